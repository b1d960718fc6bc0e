"""The ops dashboard in headless Chromium while a pipeline runs: the bridge as a process with a
relay publisher and a filter client, the store, subscriptions and filter queries (the shared Spark
session) with their job metrics, and `python -m tools.dashboard` over all of it. The charts must
render with non-zero data; a screenshot is saved under the test's tmp dir."""
from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
import uuid

import pytest

from core.config import REPO_ROOT, load_config
from core.kafka import ensure_topics
from pipeline.filter.matching import start_filter_query
from pipeline.filter.settings import FilterJobSettings, SubscriptionsJobSettings
from pipeline.filter.subscriptions import SubscriptionsJob
from pipeline.spark.metrics import JobMetrics
from pipeline.store.job import start_store_query
from pipeline.store.settings import StoreJobSettings
from tests.conftest import BATCH_AT_EVERY_TRIGGER, free_port
from tools.loadgen import LoadGenerator, LoadProfile, produce
from tools.processes import start_bridge, start_publisher

pytestmark = pytest.mark.integration

CONTENT_TOPIC = "/dashboard/1/chat/proto"
# Panels that must show non-zero data in this run (lag may rightly be 0, nothing is dropped).
MUST_HAVE_DATA = ("throughput", "batch_duration", "quarantine", "store_rows", "store_growth", "subscriptions",
                  "pushes", "bridge")
ALL_PANELS = MUST_HAVE_DATA + ("lag", "rejected", "dropped", "threads")


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("chromium not found: `bash scripts/setup.sh --with-interop` installs Debian's chromium")
    return path


def api(url: str) -> dict:
    return json.loads(urllib.request.urlopen(f"{url}api/data", timeout=10).read())


def nonzero(data: dict) -> dict[str, int]:
    return {p["id"]: sum(1 for s in p["series"] for _, v in s["points"] if v) for p in data["panels"]}


