"""Run the community's interop suite (logos-messaging/logos-delivery-interop-tests) against this
node without docker, and count the results per area and node pair.

    python3 tools/interop_suite/run.py --suite /work/interop-suite --venv /work/interop-venv \
        [--areas relay,store,lightpush,filter,sharding] [--pairs us:us,go-waku:us,us:go-waku] \
        [--run-dir /work/interop-run] [--timeout 240] [--health-shim] [--isolation-store test] \
        [--kafka HOST:PORT] [--spark jobs|live] [--no-spark] [-k EXPR] [--pytest-arg ARG ...]

Starts once, shared by every node of every test: the embedded Kafka broker
(`python -m tools.embedded_kafka start`, the pipeline's topics) and the Spark jobs, writing the
Delta warehouse under --run-dir: by default as the product runs them (`--spark jobs`:
`./spark-submit.sh store`, `subscriptions` and `filter`, a driver each, the filter query on
cores of its own), or `--spark live` (`./spark-submit.sh live`: the three queries in one
driver, `spark.one_driver = true`); then runs the suite's pytest once per area and pair, one
after another, with the plugin local_nodes.py (our node and go-waku as local processes), and
prints a table of run / passed / failed / skipped (errors count as failed) from each run's JUnit
XML, and every failed test with the first line of its failure. Results: <run-dir>/results/
(results.json, <area>-<pair>.xml and .log, the suite's node logs under the suite's log/docker).

Standard library only; it imports nothing of this repository (it starts the node and the jobs as
processes, with the repository's .venv).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MAIN = HERE.parents[1]
OURS = "local/nwaku-as-waku-bridge"  # "nwaku" in the name: the suite treats it as nwaku
GOWAKU = "local/go-waku:v0.10.0"  # "go-waku" in the name: the suite's go-waku branch
PAIRS = {"us:us": (OURS, OURS), "go-waku:us": (GOWAKU, OURS), "us:go-waku": (OURS, GOWAKU)}
AREAS = {"relay": "tests/relay", "store": "tests/store", "lightpush": "tests/light_push",
         "filter": "tests/filter", "sharding": "tests/sharding"}
# Not applicable without docker or outside this node: RLN (a Sepolia/Anvil contract and nwaku's
# generateRlnKeystore in the image), postgres (nwaku's --store-message-db-url, refused here).
IGNORED = ["tests/relay/test_rln.py", "tests/store/test_external_db.py"]
# --spark: the product's jobs a driver each (tools.local_run.spark_jobs(False)), or its one driver
SPARK_JOBS = {"jobs": ["subscriptions", "store", "filter"], "live": ["live"]}
PARTITIONS = 2  # of waku.messages and waku.subscriptions: the filter query needs one slot each


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


def wait_for_line(path: Path, needle: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and needle in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before {needle!r}: see {path}")
        time.sleep(1)
    raise RuntimeError(f"no {needle!r} in {path} after {timeout:.0f} s")


class Services:
    """The embedded broker and the Spark live job, each a process group of its own."""

    def __init__(self, run_dir: Path, port: int) -> None:
        self.run_dir = run_dir
        self.port = port
        self.procs: list[subprocess.Popen] = []
        self.python = str(MAIN / ".venv" / "bin" / "python")

    def sets(self) -> list[str]:
        return [f"kafka.bootstrap_servers=127.0.0.1:{self.port}",
                f"warehouse.root={self.run_dir / 'warehouse'}", f"warehouse.checkpoints={self.run_dir / 'checkpoints'}",
                f"topics.messages_partitions={PARTITIONS}", f"topics.subscriptions_partitions={PARTITIONS}",
                "topics.push_partitions=1"]

    def start_kafka(self) -> str:
        out = self.run_dir / "kafka.log"
        proc = subprocess.Popen(
            [self.python, "-m", "tools.embedded_kafka", "start", "--port", str(self.port),
             "--controller-port", str(self.port + 1), "--data-dir", str(self.run_dir / "kafka"),
             "--topic", f"waku.messages:{PARTITIONS}", "--topic", f"waku.subscriptions:{PARTITIONS}"],
            cwd=MAIN, stdout=out.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        wait_for_line(out, "Kafka running on", proc, 300)
        return f"127.0.0.1:{self.port}"

    def live_sets(self) -> list[str]:
        return [*self.sets(), "filter.subscriptions_warm_up=false", "job_metrics.store_port=-1",
                "job_metrics.subscriptions_port=-1", "job_metrics.filter_port=-1"]

    def start_spark(self, mode: str = "jobs") -> None:
        """The store, subscriptions and filter queries on the product's batch cadence, metrics
        endpoints off: `jobs`, a driver each, as `make run` and a deployment start them (the
        filter query's real-time tasks on cores no store batch or MERGE shares: the suite reads
        a push once, 0.1 s after the publish); `live`, the three in one driver (jobs/live.py).
        Not a batch at every trigger: at the suite's trickle the store query then ran a 1-4 s
        Delta batch every second and the subscriptions query a MERGE at each subscribe, CPU the
        filter push path lost on 2 cores. Neither is on that path, and the store service's Kafka
        tail covers what the store job has not written yet."""
        sets = [w for s in self.live_sets() for w in ("--set", s)]
        jobs = SPARK_JOBS[mode]
        started = []
        for job in jobs:
            out = self.run_dir / f"{job}-job.log"
            proc = subprocess.Popen([str(MAIN / "spark-submit.sh"), job, *sets], cwd=MAIN, stdout=out.open("w"),
                                    stderr=subprocess.STDOUT, start_new_session=True)
            self.procs.append(proc)
            started.append((job, out, proc))
        for job, out, proc in started:
            for query in {"live": ["filter", "store"]}.get(job, [job]):
                wait_for_line(out, f"{query} query started", proc, 900)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(90)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)


def counts(xml_path: Path) -> tuple[dict[str, int], list[dict[str, str]]]:
    """run / passed / failed / skipped of a JUnit XML, one per test (a test failing in its call
    and again in its teardown has two entries: it counts once, failed; errors and failures are
    both failed; an xfail is a skip in JUnit XML), and each failed test's first failure line."""
    c = {"run": 0, "passed": 0, "failed": 0, "skipped": 0}
    failed: dict[str, dict[str, str]] = {}
    outcome: dict[str, str] = {}
    if not xml_path.exists():
        return c, []
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        test = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            outcome[test] = "failed"
            text = (bad.get("message") or bad.text or "").strip().splitlines()
            failed.setdefault(test, {"test": test, "kind": bad.tag, "message": text[0][:300] if text else ""})
        elif test not in outcome:
            outcome[test] = "skipped" if case.find("skipped") is not None else "passed"
    for result in outcome.values():
        c["run"] += 1
        c[result] += 1
    return c, list(failed.values())


