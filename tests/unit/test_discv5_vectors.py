"""discv5 (ingest/discv5/): the wire spec's test vectors (devp2p discv5/discv5-wire-test-vectors.md)
reproduced byte for byte; a handshake and request/response between two in-memory nodes; hostile
input (truncated, oversized, replayed, unknown session, bad tag, foreign bytes) dropped and
counted, and no answer to input outside a session larger than the input."""
from __future__ import annotations

import random

import pytest

from ingest.discv5 import codec
from ingest.discv5.codec import FindNode, Nodes, PacketError, Ping, Pong, TalkReq, TalkResp
from ingest.discv5.protocol import Discv5, answer, relayable
from ingest.discv5.table import Table
from ingest.enr import RELAY, WakuEnrFields, build, decode

h = bytes.fromhex

NODE_A_KEY = h("eef77acb6c6a6eebc5b363a475ac583ec7eccdb42b6481424c60f59aa326547f")
NODE_B_KEY = h("66fb62bfbd66b9177a138c1e5cddbe4f7c30c343e94e68df8769459cb1cde628")
NODE_A_ID = h("aaaa8419e9f49d0083561b48287df592939a8d19947d8c0ef88f2a4856a69fbb")
NODE_B_ID = h("bbbb9d047f0488c0b5a93c1c3f2d8bafc7c8ff337024a55434a0d0555de64db9")
CHALLENGE_0 = h("000000000000000000000000000000006469736376350001010102030405060708090a0b0c00180102030405060708090a0b0c"
                "0d0e0f100000000000000000")
CHALLENGE_1 = CHALLENGE_0[:-1] + b"\x01"
EPH_KEY = h("0288ef00023598499cb6c940146d050d2b1fb914198c327f76aad590bead68b6")
EPH_PUB = h("039a003ba6517b473fa0cd74aefe99dadfdb34627f90fec6362df85803908f53a5")

PING_PACKET = h(
    "00000000000000000000000000000000088b3d4342774649325f313964a39e55"
    "ea96c005ad52be8c7560413a7008f16c9e6d2f43bbea8814a546b7409ce783d3"
    "4c4f53245d08dab84102ed931f66d1492acb308fa1c6715b9d139b81acbdcc")
WHOAREYOU_PACKET = h(
    "00000000000000000000000000000000088b3d434277464933a1ccc59f5967ad"
    "1d6035f15e528627dde75cd68292f9e6c27d6b66c8100a873fcbaed4e16b8d")
HANDSHAKE_PACKET = h(
    "00000000000000000000000000000000088b3d4342774649305f313964a39e55"
    "ea96c005ad521d8c7560413a7008f16c9e6d2f43bbea8814a546b7409ce783d3"
    "4c4f53245d08da4bb252012b2cba3f4f374a90a75cff91f142fa9be3e0a5f3ef"
    "268ccb9065aeecfd67a999e7fdc137e062b2ec4a0eb92947f0d9a74bfbf44dfb"
    "a776b21301f8b65efd5796706adff216ab862a9186875f9494150c4ae06fa4d1"
    "f0396c93f215fa4ef524f1eadf5f0f4126b79336671cbcf7a885b1f8bd2a5d83"
    "9cf8")
HANDSHAKE_ENR_PACKET = h(
    "00000000000000000000000000000000088b3d4342774649305f313964a39e55"
    "ea96c005ad539c8c7560413a7008f16c9e6d2f43bbea8814a546b7409ce783d3"
    "4c4f53245d08da4bb23698868350aaad22e3ab8dd034f548a1c43cd246be9856"
    "2fafa0a1fa86d8e7a3b95ae78cc2b988ded6a5b59eb83ad58097252188b902b2"
    "1481e30e5e285f19735796706adff216ab862a9186875f9494150c4ae06fa4d1"
    "f0396c93f215fa4ef524e0ed04c3c21e39b1868e1ca8105e585ec17315e755e6"
    "cfc4dd6cb7fd8e1a1f55e49b4b5eb024221482105346f3c82b15fdaae36a3bb1"
    "2a494683b4a3c7f2ae41306252fed84785e2bbff3b022812d0882f06978df84a"
    "80d443972213342d04b9048fc3b1d5fcb1df0f822152eced6da4d3f6df27e70e"
    "4539717307a0208cd208d65093ccab5aa596a34d7511401987662d8cf62b1394"
    "71")
