"""discv5's decisions, without I/O: packet bytes + state -> packets to send and what happened.

`Discv5` holds the session cache (keys by node id and UDP endpoint, discv5-theory.md "Session
Cache"), the WHOAREYOU challenges we sent, and our requests waiting for a handshake. `receive`
takes one datagram and returns an `Outcome`: the packets to send back, a response message for
the service, a node that completed a handshake with us, or why it was dropped. `request` wraps
an outgoing message in a packet (in the session when there is one, else a random packet that
starts a handshake). `answer` is the pure request handler (PING, FINDNODE, TALKREQ).

Bounds (no amplification, docs/discovery.md): a packet outside 63-1280 bytes, of another
protocol, not decryptable in a known session (and not a handshake start), a replayed nonce, or a
handshake without a challenge is dropped and counted. The only answer to input that is not in an
established session is WHOAREYOU: 63 bytes, the smallest valid packet, so never more bytes than
were received; and at most `whoareyou_per_s` a second per source IP (burst 2x), one outstanding
challenge per endpoint. Time comes in as `now`; randomness from `rand` (os.urandom).
"""
from __future__ import annotations

import ipaddress
import os
import struct
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ingest.discv5 import codec
from ingest.discv5.codec import (
    FindNode,
    Message,
    Nodes,
    PacketError,
    Ping,
    Pong,
    TalkReq,
    TalkResp,
)
from ingest.discv5.table import K, Table
from ingest.enr import EnrError, Record
from ingest.enr import decode as decode_enr

Addr = tuple[str, int]

MAX_SESSIONS = 1000
MAX_CHALLENGES = 1000
MAX_PENDING = 1000
CHALLENGE_TTL_S = 2.0  # the spec suggests 1 s for a handshake; a busy peer gets some slack
PENDING_TTL_S = 2.0
REPLAY_WINDOW = 256  # the nonces remembered per session
RECORDS_PER_NODES = 3  # 3 ENRs of at most 300 bytes stay below 1280 bytes with the framing
MAX_IPS = 10_000


@dataclass
class Session:
    write_key: bytes
    read_key: bytes
    counter: int = 0
    seen: OrderedDict[bytes, None] = field(default_factory=OrderedDict)


@dataclass(frozen=True)
class Challenge:
    data: bytes  # challenge-data: masking-iv || header of the WHOAREYOU we sent
    record: Record | None  # the sender's record, when we know it (its seq went into the WHOAREYOU)
    sent_at: float


@dataclass
class Pending:
    """A request sent without a session: re-sent in a handshake when WHOAREYOU comes back."""
    dest_id: bytes
    dest_pubkey: bytes
    addr: Addr
    plaintext: bytes
    sent_at: float


@dataclass(frozen=True)
class Outcome:
    out: list[tuple[bytes, Addr]] = field(default_factory=list)
    node_id: bytes | None = None  # the sender (message packets and handshakes)
    response: Message | None = None  # a PONG, NODES or TALKRESP for the service's waiting request
    request: Message | None = None  # a request we answered
    handshake_record: Record | None = None  # the record of a node that completed a handshake with us
    dropped: str | None = None  # why the packet was dropped (a metric label)


def nonce(counter: int, rand: Callable[[int], bytes]) -> bytes:
    """The spec's advice: the message count in the first 32 bits, 64 random bits."""
    return struct.pack(">I", counter & 0xFFFFFFFF) + rand(8)


def relayable(requester_ip: str, record: Record) -> bool:
    """go-ethereum's CheckRelayIP: loopback records only to loopback requesters, LAN records not
    to internet requesters."""
    try:
        ip = record.ip()
    except EnrError:
        return False
    if ip is None:
        return False
    node, to = ipaddress.ip_address(ip), ipaddress.ip_address(requester_ip)
    if node.is_unspecified or node.is_multicast:
        return False
    if node.is_loopback and not to.is_loopback:
        return False
    return not (node.is_private and not (to.is_private or to.is_loopback))


def answer(request: Message, src: Addr, own: Record, table: Table) -> list[Message]:
    """The responses to a request (pure): PONG with the envelope address; NODES with our record
    for distance 0 and verified table nodes for the others (at most 16, 3 per message, at least
    one message); an empty TALKRESP for every TALKREQ (we speak no TALK protocol)."""
    if isinstance(request, Ping):
        return [Pong(request.req_id, own.seq, src[0], src[1])]
    if isinstance(request, FindNode):
        found: list[bytes] = []
        done: set[int] = set()
        for d in request.distances:
            if d in done or d > 256:
                continue
            done.add(d)
            if d == 0:
                found.append(own.raw)
            else:
                found += [e.record.raw for e in table.at_distance(d) if relayable(src[0], e.record)]
            if len(found) >= K:
                break
        found = found[:K]
        chunks = [tuple(found[i:i + RECORDS_PER_NODES]) for i in range(0, len(found), RECORDS_PER_NODES)] or [()]
        return [Nodes(request.req_id, len(chunks), c) for c in chunks]
    if isinstance(request, TalkReq):
        return [TalkResp(request.req_id, b"")]
    return []


