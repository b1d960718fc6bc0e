"""The bridge's persistent identity: a libp2p key, created on first start, kept across restarts.

Two key forms are read:

- nwaku's ``--nodekey`` form: the hex of a 32-byte secp256k1 private key (optional ``0x``,
  surrounding whitespace), in ``bridge.nodekey`` or as the text of the key file. New key files
  are written in this form: a secp256k1 identity is what an ENR (EIP-778 ``v4``) carries, so
  only it makes the node discoverable (docs/discovery.md).
- the libp2p protobuf encoding of a private key (the bytes go-libp2p's
  ``crypto.MarshalPrivateKey`` writes): the Ed25519 key files of earlier versions keep working,
  with the same peer id, but have no ENR (docs/decisions.md).

The file is readable by the owner only. The peer id derived from the key is the bridge's
``bridge_id`` and must survive restarts.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from libp2p.crypto.keys import KeyPair, KeyType
from libp2p.crypto.secp256k1 import create_new_key_pair
from libp2p.crypto.serialization import deserialize_private_key
from libp2p.peer.id import ID

_HEX_KEY = re.compile(r"\s*(?:0x)?([0-9a-fA-F]{64})\s*")


class IdentityError(Exception):
    """The key file cannot be read, created or parsed; the message is one line for the user."""


def key_from_hex(text: str) -> KeyPair:
    """A secp256k1 key pair from nwaku's --nodekey form (64 hex digits, optional 0x)."""
    m = _HEX_KEY.fullmatch(text)
    if m is None:
        raise IdentityError("expected a node key of 64 hex digits (a secp256k1 private key, nwaku's --nodekey)")
    try:
        return create_new_key_pair(bytes.fromhex(m.group(1)))
    except Exception:  # noqa: BLE001 - zero or not below the curve order
        raise IdentityError("the node key is not a valid secp256k1 private key") from None


def key_to_hex(key_pair: KeyPair) -> str:
    """nwaku's --nodekey form of a secp256k1 key pair."""
    if not is_secp256k1(key_pair):
        raise IdentityError("only a secp256k1 key has a --nodekey form")
    return key_pair.private_key.to_bytes().hex()


def is_secp256k1(key_pair: KeyPair) -> bool:
    return key_pair.private_key.get_type() == KeyType.Secp256k1


def load_or_create_key(path: str | os.PathLike[str]) -> tuple[KeyPair, bool]:
    """The key pair stored at `path`, created there if missing; returns (key pair, created)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return _create(path), True
    except IsADirectoryError:
        raise IdentityError(f"key file {path} is a directory") from None
    except OSError as exc:
        raise IdentityError(f"cannot read key file {path}: {exc.strerror}") from None
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        text = ""
    if _HEX_KEY.fullmatch(text):
        try:
            return key_from_hex(text), False
        except IdentityError as exc:
            raise IdentityError(f"key file {path}: {exc}") from None
    try:
        private = deserialize_private_key(data)
        return KeyPair(private, private.get_public_key()), False
    except Exception:  # noqa: BLE001 - any parse failure means the same thing to the user
        raise IdentityError(f"key file {path} holds neither a hex node key nor a libp2p private key") from None


def _create(path: Path) -> KeyPair:
    key_pair = create_new_key_pair()
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(key_to_hex(key_pair) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise IdentityError(f"cannot create key file {path}: {exc.strerror}") from None
    return key_pair


def load_identity(nodekey: str, key_file: str | os.PathLike[str]) -> tuple[KeyPair, bool]:
    """`nodekey` (hex) when given, else the key file's key (created if missing); (key pair, created)."""
    if nodekey:
        return key_from_hex(nodekey), False
    return load_or_create_key(key_file)


def enr_state_file(key_file: str | os.PathLike[str]) -> Path:
    """Where the last announced ENR is kept (its sequence number outlives restarts)."""
    return Path(str(key_file) + ".enr")


def peer_id_of(key_pair: KeyPair) -> ID:
    return ID.from_pubkey(key_pair.public_key)