NONCE = b"\xff" * 12
REQUEST_NONCE = h("0102030405060708090a0b0c")
ID_NONCE = h("0102030405060708090a0b0c0d0e0f10")


def test_node_ids_of_the_vector_keys():
    assert codec.node_id(codec.public_key(NODE_A_KEY)) == NODE_A_ID
    assert codec.node_id(codec.public_key(NODE_B_KEY)) == NODE_B_ID


def test_ecdh_vector():
    secret = codec.ecdh(h("039961e4c2356d61bedb83052c115d311acb3a96f5777296dcf297351130266231"),
                        h("fb757dc581730490a1d7a00deea65e9b1936924caaea8f44d476014856b68736"))
    assert secret == h("033b11a2a1f214567e1537ce5e509ffd9b21373247f2a3ff6841f4976f53165e7e")


def test_key_derivation_vector():
    secret = codec.ecdh(h("0317931e6e0840220642f230037d285d122bc59063221ef3226b1f403ddc69ca91"),
                        h("fb757dc581730490a1d7a00deea65e9b1936924caaea8f44d476014856b68736"))
    init, recp = codec.derive_keys(secret, CHALLENGE_0, NODE_A_ID, NODE_B_ID)
    assert init == h("dccc82d81bd610f4f76d3ebe97a40571")
    assert recp == h("ac74bb8773749920b0d3a8881c173ec5")


def test_id_nonce_signature_vector_both_ways():
    key = h("fb757dc581730490a1d7a00deea65e9b1936924caaea8f44d476014856b68736")
    eph = h("039961e4c2356d61bedb83052c115d311acb3a96f5777296dcf297351130266231")
    want = h("94852a1e2318c4e5e9d422c98eaf19d1d90d876b29cd06ca7cb7546d0fff7b48"
             "4fe86c09a064fe72bdbef73ba8e9c34df0cd2b53e9d65528c2c7f336d5dfc6e6")
    assert codec.id_sign(key, CHALLENGE_0, eph, NODE_B_ID) == want
    assert codec.id_verify(codec.public_key(key), want, CHALLENGE_0, eph, NODE_B_ID)
    assert not codec.id_verify(codec.public_key(key), want, CHALLENGE_1, eph, NODE_B_ID)
    assert not codec.id_verify(codec.public_key(key), want[:-1] + b"\x00", CHALLENGE_0, eph, NODE_B_ID)


def test_aes_gcm_vector():
    key, nonce = h("9f2d77db7004bf8a1a85107ac686990b"), h("27b5af763c446acd2749fe8e")
    ad = h("93a7400fa0d6a694ebc24d5cf570f65d04215b6ac00757875e3f3a5f42107903")
    ct = codec.encrypt_message(key, nonce, h("01c20101"), ad)
    assert ct == h("a5d12a2d94b8ccb3ba55558229867dc13bfa3648")
    assert codec.decrypt_message(key, nonce, ct, ad) == h("01c20101")
    with pytest.raises(PacketError):
        codec.decrypt_message(key, nonce, ct[:-1] + b"\x00", ad)


def test_ping_packet_vector():
    hd = codec.decode_header(NODE_B_ID, PING_PACKET)
    assert (hd.flag, hd.nonce, hd.authdata) == (codec.FLAG_MESSAGE, NONCE, NODE_A_ID)
    msg = codec.decode_message(codec.decrypt_message(bytes(16), hd.nonce, PING_PACKET[hd.masked_end:], hd.ad))
    assert msg == Ping(h("00000001"), 2)
    # and encoded: the same bytes (iv all zero, read-key all zero)
    plaintext = codec.encode_message(Ping(h("00000001"), 2))
    assert codec.message_packet(NODE_B_ID, NODE_A_ID, bytes(16), NONCE, bytes(16), plaintext) == PING_PACKET


