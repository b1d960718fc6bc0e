"""filter-subscribe v2 (/vac/waku/filter-subscribe/2.0.0-beta1): one FilterSubscribeRequest
per frame, answered with a FilterSubscribeResponse echoing request_id (a request without
request_id is neither applied nor answered). The subscriber is the connection's peer id."""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from google.protobuf.message import DecodeError

from ingest.filter.codec import (BAD_REQUEST, NOT_FOUND, OK, SERVICE_UNAVAILABLE, TOO_MANY_REQUESTS,
                                 frame, read_frame, status_desc)
from schemas import filter_v2_pb2 as fv2
from schemas import pipeline_records_pb2 as pr

if TYPE_CHECKING:
    from ingest.filter.service import FilterService

log = logging.getLogger("ingest.filter")

Req = fv2.FilterSubscribeRequest
TYPE_NAMES = {Req.SUBSCRIBER_PING: "ping", Req.SUBSCRIBE: "subscribe", Req.UNSUBSCRIBE: "unsubscribe",
              Req.UNSUBSCRIBE_ALL: "unsubscribe_all"}


async def handle_subscribe_stream(service: "FilterService", stream: Any) -> None:
    """Serve requests on one stream until the client closes it."""
    peer = stream.muxed_conn.peer_id.to_base58()
    try:
        while True:
            try:
                data = await read_frame(stream)
            except Exception:  # noqa: BLE001 - EOF, reset or an oversized / bad prefix: done
                return
            try:
                req = Req.FromString(data)
            except DecodeError:
                service.count_request("undecodable", 0)
                log.debug("filter: undecodable request from %s", peer)
                continue
            if not req.request_id:
                service.count_request(TYPE_NAMES.get(req.filter_subscribe_type, "unknown"), 0)
                continue
            code, detail = await apply_request(service, peer, req)
            service.count_request(TYPE_NAMES.get(req.filter_subscribe_type, "unknown"), code)
            resp = fv2.FilterSubscribeResponse(request_id=req.request_id, status_code=code,
                                               status_desc=status_desc(code, detail))
            await stream.write(frame(resp.SerializeToString()))
    finally:
        try:
            await stream.close()
        except Exception:  # noqa: BLE001
            pass


async def apply_request(service: "FilterService", peer: str, req: Any) -> tuple[int, str]:
    view = service.view
    async with service.lock:
        now = time.time()
        if view.rate_limited(peer, now):
            return TOO_MANY_REQUESTS, "request rate limit reached"
        kind = req.filter_subscribe_type
        topic = req.pubsub_topic if req.HasField("pubsub_topic") else None
        cts = list(req.content_topics)
        if kind == Req.SUBSCRIBER_PING:
            if not view.refresh(peer, now):
                return NOT_FOUND, "peer has no subscriptions"
            await service.emit(peer, pr.REFRESH)
            return OK, ""
        if kind == Req.SUBSCRIBE:
            code, detail = view.can_subscribe(peer, topic, cts)
            if code != OK:
                return code, detail
            if not await service.emit(peer, pr.SUBSCRIBE, topic, cts, req.request_id, "v2"):
                return SERVICE_UNAVAILABLE, "the subscription could not be recorded"
            view.subscribe(peer, topic, cts, now, "v2", req.request_id)
            return OK, ""
        if kind == Req.UNSUBSCRIBE:
            code, detail = view.can_unsubscribe(peer, topic, cts)
            if code != OK:
                return code, detail
            if not await service.emit(peer, pr.UNSUBSCRIBE, topic, cts, req.request_id, "v2"):
                return SERVICE_UNAVAILABLE, "the change could not be recorded"
            view.unsubscribe(peer, topic, cts)
            service.peer_changed(peer)
            return OK, ""
        if kind == Req.UNSUBSCRIBE_ALL:
            if not view.has(peer):
                return NOT_FOUND, "peer has no subscriptions"
            if not await service.emit(peer, pr.UNSUBSCRIBE_ALL, request_id=req.request_id, protocol="v2"):
                return SERVICE_UNAVAILABLE, "the change could not be recorded"
            view.remove_peer(peer)
            service.peer_changed(peer)
            return OK, ""
        return BAD_REQUEST, f"unknown filter_subscribe_type {kind}"
