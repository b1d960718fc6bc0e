"""discv5 (Node Discovery Protocol v5.1) wire facts, pure: packet masking and framing, the
handshake's cryptography, and the messages (devp2p discv5/discv5-wire.md, discv5-theory.md).

    packet        = masking-iv || aesctr(dest-id[:16], masking-iv, header) || message
    header        = "discv5" || 0x0001 || flag || nonce(12) || authdata-size(2) || authdata
    message       = aesgcm(key, nonce, type || rlp(data), masking-iv || header)

AES (CTR and GCM), HKDF and SHA-256 are pycryptodome's; ECDH and signatures coincurve's
(libsecp256k1, as the ENR code); RLP the `rlp` package's. Checked against the spec's test
vectors in tests/unit/test_discv5_vectors.py.
"""
from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass, field

import coincurve
import rlp  # type: ignore[import-untyped]
from coincurve.ecdsa import cdata_to_der, deserialize_compact
from Crypto.Cipher import AES
from Crypto.Hash import SHA256
from Crypto.Protocol.KDF import HKDF

PROTOCOL_ID = b"discv5"  # the spec's, and its test vectors'
# Waku's discv5 network uses its own protocol-id (go-waku's discv5 package, nwaku's build with
# -d:discv5_protocol_id=d5waku): the packets are otherwise the spec's.
WAKU_PROTOCOL_ID = b"d5waku"
VERSION = b"\x00\x01"
MIN_PACKET = 63  # "implementations should reject packets smaller than this size"
MAX_PACKET = 1280
STATIC_HEADER = 23  # protocol-id(6) version(2) flag(1) nonce(12) authdata-size(2)
IV_SIZE = 16
NONCE_SIZE = 12
TAG_SIZE = 16

FLAG_MESSAGE, FLAG_WHOAREYOU, FLAG_HANDSHAKE = 0, 1, 2

PING, PONG, FINDNODE, NODES, TALKREQ, TALKRESP = 1, 2, 3, 4, 5, 6

ID_PROOF = b"discovery v5 identity proof"
KDF_INFO = b"discovery v5 key agreement"


class PacketError(ValueError):
    """Bytes that are no valid discv5 packet or message (dropped and counted, never answered)."""


# Packets.

@dataclass(frozen=True)
class Header:
    """An unmasked packet header; `masked_end` is where the message starts in the packet."""
    iv: bytes
    flag: int
    nonce: bytes
    authdata: bytes
    raw: bytes  # static-header || authdata, unmasked (the message's associated data after the iv)
    masked_end: int

    @property
    def ad(self) -> bytes:
        """masking-iv || header: the message's associated data, and a WHOAREYOU's challenge-data."""
        return self.iv + self.raw


def _ctr(key: bytes, iv: bytes) -> object:
    return AES.new(key, AES.MODE_CTR, nonce=b"", initial_value=iv)


def encode_header(flag: int, nonce: bytes, authdata: bytes, protocol_id: bytes = PROTOCOL_ID) -> bytes:
    """The unmasked header: static-header || authdata."""
    if len(nonce) != NONCE_SIZE or len(protocol_id) != 6:
        raise ValueError("nonce: expected 12 bytes; protocol id: 6")
    return protocol_id + VERSION + bytes([flag]) + nonce + struct.pack(">H", len(authdata)) + authdata


def mask(dest_id: bytes, iv: bytes, header: bytes) -> bytes:
    """masking-iv || masked-header."""
    return iv + _ctr(dest_id[:16], iv).encrypt(header)  # type: ignore[attr-defined, no-any-return]


