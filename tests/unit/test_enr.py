"""ENR (EIP-778 v4) with Waku's fields: the EIP's test vector, a fleet node's record as go-waku's
own test decodes it, our records' encodings and the sequence number across restarts."""
from __future__ import annotations

import multiaddr
import pytest

from ingest import enr
from ingest.enr import FILTER, LIGHTPUSH, RELAY, STORE, EnrError, WakuEnrFields

# EIP-778's example record and its key.
EIP_KEY = bytes.fromhex("b71c71a67e1177ad4e901695e1b4b9ee17ae16c6668d313eac2f96dbcda3f291")
EIP_ENR = ("enr:-IS4QHCYrYZbAKWCBRlAy5zzaDZXJBGkcnh4MHcBFZntXNFrdvJjX04jRzjzCBOonrkTfj499SZuOh8R33Ls8RRcy5wBgmlkgnY0"
           "gmlwhH8AAAGJc2VjcDI1NmsxoQPKY0yuDUmstAHYpMa2_oxVtw0RW_QAdpzBQA8yWM0xOIN1ZHCCdl8")
EIP_NODE_ID = "a448f24c6d18e575453db13171562b71999873db5b286df957af199ec94617f7"
# go-waku v0.10.0 waku/v2/protocol/enr/enr_test.go: a Status fleet node (rs: cluster 1, shards 0-7).
FLEET_ENR = ("enr:-QESuEC1p_s3xJzAC_XlOuuNrhVUETmfhbm1wxRGis0f7DlqGSw2FM-p2Ugl_r25UHQJ3f1rIRrpzxJXSMaJe4yk1XFSAYJp"
             "ZIJ2NIJpcISygI2rim11bHRpYWRkcnO4XAArNiZub2RlLTAxLmRvLWFtczMud2FrdS50ZXN0LnN0YXR1c2ltLm5ldAZ2XwAtNiZub2RlLTAxLmRvLWFt"
             "czMud2FrdS50ZXN0LnN0YXR1c2ltLm5ldAYfQN4DgnJzkwABCAAAAAEAAgADAAQABQAGAAeJc2VjcDI1NmsxoQJATXRSRSUyTw_QLB6H_U3o"
             "ziVQgNRgrXpK7wp2AMyNxYN0Y3CCdl-DdWRwgiMohXdha3UyDw")
KEY = bytes.fromhex("11" * 32)


def test_eip778_vector_decodes_and_is_reproduced_byte_for_byte():
    r = enr.decode_text(EIP_ENR)
    assert (r.seq, r.ip(), r.port(b"udp")) == (1, "127.0.0.1", 30303)
    assert r.node_id().hex() == EIP_NODE_ID
    raw = enr.sign(EIP_KEY, 1, {b"ip": bytes([127, 0, 0, 1]), b"udp": (30303).to_bytes(2, "big")})
    assert enr.to_text(raw) == EIP_ENR


def test_fleet_record_decodes_as_go_waku_does():
    r = enr.decode_text(FLEET_ENR)
    assert str(r.peer_id()) == "16Uiu2HAkykgaECHswi3YKJ5dMLbq2kPVCo89fcyTd38UcQD6ej5W"
    assert [str(a) for a in r.addrs()] == [
        "/ip4/178.128.141.171/tcp/30303",
        "/dns4/node-01.do-ams3.waku.test.statusim.net/tcp/30303",
        "/dns4/node-01.do-ams3.waku.test.statusim.net/tcp/8000/wss"]
    assert r.capabilities() == RELAY | STORE | FILTER | LIGHTPUSH
    assert r.relay_shards() == (1, tuple(range(8)))


def _fields(*addrs: str, shards=(0, 1), caps=RELAY | STORE) -> WakuEnrFields:
    return WakuEnrFields(tuple(multiaddr.Multiaddr(a) for a in addrs), caps, 1, tuple(shards), 9000)


