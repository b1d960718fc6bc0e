"""Where the acceptable roots and our own Merkle path come from.

- `ChainMembership`: nwaku 0.37+'s on-chain group manager without a local tree: the
  contract's root() polled (every `root_poll_s`, 5 s as nwaku) into a window of recent roots,
  and our own Merkle path from getMerkleProof(index) whenever the root moved.
- `StaticMembership`: the group's rate commitments from the settings in a local depth-20
  Poseidon tree (zerokit's): one root, paths computed locally. Private clusters and tests.

Both are read from the trio thread only; the chain is asked in a worker thread
(`trio.to_thread`), and what it answers is applied on the trio thread.
"""
from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import trio

from ingest.rln import zk
from ingest.rln.chain import ChainError, RlnChain

log = logging.getLogger("ingest.rln")


class MembershipError(Exception):
    """The membership cannot be used; one line for the operator."""


@dataclass(frozen=True)
class OwnPath:
    """Our leaf's Merkle path: sibling nodes bottom-up (32 B LE) and the index bits, LSB first."""
    index: int
    elements: tuple[bytes, ...]
    bits: bytes


def index_bits(index: int, depth: int = 20) -> bytes:
    """nwaku's uint64ToIndex: the leaf index's bits, least significant first."""
    return bytes((index >> i) & 1 for i in range(depth))


class RootWindow:
    """The acceptable roots: the newest `size` + 1 (nwaku pops the oldest only once it holds
    more than AcceptableRootWindowSize, then appends)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._roots: deque[bytes] = deque()
        self._set: frozenset[bytes] = frozenset()

    def add(self, root: bytes) -> bool:
        """Append a root that differs from the newest; True when the window changed."""
        if self._roots and self._roots[-1] == root:
            return False
        if len(self._roots) > self.size:
            self._roots.popleft()
        self._roots.append(root)
        self._set = frozenset(self._roots)
        return True

    @property
    def roots(self) -> frozenset[bytes]:
        return self._set

    def newest(self) -> bytes | None:
        return self._roots[-1] if self._roots else None

    def __len__(self) -> int:
        return len(self._roots)


class StaticMembership:
    def __init__(self, rate_commitments: tuple[bytes, ...], depth: int = 20) -> None:
        if len(rate_commitments) > 1 << depth:
            raise MembershipError(f"rln: {len(rate_commitments)} rate commitments do not fit a depth-{depth} tree")
        self.depth = depth
        self.leaves = rate_commitments
        self.tree = zk.merkle_tree(depth)
        for i, leaf in enumerate(rate_commitments):
            self.tree.set(i, leaf)
        self.window = RootWindow(1)
        self.window.add(bytes(self.tree.root()))

    @property
    def roots(self) -> frozenset[bytes]:
        return self.window.roots

    def own_path(self, index: int) -> OwnPath:
        elements, bits = self.tree.proof(index)
        return OwnPath(index, tuple(bytes(e) for e in elements), bytes(bits))

    def leaf(self, index: int) -> bytes | None:
        return self.leaves[index] if 0 <= index < len(self.leaves) else None

    async def run(self) -> None:  # nothing changes
        await trio.sleep_forever()


class ChainMembership:
    def __init__(self, chain: RlnChain, window: int, poll_s: float, own_index: int | None = None,
                 on_change: Callable[[int], None] | None = None) -> None:
        self.chain = chain
        self.window = RootWindow(window)
        self.poll_s = poll_s
        self.own_index = own_index
        self.path: OwnPath | None = None
        self.on_change = on_change
        self.members = 0
        self.failures = 0

    @property
    def roots(self) -> frozenset[bytes]:
        return self.window.roots

    def _read(self, with_path: bool) -> tuple[bytes, list[bytes] | None, int]:
        root = self.chain.root()
        elements = self.chain.merkle_proof(self.own_index) if with_path and self.own_index is not None else None
        return root, elements, self.chain.next_free_index()

    def _apply(self, root: bytes, elements: list[bytes] | None, members: int) -> bool:
        changed = self.window.add(root)
        if elements is not None and self.own_index is not None:
            self.path = OwnPath(self.own_index, tuple(elements), index_bits(self.own_index, len(elements)))
        self.members = members
        if changed and self.on_change is not None:
            self.on_change(members)
        return changed

    def start(self) -> None:
        """The first root (and our path): synchronous, at start-up; a failure stops the node."""
        try:
            self._apply(*self._read(True))
        except ChainError as exc:
            raise MembershipError(f"rln: cannot read the membership contract: {exc}") from None

    async def poll_once(self) -> bool:
        """Read root() once; a new root is appended and our path refreshed (nwaku's updateRoots
        + fetchMerkleProofElements). True when the root moved."""
        root = await trio.to_thread.run_sync(self.chain.root)
        if root == self.window.newest():
            return False
        _, elements, members = await trio.to_thread.run_sync(self._read, True)
        return self._apply(root, elements, members)

    async def run(self) -> None:
        """Poll every poll_s; an unreachable chain is logged once per change of error, the window
        kept (roots stay acceptable as long as nwaku's would: until newer ones push them out)."""
        last_error = ""
        while True:
            await trio.sleep(self.poll_s)
            try:
                if await self.poll_once():
                    log.info("rln: membership root moved (%d members, %d roots in the window)",
                             self.members, len(self.window))
                if last_error:
                    log.info("rln: membership contract reachable again")
                    last_error = ""
            except ChainError as exc:
                self.failures += 1
                if str(exc) != last_error:
                    log.warning("rln: polling the membership contract failed: %s", exc)
                    last_error = str(exc)