def decode_header(own_id: bytes, packet: bytes, protocol_id: bytes = PROTOCOL_ID) -> Header:
    """Unmask a packet's header with our node id; PacketError when it is not discv5 for us."""
    if len(packet) < MIN_PACKET:
        raise PacketError(f"packet of {len(packet)} bytes, below {MIN_PACKET}")
    if len(packet) > MAX_PACKET:
        raise PacketError(f"packet of {len(packet)} bytes, above {MAX_PACKET}")
    iv = packet[:IV_SIZE]
    cipher = _ctr(own_id[:16], iv)
    static = cipher.decrypt(packet[IV_SIZE:IV_SIZE + STATIC_HEADER])  # type: ignore[attr-defined]
    if static[:6] != protocol_id or static[6:8] != VERSION:
        raise PacketError("not a discv5 packet for us (protocol id or version)")
    flag = static[8]
    if flag > FLAG_HANDSHAKE:
        raise PacketError(f"unknown flag {flag}")
    nonce = static[9:21]
    (size,) = struct.unpack(">H", static[21:23])
    end = IV_SIZE + STATIC_HEADER + size
    if end > len(packet):
        raise PacketError("authdata past the end of the packet")
    authdata = cipher.decrypt(packet[IV_SIZE + STATIC_HEADER:end])  # type: ignore[attr-defined]
    return Header(iv, flag, nonce, authdata, static + authdata, end)


def encrypt_message(key: bytes, nonce: bytes, plaintext: bytes, ad: bytes) -> bytes:
    """AES-128-GCM, the 16-byte tag appended."""
    c = AES.new(key, AES.MODE_GCM, nonce=nonce, mac_len=TAG_SIZE)
    c.update(ad)
    ct, tag = c.encrypt_and_digest(plaintext)
    return ct + tag


def decrypt_message(key: bytes, nonce: bytes, ciphertext: bytes, ad: bytes) -> bytes:
    """The plaintext, or PacketError when the tag does not authenticate it."""
    if len(ciphertext) < TAG_SIZE:
        raise PacketError("message shorter than its tag")
    c = AES.new(key, AES.MODE_GCM, nonce=nonce, mac_len=TAG_SIZE)
    c.update(ad)
    try:
        return c.decrypt_and_verify(ciphertext[:-TAG_SIZE], ciphertext[-TAG_SIZE:])
    except ValueError:
        raise PacketError("message not authenticated (bad tag or key)") from None


def message_packet(dest_id: bytes, src_id: bytes, iv: bytes, nonce: bytes, key: bytes, plaintext: bytes,
                   protocol_id: bytes = PROTOCOL_ID) -> bytes:
    """An ordinary message packet (flag 0)."""
    header = encode_header(FLAG_MESSAGE, nonce, src_id, protocol_id)
    return mask(dest_id, iv, header) + encrypt_message(key, nonce, plaintext, iv + header)


def random_message_packet(dest_id: bytes, src_id: bytes, iv: bytes, nonce: bytes, filler: bytes,
                          protocol_id: bytes = PROTOCOL_ID) -> bytes:
    """An ordinary packet whose message is random bytes: it starts a handshake (the recipient
    cannot decrypt it and answers WHOAREYOU)."""
    return mask(dest_id, iv, encode_header(FLAG_MESSAGE, nonce, src_id, protocol_id)) + filler


def whoareyou_authdata(id_nonce: bytes, enr_seq: int) -> bytes:
    return id_nonce + struct.pack(">Q", enr_seq)


def whoareyou_packet(dest_id: bytes, iv: bytes, nonce: bytes, id_nonce: bytes, enr_seq: int,
                     protocol_id: bytes = PROTOCOL_ID) -> tuple[bytes, bytes]:
    """(the WHOAREYOU packet (63 bytes), its challenge-data = masking-iv || header)."""
    header = encode_header(FLAG_WHOAREYOU, nonce, whoareyou_authdata(id_nonce, enr_seq), protocol_id)
    return mask(dest_id, iv, header), iv + header


def parse_whoareyou(h: Header) -> tuple[bytes, int]:
    """(id-nonce, enr-seq) of a WHOAREYOU header."""
    if len(h.authdata) != 24:
        raise PacketError("WHOAREYOU: authdata of 24 bytes expected")
    return h.authdata[:16], struct.unpack(">Q", h.authdata[16:])[0]


@dataclass(frozen=True)
class HandshakeAuth:
    src_id: bytes
    signature: bytes
    eph_pubkey: bytes
    record: bytes  # raw ENR, or b"" when left out


def handshake_authdata(src_id: bytes, signature: bytes, eph_pubkey: bytes, record: bytes) -> bytes:
    return src_id + bytes([len(signature), len(eph_pubkey)]) + signature + eph_pubkey + record


