"""RLN-v2 costs: proof generation, zerokit's raw verification, the bridge's whole check of a
message against it, and the relay read rate of a bridge process with RLN on.

    .venv/bin/python tests/benchmarks/rln.py [--quick] [--messages N] [--passes P] [--burn K]

1. Proofs: N distinct valid proofs (a static group of seeded members, limit 100 each) made with
   zerokit through waku_rln on two threads; cached in .cache/rln-bench/ so later runs skip it
   (the group, timestamps and epoch are fixed: epoch_s and the clock gap are set to 10^9 s,
   which changes nothing in what a verification costs). Proof generation time p50/p99 is
   measured on fresh proofs every run.
2.-3. Message by message, paired so that both see the same machine: zerokit's raw
   verify_with_roots (waku_rln.verify, inline), then the bridge's whole check of the same
   message, ingest/rln/service.RlnRelay.validate (decode, clock, epoch, root, the zkSNARK on a
   native verifier thread, the nullifier log) on a trio loop; the goal is within 1.3x of
   the raw verification. `--passes P` checks the N messages P times (a new RlnRelay each pass,
   so no nullifier is seen twice) for P x N pairs: a p99 of 3,000 pairs moves less from run to
   run than one of 600. `--burn K` runs K processes that spin on the CPU beside steps 2-3 (a
   saturated machine, the same every run; step 4 runs without them).
4. Relay read rate: a `waku-bridge run` process with RLN on (the same group) and the embedded
   Kafka; another process publishes the N messages over relay as fast as it goes. The rate is
   what the bridge stored (its produced counter), and verified messages/s per core is that
   count over the bridge's CPU seconds. Start-up is excluded.
The last line is JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from tests.benchmarks.relay_bridge import scrape  # noqa: E402
from tests.benchmarks.stats import percentile  # noqa: E402

SEED = 20261204
MEMBERS = 10
LIMIT = 100
SHARD = "/waku/2/rs/1/0"
CT = "/rln-bench/1/chat/proto"
T0 = 1_800_000_000_000_000_000  # a fixed timestamp (ns): cached proofs stay valid
BIG = 10**9
CACHE = REPO_ROOT / ".cache" / "rln-bench"


def group():
    from ingest.rln import zk
    rng = random.Random(SEED)
    ids = [zk.identity(rng.randbytes(16)) for _ in range(MEMBERS)]
    return ids, tuple(zk.rate_commitment(c, LIMIT) for _, _, _, c in ids)


def make_proof(args):
    from ingest.rln import zk
    from ingest.rln.membership import StaticMembership
    from ingest.rln.rules import DEFAULT_RLN_IDENTIFIER, HASHED, encode_proof, epoch_bytes, external_nullifier, signal
    from schemas.waku_message_pb2 import WakuMessage
    i, secret, member, tree, message_id = args
    msg = WakuMessage(payload=b"rln-bench-%06d" % i + bytes(200), content_topic=CT, timestamp=T0 + i)
    path = tree.own_path(member) if isinstance(tree, StaticMembership) else tree
    e = epoch_bytes(T0 // 10**9 // BIG)
    en = external_nullifier(e, DEFAULT_RLN_IDENTIFIER, HASHED, zk.poseidon, zk.hash_to_field)
    started = time.perf_counter()
    p, root, sx, sy, n = zk.prove(secret, LIMIT, message_id, path.elements, path.bits,
                                  zk.hash_to_field(signal(msg)), en)
    took = time.perf_counter() - started
    msg.rate_limit_proof = encode_proof(p, root, e, sx, sy, n, DEFAULT_RLN_IDENTIFIER)
    return msg.SerializeToString(), took


def proofs(n: int) -> tuple[list[bytes], list[float]]:
    """n valid messages (cached), and the generation times of the ones made in this run."""
    from ingest.rln.membership import StaticMembership
    ids, leaves = group()
    tree = StaticMembership(leaves)
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"messages-{SEED}-{n}.pickle"
    if path.exists():
        return pickle.loads(path.read_bytes()), []
    jobs = [(i, ids[i % MEMBERS][2], i % MEMBERS, tree, i // MEMBERS) for i in range(n)]
    with ThreadPoolExecutor(2) as pool:
        made = list(pool.map(make_proof, jobs))
    path.write_bytes(pickle.dumps([m for m, _ in made]))
    return [m for m, _ in made], [t for _, t in made]


def fresh_proof_times(k: int) -> list[float]:
    from ingest.rln.membership import StaticMembership
    ids, leaves = group()
    tree = StaticMembership(leaves)
    return [make_proof((10_000 + i, ids[0][2], 0, tree, i % LIMIT))[1] for i in range(k)]


def raw_verify_one(data: bytes) -> float:
    """zerokit's verification of one message, inline: the library's own cost."""
    from ingest.rln import zk
    from ingest.rln.rules import DEFAULT_RLN_IDENTIFIER, HASHED, decode_proof, external_nullifier, signal
    from schemas.waku_message_pb2 import WakuMessage
    msg = WakuMessage.FromString(data)
    proof = decode_proof(msg.rate_limit_proof)
    assert proof is not None
    en = external_nullifier(proof.epoch, DEFAULT_RLN_IDENTIFIER, HASHED, zk.poseidon, zk.hash_to_field)
    x = zk.hash_to_field(signal(msg))
    started = time.perf_counter()
    verdict = zk.verify(proof.proof, proof.merkle_root, en, x, proof.share_x, proof.share_y, proof.nullifier, ())
    took = time.perf_counter() - started
    assert verdict == "valid", verdict
    return took


def paired(messages: list[bytes]) -> tuple[list[float], list[float]]:
    """Message by message, zerokit's raw verification and then the bridge's whole check
    (RlnRelay.validate on a trio loop: decode, clock, epoch, root, the zkSNARK on a verifier
    thread, the nullifier log) of the same message, so that both see the same machine."""
    import trio
    from prometheus_client import CollectorRegistry

    from core.config import load_config
    from ingest.rln.membership import StaticMembership
    from ingest.rln.service import RlnRelay
    from ingest.rln.settings import RlnSettings
    from schemas.waku_message_pb2 import WakuMessage
    _, leaves = group()
    settings = RlnSettings.from_config(load_config(rln_overrides(leaves), environ={}), 1)
    assert settings is not None
    relay = RlnRelay(settings, StaticMembership(leaves), registry=CollectorRegistry())
    raw: list[float] = []
    ours: list[float] = []

    async def main() -> None:
        for data in messages:
            raw.append(raw_verify_one(data))
            msg = WakuMessage.FromString(data)
            started = time.perf_counter()
            reason = await relay.validate(SHARD, msg)
            ours.append(time.perf_counter() - started)
            assert reason is None, reason
    trio.run(main)
    return raw, ours


def rln_overrides(leaves) -> list[str]:
    commitments = ",".join(hex(int.from_bytes(leaf, "little")) for leaf in leaves)
    return ["bridge.cluster_id=1", f"bridge.pubsub_topics={SHARD}", "rln.enabled=true", "rln.membership=static",
            f"rln.static_rate_commitments={commitments}", f"rln.epoch_s={BIG}", f"rln.max_clock_gap_s={BIG}"]


def publish_main(peer: str, path: str) -> int:
    """The load generator (its own process): publish the messages in `path` over relay."""
    import trio

    from ingest.publisher import Publisher
    messages = pickle.loads(Path(path).read_bytes())

    async def main() -> None:
        pub = Publisher()
        async with pub.running([SHARD]):
            await pub.connect(peer)
            await pub.wait_for_mesh(SHARD, timeout=60)
            started = time.monotonic()
            for data in messages:
                await pub.publish(data, SHARD)
            took = time.monotonic() - started
            print(json.dumps({"published": len(messages), "seconds": round(took, 3)}), flush=True)
            # Connected until the parent closes our stdin (it has counted what the bridge
            # stored): leaving with unread bytes at the bridge would reset the connection and
            # lose them.
            await trio.to_thread.run_sync(sys.stdin.read)
    trio.run(main)
    return 0


def relay_rate(messages: list[bytes], tmp: Path) -> dict:
    from tools.embedded_kafka import EmbeddedKafka
    from tools.processes import free_port, proc_cpu_s, start_bridge
    _, leaves = group()
    kafka = EmbeddedKafka(tmp / "kafka", port=free_port(), controller_port=free_port())
    bridge = None
    try:
        kafka.start()
        kafka.create_topics({"waku.messages": 4})
        metrics_port = free_port()
        bridge = start_bridge([
            f"kafka.bootstrap_servers={kafka.bootstrap_servers}", "topics.messages=waku.messages",
            f"bridge.key_file={tmp / 'bridge.key'}", "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0",
            "bridge.ws_port=-1", f"bridge.metrics_port={metrics_port}", "filter.enabled=false",
            "store_service.enabled=false", *rln_overrides(leaves)], log=open(tmp / "bridge.log", "w"), timeout=120)
        (tmp / "messages.pickle").write_bytes(pickle.dumps(messages))
        cpu0 = proc_cpu_s(bridge.proc.pid)
        began = time.monotonic()
        pub = subprocess.Popen([sys.executable, __file__, "--publish", bridge.tcp_addr, str(tmp / "messages.pickle")],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
        first = None
        deadline = time.monotonic() + 300
        produced = 0.0
        while time.monotonic() < deadline:
            s = scrape(metrics_port)
            produced = s.get("waku_bridge_produced_total", 0.0)
            if first is None and s.get("waku_bridge_received_total", 0.0) > 0:
                first, cpu0 = time.monotonic(), proc_cpu_s(bridge.proc.pid)
            if produced >= len(messages):
                break
            time.sleep(0.05)
        done = time.monotonic()
        cpu1 = proc_cpu_s(bridge.proc.pid)
        pub.communicate(timeout=60)
        final = scrape(metrics_port)
        rejected = {k: v for k, v in final.items() if k.startswith("waku_bridge_rejected_total") and v}
        seconds = done - (first or began)
        return {"stored": produced, "seconds": round(seconds, 3), "stored_per_s": round(produced / seconds, 1),
                "bridge_cpu_s": round(cpu1 - cpu0, 2),
                "verified_per_core_s": round(produced / (cpu1 - cpu0), 1) if cpu1 > cpu0 else None,
                "missing": len(messages) - int(produced), "rejected": rejected}
    finally:
        if bridge is not None:
            bridge.stop(60)
        kafka.stop()


def ms(values: list[float], p: float) -> float:
    return round(percentile(values, p) * 1000, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--messages", type=int)
    parser.add_argument("--passes", type=int, default=1, help="check the messages this many times (pairs pooled)")
    parser.add_argument("--burn", type=int, default=0, help="CPU-spinning processes beside the paired checks")
    parser.add_argument("--publish", nargs=2, metavar=("PEER", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.publish:
        return publish_main(*args.publish)
    n = args.messages or (60 if args.quick else 600)
    print(f"load average {os.getloadavg()[0]:.2f}; {n} messages", flush=True)
    from ingest.rln import zk
    t = time.perf_counter()
    zk.warm_up()
    print(f"zerokit key and graph loaded in {time.perf_counter() - t:.2f} s", flush=True)
    messages, made = proofs(n)
    gen = fresh_proof_times(3 if args.quick else 10) + made
    print(f"proof generation: p50 {ms(gen, 50)} ms, p99 {ms(gen, 99)} ms over {len(gen)} proofs", flush=True)
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.burn)]
    try:
        if burners:
            time.sleep(5)  # the burners are on the cores before the first pair
        load_paired = os.getloadavg()[0]
        raw, ours = [], []
        for _ in range(max(1, args.passes)):
            r, o = paired(messages)
            raw += r
            ours += o
        load_paired = max(load_paired, os.getloadavg()[0])
    finally:
        for b in burners:
            b.kill()
            b.wait()
    print(f"raw verification (zerokit), {len(raw)} pairs (load {load_paired:.1f}): p50 {ms(raw, 50)} ms, "
          f"p99 {ms(raw, 99)} ms", flush=True)
    print(f"the bridge's check: p50 {ms(ours, 50)} ms, p99 {ms(ours, 99)} ms "
          f"({statistics.median(ours) / statistics.median(raw):.2f}x raw at p50)", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="rln-bench-"))
    try:
        rate = relay_rate(messages, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"relay with RLN on: {rate['stored']:.0f} stored in {rate['seconds']} s = {rate['stored_per_s']} msg/s; "
          f"{rate['verified_per_core_s']} verified messages per CPU-second of the bridge; missing {rate['missing']}",
          flush=True)
    result = {
        "proof_generation_p50_ms": ms(gen, 50), "proof_generation_p99_ms": ms(gen, 99),
        "raw_verify_p50_ms": ms(raw, 50), "raw_verify_p99_ms": ms(raw, 99),
        "bridge_check_p50_ms": ms(ours, 50), "bridge_check_p99_ms": ms(ours, 99),
        "bridge_over_raw_p50": round(statistics.median(ours) / statistics.median(raw), 2),
        "bridge_over_raw_p99": round(percentile(ours, 99) / percentile(raw, 99), 2),
        "relay_stored_per_s": rate["stored_per_s"], "verified_per_core_s": rate["verified_per_core_s"],
        "missing": rate["missing"], "rejected": rate["rejected"], "messages": n, "quick": args.quick,
        "pairs": len(raw), "burn": args.burn, "load_average_1m_paired": round(load_paired, 2),
        "load_average_1m": round(os.getloadavg()[0], 2), "cores": os.cpu_count(),
    }
    print(json.dumps(result), flush=True)
    return 0 if rate["missing"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
