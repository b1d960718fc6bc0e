"""`waku-store`: history queries (13/WAKU2-STORE 2.0.0-beta2 semantics) against the Delta
messages table directly, or against a remote store peer over libp2p; follows the cursors to the
end and prints a table, JSON lines or CSV (docs/store-service.md).

    waku-store query --content-topic /app/1/chat/proto --start 2026-11-20T00:00 --format jsonl
    waku-store query --peer /ip4/127.0.0.1/tcp/60000/p2p/16Uiu2... --direction backward --limit 50

Time window: --start is a forward cursor (start, 0x00...) and --end stops paging (start
inclusive, end exclusive); backward paging starts at the cursor (end, 0x00...) and stops at the
first message before --start. Forward output is oldest first, backward output newest first.
"""
from __future__ import annotations

import argparse
import base64
import csv
import datetime as dt
import json
import logging
import math
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TextIO

from core.config import ConfigError, add_config_arguments, config_from_args
from core.store_page import Index, Page, StoredMessage, StoreQuery, check_query

if TYPE_CHECKING:
    from ingest.store.codec import RemotePage
    from ingest.store.reader import StoreReader

log = logging.getLogger("ingest.store.cli")

Fetch = Callable[[StoreQuery], Awaitable["Page | RemotePage"]]


def parse_time(text: str) -> float:
    """Unix seconds, or an ISO 8601 date/time (UTC unless it names an offset)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a time (Unix seconds or ISO 8601): {text!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.timestamp()


def _known(t: float) -> bool:
    return not math.isnan(t)


async def export(fetch: Fetch, query: StoreQuery, start: float | None = None, end: float | None = None,
                 limit: int | None = None,
                 on_page: Callable[[int], None] | None = None) -> AsyncIterator[StoredMessage]:
    """Every message of the query in the window [start, end), oldest first (forward) or newest
    first (backward), following cursors. Works when messages carry no receive time (a remote
    peer): the page crossing the window's far end is re-read one message at a time, each
    response cursor then being that message's Index."""
    fwd = query.forward
    if query.cursor is None:
        if fwd and start is not None:
            query = query.with_cursor(Index.at_time(start))
        elif not fwd and end is not None:
            query = query.with_cursor(Index.at_time(end))
    count = 0

    def beyond(t: float) -> bool:
        return (fwd and end is not None and t >= end) or (not fwd and start is not None and t < start)

    while True:
        page = await fetch(query)
        if on_page:
            on_page(len(page.messages))
        msgs = list(page.messages) if fwd else list(reversed(page.messages))
        crosses = page.cursor is not None and beyond(page.cursor.received_time)
        if crosses and msgs and not all(_known(m.received_time) for m in msgs):
            # Re-read this page one message at a time to learn each receive time.
            single = query
            while True:
                one = await fetch(StoreQuery(single.pubsub_topic, single.content_topics, single.cursor, fwd, 1))
                if one.cursor is None or beyond(one.cursor.received_time):
                    return
                for m in one.messages:
                    m.received_time = one.cursor.received_time
                    yield m
                    count += 1
                    if limit is not None and count >= limit:
                        return
                single = single.with_cursor(one.cursor)
        for m in msgs:
            if _known(m.received_time) and beyond(m.received_time):
                return
            yield m
            count += 1
            if limit is not None and count >= limit:
                return
        if page.cursor is None or crosses:
            return
        query = query.with_cursor(page.cursor)


# --- output -------------------------------------------------------------------------------

FIELDS = ("received_time", "received_at", "pubsub_topic", "content_topic", "digest", "timestamp", "version",
          "payload", "meta")


def record(m: StoredMessage) -> dict[str, Any]:
    t = m.received_time
    return {
        "received_time": None if math.isnan(t) else t,
        "received_at": (None if math.isnan(t)
                        else dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="microseconds")),
        "pubsub_topic": m.pubsub_topic,
        "content_topic": m.content_topic,
        "digest": m.digest.hex(),
        "timestamp": m.timestamp,
        "version": m.version,
        "payload": base64.b64encode(m.payload).decode(),
        "meta": None if m.meta is None else base64.b64encode(m.meta).decode(),
    }


class Writer:
    def __init__(self, fmt: str, out: TextIO) -> None:
        self.fmt, self.out = fmt, out
        self.csv = csv.DictWriter(out, FIELDS) if fmt == "csv" else None
        if self.csv:
            self.csv.writeheader()
        elif fmt == "table":
            print(f"{'received_at':32}  {'pubsub_topic':24}  {'content_topic':28}  {'digest':16}  payload", file=out)

    def write(self, m: StoredMessage) -> None:
        r = record(m)
        if self.fmt == "jsonl":
            self.out.write(json.dumps(r) + "\n")
        elif self.csv:
            self.csv.writerow(r)
        else:
            text = _printable(m.payload)
            print(f"{r['received_at'] or '?':32}  {m.pubsub_topic:24}  {m.content_topic:28}  "
                  f"{m.digest.hex()[:16]}  {text}", file=self.out)