def parse_handshake(h: Header) -> HandshakeAuth:
    a = h.authdata
    if len(a) < 34:
        raise PacketError("handshake: authdata too short")
    sig_size, key_size = a[32], a[33]
    if sig_size != 64 or key_size != 33:
        raise PacketError(f"handshake: sig-size {sig_size} / eph-key-size {key_size}, expected 64 / 33 (v4)")
    end = 34 + sig_size + key_size
    if len(a) < end:
        raise PacketError("handshake: authdata too short")
    return HandshakeAuth(a[:32], a[34:34 + sig_size], a[34 + sig_size:end], a[end:])


def handshake_packet(dest_id: bytes, iv: bytes, nonce: bytes, key: bytes, plaintext: bytes, src_id: bytes,
                     signature: bytes, eph_pubkey: bytes, record: bytes, protocol_id: bytes = PROTOCOL_ID) -> bytes:
    header = encode_header(FLAG_HANDSHAKE, nonce, handshake_authdata(src_id, signature, eph_pubkey, record),
                           protocol_id)
    return mask(dest_id, iv, header) + encrypt_message(key, nonce, plaintext, iv + header)


# The handshake's cryptography (identity scheme v4).

def public_key(private_key: bytes) -> bytes:
    """The compressed (33-byte) public key."""
    return coincurve.PrivateKey(private_key).public_key.format(compressed=True)


def node_id(pubkey: bytes) -> bytes:
    """The v4 node id: keccak256 of the uncompressed public key's x || y."""
    from Crypto.Hash import keccak
    raw = coincurve.PublicKey(pubkey).format(compressed=False)[1:]
    return keccak.new(digest_bits=256, data=raw).digest()


def ecdh(pubkey: bytes, private_key: bytes) -> bytes:
    """The 33-byte shared secret: the compressed point pubkey * private_key."""
    try:
        point = coincurve.PublicKey(pubkey).multiply(private_key)
    except (ValueError, TypeError):
        raise PacketError("not a secp256k1 public key") from None
    return point.format(compressed=True)


def derive_keys(secret: bytes, challenge_data: bytes, initiator_id: bytes, recipient_id: bytes) -> tuple[bytes, bytes]:
    """(initiator-key, recipient-key): HKDF-SHA256, salt the challenge-data, 32 bytes."""
    key_data = HKDF(secret, 32, challenge_data, SHA256, context=KDF_INFO + initiator_id + recipient_id)
    assert isinstance(key_data, bytes)
    return key_data[:16], key_data[16:]


def _id_proof_hash(challenge_data: bytes, eph_pubkey: bytes, recipient_id: bytes) -> bytes:
    return SHA256.new(ID_PROOF + challenge_data + eph_pubkey + recipient_id).digest()


def id_sign(private_key: bytes, challenge_data: bytes, eph_pubkey: bytes, recipient_id: bytes) -> bytes:
    """The 64-byte r || s id-signature."""
    digest = _id_proof_hash(challenge_data, eph_pubkey, recipient_id)
    return coincurve.PrivateKey(private_key).sign_recoverable(digest, hasher=None)[:64]


def id_verify(pubkey: bytes, signature: bytes, challenge_data: bytes, eph_pubkey: bytes, recipient_id: bytes) -> bool:
    if len(signature) != 64:
        return False
    try:
        der = cdata_to_der(deserialize_compact(signature))
        return bool(coincurve.PublicKey(pubkey).verify(der, _id_proof_hash(challenge_data, eph_pubkey, recipient_id),
                                                       hasher=None))
    except Exception:  # noqa: BLE001 - an invalid key or signature encoding: not verified
        return False


# Messages: message-type || rlp(message-data).

