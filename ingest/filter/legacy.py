"""Legacy filter v00 (/vac/waku/filter/2.0.0-beta1): FilterRPC{requestId, request} subscribes
or unsubscribes (both published ContentFilter shapes decode, see schemas/filter_v00.proto);
nothing is answered. Pushes go back as FilterRPC{requestId of the subscribing request, push}
on a new stream of the same protocol. A request without topic uses the bridge's default
pubsub topic (the matching is an equi-join on (pubsub topic, content topic))."""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from google.protobuf.message import DecodeError

from ingest.filter.codec import OK, read_frame
from schemas import filter_v00_pb2 as f00
from schemas import pipeline_records_pb2 as pr

if TYPE_CHECKING:
    from ingest.filter.service import FilterService

log = logging.getLogger("ingest.filter")


def push_rpc(request_id: str, message: Any) -> bytes:
    return f00.FilterRPC(requestId=request_id, push=f00.MessagePush(messages=[message])).SerializeToString()


async def handle_v00_stream(service: "FilterService", stream: Any) -> None:
    peer = stream.muxed_conn.peer_id.to_base58()
    try:
        while True:
            try:
                data = await read_frame(stream)
            except Exception:  # noqa: BLE001 - EOF, reset, bad frame
                return
            try:
                rpc = f00.FilterRPC.FromString(data)
            except DecodeError:
                service.count_request("v00_undecodable", 0)
                continue
            if not rpc.HasField("request"):
                continue
            code, detail = await apply_v00(service, peer, rpc)
            service.count_request("v00_subscribe" if rpc.request.subscribe else "v00_unsubscribe", code)
            if code != OK:
                log.info("filter v00: request %s of %s refused: %d %s", rpc.requestId, peer, code, detail)
    finally:
        try:
            await stream.close()
        except Exception:  # noqa: BLE001
            pass


async def apply_v00(service: "FilterService", peer: str, rpc: Any) -> tuple[int, str]:
    req = rpc.request
    topic = req.topic or service.settings.default_pubsub_topic
    cts = list(dict.fromkeys(ct for cf in req.contentFilters for ct in cf.contentTopics))
    view = service.view
    async with service.lock:
        now = time.time()
        if view.rate_limited(peer, now):
            return 429, "request rate limit reached"
        if req.subscribe:
            code, detail = view.can_subscribe(peer, topic, cts)
            if code != OK:
                return code, detail
            if not await service.emit(peer, pr.SUBSCRIBE, topic, cts, rpc.requestId, "v00"):
                return 503, "the subscription could not be recorded"
            view.subscribe(peer, topic, cts, now, "v00", rpc.requestId)
            return OK, ""
        code, detail = view.can_unsubscribe(peer, topic, cts)
        if code != OK:
            return code, detail
        if not await service.emit(peer, pr.UNSUBSCRIBE, topic, cts, rpc.requestId, "v00"):
            return 503, "the change could not be recorded"
        view.unsubscribe(peer, topic, cts)
        service.peer_changed(peer)
        return OK, ""
