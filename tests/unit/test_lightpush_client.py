"""The lightpush client's reading of a service node's answers (ingest/lightpush/client.py) and
the REST answers made of them (ingest/rest/remote.py), as nwaku's legacy and v3 REST handlers
answer (issue #68 F)."""
from __future__ import annotations

import json

from ingest.lightpush import codec
from ingest.lightpush.client import PushResult, dial_failure, v2_result, v3_result
from ingest.rest.remote import v1_answer, v3_answer
from schemas.waku_message_pb2 import WakuMessage


def test_v3_answers():
    ok = v3_result("r", codec.v3_response("r", codec.SUCCESS, relay_peers=3))
    assert (ok.ok, ok.code, ok.relay_peers, ok.version) == (True, 200, 3, "v3")
    refused = v3_result("r", codec.v3_response("r", codec.UNSUPPORTED_PUBSUB_TOPIC, "this node does not relay x"))
    assert (refused.ok, refused.code, refused.desc) == (
        False, 421, "UNSUPPORTED_PUBSUB_TOPIC: this node does not relay x")
    assert v3_result("r", codec.v3_response("other", codec.SUCCESS)).desc == "response failure, requestId mismatch"
    assert v3_result("r", None).code == 500


def test_v2_answers():
    assert v2_result(codec.v2_response("r", codec.SUCCESS)).ok
    refused = v2_result(codec.v2_response("r", codec.TOO_MANY_REQUESTS, "request rate limit reached"))
    assert (refused.ok, refused.code, refused.desc) == (False, 429, "request rate limit reached")
    limited = v2_result(codec.v2_rejected())  # a stream over the caps: nwaku's text
    assert (limited.ok, limited.code) == (False, 429)
    assert v2_result(codec.v2_request("r", WakuMessage(), "t")).desc == "empty_response_body_failure"


def test_rest_answers_as_nwaku():
    down = dial_failure("16Uiu2Peer")
    r = v1_answer(down)
    assert (r.status_code, r.body) == (503, b"Failed to request a message push: dial_failure")
    r = v3_answer(down)
    assert r.status_code == 505 and json.loads(r.body) == {"statusDesc": "dial_failure: 16Uiu2Peer is not accessible"}
    assert (v1_answer(None).status_code, v1_answer(None).body) == (503, b"Push request timed out")
    assert v1_answer(PushResult(False, 429, "TOO_MANY_REQUESTS: x", None, "v2")).status_code == 429
    ok = v3_answer(PushResult(True, 200, "", None, "v2"))
    assert (ok.status_code, json.loads(ok.body)) == (200, {"relayPeerCount": 0})
    assert v1_answer(PushResult(True, 200, "", 2, "v3")).body == b"OK"
