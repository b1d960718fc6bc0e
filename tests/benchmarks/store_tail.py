"""CPU cost of the store service's fresh tail (ingest/store/tail.py), in-process, no Kafka:
decoding + validating + hashing a record (core/validation.py), taking messages in, answering a
page, and releasing a commit's worth of messages (`Tail.publish`: all of it, and the longest
single hold of the tail's lock). CPU time (time.process_time), steadier than wall-clock on shared
cores; the lock's holds in wall-clock time.

    .venv/bin/python tests/benchmarks/store_tail.py [--records 50000] [--commit 10000]

`--kafka N`: instead, N load-generator records are put in a real (embedded) broker first, then
the tail's real consumer thread (TailFollower) reads them: how many records a second one
process's tail follows (wall clock), and the CPU a record of kafka-python and of librdkafka,
each measured alone.

    .venv/bin/python tests/benchmarks/store_tail.py --kafka 150000 --payload-bytes 1024

`--gil RATE`: how late records reach the tail while another thread of the process holds the GIL,
as bridge B's reader does for ~0.2 s of CPU after each Delta commit. A producer process offers
RATE records/s (the load generator's mix, each stamped with the receive time at which it is
due, generated before sending starts); in this process a thread runs pure Python for
`--hold-ms` every 2 s (0: none), and the consumer under test takes each record through the
tail's rules. Latency = in the consumer (decoded) -
receive time, over every valid message offered (its first copy), the records never consumed as
+inf (tests/benchmarks/stats.py: nearest rank; null where a percentile falls on one). The process uses the
bridge's GC settings (`ingest.cli._quiet_gc`). Consumers: the tail as it ships (TailFollower,
librdkafka) and, for comparison, the kafka-python loop it replaced (as shipped until session
14). `--rounds N` repeats the four runs. Full GC collections of the process are counted.

    .venv/bin/python tests/benchmarks/store_tail.py --gil 10000 --seconds 30 --hold-ms 250

`--idle RATE`: what the tail costs at a trickle with no query, reading Kafka record by record
(`store_service.tail_idle_after_s` 0) and once a second (the default once no query came for 60
s; here after 0.1 s): a producer process offers RATE records/s for `--seconds`, and this process
(the tail alone) and the broker are charged CPU. The two ways alternate, `--rounds` times.

    .venv/bin/python tests/benchmarks/store_tail.py --idle 50 --seconds 60 --rounds 3

`--commit-s S` (with `--gil`): the tail alone, with commits. Every S s the messages taken in
more than a second before are released as a Delta commit releases them (`Tail.publish`), and a
prober asks the tail for a 20-message page every 10 ms, timing the lock wait and the page.

    .venv/bin/python tests/benchmarks/store_tail.py --gil 10000 --seconds 30 --commit-s 4 --hold-ms 0 --rounds 2
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import threading
import time
from pathlib import Path

from core.store_page import StoreQuery
from core.validation import Limits
from ingest.store.tail import Tail, stored_form
from tools.loadgen import GENERATE_S_PER_RECORD, LoadGenerator, LoadProfile
from tools.processes import free_port, proc_cpu_s

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: `tests` importable

from tests.benchmarks.stats import INF, finite, latency_summary, percentile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--commit", type=int, default=10_000)
    parser.add_argument("--payload-bytes", type=int, default=300)
    parser.add_argument("--kafka", type=int, default=0, metavar="N", help="follow N records from a real broker")
    parser.add_argument("--gil", type=float, default=0, metavar="RATE",
                        help="latency to the tail at RATE records/s with a GIL-holding thread")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--hold-ms", type=float, default=250.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--commit-s", type=float, default=0.0, metavar="S",
                        help="--gil: the tail alone, with a commit every S s and a page asked every 10 ms")
    parser.add_argument("--idle", type=float, default=0, metavar="RATE",
                        help="the tail's CPU at RATE records/s, reading record by record and once a second")
    args = parser.parse_args()
    if args.idle:
        idle_cost(args.idle, args.seconds, args.rounds, args.payload_bytes)
        return
    if args.gil:
        gil_latency(args.gil, args.seconds, args.hold_ms, args.rounds, args.payload_bytes, args.commit_s)
        return
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
    tail.lock = TimedLock()
    c = time.process_time()
    tail.publish(durable)
    publish_ms = (time.process_time() - c) * 1e3
    print(json.dumps({"benchmark": "store_tail", "records": len(records), "tail": len(good),
                      "decode_validate_hash_us": round(decode_us, 2), "add_us": round(add_us, 2),
                      "page_ms": round(page_ms, 4), "commit": len(durable), "publish_ms": round(publish_ms, 1),
                      "publish_holds": len(tail.lock.holds),
                      "longest_hold_ms": round(max(tail.lock.holds) * 1e3, 2)}))


class GcPauses:
    """Full (generation 2) collections of this process, and how long each paused it."""

    def __init__(self) -> None:
        import gc

        self.times: list[float] = []
        self._began = 0.0
        gc.callbacks.append(self._note)

    def _note(self, phase: str, info: dict) -> None:
        if info["generation"] == 2:
            if phase == "start":
                self._began = time.perf_counter()
            else:
                self.times.append(time.perf_counter() - self._began)

    def reset(self) -> None:
        self.times = []

    def figures(self) -> dict:
        return {"gc_full": len(self.times), "gc_full_max_ms": round(max(self.times, default=0) * 1e3, 1)}


class TimedLock:
    """A lock that records how long each hold lasted (wall clock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.holds: list[float] = []

    def __enter__(self) -> None:
        self._lock.acquire()
        self._began = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.holds.append(time.perf_counter() - self._began)
        self._lock.release()


def follow_kafka(n: int, payload_bytes: int) -> None:
    import os
    import tempfile
    from pathlib import Path

    from kafka import KafkaConsumer, TopicPartition

    from core.kafka import ensure_topics
    from ingest.store.tail import TailFollower, TailSettings
    from tools.embedded_kafka import EmbeddedKafka
    from tools.loadgen import produce

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
        print(json.dumps({"benchmark": "store_tail", "mode": "kafka", "records": n, "consumed": follower.consumed,
                          "payload_bytes": payload_bytes,
                          "tail": len(tail), "follow_s": round(follow_s, 2), "follow_per_s": round(n / follow_s),
                          "kafka_python_alone_s": round(poll_s, 2), "kafka_python_cpu_us": round(poll_cpu_us, 1),
                          "librdkafka_alone_s": round(rd_s, 2), "librdkafka_cpu_us": round(rd_cpu_us, 1),
                          "load_avg": [round(x, 2) for x in os.getloadavg()]}))
    finally:
        broker.stop()


def gil_latency(rate: float, seconds: float, hold_ms: float, rounds: int, payload_bytes: int,
                commit_s: float = 0.0) -> None:
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from core.kafka import ensure_topics
    from ingest.store.tail import TailFollower, TailSettings
    from tools.embedded_kafka import EmbeddedKafka

    repo = Path(__file__).resolve().parents[2]
    tmp = Path(tempfile.mkdtemp(prefix="waku-bench-tail-"))
    broker = EmbeddedKafka(data_dir=tmp / "kafka", port=free_port(), controller_port=free_port(),
                           jar_dir=repo / ".cache/jars/kafka", heap="-Xmx1g")
    broker.start()
    from ingest.cli import _quiet_gc

    _quiet_gc()  # as `waku-bridge run` does once started
    pauses = GcPauses()
    runs = []
    try:
        for n, (client, hold) in enumerate([(c, h) for _ in range(rounds) for h in (0.0, hold_ms)
                                            for c in (("tail",) if commit_s else ("kafka-python", "tail"))]):
            topic = f"bench.gil.{n}"
            ensure_topics(broker.bootstrap_servers, {topic: 4})
            late: list[float] = []
            seen: set[bytes] = set()
            stop = threading.Event()
            arrived: collections.deque[tuple[float, bytes]] = collections.deque()
            if client == "tail":
                tail = TimedTail(10_000_000, seen, late, arrived if commit_s else None)
                follower = TailFollower(TailSettings(broker.bootstrap_servers, topic=topic, lookback_s=0),
                                        tail, lambda hashes: set())
                follower.start()
                follower.ready.wait(30)
                consumed, finish = (lambda follower=follower: follower.consumed), follower.stop
                if commit_s:
                    committer = Committer(tail, arrived, commit_s, stop)
            else:
                consumed, finish = kafka_python_loop(broker.bootstrap_servers, topic, seen, late, stop)
            holder = threading.Thread(target=hold_gil, args=(stop, hold / 1000, 2.0), daemon=True)
            if hold:
                holder.start()
            cpu, broker_cpu = time.process_time(), proc_cpu_s(broker.pid)
            pauses.reset()
            # store_ingest.py's producer role: the records are generated first, each stamped with
            # the receive time at which it is due, then sent on schedule.
            count = int(rate * seconds)
            spec = {"bootstrap": broker.bootstrap_servers, "topic": topic, "rate": rate, "seconds": seconds,
                    "start_at": time.time() + 2.0 + count * GENERATE_S_PER_RECORD, "payload_bytes": payload_bytes,
                    "seed": 5,
                    "out": str(tmp / f"producer-{n}.json")}
            subprocess.run([sys.executable, str(repo / "tests/benchmarks/store_ingest.py"), "--role", "producer",
                            "--spec", json.dumps(spec)], cwd=repo, check=True)
            produced = json.loads(Path(spec["out"]).read_text())
            sent = produced["sent"] - produced["undelivered"]
            deadline = time.monotonic() + 10
            while consumed() < sent and time.monotonic() < deadline:
                time.sleep(0.05)
            stop.set()
            finish()
            if commit_s:
                committer.join()
            cpu_s = time.process_time() - cpu - (hold / 1000 * seconds / 2.0 if hold else 0.0)
            broker_cpu = proc_cpu_s(broker.pid) - broker_cpu
            xs = [x * 1000 for x in late]
            # the records never consumed count as +inf (stats.py: null where a percentile falls on one)
            missing = max(0, produced["sent"] - consumed())
            lateness = latency_summary(xs, len(xs) + missing, digits=1)
            run = {"consumer": client, "hold_ms": hold, "offered": produced["sent"],
                   "undelivered": produced["undelivered"], "consumed": consumed(),
                   "missing": produced["sent"] - consumed(), "valid": len(xs),
                   "p50_ms": lateness.p50, "p99_ms": lateness.p99,
                   "p999_ms": finite(percentile(xs + [INF] * missing, 99.9), 1), "max_ms": lateness.max,
                   "consumer_cpu_s": round(cpu_s, 2), "broker_cpu_s": round(broker_cpu, 2),
                   "load_avg": round(os.getloadavg()[0], 2), **pauses.figures()}
            print(f"{client:>12}  hold {hold:5.0f} ms  p50 {run['p50_ms']} ms  p99 {run['p99_ms']} ms  "
                  f"max {run['max_ms']} ms  missing {run['missing']}  CPU {run['consumer_cpu_s']} s  "
                  f"broker CPU {run['broker_cpu_s']} s; full GC {run['gc_full']}, longest "
                  f"{run['gc_full_max_ms']} ms", flush=True)
            if commit_s:
                run.update(committer.figures())
                print(f"{'':>12}  commits {run['commits']} of p50 {run['commit_p50']} messages; a page "
                      f"(lock wait included) p50 {run['page_p50_ms']} ms  p99 {run['page_p99_ms']} ms  "
                      f"max {run['page_max_ms']} ms", flush=True)
            runs.append(run)
    finally:
        broker.stop()
    print(json.dumps({"benchmark": "store_tail", "mode": "gil", "rate": rate, "seconds": seconds,
                      "commit_s": commit_s, "runs": runs}))


def idle_cost(rate: float, seconds: float, rounds: int, payload_bytes: int) -> None:
    import os
    import subprocess
    import tempfile

    from core.kafka import ensure_topics
    from ingest.store.tail import TailFollower, TailSettings
    from tools.embedded_kafka import EmbeddedKafka

    repo = Path(__file__).resolve().parents[2]
    tmp = Path(tempfile.mkdtemp(prefix="waku-bench-tail-"))
    broker = EmbeddedKafka(data_dir=tmp / "kafka", port=free_port(), controller_port=free_port(),
                           jar_dir=repo / ".cache/jars/kafka")
    broker.start()
    from ingest.cli import _quiet_gc

    _quiet_gc()  # as `waku-bridge run` does once started
    runs = []
    try:
        # A first run warms the broker's JIT up (its figures are printed, not counted).
        ways = ["warm-up", *(w for _ in range(rounds) for w in ("record by record", "once a second"))]
        for n, way in enumerate(ways):
            topic = f"bench.idle.{n}"
            ensure_topics(broker.bootstrap_servers, {topic: 4})
            settings = TailSettings(broker.bootstrap_servers, topic=topic, lookback_s=0,
                                    idle_after_s=0.1 if way == "once a second" else 0.0)
            follower = TailFollower(settings, Tail(10_000_000), lambda hashes: set())
            follower.start()
            follower.ready.wait(30)
            while way == "once a second" and not follower.idle:
                time.sleep(0.05)
            count = int(rate * seconds)
            spec = {"bootstrap": broker.bootstrap_servers, "topic": topic, "rate": rate,
                    "seconds": seconds if n else min(seconds, 20.0),
                    "start_at": time.time() + 2.0 + count * GENERATE_S_PER_RECORD, "payload_bytes": payload_bytes,
                    "seed": 5, "out": str(tmp / f"producer-{n}.json")}
            producer = subprocess.Popen([sys.executable, str(repo / "tests/benchmarks/store_ingest.py"), "--role",
                                         "producer", "--spec", json.dumps(spec)], cwd=repo)
            # Charged from the producer's first record to its last, and the last reads (a fetch
            # waits up to 1 s, the idle loop takes once a second).
            time.sleep(max(0.0, spec["start_at"] - time.time()))
            cpu, broker_cpu, began = time.process_time(), proc_cpu_s(broker.pid), time.monotonic()
            producer.wait()
            time.sleep(2.5)
            window = time.monotonic() - began
            cpu_s, broker_cpu = time.process_time() - cpu, proc_cpu_s(broker.pid) - broker_cpu
            sent = json.loads(Path(spec["out"]).read_text())["sent"]
            run = {"way": way, "offered": sent, "consumed": follower.consumed, "window_s": round(window, 1),
                   "sessions": dict(follower.sessions),
                   "tail_cpu_s_per_min": round(cpu_s / window * 60, 3),
                   "broker_cpu_s_per_min": round(broker_cpu / window * 60, 3),
                   "load_avg": round(os.getloadavg()[0], 2)}
            follower.stop()
            print(f"{way:>16}: tail {run['tail_cpu_s_per_min']} CPU-s a minute, broker "
                  f"{run['broker_cpu_s_per_min']}; consumed {run['consumed']} of {sent}, load {run['load_avg']}",
                  flush=True)
            if n:
                runs.append(run)
    finally:
        broker.stop()
    by_way = {w: [r for r in runs if r["way"] == w] for w in ("record by record", "once a second")}
    summary = {w: {k: round(sum(r[k] for r in rs) / len(rs), 3) for k in ("tail_cpu_s_per_min", "broker_cpu_s_per_min")}
               for w, rs in by_way.items()}
    print(json.dumps({"benchmark": "store_tail", "mode": "idle", "rate": rate, "seconds": seconds,
                      "mean": summary, "runs": runs}))


class TimedTail(Tail):
    """The tail, noting each message's first copy as it is taken in (and, given `arrived`, when:
    for the committer)."""

    def __init__(self, max_messages: int, seen: set[bytes], late: list[float],
                 arrived: collections.deque[tuple[float, bytes]] | None) -> None:
        super().__init__(max_messages)
        self.timed_seen, self.timed_late, self.timed_arrived = seen, late, arrived

    def add_locked(self, messages, coords=None):
        messages = list(messages)
        note_first_copies(messages, self.timed_seen, self.timed_late)
        if self.timed_arrived is not None:
            now = time.monotonic()
            self.timed_arrived.extend((now, m.message_hash) for m in messages)
        return super().add_locked(messages, coords)


def commit(tail: Tail, durable: set[bytes]) -> None:
    """What the store service's reader does with the tail when a Delta commit holds `durable`."""
    tail.publish(durable)


class Committer:
    """Stands for the store job and the reader: every `every_s` the messages taken into the tail
    more than a second before are committed (`commit`), as a Delta commit of a store-job batch
    makes them durable; meanwhile a prober asks the tail for a page of the busiest content topic
    every 10 ms, as the reader does for every query (the tail's lock, then its nearest matches),
    timing each, lock wait included."""

    def __init__(self, tail: Tail, arrived: collections.deque, every_s: float, stop: threading.Event) -> None:
        self.tail, self.arrived, self.every_s, self.stop = tail, arrived, every_s, stop
        self.sizes: list[int] = []
        self.pages: list[float] = []
        self.threads = [threading.Thread(target=self._commits, daemon=True),
                        threading.Thread(target=self._probe, daemon=True)]
        for t in self.threads:
            t.start()

    def _commits(self) -> None:
        while not self.stop.wait(self.every_s):
            upto, durable = time.monotonic() - 1.0, set()
            while self.arrived and self.arrived[0][0] < upto:
                durable.add(self.arrived.popleft()[1])
            self.sizes.append(len(durable))
            commit(self.tail, durable)

    def _probe(self) -> None:
        topic = None
        while not self.stop.wait(0.01):
            if topic is None:
                if not self.arrived:
                    continue
                with self.tail.lock:
                    m = self.tail.get_locked(self.arrived[0][1])
                if m is None:
                    continue
                topic = m.content_topic
            began = time.perf_counter()
            with self.tail.lock:
                self.tail.nearest_locked(StoreQuery(content_topics=(topic,), forward=False, page_size=20), 20)
            self.pages.append(time.perf_counter() - began)

    def join(self) -> None:
        for t in self.threads:
            t.join(10)

    def figures(self) -> dict:
        pages = latency_summary([x * 1000 for x in self.pages], len(self.pages), digits=2)
        return {"commits": len(self.sizes), "commit_p50": percentile(self.sizes, 50) or 0,
                "pages": pages.delivered, "page_p50_ms": pages.p50, "page_p99_ms": pages.p99,
                "page_max_ms": pages.max}


def note_first_copies(messages: list, seen: set[bytes], late: list[float]) -> None:
    """How late each message is, from its receive time, the first time its hash is seen (the load
    generator's copies of a message carry the first copy's receive time, or a later one)."""
    now = time.time()
    for m in messages:
        if m.message_hash not in seen:
            seen.add(m.message_hash)
            late.append(now - m.received_time)


def hold_gil(stop, hold_s: float, every_s: float) -> None:
    """Pure-Python work for `hold_s` every `every_s` (the interpreter switches threads every 5 ms)."""
    d: dict[int, int] = {}
    while not stop.wait(every_s):
        t = time.perf_counter()
        while time.perf_counter() - t < hold_s:
            for i in range(200):
                d[i] = i
            d.clear()


def kafka_python_loop(bootstrap: str, topic: str, seen: set[bytes], late: list[float], stop):
    """The tail's kafka-python consumer loop as shipped until session 14 (same fetch settings),
    taking each record through the tail's rules."""

    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      fetch_min_bytes=256 * 1024, fetch_max_wait_ms=10, reconnect_backoff_max_ms=1000,
                      max_partition_fetch_bytes=4 * 1024 * 1024)
    tps = [TopicPartition(topic, p) for p in range(4)]
    c.assign(tps)
    c.seek_to_end(*tps)
    for tp in tps:
        c.position(tp)
    count = [0]

    def loop() -> None:
        lim = Limits()
        while not stop.is_set():
            for recs in c.poll(timeout_ms=100, max_records=5000).values():
                now = time.time()
                stored = [stored_form(r.value, lim, now)[0] for r in recs]
                note_first_copies([m for m in stored if m is not None], seen, late)
                count[0] += len(recs)

    th = threading.Thread(target=loop, daemon=True)
    th.start()

    def finish() -> None:
        th.join(5)
        c.close()

    return (lambda: count[0]), finish


if __name__ == "__main__":
    main()
