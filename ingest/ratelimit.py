"""A token bucket (rate per second, burst), as nwaku and go-waku bound peers: `try_take()` for
refusals (429), `take()` to pace (waits for a token)."""
from __future__ import annotations

import time
from collections.abc import Callable

import trio


class TokenBucket:
    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = float(rate)
        self.burst = float(burst)
        self.clock = clock
        self.tokens = float(burst)
        self.last = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now

    def try_take(self) -> bool:
        """Take a token if there is one."""
        self._refill()
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def wait_s(self) -> float:
        """Seconds until a token is there (0: now)."""
        self._refill()
        return 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) / self.rate

    async def take(self) -> None:
        """Wait for a token and take it."""
        while not self.try_take():
            await trio.sleep(max(self.wait_s(), 0.001))


class PeerBuckets:
    """One token bucket per peer (rate 0: no limit); buckets idle long enough to be full again
    are forgotten, so memory stays bounded by the active peers."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic,
                 max_peers: int = 10_000) -> None:
        self.rate, self.burst, self.clock, self.max_peers = rate, burst, clock, max_peers
        self._buckets: dict[str, TokenBucket] = {}

    def allow(self, peer: str) -> bool:
        if self.rate <= 0:
            return True
        bucket = self._buckets.get(peer)
        if bucket is None:
            if len(self._buckets) >= self.max_peers:
                self._prune()
            bucket = self._buckets[peer] = TokenBucket(self.rate, self.burst, self.clock)
        return bucket.try_take()

    def _prune(self) -> None:
        now = self.clock()
        full_after = self.burst / self.rate
        for peer in [p for p, b in self._buckets.items() if now - b.last >= full_after]:
            del self._buckets[peer]
