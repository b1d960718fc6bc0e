"""A stream over the inbound caps (ingest/host.StreamGate) of a request/response protocol is
answered its 429 unread and closed, as nwaku answers a request its limiter rejects, so that
every refused request gets its status (issue 68 R: 200 concurrent filter requests from one
peer, 34 streams reset with no bytes); other protocols' streams are still reset."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import trio

from ingest.filter import codec as filter_codec
from ingest.framing import frame
from ingest.host import StreamGate, StreamLimits
from schemas import filter_v2_pb2 as fv2


class FakeStream:
    def __init__(self, peer: str = "p", stalled: bool = False) -> None:
        self.muxed_conn = SimpleNamespace(peer_id=peer)
        self.written: list[bytes] = []
        self.closed = self.was_reset = False
        self.stalled = stalled

    async def write(self, data: bytes) -> None:
        if self.stalled:  # a peer that never reads
            await trio.sleep_forever()
        self.written.append(data)

    async def close(self) -> None:
        self.closed = True

    async def reset(self) -> None:
        self.was_reset = True


def test_refused_streams_get_their_429():
    gate = StreamGate(StreamLimits(per_peer=2, total=100))
    gate.refuse_with(filter_codec.FILTER_SUBSCRIBE_CODEC, frame(filter_codec.rejected_response()))
    served: list[Any] = []
    release: list[trio.Event] = []

    async def handler(stream: Any) -> None:
        served.append(stream)
        await release[0].wait()

    subscribe = gate.wrap(filter_codec.FILTER_SUBSCRIBE_CODEC, handler)
    other = gate.wrap("/other/1", handler)
    streams = [FakeStream() for _ in range(200)]
    relay = FakeStream()
    stalled = FakeStream(stalled=True)

    async def main() -> None:
        release.append(trio.Event())
        async with trio.open_nursery() as nursery:
            for s in streams:
                nursery.start_soon(subscribe, s)
            await trio.sleep(0.01)
            await other(relay)
            await subscribe(stalled)  # a refusal that cannot be written is a reset, in bounded time
            release[0].set()

    trio.run(main)
    assert len(served) == 2
    refused = [s for s in streams if s not in served]
    assert len(refused) == 198
    for s in refused:
        assert s.closed and not s.was_reset and len(s.written) == 1
        data = s.written[0]
        resp = fv2.FilterSubscribeResponse.FromString(data[1:])  # one-byte varint length
        assert (resp.request_id, resp.status_code, resp.status_desc) == (
            "N/A", 429, "filter request rejected due rate limit exceeded")
    assert relay.was_reset and not relay.written
    assert stalled.was_reset
