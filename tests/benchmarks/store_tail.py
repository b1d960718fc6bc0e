"""CPU cost of the store service's fresh tail (ingest/store/tail.py), in-process, no Kafka:
decoding + validating + hashing a record (core/validation.py), taking messages in, answering a
page, and dropping a commit's worth of messages (the part done under the tail's lock, then the
trimming after it). CPU time (time.process_time), steadier than wall-clock on shared cores.

    .venv/bin/python tests/benchmarks/store_tail.py [--records 50000] [--commit 10000]

`--kafka N`: instead, N load-generator records are put in a real (embedded) broker first, then
the tail's real consumer thread (TailFollower) reads them: how many records a second one
process's tail follows (wall clock, and kafka-python's own share measured alone).

    .venv/bin/python tests/benchmarks/store_tail.py --kafka 150000 --payload-bytes 1024
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
    parser.add_argument("--kafka", type=int, default=0, metavar="N", help="follow N records from a real broker")
    args = parser.parse_args()
    if args.kafka:
        follow_kafka(args.kafka, args.payload_bytes)
        return
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


def follow_kafka(n: int, payload_bytes: int) -> None:
    import os
    import socket
    import tempfile
    from pathlib import Path

    from kafka import KafkaConsumer, TopicPartition

    from core.kafka import ensure_topics
    from ingest.store.tail import TailFollower, TailSettings
    from tools.embedded_kafka import EmbeddedKafka
    from tools.loadgen import produce

    def free_port() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    repo = Path(__file__).resolve().parents[2]
    broker = EmbeddedKafka(data_dir=Path(tempfile.mkdtemp(prefix="waku-bench-tail-")) / "kafka", port=free_port(),
                           controller_port=free_port(), jar_dir=repo / ".cache/jars/kafka", heap="-Xmx1g")
    broker.start()
    try:
        ensure_topics(broker.bootstrap_servers, {"bench.tail": 4})
        produce(broker.bootstrap_servers, "bench.tail",
                LoadGenerator(LoadProfile(payload_bytes=payload_bytes, seed=3)).batch(n))
        tps = [TopicPartition("bench.tail", p) for p in range(4)]
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, group_id=None, enable_auto_commit=False,
                                 fetch_max_wait_ms=20, max_partition_fetch_bytes=4 * 1024 * 1024)
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        # Process CPU: kafka-python 3 and librdkafka both do their network I/O on threads of their own.
        began, cpu, got = time.perf_counter(), time.process_time(), 0
        while got < n:
            got += sum(len(rs) for rs in consumer.poll(timeout_ms=100, max_records=5000).values())
        poll_s, poll_cpu_us = time.perf_counter() - began, (time.process_time() - cpu) / n * 1e6
        consumer.close()
        from confluent_kafka import Consumer
        from confluent_kafka import TopicPartition as CTopicPartition
        rd = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "bench-tail",
                       "enable.auto.commit": False, "fetch.wait.max.ms": 20, "fetch.min.bytes": 256 * 1024})
        rd.assign([CTopicPartition("bench.tail", p, 0) for p in range(4)])
        began, cpu, got = time.perf_counter(), time.process_time(), 0
        while got < n:
            got += sum(1 for m in rd.consume(5000, 0.1) if m.error() is None and m.value() is not None)
        rd_s, rd_cpu_us = time.perf_counter() - began, (time.process_time() - cpu) / n * 1e6
        rd.close()
        # room for every record in every partition (the follower starts no further back than
        # max_messages / partitions records from each partition's end)
        tail = Tail(len(tps) * n)
        follower = TailFollower(TailSettings(broker.bootstrap_servers, topic="bench.tail", max_messages=len(tps) * n,
                                             lookback_s=86_400), tail, lambda hashes: set())
        began = time.perf_counter()
        follower.start()
        while follower.consumed < n and time.perf_counter() - began < 600:
            time.sleep(0.01)
        follow_s = time.perf_counter() - began
        follower.stop()
        print(json.dumps({"benchmark": "store_tail", "mode": "kafka", "records": n, "consumed": follower.consumed, "payload_bytes": payload_bytes,
                          "tail": len(tail), "follow_s": round(follow_s, 2), "follow_per_s": round(n / follow_s),
                          "kafka_python_alone_s": round(poll_s, 2), "kafka_python_cpu_us": round(poll_cpu_us, 1),
                          "librdkafka_alone_s": round(rd_s, 2), "librdkafka_cpu_us": round(rd_cpu_us, 1),
                          "load_avg": [round(x, 2) for x in os.getloadavg()]}))
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
