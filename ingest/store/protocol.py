"""The store protocols' decisions as pure functions (nwaku's `waku_store` handler shape), for
beta2 and v3: from a decoded request and the service's limits to the query to run or the reason
it cannot be served, and from a page to the response. No I/O here: the server
(ingest/store/server.py) frames, reads pages and resolves hashes with the online reader
(possibly in a worker thread) and writes.

    query, reason = plan(rpc, limits)        # reason: a metric label, or None
    page = reader.query(query)               # only when reason is None
    answer = respond(rpc, page)              # page None: the empty answer
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from core.store_page import (
    Page,
    StoredMessage,
    StoreLimits,
    StoreQuery,
    after_cursor,
    check_query,
    finish_page,
    in_window,
    key_of,
    matches_topics,
    page_size_of,
)
from ingest.store.codec import query_from_proto, response_rpc
from ingest.store.codec_v3 import BAD_REQUEST, hash_of
from schemas import store_beta2_pb2 as pb
from schemas import store_v3_pb2 as pb3

REJECT_REASONS = ("too_many_content_topics", "bad_cursor_time", "no_query", "rate_limited", "busy", "catching_up",
                  "error")


def plan(rpc: pb.HistoryRPC, limits: StoreLimits) -> tuple[StoreQuery | None, str | None]:
    """(the query to answer, None) or (None, why it gets an empty response). The one check of
    a query: readers trust what passes here."""
    if not rpc.HasField("query"):
        return None, "no_query"
    query = query_from_proto(rpc.query)
    reason = check_query(query, limits)
    return (None, reason) if reason else (query, None)


def respond(rpc: pb.HistoryRPC, page: Page | None) -> bytes:
    """The HistoryRPC answering `rpc` (its request_id) with `page` (None: empty, in the
    direction the query asked)."""
    forward = rpc.HasField("query") and rpc.query.pagingInfo.direction == pb.PagingInfo.FORWARD
    return response_rpc(rpc.request_id, page, forward).SerializeToString()


# --- store v3 ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class V3Plan:
    """What a v3 request asks: a page of `query` after the message `cursor_hash` (a hash the
    server resolves to a store position); with `hashes` (each once), a page of those messages
    that match `query`."""
    query: StoreQuery
    cursor_hash: bytes | None = None
    hashes: tuple[bytes, ...] = ()
    include_data: bool = True


def whole_millisecond(bound: int) -> int:
    """A time bound as the client meant it. js-waku (0.0.36) sends a Date's milliseconds times
    10^6 computed in float64 (`BigInt(date.getTime() * 1e6)`), which rounds to a multiple of
    256 ns unless the millisecond is divisible by 4: a window bounded by a message's own
    timestamp then missed it. A bound that is exactly that rounding of a whole millisecond is
    read as the millisecond; every other bound is taken as sent (integer nanoseconds)."""
    ms = (bound + 500_000) // 1_000_000
    exact = ms * 1_000_000
    if bound != exact and abs(ms) < 2**53 and int(float(ms) * 1e6) == bound:
        return exact
    return bound


def plan_v3(req: pb3.StoreQueryRequest, limits: StoreLimits) -> tuple[V3Plan | None, tuple[int, str] | None]:
    """(the plan, None) or (None, (status code, reason)) for a StoreQueryRequest, with the
    reference nodes' rules: at most max_content_topics, none empty; a time window that is not
    reversed; a 32-byte cursor; 32-byte message hashes, at most max_page_size distinct ones. The
    page size is capped at the maximum (0 or absent: the default); the direction is backward
    unless forward. Message hashes are one more filter, with the pubsub topic, content topics
    and time window, as nwaku's archive queries them (`messageHash IN (...)` AND the others):
    js-waku sends its pubsub topic with them, go-waku nothing else."""
    if not req.request_id:
        return None, (BAD_REQUEST, "missing request_id")
    hashes = tuple(dict.fromkeys(bytes(h) for h in req.message_hashes))  # each once
    topic = req.pubsub_topic if req.HasField("pubsub_topic") else ""
    cts = tuple(req.content_topics)
    if any(len(h) != 32 for h in hashes):
        return None, (BAD_REQUEST, "a message hash is not 32 bytes")
    if len(hashes) > limits.max_page_size:
        return None, (BAD_REQUEST, f"more than {limits.max_page_size} message hashes")
    if len(cts) > limits.max_content_topics:
        return None, (BAD_REQUEST, f"more than {limits.max_content_topics} content topics")
    if any(not c for c in cts):
        return None, (BAD_REQUEST, "empty content topic")
    start = whole_millisecond(req.time_start) if req.HasField("time_start") else None
    end = whole_millisecond(req.time_end) if req.HasField("time_end") else None
    if start is not None and end is not None and start > end:
        return None, (BAD_REQUEST, "time_start is after time_end")
    cursor = bytes(req.pagination_cursor) if req.HasField("pagination_cursor") else None
    if cursor is not None and len(cursor) != 32:
        return None, (BAD_REQUEST, "the cursor is not a 32-byte message hash")
    limit = req.pagination_limit if req.HasField("pagination_limit") else 0
    size = page_size_of(min(limit, limits.max_page_size) if limit else 0, limits)
    query = StoreQuery(topic, cts, None, bool(req.pagination_forward), size, start, end)
    return V3Plan(query, cursor, hashes, req.include_data), None


def lookup_page(found: Iterable[StoredMessage], query: StoreQuery, limits: StoreLimits) -> tuple[Page, bytes | None]:
    """A lookup by hash paged like any query: of the messages found for the requested hashes,
    each once, those matching the query's filters on the queried side of its cursor (resolved
    from the request's cursor hash), the page nearest the cursor in store order, oldest first;
    and the response cursor, the hash of the page's edge message, only when more follow (the
    lookup knows all its candidates, as nwaku knows from fetching one row more than the page)."""
    unique = {key_of(m): m for m in found}
    hits = [m for m in unique.values() if matches_topics(m.pubsub_topic, m.content_topic, query)
            and after_cursor(key_of(m), query) and in_window(m, query)]
    page = finish_page(hits, query, limits)
    return page, page_cursor_v3(page)


def page_cursor_v3(page: Page) -> bytes | None:
    """The response cursor: the hash of the page's edge message (last forward, first backward)
    when a further message follows (finish_page saw one more than the page) or the scan budget
    cut the page short, else None: no cursor after an exactly full last page, as nwaku."""
    if not page.messages or page.cursor is None:
        return None
    edge = page.messages[-1] if page.forward else page.messages[0]
    return hash_of(edge)
