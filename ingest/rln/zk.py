"""The zk part, from zerokit (the `rln` crate 3.0.0 nwaku links) through the project's binding
`waku_rln` (native/waku_rln, built by scripts/setup.sh): Poseidon, hash-to-field, identities,
Groth16 proving and verification over the embedded depth-20 circuit, a Merkle tree.

Verification and proving release the GIL. Proofs are made in a trio worker thread
(`trio.to_thread.run_sync`); verifications go to :class:`Verifier`'s resident threads (a
queue hop and one wake-up instead of trio's per-call thread machinery, 0.4 ms of a 3 ms
verification), so the bridge's trio loop keeps reading its peers meanwhile.
"""
from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

import trio

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


class Verifier:
    """`threads` resident daemon threads that run zerokit's verification off the trio loop.

        verdict = await verifier().verify(proof, root, en, x, share_x, share_y, nullifier)

    Each call queues its arguments and sleeps until a thread hands the verdict back through
    the caller's trio token; calls from many peers queue up and run `threads` at a time. A
    cancelled caller's verification still runs to its end; its verdict is dropped."""

    def __init__(self, threads: int) -> None:
        if threads < 1:
            raise ValueError(f"verifier threads: at least 1, got {threads}")
        self.threads = threads
        self._jobs: queue.SimpleQueue[tuple[tuple[Any, ...], trio.lowlevel.TrioToken,
                                            Callable[[str | BaseException], None]]] = queue.SimpleQueue()
        for i in range(threads):
            threading.Thread(target=self._run, name=f"rln-verify-{i}", daemon=True).start()

    def _run(self) -> None:
        while True:
            args, token, done = self._jobs.get()
            result: str | BaseException
            try:
                result = verify(*args)  # the module's one call of zerokit's verify
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                result = exc
            try:
                token.run_sync_soon(done, result)
            except trio.RunFinishedError:
                pass

    async def verify(self, proof: bytes, root: bytes, external_nullifier: bytes, x: bytes, share_x: bytes,
                     share_y: bytes, nullifier: bytes, roots: Sequence[bytes] = ()) -> str:
        """As :func:`verify`, awaited from trio."""
        native()
        task = trio.lowlevel.current_task()
        box: list[str | BaseException] = []
        waiting = True

        def done(result: str | BaseException) -> None:
            if waiting:
                box.append(result)
                trio.lowlevel.reschedule(task)

        def abort(_: Any) -> trio.lowlevel.Abort:
            nonlocal waiting
            waiting = False
            return trio.lowlevel.Abort.SUCCEEDED

        self._jobs.put(((proof, root, external_nullifier, x, share_x, share_y, nullifier, list(roots)),
                        trio.lowlevel.current_trio_token(), done))
        await trio.lowlevel.wait_task_rescheduled(abort)
        result = box[0]
        if isinstance(result, BaseException):
            raise result
        return result


_verifier: Verifier | None = None
_verifier_lock = threading.Lock()


def default_verify_threads() -> int:
    """One thread per core but the one the trio loop runs on (at least one)."""
    return max(1, (os.cpu_count() or 1) - 1)


def verifier(threads: int = 0) -> Verifier:
    """The process's verifier (created on first use with `threads`, 0: one per core but one);
    later calls get the same one whatever they ask."""
    global _verifier
    with _verifier_lock:
        if _verifier is None:
            _verifier = Verifier(threads or default_verify_threads())
        return _verifier


def warm_up() -> None:
    native().warm_up()


def merkle_tree(depth: int = 20) -> Any:
    return native().MerkleTree(depth)
