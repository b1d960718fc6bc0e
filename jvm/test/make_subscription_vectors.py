"""The JVM twins test's vectors: one seeded sequence of filter subscription requests, sweeps,
restarts and late acknowledgements (tests/filter_twins.py) run through the bridge's state machine
(ingest/filter/state.py), with the SubscriptionEvents it produces (Python's protobuf encodings)
and, after each step, the criteria the bridge holds, which CriteriaIndex must hold live at the
step's time (CriteriaIndexTwinsTest); a filter job restart carries the snapshot of the
subscriptions table (pipeline/filter/batch_effect.py's fold) and the offset its replay starts at.
Written to jvm/test/subscription_vectors.json, one step a line.

    python jvm/test/make_subscription_vectors.py           # rewrite jvm/test/subscription_vectors.json
    python jvm/test/make_subscription_vectors.py --check   # exit 1 if it differs from what the code gives
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
OUT = Path(__file__).resolve().parent / "subscription_vectors.json"
sys.path.insert(0, str(REPO))

from tests.filter_twins import vectors_json  # noqa: E402  (the repo root is put on the path first)


def main() -> int:
    parser = argparse.ArgumentParser(description="write the JVM twins test's subscription vectors")
    parser.add_argument("--check", action="store_true", help="exit 1 if jvm/test/subscription_vectors.json is stale")
    args = parser.parse_args()
    text = vectors_json()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"error: {OUT.relative_to(REPO)} is stale: run python jvm/test/make_subscription_vectors.py",
                  file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
