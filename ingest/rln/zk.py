"""The zk part, from zerokit (the `rln` crate 3.0.0 nwaku links) through the project's binding
`waku_rln` (native/waku_rln, built by scripts/setup.sh): Poseidon, hash-to-field, identities,
Groth16 proving and verification over the embedded depth-20 circuit, a Merkle tree.

Verification and proving release the GIL: the callers run them in a worker thread
(`trio.to_thread.run_sync`), so the bridge's trio loop keeps reading its peers meanwhile.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ingest.rln.rules import HashToField, Poseidon

try:
    import waku_rln as _native  # type: ignore[import-untyped]  # native/waku_rln (PyO3)
except ImportError as exc:  # pragma: no cover - set-up builds it
    _native = None
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None


class ZkUnavailable(RuntimeError):
    """The native RLN library is not installed (run scripts/setup.sh)."""


def native() -> Any:
    if _native is None:
        raise ZkUnavailable(f"the RLN library waku_rln is not installed ({_IMPORT_ERROR}); "
                            "run `make setup` (scripts/setup.sh builds native/waku_rln)")
    return _native


def available() -> bool:
    return _native is not None


def poseidon(inputs: Sequence[bytes]) -> bytes:
    return bytes(native().poseidon(list(inputs)))


def hash_to_field(data: bytes) -> bytes:
    return bytes(native().hash_to_field(data))


POSEIDON: Poseidon = poseidon
HASH_TO_FIELD: HashToField = hash_to_field


def rate_commitment(id_commitment: bytes, user_message_limit: int) -> bytes:
    """A membership's leaf: Poseidon(id_commitment, user_message_limit) (nwaku's toLeaf)."""
    return poseidon([id_commitment, user_message_limit.to_bytes(32, "little")])


def identity(seed: bytes | None = None) -> tuple[bytes, bytes, bytes, bytes]:
    """(trapdoor, nullifier, secret, commitment) of a new identity (seeded: deterministic)."""
    t, n, s, c = native().identity(seed)
    return bytes(t), bytes(n), bytes(s), bytes(c)


def verify(proof: bytes, root: bytes, external_nullifier: bytes, x: bytes, share_x: bytes, share_y: bytes,
           nullifier: bytes, roots: Sequence[bytes]) -> str:
    """zerokit's verify_with_roots: "valid", "root", "signal" or "proof" (blocking, GIL released)."""
    return str(native().verify(proof, root, external_nullifier, x, share_x, share_y, nullifier, list(roots)))


def prove(identity_secret: bytes, user_message_limit: int, message_id: int, path_elements: Sequence[bytes],
          path_index: bytes, x: bytes, external_nullifier: bytes) -> tuple[bytes, bytes, bytes, bytes, bytes]:
    """(proof, root, share_x, share_y, nullifier) of a new proof (blocking, GIL released)."""
    p, r, sx, sy, n = native().prove(identity_secret, user_message_limit, message_id, list(path_elements),
                                     bytes(path_index), x, external_nullifier)
    return bytes(p), bytes(r), bytes(sx), bytes(sy), bytes(n)


def warm_up() -> None:
    native().warm_up()


def merkle_tree(depth: int = 20) -> Any:
    return native().MerkleTree(depth)