def _printable(payload: bytes, width: int = 40) -> str:
    """The payload as text when it is printable UTF-8, else as hex (table format)."""
    try:
        text = payload.decode("utf-8")
        if text.isprintable():
            return text if len(text) <= width else text[:width - 1] + "…"
    except UnicodeDecodeError:
        pass
    h = "0x" + payload.hex()
    return h if len(h) <= width else h[:width - 1] + "…"


class Progress:
    """A line on stderr every `every` seconds (long exports), and a summary at the end."""

    def __init__(self, enabled: bool, every: float = 2.0, err: TextIO | None = None) -> None:
        self.enabled, self.every = enabled, every
        self.err = err or sys.stderr
        self.began = self.last = time.monotonic()
        self.pages = self.messages = 0

    def page(self, n: int) -> None:
        self.pages += 1
        self.messages += n
        now = time.monotonic()
        if self.enabled and now - self.last >= self.every:
            self.last = now
            rate = self.messages / max(now - self.began, 1e-9)
            print(f"waku-store: {self.messages} messages, {self.pages} pages, {rate:.0f} messages/s",
                  file=self.err, flush=True)

    def done(self, written: int) -> None:
        if self.enabled:
            print(f"waku-store: done: {written} messages written, {self.pages} pages in "
                  f"{time.monotonic() - self.began:.1f} s", file=self.err, flush=True)


# --- main ---------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="waku-store", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    q = sub.add_parser("query", help="page through history and print it")
    add_config_arguments(q)
    q.add_argument("--peer", metavar="MULTIADDR", help="a remote store peer (/ip4/.../tcp/.../p2p/<id>); "
                   "default: read the Delta messages table directly")
    q.add_argument("--table", metavar="PATH", help="the Delta messages table (default: from the configuration)")
    q.add_argument("--pubsub-topic", default="", help="only this pubsub topic (default: any)")
    q.add_argument("-c", "--content-topic", action="append", default=[], dest="content_topics",
                   help="only these content topics (repeatable; default: any)")
    q.add_argument("--start", type=parse_time, help="window start, inclusive (Unix seconds or ISO 8601, UTC)")
    q.add_argument("--end", type=parse_time, help="window end, exclusive")
    q.add_argument("--direction", choices=("forward", "backward"), default="forward")
    q.add_argument("--page-size", type=int, default=0, help="messages per page (0: the service default)")
    q.add_argument("--limit", type=int, help="stop after this many messages")
    q.add_argument("--format", choices=("table", "jsonl", "csv"), default="table")
    q.add_argument("--output", "-o", metavar="FILE", help="write here instead of stdout")
    q.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress lines on stderr (default: when stderr is a terminal)")
    q.add_argument("--timeout", type=float, default=30.0, help="per-request timeout against a peer (s)")
    q.add_argument("--reuse-stream", action="store_true",
                   help="send every page's query on one stream (faster against this project's server; "
                        "a server that closes after one answer costs a retry per page)")
    return parser


def _local_fetch(reader: StoreReader) -> Fetch:
    async def fetch(query: StoreQuery) -> Page:
        return reader.query(query)
    return fetch


async def run_query(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    query = StoreQuery(args.pubsub_topic, tuple(args.content_topics), None, args.direction == "forward",
                       max(0, args.page_size))
    progress = Progress(err.isatty() if args.progress is None else args.progress, err=err)
    writer = Writer(args.format, out)
    written = 0

    async def drain(fetch: Fetch) -> None:
        nonlocal written
        async for m in export(fetch, query, args.start, args.end, args.limit, progress.page):
            writer.write(m)
            written += 1

    if args.peer:
        from ingest.store.client import StoreClient

        async with StoreClient.running(timeout=args.timeout, reuse_streams=args.reuse_stream) as client:
            peer_id = await client.connect(args.peer)

            async def fetch(q: StoreQuery) -> RemotePage:
                return await client.query(peer_id, q)

            await drain(fetch)
    else:
        from ingest.store.reader import ReaderSettings, StoreReader

        config = config_from_args(args)
        settings = ReaderSettings.from_config(config)
        if args.table:
            settings = ReaderSettings(args.table, settings.limits, settings.max_scan_rows, settings.refresh_interval_s,
                                      settings.cache_mb, object_store=settings.object_store)
        reader = StoreReader(settings)
        if reader.refresh() is None:
            print(f"waku-store: no Delta table at {settings.table_path}", file=err)
            return 1
        reason = check_query(query, settings.limits)
        if reason:
            print(f"waku-store: the query cannot be served: {reason}", file=err)
            return 2
        await drain(_local_fetch(reader))
    out.flush()
    progress.done(written)
    return 0


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    import trio

    args = build_parser().parse_args(argv)
    out = out or sys.stdout
    err = err or sys.stderr
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    handle = None
    try:
        if args.output:
            handle = open(args.output, "w", newline="" if args.format == "csv" else None)
            out = handle
        return trio.run(run_query, args, out, err)
    except ConfigError as exc:
        print(f"waku-store: {exc}", file=err)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - one line for the user
        print(f"waku-store: {type(exc).__name__}: {exc}", file=err)
        return 1
    finally:
        if handle is not None:
            handle.close()


if __name__ == "__main__":
    sys.exit(main())