def head_commit() -> str:
    """main's commit now: each node start runs the working tree as it is then."""
    return subprocess.run(["git", "-C", str(MAIN), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()


def suite_commit(suite: Path) -> str:
    """The commit the README's `git archive` wrote into <suite>/.suite-commit."""
    marker = suite / ".suite-commit"
    return marker.read_text().strip() if marker.exists() else "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", default="/work/interop-suite", help="the suite's files (git archive 6db84924)")
    p.add_argument("--venv", default="/work/interop-venv", help="a virtualenv with the suite's requirements")
    p.add_argument("--run-dir", default="/work/interop-run", help="broker, warehouse, node state, results")
    p.add_argument("--areas", default=",".join(AREAS))
    p.add_argument("--pairs", default=",".join(PAIRS))
    p.add_argument("--timeout", type=int, default=240, help="pytest-timeout per test, seconds")
    p.add_argument("--health-shim", action="store_true",
                   help="accept nodeHealth READY (see local_nodes._health_shim); without it every test errors")
    p.add_argument("--relay-shim", action="store_true",
                   help="start our node without the suite's --relay=false (refused: it always relays)")
    p.add_argument("--isolation-store", choices=["shared", "test"], default="shared",
                   help="store area: shared warehouse and topics (default) or each test its own topics")
    p.add_argument("--kafka", default="", help="use this broker (and its topics) instead of starting one")
    p.add_argument("--kafka-port", type=int, default=19092)
    p.add_argument("--spark", choices=sorted(SPARK_JOBS), default="jobs",
                   help="the Spark jobs a driver each, as the product runs them (default), or the live job's "
                        "one driver")
    p.add_argument("--no-spark", action="store_true", help="do not start the Spark jobs")
    p.add_argument("--our-log-level", default="", help="replaces the suite's --log-level TRACE for our node")
    p.add_argument("-k", dest="keyword", default="", help="pytest -k expression")
    p.add_argument("--pytest-arg", action="append", default=[], help="more pytest arguments")
    p.add_argument("--workers", default="", help="pytest-xdist workers per area: relay=3,store=2 (default 1)")
    p.add_argument("--tag", default="", help="name of this run in results.json")
    args = p.parse_args(argv)

    workers = {a: int(n) for a, n in (item.split("=") for item in args.workers.split(",") if item)}
    run_dir = Path(args.run_dir).resolve()
    results = run_dir / "results"
    results.mkdir(parents=True, exist_ok=True)
    services = Services(run_dir, args.kafka_port)
    stopping = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stopping.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    runs: list[dict[str, Any]] = []
    summary: dict[str, Any] = {
        "tag": args.tag, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "our_commit": head_commit(),
        "suite_commit": suite_commit(Path(args.suite)),
        "health_shim": args.health_shim, "relay_shim": args.relay_shim, "timeout": args.timeout,
        "spark": "none" if args.no_spark else args.spark, "runs": runs}
    try:
        kafka = args.kafka
        if not kafka:
            log(f"starting embedded Kafka on 127.0.0.1:{args.kafka_port} (log {run_dir / 'kafka.log'})")
            kafka = services.start_kafka()
        if not args.no_spark:
            log(f"starting the Spark jobs ({args.spark}; logs {run_dir}/*-job.log)")
            began = time.monotonic()
            services.start_spark(args.spark)
            log(f"Spark jobs started in {time.monotonic() - began:.0f} s")
        for area in args.areas.split(","):
            for pair in args.pairs.split(","):
                node1, node2 = PAIRS[pair]
                name = f"{area}-{pair.replace(':', '_')}"
                env = {**os.environ, "NODE_1": node1, "NODE_2": node2,
                       "ADDITIONAL_NODES": ",".join([node2] * 3) if node2 == OURS else ",".join([OURS] * 3),
                       "PYTHONPATH": str(HERE), "WAKU_SUITE_KAFKA": kafka, "WAKU_SUITE_MAIN": str(MAIN),
                       "WAKU_SUITE_RUN_DIR": str(run_dir), "WAKU_SUITE_WAREHOUSE": str(run_dir / "warehouse"),
                       "WAKU_SUITE_CHECKPOINTS": str(run_dir / "checkpoints"),
                       "WAKU_SUITE_PARTITIONS": str(PARTITIONS),
                       "WAKU_SUITE_ISOLATION": args.isolation_store if area == "store" else "shared",
                       "WAKU_SUITE_HEALTH_SHIM": "1" if args.health_shim else "0",
                       "WAKU_SUITE_RELAY_SHIM": "1" if args.relay_shim else "0",
                       "WAKU_SUITE_OUR_LOG_LEVEL": args.our_log_level}
                cmd = [str(Path(args.venv) / "bin" / "python"), "-m", "pytest", "-p", "local_nodes",
                       "-p", "no:cacheprovider", AREAS[area], *(f"--ignore={i}" for i in IGNORED),
                       f"--timeout={args.timeout}", f"--junitxml={results / (name + '.xml')}",
                       "-o", "log_cli=false", "-rA", *(["-k", args.keyword] if args.keyword else []),
                       *(["-n", str(workers[area])] if workers.get(area, 1) > 1 else []), *args.pytest_arg]
                load = os.getloadavg()
                commit = head_commit()
                started = time.strftime("%H:%M:%S UTC", time.gmtime())
                log(f"{name}: {' '.join(cmd)}")
                began = time.monotonic()
                with (results / f"{name}.log").open("w") as out:
                    rc = subprocess.run(cmd, cwd=args.suite, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
                c, failed = counts(results / f"{name}.xml")
                took = time.monotonic() - began
                log(f"{name}: {c} in {took:.0f} s (rc {rc}, load before {load[0]:.1f})")
                runs.append({"area": area, "pair": pair, **c, "seconds": round(took), "started": started,
                             "our_commit": commit, "workers": workers.get(area, 1),
                             "isolation": env["WAKU_SUITE_ISOLATION"], "load_before": [round(x, 1) for x in load],
                             "load_after": [round(x, 1) for x in os.getloadavg()],
                             "failed_tests": failed, "command": " ".join(cmd)})
                (results / "results.json").write_text(json.dumps(summary, indent=1))
    except KeyboardInterrupt:
        log("interrupted")
    finally:
        summary["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        (results / "results.json").write_text(json.dumps(summary, indent=1))
        services.stop()
    print(f"\n{'area':<10} {'pair':<11} {'run':>4} {'passed':>6} {'failed':>6} {'skipped':>7}")
    for r in runs:
        print(f"{r['area']:<10} {r['pair']:<11} {r['run']:>4} {r['passed']:>6} {r['failed']:>6} {r['skipped']:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
