"""The store protocol's decisions as pure functions (nwaku's `waku_store` handler shape): from a
decoded request and the service's limits to the query to run or the reason it cannot be served,
and from a page to the response. No I/O here: the server (ingest/store/server.py) frames,
reads the page from the online reader (possibly in a worker thread) and writes.

    query, reason = plan(rpc, limits)        # reason: a metric label, or None
    page = reader.query(query)               # only when reason is None
    answer = respond(rpc, page)              # page None: the empty answer
"""
from __future__ import annotations

from typing import Any

from core.store_page import Page, StoreLimits, StoreQuery, check_query
from ingest.store.codec import query_from_proto, response_rpc
from schemas import store_beta2_pb2 as pb

REJECT_REASONS = ("too_many_content_topics", "bad_page_size", "bad_cursor_time", "bad_cursor_digest", "no_query",
                  "error")


def plan(rpc: pb.HistoryRPC, limits: StoreLimits) -> tuple[StoreQuery | None, str | None]:
    """(the query to answer, None) or (None, why it gets an empty response). The one check of
    a query: readers trust what passes here."""
    if not rpc.HasField("query"):
        return None, "no_query"
    query = query_from_proto(rpc.query)
    reason = check_query(query, limits)
    return (None, reason) if reason else (query, None)


def respond(rpc: Any, page: Page | None) -> bytes:
    """The HistoryRPC answering `rpc` (its request_id) with `page` (None: empty)."""
    return response_rpc(rpc.request_id, page).SerializeToString()
