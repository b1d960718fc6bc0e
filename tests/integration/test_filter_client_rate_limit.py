"""Issue #68: a filter service's rate-limit refusal may carry another request id than the
request's (go-waku v0.10.0 answers 429 with "N/A" before it reads the request: filter/server.go);
nwaku's client takes it as the answer (waku_filter_v2/client.nim: "DOS protection rate limit
checks does not know about request id"), and so does ours, so that the REST client answers the
service's 429 instead of a 500 BAD_RESPONSE. Any other answer under another id is still refused.
Real hosts on loopback: our FilterClient, and a service answering as go-waku's does."""
from __future__ import annotations

import pytest
import trio
from libp2p.crypto.secp256k1 import create_new_key_pair
from libp2p.custom_types import TProtocol

from ingest.filter.client import FilterClient
from ingest.filter.codec import FILTER_SUBSCRIBE_CODEC, MAX_REQUEST_BYTES
from ingest.framing import frame, read_frame
from ingest.host import build_host, listen_addrs
from schemas import filter_v2_pb2 as fv2

pytestmark = pytest.mark.integration
Req = fv2.FilterSubscribeRequest


def answering(status: int, desc: str):
    async def handler(stream) -> None:
        await read_frame(stream, MAX_REQUEST_BYTES)
        resp = fv2.FilterSubscribeResponse(request_id="N/A", status_code=status, status_desc=desc)
        await stream.write(frame(resp.SerializeToString()))
        await stream.close()
    return handler


def test_a_rate_limit_refusal_under_another_request_id_is_the_answer():
    out: dict = {}

    async def ask(status: int, desc: str):
        addrs = listen_addrs("127.0.0.1", 0, -1)
        service = build_host(create_new_key_pair(), addrs)
        service.set_stream_handler(TProtocol(FILTER_SUBSCRIBE_CODEC), answering(status, desc))
        client = FilterClient()
        async with service.run(addrs), client.running():
            await client.connect(f"{service.get_addrs()[0]}", timeout=10)
            try:
                return await client.request(Req.SUBSCRIBE, "/waku/2/rs/2/0", ["/app/1/x/proto"], timeout=10)
            except RuntimeError as exc:
                return exc

    async def main() -> None:
        with trio.fail_after(60):
            out["429"] = await ask(429, "filter request rejected due rate limit exceeded")
            out["200"] = await ask(200, "OK")

    trio.run(main)
    limited = out["429"]
    assert isinstance(limited, fv2.FilterSubscribeResponse), limited
    assert (limited.status_code, limited.status_desc) == (429, "filter request rejected due rate limit exceeded")
    assert isinstance(out["200"], RuntimeError) and "expected" in str(out["200"])