def test_whoareyou_packet_vector():
    # As every vector, sent to node B (masked with its id).
    packet, challenge = codec.whoareyou_packet(NODE_B_ID, bytes(16), REQUEST_NONCE, ID_NONCE, 0)
    assert packet == WHOAREYOU_PACKET and len(packet) == codec.MIN_PACKET
    assert challenge == CHALLENGE_0
    hd = codec.decode_header(NODE_B_ID, WHOAREYOU_PACKET)
    assert hd.flag == codec.FLAG_WHOAREYOU and hd.nonce == REQUEST_NONCE and hd.ad == CHALLENGE_0
    assert codec.parse_whoareyou(hd) == (ID_NONCE, 0)


@pytest.mark.parametrize("packet, challenge, read_key, with_record", [
    (HANDSHAKE_PACKET, CHALLENGE_1, h("4f9fac6de7567d1e3b1241dffe90f662"), False),
    (HANDSHAKE_ENR_PACKET, CHALLENGE_0, h("53b1c075f41876423154e157470c2f48"), True),
])
def test_handshake_packet_vectors(packet, challenge, read_key, with_record):
    hd = codec.decode_header(NODE_B_ID, packet)
    assert hd.flag == codec.FLAG_HANDSHAKE and hd.nonce == NONCE
    auth = codec.parse_handshake(hd)
    assert auth.src_id == NODE_A_ID and auth.eph_pubkey == EPH_PUB
    assert codec.public_key(EPH_KEY) == EPH_PUB
    # B's side: the keys from its static key and A's ephemeral key; A's signature checks.
    init, _ = codec.derive_keys(codec.ecdh(EPH_PUB, NODE_B_KEY), challenge, NODE_A_ID, NODE_B_ID)
    assert init == read_key
    assert codec.id_verify(codec.public_key(NODE_A_KEY), auth.signature, challenge, EPH_PUB, NODE_B_ID)
    msg = codec.decode_message(codec.decrypt_message(init, hd.nonce, packet[hd.masked_end:], hd.ad))
    assert msg == Ping(h("00000001"), 1)
    if with_record:
        r = decode(auth.record)
        assert r.node_id() == NODE_A_ID and r.public_key == codec.public_key(NODE_A_KEY)
    else:
        assert auth.record == b""
    # A's side: the same packet from the same inputs (deterministic signature).
    sig = codec.id_sign(NODE_A_KEY, challenge, EPH_PUB, NODE_B_ID)
    assert sig == auth.signature
    rebuilt = codec.handshake_packet(NODE_B_ID, bytes(16), NONCE, init, codec.encode_message(Ping(h("00000001"), 1)),
                                     NODE_A_ID, sig, EPH_PUB, auth.record)
    assert rebuilt == packet


@pytest.mark.parametrize("m", [
    Ping(b"\x01", 0), Ping(b"12345678", 2 ** 63), Pong(b"", 7, "10.1.2.3", 30303), Pong(b"x", 1, "::1", 9000),
    FindNode(b"ab", (0, 1, 256)), Nodes(b"a", 2, ()), TalkReq(b"q", b"waku", b"\x00\x01"), TalkResp(b"q", b""),
])
def test_messages_round_trip(m):
    assert codec.decode_message(codec.encode_message(m)) == m


@pytest.mark.parametrize("plaintext", [
    b"", b"\x09\xc0", b"\x01", b"\x01\xc3\x80\x80", b"\x01\xc2" + b"\x89" + b"\x00" * 9,  # req-id > 8 bytes
    b"\x03\xc3\x80\x81\x05",  # distances not a list
])
def test_bad_messages_refused(plaintext):
    with pytest.raises(PacketError):
        codec.decode_message(plaintext)


# Two nodes in memory.

def _record(key: bytes, udp: int, seq: int = 1, cluster: int = 1) -> bytes:
    from multiaddr import Multiaddr
    return build(key, seq, WakuEnrFields((Multiaddr("/ip4/127.0.0.1/tcp/60000"),), RELAY, cluster, (0,), udp))


class Node:
    def __init__(self, key: bytes, port: int, rng: random.Random) -> None:
        self.addr = ("127.0.0.1", port)
        self.record = decode(_record(key, port))
        self.table = Table(self.record.node_id())
        # the spec's protocol id, so that its vectors apply (the bridge speaks Waku's d5waku)
        self.d = Discv5(key, lambda: self.record, self.table, rand=lambda n: rng.randbytes(n),
                        protocol_id=codec.PROTOCOL_ID)


