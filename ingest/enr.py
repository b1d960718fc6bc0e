"""Ethereum Node Records (EIP-778, identity scheme ``v4``) with Waku's fields (RFC 31/WAKU2-ENR),
encoded as nwaku (``waku/waku_enr/``) and go-waku (``waku/v2/protocol/enr``) do.

A record is ``rlp([signature, seq, k1, v1, k2, v2, ...])``, keys sorted and unique, at most 300
bytes; the signature is the 64-byte ``r || s`` secp256k1 signature of
``keccak256(rlp([seq, k1, v1, ...]))``; ``id`` is ``"v4"`` and ``secp256k1`` the compressed
public key. The text form is ``enr:`` + unpadded URL-safe base64. RLP is the ``rlp`` package's.

Waku's keys: ``waku2`` one byte of capability bits (relay 0, store 1, filter 2, lightpush 3);
``multiaddrs`` each address (without ``/p2p``) as its binary multiaddr behind a 2-byte big-endian
length; ``rs`` cluster (2 bytes BE), shard count (1 byte), shards (2 bytes BE each); ``rsv``
cluster and a 128-byte vector, shard ``i`` at bit ``i % 8`` of byte ``i // 8`` (used from 64
shards on, as both reference nodes do).
"""
from __future__ import annotations

import base64
import ipaddress
import logging
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import coincurve
import multiaddr
import rlp  # type: ignore[import-untyped]
from coincurve.ecdsa import cdata_to_der, deserialize_compact
from Crypto.Hash import keccak
from libp2p.crypto.secp256k1 import Secp256k1PublicKey
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo

log = logging.getLogger("ingest.enr")

MAX_RECORD_BYTES = 300
SHARD_LIST_MAX = 64  # from this many shards on, rsv (the bit vector) instead of rs
MAX_SHARD = 1023

RELAY, STORE, FILTER, LIGHTPUSH = 1, 2, 4, 8  # the waku2 capability bits

_P2P = multiaddr.protocols.P_P2P


class EnrError(ValueError):
    """Not a valid record (or one we cannot build); the message is one line."""


def keccak256(data: bytes) -> bytes:
    return keccak.new(digest_bits=256, data=data).digest()


