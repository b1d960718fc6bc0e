"""Hostile input for every decoder and pure handler of the bridge: hypothesis feeds arbitrary
bytes and arbitrary well-formed-but-hostile messages to each. Nothing may raise but the decoder's
own refusal (DecodeError / FrameError), and every answer stays within the protocol (status codes
of the reference nodes, page sizes within the maximum).

Deterministic in CI (derandomized, a fixed seed printed below); WAKU_FUZZ_EXAMPLES raises the
number of cases per target for a longer local run.
"""
from __future__ import annotations

import os

import trio
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from core.message import check_message
from core.records import decode_push
from core.store_page import StoreLimits, page_from_rows
from ingest.filter import protocol as filter_protocol
from ingest.filter.state import FilterLimits, SubscriptionView
from ingest.framing import FrameError, FrameReader
from ingest.lightpush import protocol as lp_protocol
from ingest.metadata import codec as metadata_codec
from ingest.store import codec_v3
from ingest.store.codec import decode_rpc
from ingest.store.protocol import plan, plan_v3, respond
from schemas import filter_v00_pb2 as f00
from schemas import filter_v2_pb2 as fv2
from schemas import lightpush_pb2 as lp
from schemas import metadata_pb2 as md
from schemas import relay_pb2
from schemas import store_beta2_pb2 as sb2
from schemas import store_v3_pb2 as sv3

SEED = 20261123
EXAMPLES = int(os.environ.get("WAKU_FUZZ_EXAMPLES", "300"))
print(f"fuzz seed {SEED}, {EXAMPLES} examples per target")

fuzz = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])
blobs = st.binary(max_size=4096)
texts = st.text(max_size=200)


def decodes(cls, data: bytes):
    try:
        return cls.FromString(data)
    except DecodeError:
        return None


@seed(SEED)
@fuzz
@given(blobs)
def test_relay_rpc_and_message_rules(data):
    rpc = decodes(relay_pb2.RPC, data)
    for msg in (rpc.publish if rpc is not None else []):
        check_message(msg.data)
    msg, reason = check_message(data)
    assert (msg is None) == (reason is not None)
    assert reason in (None, "oversized", "undecodable", "empty_content_topic", "meta_too_long")


FILTER_CODES = {200, 400, 404, 429, 503}


@seed(SEED)
@fuzz
@given(blobs, st.lists(st.tuples(st.integers(0, 5), texts, st.lists(texts, max_size=120)), max_size=8))
def test_filter_requests(data, requests):
    view = SubscriptionView(FilterLimits(max_criteria_per_peer=50, max_peers=3))
    for payload in [data] + [fv2.FilterSubscribeRequest(request_id="r", filter_subscribe_type=k % 4,
                                                        pubsub_topic=t, content_topics=c).SerializeToString()
                             for k, t, c in requests]:
        req = decodes(fv2.FilterSubscribeRequest, payload)
        if req is not None:
            response = filter_protocol.handle("peer", filter_protocol.from_v2(req), view)
            assert response.code in FILTER_CODES
            for change in response.events:
                view.apply("peer", change, 1.0)
        rpc = decodes(f00.FilterRPC, payload)
        if rpc is not None and rpc.HasField("request"):
            request = filter_protocol.from_v00(rpc, "/waku/2/default-waku/proto")
            response = filter_protocol.handle("v00peer", request, view)
            assert response.code in FILTER_CODES
    assert view.criteria_count() <= 3 * 50


@seed(SEED)
@fuzz
@given(blobs, st.integers(0, 2**64 - 1), st.binary(max_size=64), st.floats(allow_nan=True, allow_infinity=True),
       st.lists(texts, max_size=150))
def test_store_beta2(data, size, digest, t, topics):
    limits = StoreLimits()
    crafted = sb2.HistoryRPC(request_id="q", query=sb2.HistoryQuery(
        contentFilters=[sb2.ContentFilter(contentTopic=c) for c in topics],
        pagingInfo=sb2.PagingInfo(pageSize=size, cursor=sb2.Index(digest=digest, receivedTime=t)))).SerializeToString()
    for payload in (data, crafted):
        try:
            rpc = decode_rpc(payload)
        except DecodeError:
            continue
        query, reason = plan(rpc, limits)
        page = page_from_rows([], query) if query is not None else None
        answer = sb2.HistoryRPC.FromString(respond(rpc, page))
        assert answer.request_id == rpc.request_id and answer.response.pagingInfo.pageSize <= limits.max_page_size


@seed(SEED)
@fuzz
@given(blobs, st.lists(st.binary(max_size=40), max_size=5), st.one_of(st.none(), st.binary(max_size=40)),
       st.one_of(st.none(), st.integers(0, 2**64 - 1)), st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)))
def test_store_v3(data, hashes, cursor, limit, start):
    crafted = codec_v3.request("q", hashes=hashes, cursor=cursor, limit=limit, time_start=start,
                               pubsub_topic=None if hashes else "/waku/2/rs/1/0")
    for payload in (data, crafted):
        try:
            req = codec_v3.decode_request(payload)
        except DecodeError:
            continue
        p, refusal = plan_v3(req, StoreLimits())
        if p is None:
            assert refusal[0] == 400 and refusal[1]
            resp = sv3.StoreQueryResponse.FromString(codec_v3.response(req.request_id, *refusal))
            assert resp.status_code == 400
        else:
            assert 1 <= p.query.page_size <= 100 and all(len(h) == 32 for h in p.hashes)


LP_CODES = {200, 400, 413, 420, 421, 429, 500, 503, 504, 505}


@seed(SEED)
@fuzz
@given(blobs, texts, st.binary(max_size=2000), texts)
def test_lightpush(data, topic, payload, content_topic):
    from schemas.waku_message_pb2 import WakuMessage

    ctx = lp_protocol.PushContext(frozenset({"/waku/2/rs/1/0"}), 1, 8, check_message)
    crafted = [lp.LightpushRequest(request_id="a", pubsub_topic=topic,
                                   message=WakuMessage(payload=payload, content_topic=content_topic))
               .SerializeToString(),
               lp.PushRPC(request_id="b", request=lp.PushRequest(pubsub_topic=topic, message=WakuMessage(
                   payload=payload, content_topic=content_topic))).SerializeToString()]
    for payload_bytes in [data, *crafted]:
        req = decodes(lp.LightpushRequest, payload_bytes)
        if req is not None:
            d = lp_protocol.from_v3(req, ctx)
            assert isinstance(d, lp_protocol.Accepted) or d.code in LP_CODES
        rpc = decodes(lp.PushRPC, payload_bytes)
        if rpc is not None:
            d = lp_protocol.from_v2(rpc, ctx)
            assert isinstance(d, lp_protocol.Accepted) or d.code in LP_CODES


@seed(SEED)
@fuzz
@given(blobs)
def test_metadata_and_records(data):
    for kind in (md.WakuMetadataRequest, md.WakuMetadataResponse):
        try:
            cluster, shards = metadata_codec.decode(data, kind)
        except DecodeError:
            continue
        assert cluster is None or 0 <= cluster < 2**32
    decode_push(data)


class _Chunks:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def read(self, n: int) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


@seed(SEED)
@fuzz
@given(st.lists(st.binary(max_size=300), max_size=12), st.integers(1, 2048))
def test_frame_reader(chunks, limit):
    async def main() -> list[bytes]:
        reader = FrameReader(_Chunks(list(chunks)), limit)
        frames = []
        try:
            while (f := await reader.read_frame()) is not None:
                assert len(f) <= limit
                frames.append(f)
        except FrameError:
            pass
        return frames
    trio.run(main)
