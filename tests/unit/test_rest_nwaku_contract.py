"""nwaku's contract of the relay subscription routes (leaving a topic is leaving relay) and of
lightpush over REST against a real LightpushService (stores and relays faked): nwaku's answers
of its legacy route (`/lightpush/v1/message`: 503 `Failed to request a message push: <info>`
with its legacy protocol's texts) and of v3, a duplicate push refused as nwaku's relay refuses
to publish it again, topics joined through REST served, nwaku's default of no rate limit."""
from __future__ import annotations

import base64
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import trio

from core.config import load_config
from core.message import Limits, check_message
from ingest.lightpush import codec as lp_codec
from ingest.lightpush.protocol import PushContext
from ingest.lightpush.service import LightpushService
from ingest.rest.app import build_app
from ingest.rest.cache import MessageCache
from ingest.rest.settings import RestSettings
from ingest.settings import BridgeSettings
from schemas import lightpush_pb2 as pb

SHARD = "/waku/2/rs/1/0"
JOINED = "/waku/2/rs/1/5"  # joined through POST /relay/v1/subscriptions
CT = "/app/1/chat/proto"


class FakePubsub:
    def __init__(self, topics: set[str]) -> None:
        self.topic_ids = topics
        self.peers: dict[str, Any] = {}
        self.left: list[str] = []

    async def join(self, topic: str) -> None:
        self.topic_ids.add(topic)

    async def leave(self, topic: str) -> None:
        self.topic_ids.discard(topic)
        self.left.append(topic)


