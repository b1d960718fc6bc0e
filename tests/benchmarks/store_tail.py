"""CPU cost of the store service's fresh tail (ingest/store/tail.py), in-process, no Kafka:
decoding + validating + hashing a record (core/validation.py), taking messages in, answering a
page, and dropping a commit's worth of messages (the part done under the tail's lock, then the
trimming after it). CPU time (time.process_time), steadier than wall-clock on shared cores.

    .venv/bin/python tests/benchmarks/store_tail.py [--records 50000] [--commit 10000]
"""
from __future__ import annotations

import argparse
import json
import time

from core.store_page import StoreQuery
from core.validation import Limits
from ingest.store.tail import Tail, stored_form
from tools.loadgen import LoadGenerator, LoadProfile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--commit", type=int, default=10_000)
    parser.add_argument("--payload-bytes", type=int, default=300)
    args = parser.parse_args()
    gen = LoadGenerator(LoadProfile(payload_bytes=args.payload_bytes, seed=3))
    now = time.time()
    records = [gen.next(now + i * 1e-4) for i in range(args.records)]
    c = time.process_time()
    results = [stored_form(r.value, Limits(), now + 10) for r in records]
    decode_us = (time.process_time() - c) / len(records) * 1e6
    good = [m for m, _ in results if m is not None]
    tail = Tail(len(good) + 1)
    c = time.process_time()
    for i in range(0, len(good), 500):
        with tail.lock:
            tail.add_locked(good[i:i + 500], {m.message_hash: (0, i + j) for j, m in enumerate(good[i:i + 500])})
    add_us = (time.process_time() - c) / len(good) * 1e6
    topic = good[0].content_topic
    c = time.process_time()
    for _ in range(2000):
        with tail.lock:
            tail.nearest_locked(StoreQuery(content_topics=(topic,), forward=False, page_size=20), 20)
    page_ms = (time.process_time() - c) / 2000 * 1e3
    durable = {m.message_hash for m in good[:args.commit]}
    c = time.process_time()
    with tail.lock:
        tail.drop_locked(durable)
    locked_ms = (time.process_time() - c) * 1e3
    c = time.process_time()
    tail.tidy()
    tidy_ms = (time.process_time() - c) * 1e3
    print(json.dumps({"benchmark": "store_tail", "records": len(records), "tail": len(good),
                      "decode_validate_hash_us": round(decode_us, 2), "add_us": round(add_us, 2),
                      "page_ms": round(page_ms, 4), "commit": len(durable), "drop_locked_ms": round(locked_ms, 1),
                      "tidy_ms": round(tidy_ms, 1)}))


if __name__ == "__main__":
    main()
