"""Load generator: realistic ingest records written straight into Kafka.

Many content topics with a skewed (Zipf) popularity, payload sizes from a log-normal
distribution (or fixed), a share of duplicates (the same message relayed again, by the same or
another bridge), of ephemeral messages and of invalid records of every kind the store refuses.
`generate` also returns the ground truth: which hashes the store must hold and which records
quarantine must hold, with their reason.

    python -m tools.loadgen --count 100000 [--rate 10000] [--payload-bytes 1024] [--set k=v]
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from core.message import message_hash
from schemas import pipeline_records_pb2 as pr
from schemas import waku_message_pb2 as wm

# Time to leave per record before a paced producer that generates its records first (each
# stamped with the receive time at which it is due) starts sending: ~15 µs each idle, more on
# cores shared with the rest of a benchmark. A producer that starts late stamps receive times in
# the past (docs/benchmarks.md, session 16).
GENERATE_S_PER_RECORD = 40e-6

INVALID_KINDS = ["undecodable", "missing_message", "empty_pubsub_topic", "empty_content_topic",
                 "oversized_message", "oversized_meta", "bad_received_time", "timestamp_skew"]


@dataclass
class LoadProfile:
    content_topics: int = 1000
    pubsub_topics: int = 8
    zipf_s: float = 1.1
    payload_bytes: int | None = None  # fixed size; None: log-normal around 300 bytes
    duplicate_share: float = 0.05
    ephemeral_share: float = 0.02
    invalid_share: float = 0.01
    bridges: int = 3
    seed: int = 1


@dataclass
class Truth:
    stored: dict[bytes, bytes] = field(default_factory=dict)  # hash -> first record value
    quarantined: list[tuple[str, bytes]] = field(default_factory=list)  # (reason, raw value)
    ephemeral: int = 0
    duplicates: int = 0


@dataclass
class Generated:
    key: bytes
    value: bytes


class LoadGenerator:
    def __init__(self, profile: LoadProfile) -> None:
        self.p = profile
        self.rng = random.Random(profile.seed)
        weights = [1.0 / (i + 1) ** profile.zipf_s for i in range(profile.content_topics)]
        total = sum(weights)
        self._cum = []
        acc = 0.0
        for w in weights:
            acc += w / total
            self._cum.append(acc)
        self._recent: list[tuple[str, wm.WakuMessage, float]] = []
        self.truth = Truth()
        self._n = 0

    def _content_topic(self) -> str:
        import bisect

        i = min(bisect.bisect_left(self._cum, self.rng.random()), len(self._cum) - 1)
        return f"/app-{i % 37}/1/topic-{i}/proto"

    def _payload(self) -> bytes:
        size = self.p.payload_bytes
        if size is None:
            size = min(100_000, int(self.rng.lognormvariate(5.7, 1.0)))
        return self.rng.randbytes(size)

    def _message(self, now: float) -> tuple[str, wm.WakuMessage]:
        self._n += 1
        msg = wm.WakuMessage(payload=self._payload(), content_topic=self._content_topic(),
                             timestamp=int((now - self.rng.random()) * 1e9))
        if self.rng.random() < 0.2:
            msg.meta = self.rng.randbytes(self.rng.randrange(1, 65))
        if self.rng.random() < 0.3:
            msg.version = 1
        pubsub = f"/waku/2/rs/1/{self.rng.randrange(self.p.pubsub_topics)}"
        return pubsub, msg

    def _record(self, pubsub: str, msg: wm.WakuMessage, received: float, bridge: int) -> bytes:
        return pr.IngestRecord(pubsub_topic=pubsub, message=msg, received_time=received,
                               source=pr.RELAY, bridge_id=f"bridge-{bridge}").SerializeToString()

    @staticmethod
    def _hash(pubsub: str, msg: wm.WakuMessage) -> bytes:
        return message_hash(pubsub, msg.payload, msg.content_topic,
                            msg.meta if msg.HasField("meta") else None,
                            msg.timestamp if msg.HasField("timestamp") else None)

    def _invalid(self, now: float) -> tuple[str, bytes]:
        kind = self.rng.choice(INVALID_KINDS)
        pubsub, msg = self._message(now)
        received = now
        if kind == "undecodable":
            return kind, b"\xff\xff\xff" + self.rng.randbytes(20)
        if kind == "missing_message":
            return kind, pr.IngestRecord(pubsub_topic=pubsub, received_time=now).SerializeToString()
        if kind == "empty_pubsub_topic":
            pubsub = ""
        elif kind == "empty_content_topic":
            msg.content_topic = ""
        elif kind == "oversized_message":
            msg.payload = self.rng.randbytes(153_601)
        elif kind == "oversized_meta":
            msg.meta = self.rng.randbytes(65)
        elif kind == "bad_received_time":
            received = self.rng.choice([0.0, float("nan"), float("inf"), now + 3600.0])
        elif kind == "timestamp_skew":
            msg.timestamp = int((now - 3600) * 1e9)
        return kind, self._record(pubsub, msg, received, 0)

    def next(self, now: float | None = None) -> Generated:
        """The next record; updates the ground truth."""
        now = time.time() if now is None else now
        r = self.rng.random()
        if r < self.p.invalid_share:
            kind, value = self._invalid(now)
            self.truth.quarantined.append((kind, value))
            return Generated(self.rng.randbytes(32), value)
        if r < self.p.invalid_share + self.p.duplicate_share and self._recent:
            pubsub, msg, received = self.rng.choice(self._recent)
            # Another bridge saw it a little later; or the same record was produced again.
            if self.rng.random() < 0.5:
                received = received + self.rng.random() * 2.0
            self.truth.duplicates += 1
            return Generated(self._hash(pubsub, msg),
                             self._record(pubsub, msg, received, self.rng.randrange(self.p.bridges)))
        pubsub, msg = self._message(now)
        h = self._hash(pubsub, msg)
        if r < self.p.invalid_share + self.p.duplicate_share + self.p.ephemeral_share:
            msg.ephemeral = True
            self.truth.ephemeral += 1
            return Generated(h, self._record(pubsub, msg, now, 0))
        value = self._record(pubsub, msg, now, self.rng.randrange(self.p.bridges))
        self.truth.stored.setdefault(h, value)
        self._recent.append((pubsub, msg, now))
        if len(self._recent) > 1000:
            self._recent.pop(0)
        return Generated(h, value)

    def batch(self, count: int, now: float | None = None) -> list[Generated]:
        return [self.next(now) for _ in range(count)]


def producer(bootstrap_servers: str, **overrides):
    """A kafka-python producer tuned for throughput with delivery confirmation (acks=all,
    idempotent: like every writer of the pipeline)."""
    from kafka import KafkaProducer

    opts = dict(bootstrap_servers=bootstrap_servers, acks="all", enable_idempotence=True, linger_ms=5,
                batch_size=1 << 20, max_request_size=4 << 20)
    opts.update(overrides)
    return KafkaProducer(**opts)


def produce(bootstrap_servers: str, topic: str, records: list[Generated]) -> None:
    p = producer(bootstrap_servers)
    try:
        futures = [p.send(topic, key=r.key, value=r.value) for r in records]
        p.flush()
        for f in futures:
            f.get(timeout=60)
    finally:
        p.close()


def paced(gen: LoadGenerator, rate: float, count: int) -> Iterator[Generated]:
    """Yield count records at about `rate` per second (receive time stamped when yielded)."""
    began = time.monotonic()
    for i in range(count):
        due = began + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield gen.next()


def main(argv: list[str] | None = None) -> int:
    from core.config import ConfigError, add_config_arguments, config_from_args

    parser = argparse.ArgumentParser(prog="waku-loadgen", description=__doc__.splitlines()[0])
    add_config_arguments(parser)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=0, help="records per second (0: as fast as possible)")
    parser.add_argument("--payload-bytes", type=int, default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--invalid-share", type=float, default=0.01)
    parser.add_argument("--duplicate-share", type=float, default=0.05)
    parser.add_argument("--ephemeral-share", type=float, default=0.02)
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    gen = LoadGenerator(LoadProfile(payload_bytes=args.payload_bytes, seed=args.seed,
                                    invalid_share=args.invalid_share,
                                    duplicate_share=args.duplicate_share,
                                    ephemeral_share=args.ephemeral_share))
    p = producer(config.bootstrap_servers())
    topic = config.get("topics.messages")
    began = time.monotonic()
    records = paced(gen, args.rate, args.count) if args.rate else (gen.next() for _ in range(args.count))
    for r in records:
        p.send(topic, key=r.key, value=r.value)
    p.flush()
    p.close()
    took = time.monotonic() - began
    print(f"produced {args.count} records to {topic} in {took:.1f}s ({args.count / took:.0f}/s): "
          f"{len(gen.truth.stored)} distinct valid, {gen.truth.duplicates} duplicates, "
          f"{gen.truth.ephemeral} ephemeral, {len(gen.truth.quarantined)} invalid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