def test_waku_fields_round_trip():
    pid = "16Uiu2HAmMGhfSTUzKbsjMWxc6T1X4wiTWSF1bEWSLjAukCm7KiHV"
    f = _fields("/ip4/10.0.0.1/tcp/60000", f"/ip4/10.0.0.1/tcp/8000/ws/p2p/{pid}", "/dns4/n.example.org/tcp/443/wss")
    r = enr.decode(enr.build(KEY, 3, f))
    assert r.seq == 3 and r.ip() == "10.0.0.1" and r.port(b"tcp") == 60000 and r.port(b"udp") == 9000
    assert [str(a) for a in r.addrs()] == ["/ip4/10.0.0.1/tcp/60000", "/ip4/10.0.0.1/tcp/8000/ws",
                                           "/dns4/n.example.org/tcp/443/wss"]
    assert r.pairs[b"waku2"] == bytes([RELAY | STORE])
    assert r.pairs[b"rs"] == bytes.fromhex("0001" "02" "0000" "0001")
    assert b"rsv" not in r.pairs


def test_64_shards_or_more_go_in_the_bit_vector():
    r = enr.decode(enr.build(KEY, 1, _fields("/ip4/10.0.0.1/tcp/1", shards=range(70))))
    assert b"rs" not in r.pairs and len(r.pairs[b"rsv"]) == 130
    assert r.pairs[b"rsv"][2] == 0xFF and r.relay_shards() == (1, tuple(range(70)))
    key, value = enr.encode_shards(1, [0, 9, 1023] + list(range(100, 164)))
    assert key == b"rsv" and value[2] == 0b1 and value[3] == 0b10 and value[129] == 0x80


def test_multiaddrs_that_do_not_fit_are_dropped_from_the_end():
    addrs = [f"/dns4/node-{i:02d}.some-long-domain.example.org/tcp/443/wss" for i in range(10)]
    raw = enr.build(KEY, 1, _fields("/ip4/10.0.0.1/tcp/60000", *addrs))
    r = enr.decode(raw)
    assert len(raw) <= enr.MAX_RECORD_BYTES
    kept = [str(a) for a in r.multiaddrs()]
    assert 0 < len(kept) < 10 and kept == addrs[:len(kept)]


def test_no_tcp_address_means_no_ip_field():
    r = enr.decode(enr.build(KEY, 1, _fields("/dns4/n.example.org/tcp/443/wss", shards=())))
    assert r.ip() is None and b"rs" not in r.pairs
    assert [str(a) for a in r.addrs()] == ["/dns4/n.example.org/tcp/443/wss"]


@pytest.mark.parametrize("mangle", [
    lambda raw: raw[:-1],  # truncated
    lambda raw: raw[:5] + bytes([raw[5] ^ 1]) + raw[6:],  # signature changed
    lambda raw: raw + b"\x00",  # trailing byte
    lambda raw: b"\xc0",  # empty list
])
def test_damaged_records_are_refused(mangle):
    raw = enr.build(KEY, 1, _fields("/ip4/10.0.0.1/tcp/1"))
    with pytest.raises(EnrError):
        enr.decode(mangle(raw))


def test_unsorted_keys_and_oversized_records_are_refused():
    import rlp
    r = enr.decode(enr.build(KEY, 1, _fields("/ip4/10.0.0.1/tcp/1")))
    items = rlp.decode(r.raw)
    items[2:4], items[4:6] = items[4:6], items[2:4]
    with pytest.raises(EnrError, match="sorted"):
        enr.decode(rlp.encode(items))
    with pytest.raises(EnrError, match="300"):
        enr.decode(b"\xf9" + (400).to_bytes(2, "big") + b"\x80" * 400)
    with pytest.raises(EnrError):
        enr.sign(KEY, 1, {b"big": b"x" * 300})


def test_sequence_number_moves_only_when_the_record_changes(tmp_path):
    state = tmp_path / "key.enr"
    a = enr.announce(KEY, _fields("/ip4/10.0.0.1/tcp/60000"), state)
    assert a.seq == 1 and state.read_text().strip() == a.text()
    again = enr.announce(KEY, _fields("/ip4/10.0.0.1/tcp/60000"), state)
    assert again.seq == 1 and again.raw == a.raw
    moved = enr.announce(KEY, _fields("/ip4/10.0.0.2/tcp/60000"), state)
    assert moved.seq == 2 and moved.ip() == "10.0.0.2"
    other_key = enr.announce(bytes.fromhex("22" * 32), _fields("/ip4/10.0.0.2/tcp/60000"), state)
    assert other_key.seq == 1  # another key's record is not ours to continue
    state.write_text("garbage")
    assert enr.announce(KEY, _fields("/ip4/10.0.0.2/tcp/60000"), state).seq == 1
