"""The zk part, from zerokit (the `rln` crate 3.0.0 nwaku links) through the project's binding
`waku_rln` (native/waku_rln, built by scripts/setup.sh): Poseidon, hash-to-field, identities,
Groth16 proving and verification over the embedded depth-20 circuit, a Merkle tree.

Verification and proving release the GIL. Proofs are made in a trio worker thread
(`trio.to_thread.run_sync`); verifications go to :class:`Verifier`'s resident native threads
(one hand-over and one wake-up of the loop, no GIL between them, instead of trio's per-call
thread machinery: 0.4 ms of a 3 ms verification), so the bridge's trio loop keeps reading its
peers meanwhile.
"""
from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Sequence
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


class _Inbox:
    """One trio run's end of the verifier: the native inbox (an eventfd the pool's threads write
    after each verdict), the tasks waiting for their verdicts, and the system task that wakes
    on the eventfd and hands each verdict to its task."""

    def __init__(self) -> None:
        self.native = native().Inbox(os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC))
        self.waiting: dict[int, tuple[trio.lowlevel.Task, list[str]]] = {}
        trio.lowlevel.spawn_system_task(self._hand_back, name="rln-verdicts")

    async def _hand_back(self) -> None:
        fd = self.native.fileno()
        while True:
            await trio.lowlevel.wait_readable(fd)
            for job, verdict in self.native.take():
                entry = self.waiting.pop(job, None)
                if entry is not None:  # None: its caller was cancelled
                    entry[1].append(verdict)
                    trio.lowlevel.reschedule(entry[0])


_INBOX: trio.lowlevel.RunVar[_Inbox] = trio.lowlevel.RunVar("rln_verify_inbox")
_jobs = itertools.count()


class Verifier:
    """`threads` native threads (waku_rln.VerifyPool) that run zerokit's verification off the
    trio loop.

        verdict = await verifier().verify(proof, root, en, x, share_x, share_y, nullifier)

    Each call hands its arguments to a waiting thread and sleeps until its verdict comes back
    through the run's inbox: an eventfd the thread writes and the loop polls with everything
    else. The threads never take the GIL, so a verification costs one hand-over and one wake-up
    of the loop. Calls from many peers queue up and run `threads` at a time. A cancelled
    caller's verification still runs to its end; its verdict is dropped."""

    def __init__(self, threads: int) -> None:
        if threads < 1:
            raise ValueError(f"verifier threads: at least 1, got {threads}")
        self.threads = threads
        self._pool = native().VerifyPool(threads)

    async def verify(self, proof: bytes, root: bytes, external_nullifier: bytes, x: bytes, share_x: bytes,
                     share_y: bytes, nullifier: bytes, roots: Sequence[bytes] = ()) -> str:
        """As :func:`verify`, awaited from trio."""
        try:
            inbox = _INBOX.get()
        except LookupError:
            inbox = _Inbox()
            _INBOX.set(inbox)
        job = next(_jobs)
        self._pool.submit(inbox.native, job, proof, root, external_nullifier, x, share_x, share_y, nullifier,
                          list(roots))
        box: list[str] = []
        inbox.waiting[job] = (trio.lowlevel.current_task(), box)

        def abort(_: Any) -> trio.lowlevel.Abort:
            inbox.waiting.pop(job, None)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        if box[0] == "panic":
            raise RuntimeError("zerokit's verification panicked (waku_rln)")
        return box[0]


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
