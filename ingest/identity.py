"""The bridge's persistent identity: an Ed25519 libp2p key in a file, created on first start.

The file holds the libp2p protobuf encoding of the private key (the same bytes go-libp2p's
``crypto.MarshalPrivateKey`` writes), readable by the owner only. The peer id derived from it
is the bridge's ``bridge_id`` and must survive restarts.
"""
from __future__ import annotations

import os
from pathlib import Path

from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyPair
from libp2p.crypto.serialization import deserialize_private_key
from libp2p.peer.id import ID


class IdentityError(Exception):
    """The key file cannot be read, created or parsed; the message is one line for the user."""


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
        private = deserialize_private_key(data)
        return KeyPair(private, private.get_public_key()), False
    except Exception:  # noqa: BLE001 - any parse failure means the same thing to the user
        raise IdentityError(f"key file {path} does not hold a libp2p private key") from None


def _create(path: Path) -> KeyPair:
    key_pair = create_new_key_pair()
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key_pair.private_key.serialize())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise IdentityError(f"cannot create key file {path}: {exc.strerror}") from None
    return key_pair


def peer_id_of(key_pair: KeyPair) -> ID:
    return ID.from_pubkey(key_pair.public_key)
