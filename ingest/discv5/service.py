"""discv5 on a trio UDP socket: the datagram loop around `protocol.Discv5`, our requests (PING,
FINDNODE) with their responses, the table's upkeep, and lookups that find Waku relay peers.

    service = Discv5Service(private_key, own_record, settings, on_peer=callback, registry=r)
    port = await service.open()          # bound: the port goes into our ENR's udp
    nursery.start_soon(service.run)      # bootstrap, lookups, revalidation, until cancelled

`on_peer(record)` is called for every node that answered us (its liveness verified) whose record
it carries; the bridge decides whether it is a relay peer of its cluster and shards.
"""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

import trio
from prometheus_client import CollectorRegistry, Counter, Gauge

from ingest.discv5 import codec
from ingest.discv5.codec import FindNode, Message, Nodes, Ping, Pong
from ingest.discv5.protocol import Addr, Discv5
from ingest.discv5.settings import Discv5Settings
from ingest.discv5.table import K, Table, udp_addr
from ingest.enr import EnrError, Record
from ingest.enr import decode as decode_enr

log = logging.getLogger("ingest.discv5")

ALPHA = 3  # lookup concurrency
MAX_NODES_RESPONSES = 5  # NODES messages taken per FINDNODE (go-ethereum's totalNodesResponseLimit)
REVALIDATE_EVERY_S = 10.0
MAX_FAILURES = 3  # a node that failed this many pings in a row leaves the table


class Discv5Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry or CollectorRegistry()
        self.received = Counter("waku_discv5_packets_received", "discv5 datagrams received", registry=r)
        self.sent = Counter("waku_discv5_packets_sent", "discv5 datagrams sent", registry=r)
        self.dropped = Counter("waku_discv5_packets_dropped", "discv5 datagrams dropped unanswered, by reason",
                               ["reason"], registry=r)
        self.requests = Counter("waku_discv5_requests_answered", "discv5 requests answered, by message",
                                ["message"], registry=r)
        self.calls = Counter("waku_discv5_requests_sent", "Our discv5 requests, by message and outcome "
                             "(answered, timeout)", ["message", "outcome"], registry=r)
        self.table_nodes = Gauge("waku_discv5_table_nodes", "Nodes in the discv5 table", registry=r)
        self.found = Counter("waku_discv5_nodes_verified", "Nodes that answered our discv5 requests", registry=r)