def _exchange(a: Node, b: Node, first: bytes, now: float = 0.0) -> list:
    """Deliver packets back and forth from `first` (a -> b) until none is left; the outcomes."""
    queue = [(first, a, b)]
    outcomes = []
    while queue:
        data, src, dst = queue.pop(0)
        o = dst.d.receive(data, src.addr, now)
        outcomes.append((dst, o))
        queue += [(p, dst, src) for p, to in o.out if to == src.addr]
    return outcomes


@pytest.fixture
def pair():
    seed = random.randrange(2 ** 32)
    print("seed", seed)
    rng = random.Random(seed)
    return Node(NODE_A_KEY, 30001, rng), Node(NODE_B_KEY, 30002, rng)


def test_handshake_then_request_in_session(pair):
    a, b = pair
    out = _exchange(a, b, a.d.request(b.record, b.addr, Ping(b"\x01", a.record.seq), 0.0))
    # random packet -> WHOAREYOU -> handshake (with A's record: B knew none) -> PONG
    assert [o.dropped for _, o in out] == [None, None, None, None]
    assert out[2][1].handshake_record.raw == a.record.raw and out[2][1].request == Ping(b"\x01", 1)
    assert out[3][0] is a and out[3][1].response == Pong(b"\x01", 1, "127.0.0.1", 30001)
    # In the session now: one packet each way, no handshake.
    b.table.add(a.record, verified=True)
    out = _exchange(a, b, a.d.request(b.record, b.addr, FindNode(b"\x02", (0, 256, 255)), 1.0))
    assert len(out) == 2
    nodes = out[1][1].response
    assert isinstance(nodes, Nodes) and nodes.total == 1 and b.record.raw in nodes.records
    # And B can ask A within the same session (recipient side keys).
    out = _exchange(b, a, b.d.request(a.record, a.addr, TalkReq(b"\x03", b"waku", b"hi"), 1.0))
    assert len(out) == 2 and out[1][1].response == TalkResp(b"\x03", b"")


def test_session_lost_on_one_side_recovers(pair):
    a, b = pair
    _exchange(a, b, a.d.request(b.record, b.addr, Ping(b"\x01", 1), 0.0))
    b.d.sessions.clear()  # B restarted: A's session packet gets WHOAREYOU, A re-sends in a handshake
    out = _exchange(a, b, a.d.request(b.record, b.addr, Ping(b"\x02", 1), 5.0), now=5.0)
    assert out[-1][1].response == Pong(b"\x02", 1, "127.0.0.1", 30001)


def test_hostile_input_dropped_and_never_amplified(pair):
    a, b = pair
    # truncated, oversized, not discv5
    assert b.d.receive(PING_PACKET[:62], a.addr, 0).dropped == "truncated"
    assert b.d.receive(b"\x00" * 1281, a.addr, 0).dropped == "oversized"
    assert b.d.receive(bytes(range(100)), a.addr, 0).dropped == "not_discv5"
    # a handshake nobody challenged (unknown session): the spec's vector sent to B
    assert b.d.receive(HANDSHAKE_PACKET, a.addr, 0.0).dropped == "unknown_session"
    # an ordinary packet without a session: only WHOAREYOU, 63 bytes, no more than was sent
    first = a.d.request(b.record, b.addr, Ping(b"\x01", 1), 0.0)
    o = b.d.receive(first, a.addr, 0.0)
    assert len(o.out) == 1 and len(o.out[0][0]) == codec.MIN_PACKET <= len(first)
    # a forged handshake (the vector's, not signed over our challenge) leaves the challenge in place
    assert b.d.receive(HANDSHAKE_PACKET, a.addr, 0.0).dropped in ("no_record", "bad_signature")
    hs = a.d.receive(o.out[0][0], b.addr, 0.0).out[0][0]
    assert b.d.receive(hs, a.addr, 0.0).request == Ping(b"\x01", 1)
    # the same handshake replayed: its challenge is used up
    assert b.d.receive(hs, a.addr, 0.0).dropped == "unknown_session"
    # a WHOAREYOU we did not ask for
    stray, _ = codec.whoareyou_packet(a.record.node_id(), bytes(16), b"\x07" * 12, ID_NONCE, 0)
    assert a.d.receive(stray, b.addr, 0.0).dropped == "unsolicited_whoareyou"


