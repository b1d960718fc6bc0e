"""The REST routes served through service nodes instead of this node (nwaku's client modes):
lightpush through `bridge.lightpush_node` (nwaku's `--lightpushnode`), with nwaku's answers of
its legacy (v1 route) and v3 lightpush REST handlers, and the refusal of the relay routes on a
node without relay (nwaku's `--relay=false`). The answers are pure functions of the client's
`PushResult`; the handlers do the I/O.

    answer = await push_remote(api, request, route="v1")
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import trio
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from ingest.lightpush import codec as lp_codec
from ingest.lightpush.client import DIAL_FAILURE, LightpushClient, PushResult
from ingest.rest import codec

if TYPE_CHECKING:
    from ingest.rest.app import Api

RELAY_OFF = "/relay endpoints are not available. Please check your configuration: --relay"
PUSH_TIMED_OUT = "Push request timed out"
NO_TOPIC = "Pubsub topic must be specified when static sharding is enabled"


def v1_answer(result: PushResult | None) -> Response:
    """nwaku's /lightpush/v1/message (the legacy client): OK; "TOO_MANY_REQUESTS": 429; every
    other failure 503 `Failed to request a message push: <error>` (a dial failure's error is
    `dial_failure`); no answer in time: 503 `Push request timed out`."""
    if result is None:
        return PlainTextResponse(PUSH_TIMED_OUT, status_code=503)
    if result.ok:
        return PlainTextResponse("OK")
    error = DIAL_FAILURE if result.dial_failed else (result.desc or "unknown failure")
    if result.code == lp_codec.TOO_MANY_REQUESTS or error.startswith("TOO_MANY_REQUESTS"):
        return PlainTextResponse("Request rate limmit reached", status_code=429)
    return PlainTextResponse(f"Failed to request a message push: {error}", status_code=503)


def v3_answer(result: PushResult | None) -> Response:
    """nwaku's /lightpush/v3/message: {"relayPeerCount"}; a failure: its status code as the HTTP
    status (500 when it is none) with {"statusDesc"}."""
    if result is None:
        return JSONResponse({"statusDesc": PUSH_TIMED_OUT}, status_code=503)
    if result.ok:
        return JSONResponse({"relayPeerCount": result.relay_peers or 0})
    status = result.code if 100 <= result.code <= 599 else 500
    return JSONResponse({"statusDesc": result.desc}, status_code=status)


async def push_remote(api: Api, client: LightpushClient, request: Request, route: str) -> Response:
    """POST /lightpush/v1/message (route "v1": lightpush 2.0.0-beta1 first, as nwaku's legacy
    client) or /lightpush/v3/message ("v3": 3.0.0 first) through the service node. An accepted
    message goes into our own relay cache, as nwaku's node sees its own message relayed back."""
    try:
        req = codec.push_request(await api.body(request))
    except codec.BadRequest as exc:
        if route == "v1" or exc.status == 413:
            raise
        return JSONResponse({"statusDesc": f"Invalid push request! {exc}"}, status_code=400)
    msg = codec.to_waku_message(req.message)
    topic = req.pubsub_topic or api.autoshard_topic(msg.content_topic)
    if topic is None and route == "v1":
        return v1_answer(PushResult(False, lp_codec.BAD_REQUEST, NO_TOPIC, None, ""))
    result: PushResult | None = None
    with trio.move_on_after(api.settings.request_timeout_s):
        try:
            result = await client.push(topic, msg, prefer="v2" if route == "v1" else "v3")
        except trio.TooSlowError:  # the client's own deadline on the answer: nwaku's timeout
            result = None
    if result is not None and result.ok and topic is not None:
        api.cache.add(topic, msg)
    return v1_answer(result) if route == "v1" else v3_answer(result)


async def relay_off(request: Request) -> Response:
    return PlainTextResponse(RELAY_OFF, status_code=404)
