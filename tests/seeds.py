"""The seed of a random test: WAKU_TEST_SEED when set (to replay a failure), else a new one;
printed either way, so a failing run's output says how to replay it."""
from __future__ import annotations

import os
import random


def seeded() -> tuple[int, random.Random]:
    raw = os.environ.get("WAKU_TEST_SEED")
    seed = int(raw) if raw else random.randrange(2**32)
    print(f"seed={seed} (replay: WAKU_TEST_SEED={seed})")
    return seed, random.Random(seed)
