"""Issue 36 item 8, with our own py-libp2p clients (ingest/filter/pusher.py PeerPusher): pushes are
paced (filter.push_rate_per_peer) only on streams of their own, which is what go-waku's light
client reads and what its rate limiter counts; a peer that keeps reading one push stream (nwaku,
js-waku) gets every push as fast as it reads. The js-waku case end to end:
tests/interop/test_js_push_rate.py; go-waku's: tests/interop/test_go_waku.py."""
from __future__ import annotations

import time

import pytest
import trio

from tests.integration.test_filter_push_streams import Client, run_pusher, settings

pytestmark = pytest.mark.integration


def timed(client: Client, n: int, **kw) -> tuple[float, object]:
    """n pushes offered at once to `client`; seconds until it had them all (hosts' start-up
    included), the pusher's stats."""
    t0 = time.monotonic()
    stats = trio.run(run_pusher, client, settings(**kw), n, 0.0, None, 60.0)
    return time.monotonic() - t0 - 0.5, stats  # run_pusher waits 0.5 s for strays at the end


def test_a_client_that_keeps_reading_is_not_paced():
    # Paced at 2/s (burst 1), 40 pushes would take 20 s.
    client = Client("keep")
    took, stats = timed(client, 40, push_rate_per_peer=2.0, push_burst_per_peer=1)
    assert sorted(client.received) == sorted(f"m{i}" for i in range(40))
    assert client.streams == 1 and stats.outcomes["reused"] == 39
    assert took < 8.0, f"40 pushes took {took:.1f} s"


def test_a_client_that_reads_one_push_per_stream_is_paced():
    # go-waku's case: every push on a stream of its own, at most push_rate_per_peer a second
    # after the burst: 30 pushes at 10/s (burst 5) take at least 2.5 s.
    client = Client("one")
    took, stats = timed(client, 30, push_rate_per_peer=10.0, push_burst_per_peer=5)
    assert sorted(client.received) == sorted(f"m{i}" for i in range(30))
    # Pushes written on the probe before the client's close arrived are sent again on streams of
    # their own: each push read once, on a stream of its own.
    assert client.streams == 30 and stats.outcomes["resent"] >= stats.outcomes["reused"]
    assert took >= 2.4, f"30 pushes took {took:.1f} s"