class Discv5:
    """    d = Discv5(private_key, lambda: our_record, table)
    outcome = d.receive(datagram, (ip, port), now)
    packet = d.request(record, addr, codec.Ping(req_id, seq), now)
    """

    def __init__(self, private_key: bytes, own: Callable[[], Record], table: Table, *,
                 rand: Callable[[int], bytes] = os.urandom, whoareyou_per_s: float = 10.0,
                 protocol_id: bytes = codec.WAKU_PROTOCOL_ID) -> None:
        self.protocol_id = protocol_id
        self.private_key = private_key
        self.own = own
        self.table = table
        self.node_id = codec.node_id(codec.public_key(private_key))
        self.rand = rand
        self.sessions: OrderedDict[tuple[bytes, Addr], Session] = OrderedDict()
        self.challenges: OrderedDict[tuple[bytes, Addr], Challenge] = OrderedDict()
        self.pending: OrderedDict[bytes, Pending] = OrderedDict()  # by the nonce of the packet we sent
        self.whoareyou_per_s = whoareyou_per_s
        self._ip_tokens: dict[str, tuple[float, float]] = {}

    # Sending.

    def request(self, record: Record, addr: Addr, message: Message, now: float) -> bytes:
        """The packet carrying `message` to the node of `record` at `addr`."""
        dest_id = record.node_id()
        plaintext = codec.encode_message(message)
        s = self.sessions.get((dest_id, addr))
        iv = self.rand(16)
        if s is not None:
            self.sessions.move_to_end((dest_id, addr))
            n, packet = self._seal(s, dest_id, iv, plaintext)
        else:  # no session: random bytes the recipient cannot decrypt start the handshake
            n = nonce(0, self.rand)
            packet = codec.random_message_packet(dest_id, self.node_id, iv, n, self.rand(20), self.protocol_id)
        # Kept by nonce either way: a peer that lost our session answers WHOAREYOU to it.
        self._expire(now)
        self.pending[n] = Pending(dest_id, record.public_key, addr, plaintext, now)
        while len(self.pending) > MAX_PENDING:
            self.pending.popitem(last=False)
        return packet

    def _seal(self, s: Session, dest_id: bytes, iv: bytes, plaintext: bytes) -> tuple[bytes, bytes]:
        s.counter += 1
        n = nonce(s.counter, self.rand)
        return n, codec.message_packet(dest_id, self.node_id, iv, n, s.write_key, plaintext, self.protocol_id)

    def _responses(self, s: Session, dest_id: bytes, addr: Addr,
                   messages: Sequence[Message]) -> list[tuple[bytes, Addr]]:
        return [(self._seal(s, dest_id, self.rand(16), codec.encode_message(m))[1], addr) for m in messages]

    # Receiving.

    def receive(self, packet: bytes, addr: Addr, now: float) -> Outcome:
        try:
            h = codec.decode_header(self.node_id, packet, self.protocol_id)
        except PacketError as exc:
            short = len(packet) < codec.MIN_PACKET or "past the end" in str(exc)
            return Outcome(dropped="oversized" if len(packet) > codec.MAX_PACKET else
                           "truncated" if short else "not_discv5")
        self._expire(now)
        if h.flag == codec.FLAG_MESSAGE:
            return self._on_message(h, packet, addr, now)
        if h.flag == codec.FLAG_WHOAREYOU:
            return self._on_whoareyou(h, addr, now)
        return self._on_handshake(h, packet, addr, now)

    def _on_message(self, h: codec.Header, packet: bytes, addr: Addr, now: float) -> Outcome:
        if len(h.authdata) != 32:
            return Outcome(dropped="bad_header")
        src = h.authdata
        s = self.sessions.get((src, addr))
        if s is not None:
            if h.nonce in s.seen:
                return Outcome(node_id=src, dropped="replayed")
            try:
                plaintext = codec.decrypt_message(s.read_key, h.nonce, packet[h.masked_end:], h.ad)
            except PacketError:
                plaintext = None
            if plaintext is not None:
                s.seen[h.nonce] = None
                while len(s.seen) > REPLAY_WINDOW:
                    s.seen.popitem(last=False)
                self.sessions.move_to_end((src, addr))
                return self._on_plaintext(s, src, addr, plaintext)
        # No session, or not decryptable in it: challenge the sender (WHOAREYOU), rate-limited.
        if not self._allow_whoareyou(addr[0], now):
            return Outcome(node_id=src, dropped="whoareyou_rate")
        if (src, addr) in self.challenges and now - self.challenges[(src, addr)].sent_at < CHALLENGE_TTL_S / 4:
            return Outcome(node_id=src, dropped="challenge_outstanding")
        e = self.table.get(src)
        known = e.record if e is not None and e.addr == addr else None
        out, data = codec.whoareyou_packet(src, self.rand(16), h.nonce, self.rand(16), known.seq if known else 0,
                                           self.protocol_id)
        self.challenges[(src, addr)] = Challenge(data, known, now)
        self.challenges.move_to_end((src, addr))
        while len(self.challenges) > MAX_CHALLENGES:
            self.challenges.popitem(last=False)
        return Outcome(out=[(out, addr)], node_id=src)

    def _on_plaintext(self, s: Session, src: bytes, addr: Addr, plaintext: bytes) -> Outcome:
        try:
            m = codec.decode_message(plaintext)
        except PacketError:
            return Outcome(node_id=src, dropped="bad_message")
        if isinstance(m, codec.REQUESTS):
            return Outcome(out=self._responses(s, src, addr, answer(m, addr, self.own(), self.table)),
                           node_id=src, request=m)
        return Outcome(node_id=src, response=m)

    def _on_whoareyou(self, h: codec.Header, addr: Addr, now: float) -> Outcome:
        try:
            id_nonce, enr_seq = codec.parse_whoareyou(h)
        except PacketError:
            return Outcome(dropped="bad_header")
        p = self.pending.pop(h.nonce, None)
        if p is None or p.addr != addr:
            return Outcome(dropped="unsolicited_whoareyou")
        del id_nonce  # part of the challenge-data
        eph = self.rand(32)
        try:
            eph_pub = codec.public_key(eph)
            secret = codec.ecdh(p.dest_pubkey, eph)
        except (PacketError, ValueError):
            return Outcome(dropped="bad_key")
        init_key, recp_key = codec.derive_keys(secret, h.ad, self.node_id, p.dest_id)
        sig = codec.id_sign(self.private_key, h.ad, eph_pub, p.dest_id)
        own = self.own()
        record = own.raw if enr_seq < own.seq else b""
        s = Session(init_key, recp_key, counter=1)
        self.sessions[(p.dest_id, addr)] = s
        self._trim_sessions()
        out = codec.handshake_packet(p.dest_id, self.rand(16), nonce(s.counter, self.rand), init_key, p.plaintext,
                                     self.node_id, sig, eph_pub, record, self.protocol_id)
        return Outcome(out=[(out, addr)], node_id=p.dest_id)

    def _on_handshake(self, h: codec.Header, packet: bytes, addr: Addr, now: float) -> Outcome:
        try:
            auth = codec.parse_handshake(h)
        except PacketError:
            return Outcome(dropped="bad_header")
        src = auth.src_id
        c = self.challenges.get((src, addr))  # kept until a handshake passes: a forged one cannot cancel it
        if c is None:
            return Outcome(node_id=src, dropped="unknown_session")
        record = c.record
        if auth.record:
            try:
                record = decode_enr(auth.record)
            except EnrError:
                return Outcome(node_id=src, dropped="bad_record")
            if record.node_id() != src:
                return Outcome(node_id=src, dropped="bad_record")
        if record is None:
            return Outcome(node_id=src, dropped="no_record")
        if not codec.id_verify(record.public_key, auth.signature, c.data, auth.eph_pubkey, self.node_id):
            return Outcome(node_id=src, dropped="bad_signature")
        try:
            secret = codec.ecdh(auth.eph_pubkey, self.private_key)
        except PacketError:
            return Outcome(node_id=src, dropped="bad_key")
        init_key, recp_key = codec.derive_keys(secret, c.data, src, self.node_id)
        try:
            plaintext = codec.decrypt_message(init_key, h.nonce, packet[h.masked_end:], h.ad)
        except PacketError:
            return Outcome(node_id=src, dropped="bad_tag")
        del self.challenges[(src, addr)]  # used once: a replayed handshake finds none
        s = Session(recp_key, init_key)
        s.seen[h.nonce] = None
        self.sessions[(src, addr)] = s
        self._trim_sessions()
        result = self._on_plaintext(s, src, addr, plaintext)
        return Outcome(out=result.out, node_id=src, response=result.response, request=result.request,
                       handshake_record=record, dropped=result.dropped)

    # Bounds.

    def _allow_whoareyou(self, ip: str, now: float) -> bool:
        if self.whoareyou_per_s <= 0:
            return True
        burst = 2 * self.whoareyou_per_s
        tokens, last = self._ip_tokens.get(ip, (burst, now))
        tokens = min(burst, tokens + (now - last) * self.whoareyou_per_s)
        if len(self._ip_tokens) >= MAX_IPS and ip not in self._ip_tokens:
            full = burst / self.whoareyou_per_s
            self._ip_tokens = {k: v for k, v in self._ip_tokens.items() if now - v[1] < full}
        if tokens < 1:
            self._ip_tokens[ip] = (tokens, now)
            return False
        self._ip_tokens[ip] = (tokens - 1, now)
        return True

    def _trim_sessions(self) -> None:
        while len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)

    def _expire(self, now: float) -> None:
        while self.challenges and now - next(iter(self.challenges.values())).sent_at > CHALLENGE_TTL_S:
            self.challenges.popitem(last=False)
        while self.pending and now - next(iter(self.pending.values())).sent_at > PENDING_TTL_S:
            self.pending.popitem(last=False)