def test_replayed_and_tampered_packets_dropped(pair):
    a, b = pair
    _exchange(a, b, a.d.request(b.record, b.addr, Ping(b"\x01", 1), 0.0))
    packet = a.d.request(b.record, b.addr, Ping(b"\x02", 1), 1.0)
    assert b.d.receive(packet, a.addr, 1.0).request == Ping(b"\x02", 1)
    assert b.d.receive(packet, a.addr, 1.0).dropped == "replayed"
    # a flipped message byte (bad tag): not decryptable in the session -> WHOAREYOU, nothing else
    packet = bytearray(a.d.request(b.record, b.addr, Ping(b"\x03", 1), 1.0))
    packet[-1] ^= 1
    o = b.d.receive(bytes(packet), a.addr, 1.0)
    assert o.request is None and all(len(p) == codec.MIN_PACKET for p, _ in o.out)
    # the same from another endpoint: sessions are tied to (node id, ip, port)
    packet = a.d.request(b.record, b.addr, Ping(b"\x04", 1), 1.0)
    o = b.d.receive(packet, ("127.0.0.9", 1234), 1.0)
    assert o.request is None and all(len(p) == codec.MIN_PACKET for p, _ in o.out)


def test_whoareyou_rate_limited_per_ip(pair):
    a, b = pair
    b.d.whoareyou_per_s = 5.0
    sent = 0
    for i in range(50):  # from many node ids on one IP: at most the burst (2 s of the rate) at once
        key = (i + 1).to_bytes(32, "big")
        fake = decode(_record(key, 31000 + i))
        pkt = Discv5(key, lambda fake=fake: fake, Table(fake.node_id()), protocol_id=codec.PROTOCOL_ID).request(
            b.record, b.addr, Ping(b"\x01", 1), 0)
        sent += len(b.d.receive(pkt, ("10.0.0.1", 31000 + i), 0.0).out)
    assert sent == 10
    pkt = a.d.request(b.record, b.addr, Ping(b"\x01", 1), 0)
    assert len(b.d.receive(pkt, ("10.0.0.2", 1), 0.0).out) == 1  # another IP is not limited by it


def test_findnode_answer_splits_and_filters(pair):
    a, b = pair
    own = b.record
    for i in range(40):
        key = (i + 1000).to_bytes(32, "big")
        b.table.add(decode(_record(key, 32000 + i)), verified=i % 2 == 0)
    dists = sorted({d for d in b.table.buckets})
    out = answer(FindNode(b"\x01", tuple(dists)), a.addr, own, b.table)
    records = [r for m in out for r in m.records]
    assert len(records) <= 16 and all(len(m.records) <= 3 for m in out)
    assert all(m.total == len(out) for m in out)
    assert all(b.table.get(decode(r).node_id()).verified for r in records)
    enc = [len(codec.encode_message(m)) for m in out]
    assert max(enc) + 16 + 23 + 32 + 16 <= codec.MAX_PACKET
    assert answer(FindNode(b"\x01", (0,)), a.addr, own, b.table)[0].records == (own.raw,)
    assert answer(FindNode(b"\x01", (300,)), a.addr, own, b.table) == [Nodes(b"\x01", 1, ())]
    # loopback records are not relayed to an internet requester
    assert not relayable("8.8.8.8", own) and relayable("127.0.0.1", own)


def test_waku_protocol_id_is_another_network(pair):
    """Waku's discv5 (go-waku, nwaku) masks "d5waku" where the spec has "discv5": each side drops
    the other's packets unanswered."""
    a, b = pair
    waku = Discv5(NODE_A_KEY, lambda: a.record, Table(a.record.node_id()))
    assert waku.protocol_id == codec.WAKU_PROTOCOL_ID == b"d5waku"
    pkt = waku.request(b.record, b.addr, Ping(b"\x01", 1), 0.0)
    assert b.d.receive(pkt, a.addr, 0.0).dropped == "not_discv5"
    assert waku.receive(PING_PACKET, b.addr, 0.0).dropped == "not_discv5"