def _int(value: int) -> bytes:
    """RLP's integer: big-endian, no leading zeros (0 is empty)."""
    return value.to_bytes((value.bit_length() + 7) // 8, "big")


def _uint(data: bytes, what: str) -> int:
    if data[:1] == b"\x00":
        raise EnrError(f"{what}: integer with a leading zero")
    return int.from_bytes(data, "big")


@dataclass(frozen=True)
class Record:
    """A decoded, signature-checked record. `pairs` holds each key's value as RLP decoded it
    (bytes, or a list for a list value)."""
    seq: int
    pairs: dict[bytes, object]
    signature: bytes
    raw: bytes

    @property
    def public_key(self) -> bytes:
        """The compressed secp256k1 public key (33 bytes)."""
        return self._bytes(b"secp256k1") or b""

    def text(self) -> str:
        return to_text(self.raw)

    def node_id(self) -> bytes:
        """The v4 node id: keccak256 of the uncompressed public key's x || y (discv5's address)."""
        return keccak256(coincurve.PublicKey(self.public_key).format(compressed=False)[1:])

    def _bytes(self, key: bytes) -> bytes | None:
        v = self.pairs.get(key)
        if v is None:
            return None
        if not isinstance(v, bytes):
            raise EnrError(f"{key.decode(errors='replace')}: expected bytes, got a list")
        return v

    def peer_id(self) -> ID:
        return ID.from_pubkey(Secp256k1PublicKey.from_bytes(self.public_key))

    def ip(self) -> str | None:
        v = self._bytes(b"ip")
        if v is None:
            return None
        if len(v) != 4:
            raise EnrError("ip: expected 4 bytes")
        return str(ipaddress.IPv4Address(v))

    def port(self, key: bytes) -> int | None:
        v = self._bytes(key)
        return None if v is None else _uint(v, key.decode())

    def capabilities(self) -> int:
        v = self._bytes(b"waku2")
        return v[0] if v else 0

    def multiaddrs(self) -> list[multiaddr.Multiaddr]:
        """The `multiaddrs` field's addresses (unparseable ones skipped, as nwaku does)."""
        v = self._bytes(b"multiaddrs")
        return decode_multiaddrs(v) if v else []

    def addrs(self) -> list[multiaddr.Multiaddr]:
        """Where to dial the node: ip/tcp first, then the multiaddrs field (no /p2p part)."""
        out: list[multiaddr.Multiaddr] = []
        ip, tcp = self.ip(), self.port(b"tcp")
        if ip is not None and tcp:
            out.append(multiaddr.Multiaddr(f"/ip4/{ip}/tcp/{tcp}"))
        out.extend(self.multiaddrs())
        return out

    def peer_info(self) -> PeerInfo:
        return PeerInfo(self.peer_id(), self.addrs())

    def relay_shards(self) -> tuple[int, tuple[int, ...]] | None:
        """(cluster, shards) from rs, else rsv; None when neither is there."""
        rs = self._bytes(b"rs")
        if rs is not None:
            return decode_shard_list(rs)
        rsv = self._bytes(b"rsv")
        if rsv is not None:
            return decode_shard_vector(rsv)
        return None


def to_text(raw: bytes) -> str:
    return "enr:" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def from_text(text: str) -> bytes:
    text = text.strip()
    if not text.startswith("enr:"):
        raise EnrError("expected enr:<base64>")
    body = text[4:]
    try:
        return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except ValueError:
        raise EnrError("enr:...: not URL-safe base64") from None


def _signing_hash(seq: int, items: Sequence[tuple[bytes, object]]) -> bytes:
    content: list[object] = [_int(seq)]
    for k, v in items:
        content += [k, v]
    return keccak256(rlp.encode(content))


def sign(private_key: bytes, seq: int, pairs: dict[bytes, object]) -> bytes:
    """The record's bytes: `pairs` plus id=v4 and secp256k1, signed with the 32-byte key."""
    key = coincurve.PrivateKey(private_key)
    items = dict(pairs)
    items[b"id"] = b"v4"
    items[b"secp256k1"] = key.public_key.format(compressed=True)
    ordered = sorted(items.items())
    signature = key.sign_recoverable(_signing_hash(seq, ordered), hasher=None)[:64]
    out: list[object] = [signature, _int(seq)]
    for k, v in ordered:
        out += [k, v]
    raw = rlp.encode(out)
    if len(raw) > MAX_RECORD_BYTES:
        raise EnrError(f"record of {len(raw)} bytes, more than EIP-778's {MAX_RECORD_BYTES}")
    return raw


def decode(raw: bytes) -> Record:
    """A record from its bytes, checked as EIP-778 requires (size, key order, v4 signature)."""
    if len(raw) > MAX_RECORD_BYTES:
        raise EnrError(f"record of {len(raw)} bytes, more than {MAX_RECORD_BYTES}")
    try:
        items = rlp.decode(raw)
    except Exception as exc:  # noqa: BLE001 - rlp's DecodingError and friends
        raise EnrError(f"not RLP: {exc}") from None
    if not isinstance(items, list) or len(items) < 2 or len(items) % 2:
        raise EnrError("expected a list [signature, seq, k, v, ...]")
    signature, seq_raw = items[0], items[1]
    if not isinstance(signature, bytes) or not isinstance(seq_raw, bytes):
        raise EnrError("signature and seq must be strings")
    seq = _uint(seq_raw, "seq")
    pairs: dict[bytes, object] = {}
    previous = b""
    ordered: list[tuple[bytes, object]] = []
    for i in range(2, len(items), 2):
        k, v = items[i], items[i + 1]
        if not isinstance(k, bytes):
            raise EnrError("a key is not a string")
        if ordered and k <= previous:
            raise EnrError("keys not sorted or not unique")
        previous = k
        pairs[k] = v
        ordered.append((k, v))
    if pairs.get(b"id") != b"v4":
        raise EnrError(f"unknown identity scheme {pairs.get(b'id')!r}")
    pub = pairs.get(b"secp256k1")
    if not isinstance(pub, bytes) or len(pub) != 33:
        raise EnrError("secp256k1: expected a 33-byte compressed public key")
    if len(signature) != 64:
        raise EnrError("signature: expected 64 bytes")
    try:
        der = cdata_to_der(deserialize_compact(signature))
        ok = coincurve.PublicKey(pub).verify(der, _signing_hash(seq, ordered), hasher=None)
    except Exception:  # noqa: BLE001 - an invalid key or signature encoding
        ok = False
    if not ok:
        raise EnrError("bad signature")
    return Record(seq, pairs, signature, raw)


def decode_text(text: str) -> Record:
    return decode(from_text(text))


# Waku's fields.

def strip_p2p(addr: multiaddr.Multiaddr) -> multiaddr.Multiaddr:
    if _P2P in [p.code for p in addr.protocols()]:
        return addr.decapsulate_code(_P2P)
    return addr


def encode_multiaddrs(addrs: Iterable[multiaddr.Multiaddr]) -> bytes:
    out = bytearray()
    for a in addrs:
        b = a.to_bytes()
        out += struct.pack(">H", len(b)) + b
    return bytes(out)


def decode_multiaddrs(data: bytes) -> list[multiaddr.Multiaddr]:
    out: list[multiaddr.Multiaddr] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < 2:
            raise EnrError("multiaddrs: truncated length")
        (n,) = struct.unpack_from(">H", data, pos)
        if n == 0 or len(data) - pos - 2 < n:
            raise EnrError("multiaddrs: invalid length")
        chunk = data[pos + 2:pos + 2 + n]
        pos += 2 + n
        try:
            out.append(multiaddr.Multiaddr(chunk))
        except Exception:  # noqa: BLE001 - not a multiaddr: skipped, as nwaku does
            continue
    return out


def encode_shards(cluster: int, shards: Sequence[int]) -> tuple[bytes, bytes]:
    """(key, value): rs for fewer than 64 shards, else rsv."""
    shards = sorted(set(shards))
    if any(not 0 <= s <= MAX_SHARD for s in shards):
        raise EnrError(f"shards must be 0-{MAX_SHARD}")
    if len(shards) < SHARD_LIST_MAX:
        return b"rs", struct.pack(">HB", cluster, len(shards)) + b"".join(struct.pack(">H", s) for s in shards)
    vec = bytearray(128)
    for s in shards:
        vec[s // 8] |= 1 << (s % 8)
    return b"rsv", struct.pack(">H", cluster) + bytes(vec)


def decode_shard_list(data: bytes) -> tuple[int, tuple[int, ...]]:
    if len(data) < 3 or len(data) != 3 + 2 * data[2]:
        raise EnrError("rs: invalid length")
    cluster = struct.unpack_from(">H", data)[0]
    return cluster, tuple(struct.unpack_from(">H", data, 3 + 2 * i)[0] for i in range(data[2]))


def decode_shard_vector(data: bytes) -> tuple[int, tuple[int, ...]]:
    if len(data) != 130:
        raise EnrError("rsv: expected 130 bytes")
    cluster = struct.unpack_from(">H", data)[0]
    return cluster, tuple(i * 8 + j for i in range(128) for j in range(8) if data[2 + i] >> j & 1)


@dataclass(frozen=True)
class WakuEnrFields:
    """What a Waku node announces in its ENR (besides its key)."""
    addrs: tuple[multiaddr.Multiaddr, ...]  # advertised addresses; the first /ip4/../tcp/.. is ip/tcp
    capabilities: int  # RELAY | STORE | FILTER | LIGHTPUSH
    cluster: int
    shards: tuple[int, ...]
    udp_port: int | None = None


def waku_pairs(fields: WakuEnrFields) -> tuple[dict[bytes, object], list[multiaddr.Multiaddr]]:
    """The key/value pairs of `fields` (without id and key), and the addresses for the multiaddrs
    field (callers drop from its end while the record is too large, as go-waku does)."""
    pairs: dict[bytes, object] = {b"waku2": bytes([fields.capabilities])}
    rest: list[multiaddr.Multiaddr] = []
    seen: set[bytes] = set()
    for a in fields.addrs:
        a = strip_p2p(a)
        if a.to_bytes() in seen:
            continue
        seen.add(a.to_bytes())
        parts = [(p.name, v) for p, v in a.items()]
        if b"ip" not in pairs and len(parts) == 2 and parts[0][0] == "ip4" and parts[1][0] == "tcp":
            pairs[b"ip"] = ipaddress.IPv4Address(parts[0][1]).packed
            pairs[b"tcp"] = _int(int(parts[1][1]))
        else:
            rest.append(a)
    if fields.udp_port is not None:
        pairs[b"udp"] = _int(fields.udp_port)
    if fields.shards:
        key, value = encode_shards(fields.cluster, fields.shards)
        pairs[key] = value
    return pairs, rest


def build(private_key: bytes, seq: int, fields: WakuEnrFields) -> bytes:
    """Our signed record: as many of the multiaddrs as fit in 300 bytes."""
    pairs, rest = waku_pairs(fields)
    for n in range(len(rest), -1, -1):
        p = dict(pairs)
        if n:
            p[b"multiaddrs"] = encode_multiaddrs(rest[:n])
        try:
            return sign(private_key, seq, p)
        except EnrError:
            if n == 0:
                raise
    raise AssertionError("unreachable")


def same_content(a: Record, b: Record) -> bool:
    """Whether two records announce the same (all pairs equal; seq and signature aside)."""
    return a.pairs == b.pairs


def next_record(private_key: bytes, fields: WakuEnrFields, previous: Record | None) -> Record:
    """Our record after `previous` (the one last announced, or None): the same sequence number
    when nothing changed, else the next one."""
    if previous is not None:
        same = decode(build(private_key, previous.seq, fields))
        if same_content(same, previous):
            return same
        return decode(build(private_key, previous.seq + 1, fields))
    return decode(build(private_key, 1, fields))


def announce(private_key: bytes, fields: WakuEnrFields, state_file: str | os.PathLike[str]) -> Record:
    """Our record now: the one kept in `state_file` when it announces the same (same sequence
    number), else the next sequence number; kept there for the next start. A missing or
    unreadable state file starts at 1 (a record another key signed is not ours: likewise)."""
    path = Path(state_file)
    previous: Record | None = None
    try:
        previous = decode_text(path.read_text())
        if previous.public_key != coincurve.PrivateKey(private_key).public_key.format(compressed=True):
            previous = None
    except (OSError, UnicodeDecodeError, EnrError):
        previous = None
    record = next_record(private_key, fields, previous)
    if previous is None or record.raw != previous.raw:
        try:
            tmp = path.with_name(path.name + ".tmp")
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(record.text() + "\n")
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("cannot keep the ENR in %s (%s): its sequence number restarts at the next start",
                        path, exc.strerror)
    return record