class Discv5Service:
    def __init__(self, private_key: bytes, own: Callable[[], Record], settings: Discv5Settings, *,
                 on_peer: Callable[[Record], None] | None = None, registry: CollectorRegistry | None = None,
                 rng: random.Random | None = None) -> None:
        self.settings = settings
        self.own = own
        self.node_id = codec.node_id(codec.public_key(private_key))
        self.table = Table(self.node_id)
        self.proto = Discv5(private_key, own, self.table, whoareyou_per_s=settings.whoareyou_per_s)
        self.on_peer = on_peer or (lambda _r: None)
        self.metrics = Discv5Metrics(registry)
        self.rng = rng or random.Random()
        self.sock: trio.socket.SocketType | None = None
        self.port: int | None = None
        self._waiting: dict[tuple[bytes, bytes], trio.MemorySendChannel[Message]] = {}
        self._verifying: set[bytes] = set()
        self._nursery: trio.Nursery | None = None
        self.lookups = 0

    async def open(self) -> int:
        """Bind the UDP socket; the port bound."""
        sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
        try:
            await sock.bind((self.settings.host, self.settings.port))
        except OSError as exc:
            sock.close()
            where = f"{self.settings.host}:{self.settings.port}"
            raise OSError(f"discv5: cannot bind UDP {where}: {exc.strerror}") from None
        self.sock = sock
        self.port = sock.getsockname()[1]
        return self.port

    async def run(self) -> None:
        if self.sock is None:
            await self.open()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._receive_loop)
                nursery.start_soon(self._maintain)
        finally:
            if self.sock is not None:
                self.sock.close()

    # The datagram loop.

    async def _receive_loop(self) -> None:
        assert self.sock is not None
        while True:
            try:
                data, addr = await self.sock.recvfrom(2048)
            except OSError as exc:  # e.g. ICMP port unreachable reported on Linux
                log.debug("discv5: recvfrom: %s", exc)
                continue
            self.metrics.received.inc()
            src: Addr = (addr[0], addr[1])
            o = self.proto.receive(data, src, time.monotonic())
            if o.dropped is not None:
                self.metrics.dropped.labels(o.dropped).inc()
            for packet, to in o.out:
                await self._send(packet, to)
            if o.request is not None:
                self.metrics.requests.labels(type(o.request).__name__.upper()).inc()
            if o.handshake_record is not None:
                self._learn(o.handshake_record)
            if o.response is not None and o.node_id is not None:
                ch = self._waiting.get((o.node_id, o.response.req_id))
                if ch is not None:
                    try:
                        ch.send_nowait(o.response)
                    except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                        pass

    async def _send(self, packet: bytes, to: Addr) -> None:
        assert self.sock is not None
        try:
            await self.sock.sendto(packet, to)
            self.metrics.sent.inc()
        except OSError as exc:
            log.debug("discv5: sendto %s: %s", to, exc)

    # Requests.

    async def _call(self, record: Record, message: Message, want: int = 1) -> list[Message]:
        """Send a request and collect up to `want` responses (NODES may come in several); fewer
        when the timeout passes."""
        addr = udp_addr(record)
        if addr is None:
            return []
        key = (record.node_id(), message.req_id)
        send, recv = trio.open_memory_channel[Message](MAX_NODES_RESPONSES)
        self._waiting[key] = send
        out: list[Message] = []
        try:
            await self._send(self.proto.request(record, addr, message, time.monotonic()), addr)
            with trio.move_on_after(self.settings.request_timeout_s):
                while len(out) < want:
                    m = await recv.receive()
                    out.append(m)
                    if isinstance(m, Nodes) and len(out) == 1:
                        want = max(1, min(m.total, MAX_NODES_RESPONSES))
        finally:
            del self._waiting[key]
        self.metrics.calls.labels(type(message).__name__.upper(), "answered" if out else "timeout").inc()
        return out

    def _req_id(self) -> bytes:
        return self.rng.randbytes(8)

    async def ping(self, record: Record) -> Pong | None:
        rs = await self._call(record, Ping(self._req_id(), self.own().seq))
        pong = next((m for m in rs if isinstance(m, Pong)), None)
        e = self.table.get(record.node_id())
        if pong is not None:
            if e is None or not e.verified:
                self.metrics.found.inc()
            e = self.table.add(record, verified=True)
            if e is not None:
                e.failures = 0
            self.on_peer(record)
        elif e is not None:
            e.failures += 1
            if e.failures >= MAX_FAILURES:
                self.table.remove(e.node_id)
        self.metrics.table_nodes.set(len(self.table))
        return pong

    async def findnode(self, record: Record, distances: tuple[int, ...]) -> list[Record] | None:
        """The records a node returns for the distances (checked: valid, at a distance asked
        for); None when it did not answer."""
        nid = record.node_id()
        out: list[Record] = []
        seen: set[bytes] = set()
        answers = await self._call(record, FindNode(self._req_id(), distances), want=1)
        if not answers:
            return None
        for m in answers:
            if not isinstance(m, Nodes):
                continue
            for raw in m.records[:K]:
                try:
                    r = decode_enr(raw)
                except EnrError:
                    continue
                rid = r.node_id()
                if rid in seen or codec.log_distance(nid, rid) not in distances:
                    continue
                seen.add(rid)
                out.append(r)
        return out

    # Table upkeep and lookups.

    def _learn(self, record: Record) -> None:
        """A record we heard of: into the table (unverified) and pinged once to verify it."""
        nid = record.node_id()
        if nid == self.node_id:
            return
        e = self.table.get(nid)
        if e is not None and e.verified and e.record.seq >= record.seq:
            return
        if self.table.add(record) is None or nid in self._verifying or self._nursery is None:
            return
        self._verifying.add(nid)
        self._nursery.start_soon(self._verify, record)

    async def _verify(self, record: Record) -> None:
        try:
            await self.ping(record)
        finally:
            self._verifying.discard(record.node_id())

    async def _maintain(self) -> None:
        boot: list[Record] = []
        for raw in self.settings.bootstrap:
            try:
                boot.append(decode_enr(raw))
            except EnrError as exc:
                log.warning("discv5: a bootstrap ENR is invalid (%s); skipped", exc)
        last_revalidate = trio.current_time()
        while True:
            if not any(e.verified for e in self.table.entries()):
                async with trio.open_nursery() as n:
                    for r in boot:
                        n.start_soon(self.ping, r)
            await self.lookup(self.node_id if self.lookups == 0 else self.rng.randbytes(32))
            if trio.current_time() - last_revalidate >= REVALIDATE_EVERY_S:
                last_revalidate = trio.current_time()
                entries = self.table.entries()
                if entries:
                    await self.ping(self.rng.choice(entries).record)
            await trio.sleep(self.settings.lookup_interval_s)

    async def lookup(self, target: bytes) -> list[Record]:
        """The k closest nodes to `target` we can find (discv5-theory.md "Lookup"): FINDNODE to
        the alpha closest not yet asked, for the distances next to the target's, until the k
        closest have all been asked."""
        self.lookups += 1
        t = int.from_bytes(target, "big")
        found: dict[bytes, Record] = {e.node_id: e.record for e in self.table.closest(target, K)}
        asked: set[bytes] = set()

        def dist(nid: bytes) -> int:
            return int.from_bytes(nid, "big") ^ t

        while True:
            closest = sorted(found, key=dist)[:K]
            todo = [nid for nid in closest if nid not in asked][:ALPHA]
            if not todo:
                return [found[n] for n in closest]

            async def ask(nid: bytes) -> None:
                r = found[nid]
                d = codec.log_distance(target, nid)
                dists = tuple(x for x in (d, d + 1, d - 1) if 0 < x <= 256) or (256,)
                results = await self.findnode(r, dists)
                if results is None:
                    return
                if self.table.add(r, verified=True) is not None:  # it answered: alive
                    self.on_peer(r)
                for rec in results:
                    rid = rec.node_id()
                    if rid != self.node_id and rid not in found:
                        found[rid] = rec
                    self._learn(rec)

            async with trio.open_nursery() as n:
                for nid in todo:
                    asked.add(nid)
                    n.start_soon(ask, nid)
