"""The secp256k1 node key (nwaku's --nodekey form) and the Ed25519 key files of earlier versions."""
from __future__ import annotations

import os
import stat

import pytest
from libp2p.crypto.ed25519 import create_new_key_pair as ed25519_key_pair

from core.config import ConfigError, load_config
from ingest.identity import (
    IdentityError,
    is_secp256k1,
    key_from_hex,
    key_to_hex,
    load_identity,
    load_or_create_key,
    peer_id_of,
)
from ingest.settings import BridgeSettings

NODEKEY = "1122334455667788990011223344556677889900112233445566778899001122"
PEER_ID = "16Uiu2HAmMGhfSTUzKbsjMWxc6T1X4wiTWSF1bEWSLjAukCm7KiHV"  # identity multihash of the key


def test_new_key_file_is_a_hex_secp256k1_key_kept_across_restarts(tmp_path):
    path = tmp_path / "sub" / "key"
    kp, created = load_or_create_key(path)
    assert created and is_secp256k1(kp)
    text = path.read_text().strip()
    assert len(text) == 64 and int(text, 16) and text == key_to_hex(kp)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again, created = load_or_create_key(path)
    assert not created and peer_id_of(again) == peer_id_of(kp)
    assert peer_id_of(kp).to_base58().startswith("16Uiu2")


def test_nodekey_hex_gives_the_reference_peer_id(tmp_path):
    assert peer_id_of(key_from_hex(NODEKEY)).to_base58() == PEER_ID
    assert peer_id_of(key_from_hex("0x" + NODEKEY.upper() + "\n")).to_base58() == PEER_ID
    kp, created = load_identity(NODEKEY, tmp_path / "unused")
    assert not created and peer_id_of(kp).to_base58() == PEER_ID
    assert not (tmp_path / "unused").exists()  # bridge.nodekey: no key file written
    (tmp_path / "nwaku.key").write_text(NODEKEY + "\n")  # a file holding nwaku's --nodekey
    assert peer_id_of(load_or_create_key(tmp_path / "nwaku.key")[0]).to_base58() == PEER_ID


def test_existing_ed25519_key_file_keeps_its_peer_id(tmp_path):
    kp = ed25519_key_pair()
    path = tmp_path / "key"
    path.write_bytes(kp.private_key.serialize())  # what earlier versions wrote
    loaded, created = load_or_create_key(path)
    assert not created and not is_secp256k1(loaded)
    assert peer_id_of(loaded) == peer_id_of(kp)


@pytest.mark.parametrize("bad", ["", "12", "zz" * 32, "00" * 32, "ff" * 32])
def test_bad_nodekey_is_refused(bad):
    with pytest.raises(IdentityError):
        key_from_hex(bad)


def test_bad_key_file_is_one_line(tmp_path):
    path = tmp_path / "key"
    path.write_bytes(b"\x00\x01garbage")
    with pytest.raises(IdentityError, match="neither a hex node key nor a libp2p private key"):
        load_or_create_key(path)


def test_nodekey_setting_is_checked(tmp_path):
    cfg = load_config([f"bridge.key_file={tmp_path / 'k'}", "bridge.nodekey=abc"], environ={})
    with pytest.raises(ConfigError, match="bridge.nodekey"):
        BridgeSettings.from_config(cfg)
    cfg = load_config([f"bridge.key_file={tmp_path / 'k'}", f"bridge.nodekey={NODEKEY}"], environ={})
    assert BridgeSettings.from_config(cfg).nodekey == NODEKEY
