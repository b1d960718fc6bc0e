"""The store service end to end: the same random tables and queries as
tests/unit/test_store_query.py, answered by the Spark DataFrame function and over libp2p
(/vac/waku/store/2.0.0-beta2, real hosts), compared with the plain-Python oracle; hostile
queries; the protocol mounted on a real bridge; the `waku-store` CLI, local and remote."""
from __future__ import annotations

import io
import json
import math
import random
import threading
import uuid

import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair

from core.store_page import MIN_DIGEST, Index, StoreQuery
from ingest.framing import frame, uvarint
from ingest.host import build_host, listen_addrs
from ingest.store.client import StoreClient
from ingest.store.reader import ReaderSettings, StoreReader
from ingest.store.server import StoreServer, StoreServiceSettings
from pipeline.store.query import history_page
from schemas import store_beta2_pb2 as pb
from tests.unit.test_store_query import (
    BASE_T,
    CONTENT,
    PAGE_SIZES,
    PUBSUB,
    check_paging,
    make_row,
    random_cursor,
    random_filters,
    random_rows,
    write_table,
)

pytestmark = pytest.mark.integration


def digests(messages) -> list[bytes]:
    return [m[1] if isinstance(m, tuple) else m.digest for m in messages]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    rnd = random.Random(20261121)
    rows = random_rows(rnd, 90)
    path = str(tmp_path_factory.mktemp("store") / "messages")
    write_table(path, rows, rnd, files=3, group=8)
    return path, rows


def reader_of(path: str, **kw) -> StoreReader:
    reader = StoreReader(ReaderSettings(path, **kw))
    reader.refresh()
    return reader