def browser(args: list[str], url: str, timeout: float = 90) -> subprocess.CompletedProcess:
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--hide-scrollbars", "--virtual-time-budget=8000", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_dashboard_renders_live_pipeline_in_chromium(spark, kafka, tmp_path):
    began = time.monotonic()
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")

    def took(what: str) -> None:
        print(f"{time.monotonic() - began:6.1f} s  {what}")
    rng = random.Random(seed)
    tag = uuid.uuid4().hex[:8]
    ports = {name: free_port() for name in ("store", "subscriptions", "filter", "bridge", "dashboard")}
    sets = [
        f"kafka.bootstrap_servers={kafka}",
        f"topics.messages=dash.{tag}.messages", f"topics.subscriptions=dash.{tag}.subscriptions",
        f"topics.push_prefix=dash.{tag}.push.",
        f"warehouse.root={tmp_path / 'wh'}", f"warehouse.checkpoints={tmp_path / 'cp'}",
        "store.trigger_seconds=1", "filter.trigger_seconds=1", "filter.subscriptions_trigger_seconds=1",
        *BATCH_AT_EVERY_TRIGGER,  # the tests wait for the tables
        "filter.trigger=microbatch",  # the jobs share one local session: real-time mode would hold every slot
        "job_metrics.write_interval_s=1", "dashboard.refresh_s=1",
        *(f"job_metrics.{job}_port={ports[job]}" for job in ("store", "subscriptions", "filter")),
        f"bridge.key_file={tmp_path / 'bridge.key'}", "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0",
        "bridge.ws_port=-1", f"bridge.metrics_port={ports['bridge']}", f"dashboard.port={ports['dashboard']}",
        "store_service.enabled=false",  # history queries play no part here
    ]
    cfg = load_config(sets, environ={})
    ensure_topics(kafka, {cfg.get("topics.messages"): 2, cfg.get("topics.subscriptions"): 2})
    # A few refused records beside what the bridge relays, so that quarantine has something.
    gen = LoadGenerator(LoadProfile(content_topics=3, invalid_share=0.3, seed=seed))
    produce(kafka, cfg.get("topics.messages"), gen.batch(60))

    started: list = []
    procs: list[subprocess.Popen] = []
    bridge = None
    try:
        store_s, subs_s, filter_s = (StoreJobSettings.from_config(cfg), SubscriptionsJobSettings.from_config(cfg),
                                     FilterJobSettings.from_config(cfg))
        m_store = JobMetrics(spark, store_s.metrics).start()
        m_subs = JobMetrics(spark, subs_s.metrics).start()
        m_filter = JobMetrics(spark, filter_s.metrics).start()
        started += [m_store, m_subs, m_filter]
        store_q = start_store_query(spark, store_s, query_name=f"dash_store_{tag}", metrics=m_store)
        subs_job = SubscriptionsJob(spark, subs_s, query_name=f"dash_subs_{tag}", metrics=m_subs)
        subs_job.start()
        filter_q = start_filter_query(spark, filter_s, query_name=f"dash_filter_{tag}", metrics=m_filter)
        started += [store_q, subs_job, filter_q]

        took("queries started")
        bridge = start_bridge(sets, log=(tmp_path / "bridge.log").open("w"))
        dash = subprocess.Popen([sys.executable, "-m", "tools.dashboard", *[a for s in sets for a in ("--set", s)]],
                                cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=(tmp_path / "dashboard.log").open("w"),
                                text=True, start_new_session=True)
        procs.append(dash)
        client = subprocess.Popen([sys.executable, "-m", "ingest.cli", "filter", "--peer", bridge.tcp_addr,
                                   "--content-topic", CONTENT_TOPIC, "--ping-interval", "20"],
                                  cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                  start_new_session=True)
        procs.append(client)
        assert client.stdout is not None and "subscribed" in client.stdout.readline()
        pushes: list[str] = []
        threading.Thread(target=lambda: pushes.extend(client.stdout), daemon=True).start()
        # The filter query's "latest" offsets are fixed at its first batch: publish after it.
        deadline = time.monotonic() + 120
        while filter_q.lastProgress is None and time.monotonic() < deadline:
            time.sleep(0.5)
        took("bridge, dashboard and filter client up; the filter query has run a batch")
        procs.append(start_publisher(bridge.tcp_addr, rate=rng.choice([8, 10, 12]), count=0,
                                     content_topic=CONTENT_TOPIC, log=subprocess.DEVNULL))
        assert dash.stdout is not None
        url = dash.stdout.readline().strip().removeprefix("dashboard on ")
        assert url.startswith("http://"), url

        deadline = time.monotonic() + 120
        seen: dict[str, int] = {}
        while time.monotonic() < deadline:
            seen = nonzero(api(url))
            if all(seen.get(p) for p in MUST_HAVE_DATA):
                break
            time.sleep(2)
        assert all(seen.get(p) for p in MUST_HAVE_DATA), f"panels without data after 120 s: {seen}"
        took("every panel has data")

        # The page, after its JS ran, in a real browser: every chart drawn, the required ones with data.
        dom = browser(["--dump-dom"], url)
        assert dom.returncode == 0, dom.stderr[-2000:]
        drawn = {m.group(1): m.group(0) for m in re.finditer(r'<div[^>]*data-panel="([a-z_]+)"[^>]*>', dom.stdout)}
        assert set(drawn) == set(ALL_PANELS), drawn.keys()
        for panel in ALL_PANELS:
            assert 'data-rendered="1"' in drawn[panel], drawn[panel]
        shown = {p: int(re.search(r'data-nonzero="(\d+)"', drawn[p]).group(1)) for p in ALL_PANELS}
        print(f"non-zero points per panel in chromium: {shown}")
        assert all(shown[p] > 0 for p in MUST_HAVE_DATA), shown
        assert "bridge up" in dom.stdout and "store up" in dom.stdout

        shot = tmp_path / "dashboard.png"
        taken = browser([f"--screenshot={shot}", "--window-size=1400,1250"], url)
        assert taken.returncode == 0 and shot.stat().st_size > 10_000, taken.stderr[-2000:]
        took("chromium done")
        print(f"screenshot: {shot}")
        assert pushes, "the filter client received no push"

        # Every streaming job wrote its rows to Delta job_metrics.
        for m in (m_store, m_subs, m_filter):
            m.flush()
        job_metrics = spark.read.format("delta").load(cfg.table_path("job_metrics"))
        jobs = {r.job for r in job_metrics.select("job").distinct().collect()}
        assert {"store", "subscriptions", "filter"} <= jobs
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
        if bridge is not None:
            bridge.stop(30)
        for item in reversed(started):
            item.stop()
        from pipeline.filter.criteria import close_indexes

        close_indexes(spark)  # the filter query's index follower lives in the shared JVM
