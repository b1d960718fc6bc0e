"""Pushes to a client that reads one push a stream (go-waku) go out as one yamux frame write
(ingest.host.write_in_one_frame: SYN on the DATA frame, FIN behind it): a py-libp2p receiver
opens the stream from it, reads the push and closes, the bridge sees the close or the reset, and
mplex connections take the usual open / write / close. go-waku's own light client: the filter
test of tests/interop/test_go_waku.py and tests/benchmarks/side_by_side.py."""
from __future__ import annotations

from functools import partial

import pytest
import trio

from ingest.host import _yamux_conn
from tests.integration.test_filter_push_streams import Client, N, run_pusher, settings

pytestmark = pytest.mark.integration


def _streams_left(left: list[int]):
    """`at_end` of run_pusher: how many streams the bridge's yamux session still keeps."""
    def at_end(bridge, peer_id) -> None:
        muxed = _yamux_conn(bridge, peer_id)
        assert muxed is not None
        left.append(len(muxed.streams) + len(muxed.stream_buffers) + len(muxed.stream_events))
    return at_end


def test_one_push_a_stream_goes_as_one_frame_and_arrives_once():
    client = Client("one")
    left: list[int] = []
    stats = trio.run(partial(run_pusher, at_end=_streams_left(left)), client, settings(), N, 0.02)
    assert sorted(client.received) == sorted(f"m{i}" for i in range(N))  # each once
    # the probe (kept open) and any stream opened before its close arrived take the usual way
    assert 0 < stats.outcomes["one_frame"] <= stats.outcomes["streams"] - 1
    assert client.streams == stats.outcomes["streams"]
    # every stream the client closed is forgotten (its answer dropped, nothing left for the
    # session's 60 s sweeper), the probe's too
    assert left == [0]


def test_a_one_frame_stream_reset_unread_is_pushed_again():
    client = Client("reset", every=3)
    stats = trio.run(run_pusher, client, settings(push_retries=3), 12, 0.05)
    assert sorted(client.received) == sorted(f"m{i}" for i in range(12))
    assert stats.outcomes["one_frame"] > 0 and stats.outcomes["retried"] >= 3


def test_mplex_takes_the_usual_way():
    client = Client("one", "mplex")
    stats = trio.run(run_pusher, client, settings(), 10, 0.02)
    assert sorted(client.received) == sorted(f"m{i}" for i in range(10))
    assert stats.outcomes["one_frame"] == 0 and client.streams == stats.outcomes["streams"]