@pytest.fixture
def api() -> Any:
    pubsub = FakePubsub({SHARD})
    seen: set[bytes] = set()
    ctx = PushContext(pubsub.topic_ids, 1, 8, check_message)  # type: ignore[arg-type]

    async def store(accepted: Any) -> bool:
        return True

    async def relay(topic: str, data: bytes) -> int:
        seen.add(data)
        return 1

    service = LightpushService(None, ctx, store=store, relay=relay, seen=seen.__contains__)  # type: ignore[arg-type]
    async def publish(topic: str, message: Any, data: bytes) -> int:
        return await relay(topic, data)

    node: Any = SimpleNamespace(settings=SimpleNamespace(cluster_id=1, num_shards_in_cluster=8, limits=Limits(),
                                                      lightpush_timeout_s=1.0),
                                pubsub=pubsub, filter=None, store=None, lightpush=service, host=None, router=None,
                                addrs=[], publish=publish)
    app = build_app(node, RestSettings(enabled=True), MessageCache(10))

    def call(method: str, path: str, body: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
                return await c.request(method, path, json=body)
        return trio.run(go)
    call.pubsub = pubsub  # type: ignore[attr-defined]
    return call


def push(topic: str, **message: Any) -> dict[str, Any]:
    return {"pubsubTopic": topic, "message": {"payload": base64.b64encode(b"hi").decode(), "contentTopic": CT,
                                              "timestamp": 1, **message}}


def test_v1_refusals_are_nwaku_legacy_texts(api):
    big = base64.b64encode(b"a" * 153_600).decode()
    cases = {
        "oversized": (push(SHARD, payload=big), "Message size exceeded maximum of 153600 bytes"),
        "meta": (push(SHARD, meta=base64.b64encode(b"m" * 1024).decode()),
                 'decode_rpc_failure: (kind: InvalidLengthField, field: "meta")'),
        "topic": (push("/waku/2/rs/1/7"), "not_published_to_any_peer"),
    }
    for name, (body, info) in cases.items():
        r = api("POST", "/lightpush/v1/message", body)
        assert (r.status_code, r.text) == (503, f"Failed to request a message push: {info}"), name


def test_a_duplicate_push_is_refused(api):
    body = push(SHARD, timestamp=7)
    assert (api("POST", "/lightpush/v1/message", body).status_code) == 200
    r = api("POST", "/lightpush/v1/message", body)
    assert (r.status_code, r.text) == (503, "Failed to request a message push: not_published_to_any_peer")
    r = api("POST", "/lightpush/v3/message", body)
    # lightpush's 420 is no HTTP status: nwaku's REST answers it 500 (chronos's toHttpCode)
    assert (r.status_code, r.json()) == (500, {"statusDesc": "INVALID_MESSAGE_ERROR: Dropping already-seen message"})


def test_v3_refusal_causes_are_nwaku_texts(api):
    big = base64.b64encode(b"a" * 153_600).decode()
    r = api("POST", "/lightpush/v3/message", push(SHARD, payload=big))
    assert (r.status_code, r.json()["statusDesc"]) == (
        413, "PAYLOAD_TOO_LARGE: Message size exceeded maximum of 153600 bytes")
    r = api("POST", "/lightpush/v3/message", push(SHARD, meta=base64.b64encode(b"m" * 65).decode()))
    assert (r.status_code, r.json()["statusDesc"]) == (
        400, 'BAD_REQUEST: decode_rpc_failure: (kind: InvalidLengthField, field: "meta")')


def test_a_topic_joined_through_rest_is_served(api):
    assert api("POST", "/lightpush/v1/message", push(JOINED)).status_code == 503
    assert api("POST", "/relay/v1/subscriptions", [JOINED]).status_code == 200
    assert api("POST", "/lightpush/v1/message", push(JOINED, timestamp=9)).status_code == 200
    r = api("POST", "/lightpush/v3/message", push(JOINED, timestamp=10))
    assert (r.status_code, r.json()) == (200, {"relayPeerCount": 1})


def test_legacy_libp2p_info_is_nwaku_text():
    rpc = pb.PushRPC.FromString(lp_codec.v2_response("r", lp_codec.UNSUPPORTED_PUBSUB_TOPIC, "x"))
    assert (rpc.response.is_success, rpc.response.info) == (False, "not_published_to_any_peer")
    rpc = pb.PushRPC.FromString(lp_codec.v2_response("r", lp_codec.PAYLOAD_TOO_LARGE, "Message size exceeded"))
    assert rpc.response.info == "Message size exceeded"


def test_no_lightpush_rate_limit_by_default():
    # nwaku's default: lightpush is limited only when --rate-limit names it (100 pushes in a row pass)
    settings = BridgeSettings.from_config(load_config(environ={}))
    assert settings.lightpush_per_peer_per_s == 0
    service = LightpushService(None, PushContext(frozenset(), 1, 8, check_message),  # type: ignore[arg-type]
                               store=None, relay=None, per_peer_per_s=settings.lightpush_per_peer_per_s)  # type: ignore[arg-type]
    assert all(service.per_peer.allow("peer") for _ in range(100))


def test_relay_unsubscribe_leaves_the_topic(api):
    """nwaku: DELETE /relay/v1/subscriptions leaves relay on the topic; a publish there is then
    400, a lightpush not published; subscribing again serves it again."""
    message = {"payload": base64.b64encode(b"x").decode(), "contentTopic": CT}
    path = "/relay/v1/messages/" + JOINED.replace("/", "%2F")
    assert api("POST", "/relay/v1/subscriptions", [JOINED]).status_code == 200
    assert (api("POST", path, message).status_code) == 200
    r = api("DELETE", "/relay/v1/subscriptions", [JOINED])
    assert (r.status_code, r.text) == (200, "OK")
    assert api.pubsub.left == [JOINED] and JOINED not in api.pubsub.topic_ids
    r = api("POST", path, message)
    assert (r.status_code, r.text) == (400, f"Failed to publish: Node not subscribed to topic: {JOINED}")
    r = api("POST", "/lightpush/v1/message", push(JOINED, timestamp=11))
    assert (r.status_code, r.text) == (503, "Failed to request a message push: not_published_to_any_peer")
    assert api("GET", path, None).status_code == 404
    assert api("POST", "/relay/v1/subscriptions", [JOINED]).status_code == 200
    assert (api("POST", path, {**message, "timestamp": 12}).status_code) == 200
    assert api("DELETE", "/relay/v1/subscriptions", ["/waku/2/rs/1/6"]).status_code == 200  # not joined: OK
    assert api.pubsub.left == [JOINED]


def test_store_route_answers_as_nwaku():
    """GET /store/v3/messages: our store's BAD_RESPONSE (an unknown cursor) is nwaku's 500 of
    handleSelfStoreRequest; a peerAddr without its leading `/` is nwaku's MultiAddress.init
    refusal (400)."""
    from ingest.store import codec_v3

    class FakeStore:
        async def query_v3(self, req: Any, peer: str) -> bytes:
            return codec_v3.response(req.request_id, codec_v3.BAD_RESPONSE, codec_v3.CURSOR_NOT_FOUND)

    node: Any = SimpleNamespace(settings=SimpleNamespace(cluster_id=1, num_shards_in_cluster=8), pubsub=None,
                                filter=None, store=FakeStore(), lightpush=None, host=None, router=None, addrs=[])
    app = build_app(node, RestSettings(enabled=True), MessageCache(10))

    def get(params: dict[str, str]) -> httpx.Response:
        async def go() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
                return await c.get("/store/v3/messages", params=params)
        return trio.run(go)

    r = get({"cursor": "0x" + "07" * 32})
    assert (r.status_code, r.text) == (
        500, "error in handleSelfStoreRequest: BAD_RESPONSE: archive error: DRIVER_ERROR: cursor not found")
    peer = "ip4/127.0.0.1/tcp/60000/p2p/16Uiu2HAmVFXtAfSj4EiR7mL2KvL4EE2wztuQgUSBoj2Jx2KeXFLN"
    r = get({"peerAddr": peer})
    assert (r.status_code, r.text) == (400, "Failed parsing remote peer info: MultiAddress.init "
                                            "[multiaddress: Invalid MultiAddress, must start with `/`]")