def test_spark_function_matches_oracle(spark, table):
    path, rows = table
    rnd = random.Random(11)
    # About 25 Spark queries in all (each is a Spark job): every page size, both directions,
    # empty and non-empty filters, first cursors at / between / before / after messages.
    mid = sorted(rows, key=lambda r: (r["received_time"], r["digest"]))[len(rows) // 2]
    cases = [(PUBSUB[0], (), True, 0, None), ("", (), False, 1000, None),
             (PUBSUB[1], (CONTENT[1],), False, 1, (mid["received_time"], mid["digest"])),
             (PUBSUB[0], (CONTENT[0], CONTENT[2]), True, 100, (mid["received_time"] + 0.25, MIN_DIGEST))]
    for _ in range(2):
        pubsub, contents = random_filters(rnd)
        cases.append((pubsub, contents, rnd.random() < 0.5, 20, random_cursor(rnd, rows)))
    for pubsub, contents, forward, size, cursor in cases:
        check_paging(lambda q: history_page(spark, path, q), rows, pubsub, contents, forward, size, cursor)


async def serve(reader, settings=StoreServiceSettings()):
    host = build_host(create_new_key_pair(), listen_addrs("127.0.0.1", 0, -1))
    server = StoreServer(reader, settings)
    server.mount(host)
    return host, server


def test_libp2p_matches_oracle_and_survives_hostile_queries(table):
    path, rows = table
    reader = reader_of(path)

    async def main():
        host, server = await serve(reader)
        async with host.run(listen_addrs("127.0.0.1", 0, -1)), StoreClient.running(timeout=10) as client:
            addr = f"{host.get_addrs()[0]}"
            peer = await client.connect(addr)
            results = []

            async def fetch_all(q):
                return await client.query(peer, q)

            # Queries over libp2p, paged to the end, checked against the oracle (by digest and
            # cursor; beta2 responses carry bare WakuMessages).
            rnd = random.Random(5)
            cases = []
            for forward in (True, False):
                for size in PAGE_SIZES:
                    pubsub, contents = random_filters(rnd)
                    cases.append((pubsub, contents, forward, size, random_cursor(rnd, rows)))
            for pubsub, contents, forward, size, cursor in cases:
                pages = []
                query = StoreQuery(pubsub, contents, None if cursor is None else Index(*cursor), forward, size)
                while True:
                    page = await fetch_all(query)
                    pages.append(page)
                    if page.cursor is None:
                        break
                    query = query.with_cursor(page.cursor)
                results.append(((pubsub, contents, forward, size, cursor), pages))

            # The WakuMessages are the stored ones, field for field.
            page = await fetch_all(StoreQuery(page_size=100))
            oldest = sorted(rows, key=lambda r: (r["received_time"], r["digest"]))[:100]
            assert len(page.waku_messages) == len(oldest)
            for w, r in zip(page.waku_messages, oldest, strict=True):
                assert (w.content_topic, w.payload, w.version) == (r["content_topic"], r["payload"], r["version"])
                assert (w.timestamp if w.HasField("timestamp") else None) == r["timestamp"]
                assert (w.meta if w.HasField("meta") else None) == r["meta"]
                assert not w.HasField("ephemeral")

            # Hostile queries: an empty response with the request_id, counted, or a closed stream.
            served = {}
            hostile = {
                "topics": pb.HistoryQuery(contentFilters=[pb.ContentFilter(contentTopic=f"/app/1/t{i}/proto")
                                                          for i in range(10_000)]),
                "digest": pb.HistoryQuery(pagingInfo=pb.PagingInfo(
                    cursor=pb.Index(digest=b"\x01" * 31, receivedTime=BASE_T))),
                "nan": pb.HistoryQuery(pagingInfo=pb.PagingInfo(
                    cursor=pb.Index(digest=MIN_DIGEST, receivedTime=math.nan))),
                "inf": pb.HistoryQuery(pagingInfo=pb.PagingInfo(
                    cursor=pb.Index(digest=MIN_DIGEST, receivedTime=math.inf))),
                "size": pb.HistoryQuery(pagingInfo=pb.PagingInfo(pageSize=2**64 - 1)),
            }
            for rid, q in hostile.items():
                answer = await client.send_raw(peer, frame(pb.HistoryRPC(request_id=rid, query=q).SerializeToString()))
                reply = pb.HistoryRPC.FromString(answer)
                assert reply.request_id == rid
                if rid in ("topics", "nan"):  # unservable: an empty answer, in the query's direction
                    assert len(reply.response.messages) == 0 and not reply.response.pagingInfo.HasField("cursor")
                    assert reply.response.pagingInfo.direction == q.pagingInfo.direction
                else:  # positions and sizes the spec allows: served (a 31-byte digest, +inf, 2^64-1)
                    served[rid] = reply.response
            fwd = pb.HistoryQuery(pagingInfo=pb.PagingInfo(cursor=pb.Index(digest=b"\x01" * 31, receivedTime=math.nan),
                                                           direction=pb.PagingInfo.FORWARD))
            reply = pb.HistoryRPC.FromString(await client.send_raw(peer, frame(pb.HistoryRPC(
                request_id="fwd", query=fwd).SerializeToString())))
            assert reply.response.pagingInfo.direction == pb.PagingInfo.FORWARD and not reply.response.messages
            assert await client.send_raw(peer, frame(b"\xff\xff\xff\x00garbage")) is None
            assert await client.send_raw(peer, uvarint(2**40) + b"x") is None
            # ... and the service keeps answering others, also several queries on one stream.
            assert len((await fetch_all(StoreQuery(page_size=5))).messages) == 5
            reusing = StoreClient(client.host, timeout=10, reuse_streams=True)
            query, got = StoreQuery(page_size=7, forward=False), []
            while True:
                page = await reusing.query(peer, query)
                got[:0] = [m.digest for m in page.messages]
                if page.cursor is None:
                    break
                query = query.with_cursor(page.cursor)
            assert got == [d for _, d in sorted((r["received_time"], r["digest"]) for r in rows)]
            assert len(reusing._streams) == 1
        return results, server.metrics, served

    results, metrics, served = trio.run(main)
    assert len(served["inf"].messages) == 20                 # backward from +inf: the last page
    assert len(served["size"].messages) == min(100, len(rows))  # 2^64-1 is the maximum, 100
    for (pubsub, contents, forward, size, cursor), pages in results:
        it = iter(pages)
        check_paging(lambda q, it=it: next(it), rows, pubsub, contents, forward, size, cursor, key=digests)
    v = metrics.value
    assert v("waku_store_rejected_total", reason="too_many_content_topics") == 1
    assert v("waku_store_rejected_total", reason="bad_cursor_time") == 2  # the two NaN cursors
    assert v("waku_store_rejected_total", reason="bad_cursor_digest") == 0
    assert v("waku_store_rejected_total", reason="bad_page_size") == 0
    assert v("waku_store_streams_closed_total", reason="undecodable") == 1
    assert v("waku_store_streams_closed_total", reason="bad_frame") == 1


def test_store_v3_pages_like_the_reference_clients(table):
    """/vac/waku/store-query/3.0.0 over libp2p: paging as js-waku does it (the next cursor is the
    hash of the last (forward) / first (backward) message, stop at the first empty page) gives
    every matching message once in store order; hash lookups; the reference nodes' 400s and
    nwaku's 300 for a cursor naming no stored message."""
    from core.store_page import StoredMessage, page_from_rows
    from ingest.store import codec_v3

    path, rows = table
    reader = reader_of(path)
    stored = [StoredMessage.from_mapping(r) for r in rows]
    order = {m.message_hash: (m.received_time, m.digest) for m in stored}

    async def main():
        host, server = await serve(reader)
        async with host.run(listen_addrs("127.0.0.1", 0, -1)), StoreClient.running(timeout=10) as client:
            peer = await client.connect(f"{host.get_addrs()[0]}")
            out = {}
            rnd = random.Random(7)
            for case in range(8):
                pubsub, contents = random_filters(rnd)
                forward, limit = case % 2 == 0, rnd.choice([None, 1, 3, 20, 1000])
                got, cursor, pages = [], None, 0
                while True:
                    resp = await client.query_v3(peer, codec_v3.request(
                        f"r{case}-{pages}", pubsub_topic=pubsub or None, content_topics=contents, cursor=cursor,
                        forward=forward, limit=limit))
                    assert resp.status_code == 200 and resp.request_id == f"r{case}-{pages}"
                    pages += 1
                    hashes = [bytes(m.message_hash) for m in resp.messages]
                    assert all(m.pubsub_topic and m.HasField("message") for m in resp.messages)
                    if not hashes:
                        break
                    assert hashes == sorted(hashes, key=order.get)  # every page oldest first
                    got = got + hashes if forward else hashes + got
                    cursor = hashes[-1] if forward else hashes[0]
                out[case] = (pubsub, contents, forward, got)
            # a hash lookup (no scan: from the reader's hash index)
            picks = [m.message_hash for m in stored[::9]] + [b"\x07" * 32]
            resp = await client.query_v3(peer, codec_v3.request("h", hashes=picks))
            out["lookup"] = (resp.status_code, sorted(bytes(m.message_hash) for m in resp.messages))
            # with a pubsub topic (as js-waku sends it), a filter on the hashes' messages (nwaku)
            resp = await client.query_v3(peer, codec_v3.request("m", pubsub_topic=PUBSUB[0], hashes=picks))
            out["mixed"] = (resp.status_code, sorted(bytes(m.message_hash) for m in resp.messages))
            bad = {
                "short cursor": codec_v3.request("b2", cursor=b"\x01" * 31),
                "unknown cursor": codec_v3.request("b3", cursor=b"\x01" * 32),
                "window": codec_v3.request("b4", time_start=10, time_end=5),
                "topics": codec_v3.request("b5", content_topics=[f"/a/1/{i}/p" for i in range(101)]),
                "no id": codec_v3.request(""),
            }
            out["bad"] = {k: (r.status_code, r.status_desc) for k, v in bad.items()
                          for r in [await client.query_v3(peer, v)]}
            # a time window on the sender timestamp (receive time without one), ends inclusive
            lo, hi = int((BASE_T + 3) * 1e9), int((BASE_T + 9) * 1e9)
            resp = await client.query_v3(peer, codec_v3.request("w", time_start=lo, time_end=hi, limit=100,
                                                                forward=True))
            out["window"] = [bytes(m.message_hash) for m in resp.messages]
            return out

    out = trio.run(main)
    for case in range(8):
        pubsub, contents, forward, got = out[case]
        want = [m.message_hash for m in sorted(stored, key=lambda m: (m.received_time, m.digest))
                if (not pubsub or m.pubsub_topic == pubsub) and (not contents or m.content_topic in contents)]
        assert got == want, case
    assert out["lookup"] == (200, sorted(m.message_hash for m in stored[::9]))
    assert out["mixed"] == (200, sorted(m.message_hash for m in stored[::9] if m.pubsub_topic == PUBSUB[0]))
    # an unknown cursor: nwaku's archive error (BAD_RESPONSE), the others its 400s
    assert out["bad"].pop("unknown cursor") == (300, "BAD_RESPONSE: archive error: DRIVER_ERROR: cursor not found")
    for name, (code, desc) in out["bad"].items():
        assert code == 400 and desc.startswith("BAD_REQUEST: "), (name, code, desc)
    lo, hi = int((BASE_T + 3) * 1e9), int((BASE_T + 9) * 1e9)
    window = page_from_rows(stored, StoreQuery(page_size=100, time_start=lo, time_end=hi))
    assert out["window"] == [m.message_hash for m in window.messages] and window.messages


def test_bridge_serves_store(tmp_path, kafka, config):
    from core.config import load_config
    from ingest.metrics import BridgeMetrics
    from ingest.node import Bridge
    from ingest.settings import BridgeSettings

    warehouse = tmp_path / "warehouse"
    rows = [make_row(BASE_T + i, PUBSUB[0], CONTENT[i % 2], b"m%d" % i, i) for i in range(30)]
    write_table(str(warehouse / "messages"), rows, random.Random(1), files=1)
    cfg = load_config([
        f"kafka.bootstrap_servers={kafka}", f"topics.messages=test.store.{uuid.uuid4().hex[:8]}",
        f"bridge.key_file={tmp_path / 'key'}", f"warehouse.root={warehouse}",
        "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=-1", "bridge.metrics_port=-1",
        "store_service.refresh_interval_s=0.2",
    ])
    bridge = Bridge(BridgeSettings.from_config(cfg), key_pair=create_new_key_pair(), metrics=BridgeMetrics(),
                    out=io.StringIO())

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(bridge.run)
            try:
                async with StoreClient.running(timeout=10) as client:
                    peer = await client.connect(str(bridge.addrs[0]))
                    page = await client.query(peer, StoreQuery(content_topics=(CONTENT[1],), forward=False,
                                                               page_size=5))
                    assert [m.payload for m in page.messages] == [b"m%d" % i for i in (21, 23, 25, 27, 29)]
                    # New table versions are followed.
                    write_table(str(warehouse / "messages"),
                                [make_row(BASE_T + 100, PUBSUB[0], CONTENT[1], b"new", 100)], random.Random(2))
                    with trio.fail_after(10):
                        while True:
                            page = await client.query(peer, StoreQuery(forward=False, page_size=1))
                            if page.messages[0].payload == b"new":
                                break
                            await trio.sleep(0.1)
            finally:
                bridge.stop()

    trio.run(main)
    assert bridge.metrics.value("waku_store_queries_total") >= 2


def test_cli_local_and_remote(table):
    from ingest.store.cli import main

    path, rows = table
    t0 = BASE_T + 86_400 + 3
    t1 = BASE_T + 86_400 + 12
    window = sorted((r["received_time"], r["digest"]) for r in rows
                    if r["pubsub_topic"] == PUBSUB[0] and t0 <= r["received_time"] < t1)
    assert window

    def run(*extra: str) -> list[dict]:
        out, err = io.StringIO(), io.StringIO()
        code = main(["query", "--table", path, "--pubsub-topic", PUBSUB[0], "--start", str(t0), "--end", str(t1),
                     "--format", "jsonl", "--page-size", "2", "--progress", *extra], out=out, err=err)
        assert code == 0, err.getvalue()
        assert "done:" in err.getvalue()
        return [json.loads(line) for line in out.getvalue().splitlines()]

    fwd = run()
    assert [(r["received_time"], bytes.fromhex(r["digest"])) for r in fwd] == window
    back = run("--direction", "backward")
    assert [(r["received_time"], bytes.fromhex(r["digest"])) for r in back] == window[::-1]
    assert len(run("--limit", "2")) == 2

    # CSV and table formats.
    out = io.StringIO()
    assert main(["query", "--table", path, "--format", "csv", "--limit", "3"], out=out, err=io.StringIO()) == 0
    assert out.getvalue().splitlines()[0].startswith("received_time,received_at,pubsub_topic")
    assert len(out.getvalue().splitlines()) == 4
    out = io.StringIO()
    assert main(["query", "--table", path, "--limit", "3"], out=out, err=io.StringIO()) == 0
    assert len(out.getvalue().splitlines()) == 4

    # Against a remote peer: the same window (receive times learned from the cursors at the edge).
    reader = reader_of(path)
    started, done = threading.Event(), trio.Event
    addr: list[str] = []
    stop = threading.Event()

    async def server_main():
        host, _ = await serve(reader)
        async with host.run(listen_addrs("127.0.0.1", 0, -1)):
            addr.append(f"{host.get_addrs()[0]}")
            started.set()
            while not stop.is_set():
                await trio.sleep(0.05)

    thread = threading.Thread(target=trio.run, args=(server_main,), daemon=True)
    thread.start()
    try:
        assert started.wait(20)
        remote = run("--peer", addr[0])
        assert [bytes.fromhex(r["digest"]) for r in remote] == [d for _, d in window]
        remote_back = run("--peer", addr[0], "--direction", "backward")
        assert [bytes.fromhex(r["digest"]) for r in remote_back] == [d for _, d in window[::-1]]
    finally:
        stop.set()
        thread.join(10)
    del done


def test_store_rate_limit_per_peer(table):
    """A peer over store_service.max_queries_per_peer_per_s gets 429 (v3) or an empty page
    (beta2, counted), and others are served meanwhile."""
    from ingest.store import codec_v3

    path, rows = table
    reader = reader_of(path)

    async def main():
        host, server = await serve(reader, StoreServiceSettings(max_queries_per_peer_per_s=1.0))
        async with host.run(listen_addrs("127.0.0.1", 0, -1)), StoreClient.running(timeout=10) as a, \
                StoreClient.running(timeout=10) as b:
            addr = f"{host.get_addrs()[0]}"
            pa, pb_ = await a.connect(addr), await b.connect(addr)
            codes = [(await a.query_v3(pa, codec_v3.request(f"q{i}", limit=5))).status_code for i in range(3)]
            beta2 = await a.query(pa, StoreQuery(page_size=5))
            other = await b.query_v3(pb_, codec_v3.request("b", limit=5))
            return codes, beta2, other, server.metrics

    codes, beta2, other, metrics = trio.run(main)
    assert codes == [200, 200, 429]           # burst of 2 (twice the rate), then refused
    # Counted the same for both protocols: the v3 429 and the empty beta2 page.
    assert beta2.messages == [] and metrics.value("waku_store_rejected_total", reason="rate_limited") == 2
    assert other.status_code == 200 and len(other.messages) == 5


def test_store_timeout_is_for_silence_not_for_slow_requests(table):
    """request_timeout_s closes a silent stream; a client that sends its request slowly (a
    byte every 0.3 s, longer than the timeout in all) is answered."""
    from libp2p.custom_types import TProtocol

    from ingest.framing import FrameReader
    from ingest.store.codec import STORE_CODEC

    path, rows = table
    reader = reader_of(path)

    async def main():
        host, server = await serve(reader, StoreServiceSettings(request_timeout_s=1.0))
        async with host.run(listen_addrs("127.0.0.1", 0, -1)), StoreClient.running(timeout=10) as client:
            peer = await client.connect(f"{host.get_addrs()[0]}")
            data = frame(pb.HistoryRPC(request_id="slow", query=pb.HistoryQuery(
                pagingInfo=pb.PagingInfo(pageSize=3))).SerializeToString())
            stream = await client.host.new_stream(peer, [TProtocol(STORE_CODEC)])
            began = trio.current_time()
            for i in range(0, len(data), 2):
                await stream.write(data[i:i + 2])
                await trio.sleep(0.3)
            slow = pb.HistoryRPC.FromString(await FrameReader(stream, 1 << 20).read_frame())
            took = trio.current_time() - began
            silent = await client.host.new_stream(peer, [TProtocol(STORE_CODEC)])
            with trio.fail_after(10):
                closed = await FrameReader(silent, 1 << 20).read_frame()
            return slow, took, closed, server.metrics

    slow, took, closed, metrics = trio.run(main)
    assert took > 1.5 and slow.request_id == "slow" and len(slow.response.messages) == 3
    # the silent stream, and the slow one once answered and left silent
    assert closed is None and metrics.value("waku_store_streams_closed_total", reason="timeout") == 2
