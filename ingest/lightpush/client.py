"""A lightpush client (nwaku's `--lightpushnode`): pushes a message to a service node over
libp2p, as lightpush v3 (`/vac/waku/lightpush/3.0.0`) or v2 (`2.0.0-beta1`), whichever of the
preferred order the peer speaks (multistream-select picks; go-waku v0.10.0 speaks only v2). The
peer is dialled on demand, again whenever it is not connected (it restarted, it was down).

    client = LightpushClient(host, "/ip4/127.0.0.1/tcp/60000/p2p/16Uiu2...", timeout=5.0)
    result = await client.push("/waku/2/rs/1/0", message, prefer="v2")   # PushResult

`PushResult` carries what nwaku's two clients report: `error` is the legacy client's error text
(`dial_failure`, the peer's `info`, ...), `code`/`desc` the v3 client's status and description.
"""
from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

import trio
from google.protobuf.message import DecodeError
from libp2p.abc import IHost
from libp2p.custom_types import TProtocol

from ingest.framing import FrameReader, close_quietly, frame
from ingest.host import dial, forget_closed
from ingest.lightpush import codec
from ingest.settings import parse_peer
from schemas import lightpush_pb2 as pb
from schemas.waku_message_pb2 import WakuMessage

log = logging.getLogger("ingest.lightpush.client")

DIAL_FAILURE = "dial_failure"              # nwaku's protocol_metrics.dialFailure
DECODE_RPC_FAILURE = "decode_rpc_failure"  # nwaku's decodeRpcFailure
EMPTY_RESPONSE = "empty_response_body_failure"
VERSIONS = {"v3": codec.LIGHTPUSH_V3_CODEC, "v2": codec.LIGHTPUSH_V2_CODEC}


@dataclass(frozen=True)
class PushResult:
    """One push's outcome. ok: the service node accepted it. code: the v3 status (200 on
    success; a v2 refusal gets the code its `info` names, else 500); desc: the status
    description (v3) or `info` (v2); relay_peers: v3's relay_peer_count; version: the protocol
    spoken ("" when no stream was opened)."""
    ok: bool
    code: int
    desc: str
    relay_peers: int | None
    version: str
    dial_failed: bool = False


def dial_failure(peer: str) -> PushResult:
    # nwaku's v3 client: NO_PEERS_TO_RELAY with "dial_failure: <peer> is not accessible"
    return PushResult(False, codec.NO_PEERS_TO_RELAY, f"{DIAL_FAILURE}: {peer} is not accessible", None, "",
                      dial_failed=True)


def v3_result(request_id: str, data: bytes | None) -> PushResult:
    """A v3 answer read from the service node, as nwaku's client reads it."""
    if data is None:
        return PushResult(False, codec.INTERNAL_SERVER_ERROR, "Failed to read response from peer", None, "v3")
    try:
        resp = pb.LightpushResponse.FromString(data)
    except DecodeError:
        return PushResult(False, codec.INTERNAL_SERVER_ERROR, DECODE_RPC_FAILURE, None, "v3")
    if resp.request_id != request_id and resp.status_code != codec.TOO_MANY_REQUESTS:
        return PushResult(False, codec.INTERNAL_SERVER_ERROR, "response failure, requestId mismatch", None, "v3")
    peers = resp.relay_peer_count if resp.HasField("relay_peer_count") else None
    if resp.status_code == codec.SUCCESS:
        return PushResult(True, codec.SUCCESS, resp.status_desc, peers, "v3")
    return PushResult(False, resp.status_code or codec.INTERNAL_SERVER_ERROR, resp.status_desc, None, "v3")


# The legacy info of our service's per-peer limiter (ingest/lightpush/service.py).
RATE_LIMITED_INFO = "request rate limit reached"


def v2_result(data: bytes | None) -> PushResult:
    """A v2 (legacy) answer: is_success, else `info` (nwaku's legacy client's error text)."""
    if data is None:
        return PushResult(False, codec.INTERNAL_SERVER_ERROR, "Exception reading: EOF", None, "v2")
    try:
        rpc = pb.PushRPC.FromString(data)
    except DecodeError:
        return PushResult(False, codec.INTERNAL_SERVER_ERROR, DECODE_RPC_FAILURE, None, "v2")
    if not rpc.HasField("response"):
        return PushResult(False, codec.INTERNAL_SERVER_ERROR, EMPTY_RESPONSE, None, "v2")
    if rpc.response.is_success:
        return PushResult(True, codec.SUCCESS, "", None, "v2")
    info = rpc.response.info or "unknown failure"
    named = {name: code for code, name in codec.STATUS_NAMES.items()}
    code = named.get(info.split(":", 1)[0].strip(), codec.INTERNAL_SERVER_ERROR)
    if info in (codec.TOO_MANY_REQUESTS_MESSAGE, RATE_LIMITED_INFO):  # the legacy texts carry no status name
        code = codec.TOO_MANY_REQUESTS
    return PushResult(False, code, info, None, "v2")


class LightpushClient:
    """Pushes through one service node (`peer`: a multiaddr ending in /p2p/<peer id>)."""

    def __init__(self, host: IHost, peer: str, timeout: float = 5.0) -> None:
        self.host = host
        self.peer = peer
        self.info = parse_peer(peer, "bridge.lightpush_node")
        self.timeout = timeout

    def connected(self) -> bool:
        conns = self.host.get_network().connections.get(self.info.peer_id)
        return bool(conns)

    async def push(self, pubsub_topic: str | None, message: WakuMessage, prefer: str = "v3") -> PushResult:
        """Push `message` on `pubsub_topic` (None: v3 only, the service node autoshards): v3 or
        v2 as `prefer`, else the other one. A peer that cannot be dialled or speaks neither
        protocol: nwaku's dial failure."""
        order = [prefer, "v2" if prefer == "v3" else "v3"]
        try:
            with trio.fail_after(self.timeout):
                forget_closed(self.host, self.info.peer_id)  # a peer stopped since: dialled again
                if not self.connected():  # one attempt, as nwaku's: a refused dial is dial_failure at once
                    await dial(self.host, self.info, self.timeout, retries=0)
                stream = await self.host.new_stream(self.info.peer_id, [TProtocol(VERSIONS[v]) for v in order])
        except Exception as exc:  # noqa: BLE001 - down, refused, no such protocol: nwaku's dial failure
            log.debug("lightpush client: %s: %s: %s", self.peer, type(exc).__name__, exc)
            return dial_failure(self.info.peer_id.to_base58())
        version = "v3" if str(stream.get_protocol()) == codec.LIGHTPUSH_V3_CODEC else "v2"
        rid = uuid.uuid4().hex
        if version == "v2" and pubsub_topic is None:
            await close_quietly(stream)
            return PushResult(False, codec.BAD_REQUEST, "Pubsub topic must be specified when static sharding is "
                              "enabled", None, "v2")
        request = (codec.v3_request(rid, message, pubsub_topic) if version == "v3"
                   else codec.v2_request(rid, message, pubsub_topic or ""))
        try:
            with trio.fail_after(self.timeout):
                await stream.write(frame(request))
                data = await FrameReader(stream, codec.MAX_REQUEST_BYTES).read_frame()
        except trio.TooSlowError:
            raise
        except Exception as exc:  # noqa: BLE001 - the stream broke: the peer's failure
            log.debug("lightpush client: push to %s failed: %s: %s", self.peer, type(exc).__name__, exc)
            data = None
        finally:
            await close_quietly(stream)
        return v3_result(rid, data) if version == "v3" else v2_result(data)