def _int(value: int) -> bytes:
    return value.to_bytes((value.bit_length() + 7) // 8, "big")


def _uint(data: object, what: str, max_bytes: int = 8) -> int:
    if not isinstance(data, bytes) or len(data) > max_bytes or data[:1] == b"\x00":
        raise PacketError(f"{what}: not an integer of at most {max_bytes} bytes")
    return int.from_bytes(data, "big")


@dataclass(frozen=True)
class Ping:
    req_id: bytes
    enr_seq: int


@dataclass(frozen=True)
class Pong:
    req_id: bytes
    enr_seq: int
    ip: str
    port: int


@dataclass(frozen=True)
class FindNode:
    req_id: bytes
    distances: tuple[int, ...]


@dataclass(frozen=True)
class Nodes:
    req_id: bytes
    total: int
    records: tuple[bytes, ...] = field(default=())  # raw ENRs


@dataclass(frozen=True)
class TalkReq:
    req_id: bytes
    protocol: bytes
    request: bytes


@dataclass(frozen=True)
class TalkResp:
    req_id: bytes
    response: bytes


Message = Ping | Pong | FindNode | Nodes | TalkReq | TalkResp
REQUESTS = (Ping, FindNode, TalkReq)


def encode_message(m: Message) -> bytes:
    """message-type || rlp(message-data)."""
    if isinstance(m, Ping):
        return bytes([PING]) + rlp.encode([m.req_id, _int(m.enr_seq)])  # type: ignore[no-any-return]
    if isinstance(m, Pong):
        ip = ipaddress.ip_address(m.ip)
        packed = ip.ipv4_mapped.packed if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped else ip.packed
        return bytes([PONG]) + rlp.encode([m.req_id, _int(m.enr_seq), packed, _int(m.port)])  # type: ignore[no-any-return]
    if isinstance(m, FindNode):
        return bytes([FINDNODE]) + rlp.encode([m.req_id, [_int(d) for d in m.distances]])  # type: ignore[no-any-return]
    if isinstance(m, Nodes):
        return bytes([NODES]) + rlp.encode(  # type: ignore[no-any-return]
            [m.req_id, _int(m.total), [rlp.decode(r) for r in m.records]])
    if isinstance(m, TalkReq):
        return bytes([TALKREQ]) + rlp.encode([m.req_id, m.protocol, m.request])  # type: ignore[no-any-return]
    return bytes([TALKRESP]) + rlp.encode([m.req_id, m.response])  # type: ignore[no-any-return]


def _req_id(v: object) -> bytes:
    if not isinstance(v, bytes) or len(v) > 8:
        raise PacketError("request-id: a byte string of at most 8 bytes expected")
    return v


def _bytes(v: object, what: str) -> bytes:
    if not isinstance(v, bytes):
        raise PacketError(f"{what}: a byte string expected")
    return v


def decode_message(plaintext: bytes) -> Message:
    """A message from its plaintext; PacketError for an unknown type or bad RLP."""
    if not plaintext:
        raise PacketError("empty message")
    kind = plaintext[0]
    try:
        items = rlp.decode(plaintext[1:])
    except Exception:  # noqa: BLE001 - rlp's DecodingError and friends
        raise PacketError("message data is not RLP") from None
    if not isinstance(items, list) or not items:
        raise PacketError("message data: a list expected")
    req_id = _req_id(items[0])
    n = len(items)
    if kind == PING and n >= 2:
        return Ping(req_id, _uint(items[1], "enr-seq"))
    if kind == PONG and n >= 4:
        ip = _bytes(items[2], "recipient-ip")
        if len(ip) not in (4, 16):
            raise PacketError("recipient-ip: 4 or 16 bytes expected")
        return Pong(req_id, _uint(items[1], "enr-seq"), str(ipaddress.ip_address(ip)),
                    _uint(items[3], "recipient-port", 2))
    if kind == FINDNODE and n >= 2:
        if not isinstance(items[1], list):
            raise PacketError("distances: a list expected")
        return FindNode(req_id, tuple(_uint(d, "distance", 2) for d in items[1]))
    if kind == NODES and n >= 3:
        if not isinstance(items[2], list) or not all(isinstance(r, list) for r in items[2]):
            raise PacketError("NODES: a list of records expected")
        return Nodes(req_id, _uint(items[1], "total", 1), tuple(rlp.encode(r) for r in items[2]))
    if kind == TALKREQ and n >= 3:
        return TalkReq(req_id, _bytes(items[1], "protocol"), _bytes(items[2], "request"))
    if kind == TALKRESP and n >= 2:
        return TalkResp(req_id, _bytes(items[1], "response"))
    raise PacketError(f"unknown message type {kind} (or too few fields)")


def log_distance(a: bytes, b: bytes) -> int:
    """logdistance(a, b) = bit length of a XOR b (0 when equal)."""
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).bit_length()
