"""The ops dashboard: one page of charts that refresh on their own, over the Delta `job_metrics`
table (every job's batches), the Delta `messages` and `subscriptions` tables (row counts from
their logs) and the live Prometheus endpoints of the bridge and of every job's driver.

    python -m tools.dashboard [--port 8050] [--set dashboard.targets=bridge2=http://h:8008/metrics]

No Spark and no CDN: the Rust Delta reader (deltalake) reads the tables, prometheus_client's
parser reads the endpoints, and the page draws its charts on canvas with a little plain JS.
A collector thread samples every `dashboard.refresh_s` and keeps `dashboard.history_minutes`;
the page polls `/api/data` (the panels as JSON) as often. What each panel means and when to act
on it: docs/operations.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
import threading
import time
import urllib.request
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from core.config import Config, ConfigError, add_config_arguments, config_from_args
from core.job_metrics import JOBS
from core.settings import ObjectStoreSettings, is_s3

log = logging.getLogger("waku.dashboard")

Series = dict[str, list[list[float]]]        # name -> [[unix time, value], ...]
SampleKey = tuple[str, str, tuple[tuple[str, str], ...]]   # (target, metric, labels)


@dataclass(frozen=True)
class DashboardSettings:
    host: str = "127.0.0.1"
    port: int = 8050
    refresh_s: float = 2.0
    history_s: float = 1800.0
    targets: Mapping[str, str] = field(default_factory=dict)   # name -> Prometheus URL
    job_metrics: str = "var/warehouse/job_metrics"
    messages: str = "var/warehouse/messages"
    subscriptions: str = "var/warehouse/subscriptions"
    object_store: ObjectStoreSettings = ObjectStoreSettings()   # the S3 store of an s3a:// warehouse

    def storage_options(self, path: str) -> dict[str, str] | None:
        """delta-rs's storage options for a table at `path` (None: a local table)."""
        return self.object_store.storage_options() if is_s3(path) else None

    @classmethod
    def from_config(cls, config: Config) -> DashboardSettings:
        d = config["dashboard"]
        if d["refresh_s"] <= 0 or d["history_minutes"] <= 0:
            raise ConfigError("dashboard.refresh_s and dashboard.history_minutes: expected positive values")
        targets: dict[str, str] = {}
        b = config["bridge"]
        if b["metrics_port"] > 0:
            targets["bridge"] = f"http://{_local(b['metrics_host'])}:{b['metrics_port']}/metrics"
        m = config["job_metrics"]
        for job in JOBS:
            if m[f"{job}_port"] > 0:
                targets[job] = f"http://{_local(m['host'])}:{m[f'{job}_port']}/metrics"
        for item in d["targets"]:
            name, sep, url = item.partition("=")
            if not sep or not name.strip() or not url.strip():
                raise ConfigError(f"dashboard.targets: expected name=url items, got {item!r}")
            targets[name.strip()] = url.strip()
        return cls(d["host"], d["port"], d["refresh_s"], d["history_minutes"] * 60.0, targets,
                   config.table_path("job_metrics"), config.table_path("messages"), config.table_path("subscriptions"),
                   ObjectStoreSettings.from_config(config))


def _local(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


# -- Prometheus ---------------------------------------------------------------------------------

def scrape(url: str, timeout: float = 2.0) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value of one endpoint."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url, timeout=timeout).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


class LiveHistory:
    """Samples of every endpoint over time, and the series the panels draw from them."""

    def __init__(self, keep_s: float, window_s: float = 10.0) -> None:
        self.keep_s = keep_s
        self.window_s = window_s
        self.samples: deque[tuple[float, dict[SampleKey, float]]] = deque()
        self.up: dict[str, bool] = {}

    def add(self, when: float, by_target: Mapping[str, Mapping[tuple[str, tuple], float]]) -> None:
        flat = {(t, name, labels): v for t, samples in by_target.items() for (name, labels), v in samples.items()}
        self.samples.append((when, flat))
        while self.samples and self.samples[0][0] < when - self.keep_s:
            self.samples.popleft()

    def gauge(self, metric: str, by: str | None = None, where: Mapping[str, str] | None = None, prefix: str = "",
              suffix: str = "") -> Series:
        """Sum of a gauge's samples over targets, per value of label `by`."""
        out: Series = defaultdict(list)
        for when, flat in self.samples:
            sums: dict[str, float] = defaultdict(float)
            for (_t, name, labels), v in flat.items():
                if name == metric and _match(labels, where):
                    sums[_label(metric, labels, by, prefix, suffix)] += v
            for k, v in sums.items():
                out[k].append([when, v])
        return dict(out)

    def rate(self, metric: str, by: str | None = None, where: Mapping[str, str] | None = None, prefix: str = "",
             suffix: str = "") -> Series:
        """Per-second increase of a counter over the last `window_s` before each sample (at least
        the previous sample), summed per `by`; a counter that went down (a restart) counts 0."""
        out: Series = defaultdict(list)
        samples = list(self.samples)
        j = 0
        for i in range(1, len(samples)):
            when, flat = samples[i]
            while j < i - 1 and samples[j + 1][0] <= when - self.window_s:
                j += 1
            then, before = samples[j]
            if when <= then:
                continue
            sums: dict[str, float] = defaultdict(float)
            for key, v in flat.items():
                _t, name, labels = key
                if name == metric and _match(labels, where):
                    label = _label(metric, labels, by, prefix, suffix)
                    sums[label] += max(0.0, v - before.get(key, 0.0)) / (when - then)
            for k, v in sums.items():
                out[k].append([when, v])
        return dict(out)

    def ratio(self, num: str, den: str, by: str, prefix: str = "", suffix: str = "") -> Series:
        """rate(num)/rate(den) per `by` (a histogram's mean: _sum over _count)."""
        n, d = self.rate(num, by), self.rate(den, by)
        out: Series = {}
        for k, points in n.items():
            dens = dict((t, v) for t, v in d.get(k, []))
            pts = [[t, v / dens[t]] for t, v in points if dens.get(t)]
            if pts:
                out[prefix + k + suffix] = pts
        return out


def _label(metric: str, labels: tuple[tuple[str, str], ...], by: str | None, prefix: str, suffix: str) -> str:
    """A series' name: prefix + the `by` label's value + suffix (the metric's name if that is empty)."""
    name = prefix + (dict(labels).get(by, "") if by else "") + suffix
    return name or metric


def _match(labels: tuple[tuple[str, str], ...], where: Mapping[str, str] | None) -> bool:
    if not where:
        return True
    d = dict(labels)
    return all(d.get(k) == v for k, v in where.items())


# -- Delta --------------------------------------------------------------------------------------

JOB_COLUMNS = ["job", "batch_time", "duration_s", "input_rows", "input_rows_per_s", "processed_rows_per_s",
               "output_rows", "stored_rows", "quarantined_rows", "kafka_lag_total"]


def read_job_metrics(path: str, since: float, storage_options: Mapping[str, str] | None = None
                     ) -> list[dict[str, Any]]:
    """Rows of job_metrics with batch_time after `since` (days before it are not read);
    `storage_options`: delta-rs's, for a table on an object store."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    try:
        table = DeltaTable(path, storage_options=dict(storage_options) if storage_options else None)
    except Exception:  # noqa: BLE001 - not created yet
        return []
    names = set(table.schema().to_arrow().names) if hasattr(table.schema(), "to_arrow") else set(JOB_COLUMNS)
    cols = [c for c in JOB_COLUMNS if c in names]
    start = dt.datetime.fromtimestamp(since, dt.UTC).replace(tzinfo=None)
    data = table.to_pyarrow_dataset()
    cond = ds.field("batch_time") >= pc.scalar(start).cast(data.schema.field("batch_time").type)
    if "day" in names:
        cond = cond & (ds.field("day") >= start.strftime("%Y-%m-%d"))
    rows = data.to_table(columns=cols, filter=cond).to_pylist()
    for r in rows:
        r["t"] = r["batch_time"].replace(tzinfo=dt.UTC).timestamp()
    rows.sort(key=lambda r: r["t"])
    return rows


def table_rows(path: str, storage_options: Mapping[str, str] | None = None) -> int | None:
    """Rows of a Delta table from the record counts in its log (no data file is read)."""
    from deltalake import DeltaTable

    try:
        actions = DeltaTable(path, storage_options=dict(storage_options) if storage_options else None
                             ).get_add_actions(flatten=True)
    except Exception:  # noqa: BLE001 - not created yet
        return None
    names = actions.schema.names
    if "num_records" not in names:
        return None
    column = actions.column(names.index("num_records"))
    return int(sum(v for v in column.to_pylist() if v is not None))


def per_job(rows: Iterable[Mapping[str, Any]], value: Callable[[Mapping[str, Any]], float | None],
            jobs: Iterable[str] | None = None, suffix: str = "") -> Series:
    out: Series = defaultdict(list)
    for r in rows:
        if jobs is not None and r["job"] not in jobs:
            continue
        v = value(r)
        if v is not None:
            out[r["job"] + suffix].append([r["t"], float(v)])
    return dict(out)


# -- the panels ---------------------------------------------------------------------------------

PANELS = [
    # (id, title, unit)
    ("throughput", "Job throughput (rows/s)", "rows/s"),
    ("lag", "Kafka lag (records)", "records"),
    ("batch_duration", "Batch duration (s)", "s"),
    ("quarantine", "Quarantine rate (% of store input)", "%"),
    ("store_rows", "Store rows (Delta messages)", "rows"),
    ("store_growth", "Store growth (rows/s)", "rows/s"),
    ("subscriptions", "Active subscriptions and peers", "count"),
    ("pushes", "Push rate and push failures (/s)", "/s"),
    ("bridge", "Bridge: received, accepted, produced (/s)", "/s"),
    ("rejected", "Bridge: rejected by reason (/s)", "/s"),
    ("dropped", "Bridge: dropped by reason (/s)", "/s"),
    ("threads", "Background threads: failures (restarted) and not running; job query failures", "count"),
]


class Dashboard:
    """The collector (a thread sampling every refresh_s) and the panels it serves."""

    def __init__(self, settings: DashboardSettings) -> None:
        self.settings = settings
        # Rates over 10 s (at least 3 samples): a job's counters move once per batch.
        self.live = LiveHistory(settings.history_s, max(10.0, 3 * settings.refresh_s))
        self.store_rows: deque[list[float]] = deque()
        self.subscription_rows: deque[list[float]] = deque()
        self.job_rows: list[dict[str, Any]] = []
        self.errors: dict[str, str] = {}
        self.updated = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def sample(self) -> None:
        now = time.time()
        by_target: dict[str, Any] = {}
        errors: dict[str, str] = {}
        for name, url in self.settings.targets.items():
            try:
                by_target[name] = scrape(url)
            except Exception as exc:  # noqa: BLE001 - a target down is shown, not fatal
                errors[name] = f"{url}: {exc}"
        try:
            jobs = read_job_metrics(self.settings.job_metrics, now - self.settings.history_s,
                                    self.settings.storage_options(self.settings.job_metrics))
        except Exception as exc:  # noqa: BLE001 - an unreadable table is shown (last rows kept), not fatal
            jobs = self.job_rows
            errors["job_metrics"] = str(exc)
        stored = table_rows(self.settings.messages, self.settings.storage_options(self.settings.messages))
        subs = table_rows(self.settings.subscriptions, self.settings.storage_options(self.settings.subscriptions))
        with self._lock:
            self.live.add(now, by_target)
            self.live.up = {name: name in by_target for name in self.settings.targets}
            self.job_rows = jobs
            for buf, v in ((self.store_rows, stored), (self.subscription_rows, subs)):
                if v is not None:
                    buf.append([now, float(v)])
                while buf and buf[0][0] < now - self.settings.history_s:
                    buf.popleft()
            self.errors = errors
            self.updated = now

    def run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.sample()
            except Exception:
                log.exception("sampling failed")
            self._stop.wait(max(0.1, self.settings.refresh_s - (time.monotonic() - began)))

    def stop(self) -> None:
        self._stop.set()

    def panels(self) -> dict[str, Any]:
        with self._lock:
            live, rows = self.live, self.job_rows
            store = [r for r in rows if r["job"] == "store"]
            series: dict[str, Series] = {
                # Rows in per second of wall time (Spark's inputRowsPerSecond: a batch's rows over
                # the time since the last one), not processedRowsPerSecond (over the batch's own
                # duration: 98 rows/s from a job taking in 5 msg/s).
                "throughput": {**per_job(rows, lambda r: r.get("input_rows_per_s"), JOBS[:3], suffix=" in"),
                               **live.rate("waku_job_input_rows_total", "job", suffix=" in (live)")},
                "lag": {**per_job(rows, lambda r: r.get("kafka_lag_total"), JOBS[:3]),
                        **live.gauge("waku_job_kafka_lag", "job", suffix=" (live)")},
                "batch_duration": {**per_job(rows, lambda r: r.get("duration_s")),
                                   **live.ratio("waku_job_batch_duration_seconds_sum",
                                                "waku_job_batch_duration_seconds_count", "job", suffix=" (live)")},
                "quarantine": {**per_job(store, lambda r: 100.0 * (r.get("quarantined_rows") or 0) / r["input_rows"]
                                         if r.get("input_rows") else None),
                               **live.rate("waku_job_quarantined_rows_total", "job", suffix=" rows/s (live)")},
                "store_rows": {"messages": list(self.store_rows)},
                "store_growth": {**_growth(self.store_rows, "messages rows/s", live.window_s),
                                 **live.rate("waku_job_stored_rows_total", "job", suffix=" stored (live)")},
                "subscriptions": {**({"criteria (Delta)": list(self.subscription_rows)}
                                     if self.subscription_rows else {}),
                                  **live.gauge("waku_filter_criteria", prefix="criteria (bridge)"),
                                  **live.gauge("waku_filter_subscribed_peers", prefix="filter peers"),
                                  **live.gauge("waku_bridge_relay_peers", prefix="relay peers")},
                "pushes": {**live.rate("waku_filter_pushes_total", "outcome"),
                           **per_job(rows, lambda r: (r.get("output_rows") or 0) / r["duration_s"]
                                     if r.get("duration_s") else None, ("filter",), suffix=" push records/s")},
                "bridge": {**live.rate("waku_bridge_received_total", prefix="received"),
                           **live.rate("waku_bridge_accepted_total", prefix="accepted"),
                           **live.rate("waku_bridge_produced_total", prefix="produced")},
                "rejected": live.rate("waku_bridge_rejected_total", "reason"),
                "dropped": live.rate("waku_bridge_dropped_total", "reason"),
                # A thread that died stops its bridge (a target down); one restarted shows its count.
                "threads": {**live.gauge("waku_bridge_thread_failures", "thread", suffix=" failures"),
                            **{k: [[t, 1.0 - v] for t, v in pts] for k, pts in
                               live.gauge("waku_bridge_thread_alive", "thread", suffix=" not running").items()},
                            **live.gauge("waku_job_thread_failures", "thread", suffix=" failures"),
                            **live.gauge("waku_job_query_failures_total", "job", suffix=" query failures")},
            }
            totals = {name: _last_total(live, metric) for name, metric in (
                ("received", "waku_bridge_received_total"), ("produced", "waku_bridge_produced_total"),
                ("rejected", "waku_bridge_rejected_total"), ("dropped", "waku_bridge_dropped_total"),
                ("pushed", "waku_filter_pushes_total"))}
            return {
                "updated": self.updated, "refresh_s": self.settings.refresh_s,
                "targets": {n: {"url": u, "up": live.up.get(n, False)} for n, u in self.settings.targets.items()},
                "errors": self.errors, "totals": totals,
                "panels": [{"id": pid, "title": title, "unit": unit,
                            "series": [{"name": k, "points": [[round(t, 3), v] for t, v in pts]}
                                       for k, pts in sorted(series[pid].items()) if pts]}
                           for pid, title, unit in PANELS],
            }


def _growth(points: Iterable[list[float]], name: str, window_s: float = 10.0) -> Series:
    """Per-second increase of a sampled total over the last `window_s` before each sample."""
    pts = list(points)
    out, j = [], 0
    for i in range(1, len(pts)):
        while j < i - 1 and pts[j + 1][0] <= pts[i][0] - window_s:
            j += 1
        (t0, v0), (t1, v1) = pts[j], pts[i]
        if t1 > t0:
            out.append([t1, max(0.0, (v1 - v0) / (t1 - t0))])
    return {name: out} if out else {}


def _last_total(live: LiveHistory, metric: str) -> float:
    if not live.samples:
        return 0.0
    return sum(v for (_t, name, _l), v in live.samples[-1][1].items() if name == metric)


# -- HTTP ---------------------------------------------------------------------------------------

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Waku pipeline</title>
<style>
 body{font-family:sans-serif;margin:12px;background:#f6f7f9;color:#222}
 h1{font-size:18px;margin:0 0 4px} #status{font-size:12px;color:#555;margin-bottom:8px}
 .grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(440px,1fr));gap:10px}
 .panel{background:#fff;border:1px solid #ddd;border-radius:4px;padding:6px}
 .panel h2{font-size:13px;margin:0 0 4px} canvas{width:100%;height:200px;display:block}
 .legend{font-size:11px;line-height:1.5} .legend span{display:inline-block;margin-right:10px}
 .legend i{display:inline-block;width:10px;height:3px;margin-right:3px;vertical-align:middle}
 .up{color:#080} .down{color:#b00}
</style></head><body>
<h1>Waku pipeline</h1><div id="status">loading…</div><div class="grid" id="grid"></div>
<script>
const COLORS=["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#e377c2","#7f7f7f","#bcbd22","#17becf"];
function fmt(v){const a=Math.abs(v);if(a>=1e6)return (v/1e6).toFixed(1)+"M";if(a>=1e3)return (v/1e3).toFixed(1)+"k";
 if(a>=10||v===0)return v.toFixed(0);return v.toPrecision(2);}
function panelEl(p){let el=document.getElementById("panel-"+p.id);if(el)return el;
 el=document.createElement("div");el.className="panel";el.id="panel-"+p.id;el.dataset.panel=p.id;
 el.innerHTML='<h2></h2><canvas width="880" height="400"></canvas><div class="legend"></div>';
 el.querySelector("h2").textContent=p.title;document.getElementById("grid").appendChild(el);return el;}
function draw(p){const el=panelEl(p),c=el.querySelector("canvas"),g=c.getContext("2d"),W=c.width,H=c.height;
 const L=70,R=10,T=10,B=40;g.clearRect(0,0,W,H);g.font="20px sans-serif";g.fillStyle="#222";
 let pts=0,nonzero=0,t0=Infinity,t1=-Infinity,v1=0;
 for(const s of p.series)for(const [t,v] of s.points){pts++;if(v!==0)nonzero++;
  t0=Math.min(t0,t);t1=Math.max(t1,t);v1=Math.max(v1,v);}
 el.dataset.points=pts;el.dataset.nonzero=nonzero;el.dataset.series=p.series.length;
 if(!pts){g.fillText("no data yet",W/2-60,H/2);el.querySelector(".legend").textContent="";
  el.dataset.rendered="1";return;}
 if(t1<=t0){t0-=1;t1+=1;} if(v1<=0)v1=1; v1*=1.1;
 const x=t=>L+(t-t0)/(t1-t0)*(W-L-R), y=v=>H-B-(v/v1)*(H-T-B);
 g.strokeStyle="#ccc";g.lineWidth=1;
 for(let i=0;i<=4;i++){const yy=y(v1*i/4);g.beginPath();g.moveTo(L,yy);g.lineTo(W-R,yy);g.stroke();
  g.fillText(fmt(v1*i/4),4,yy+6);}
 for(let i=0;i<=4;i++){const t=t0+(t1-t0)*i/4,d=new Date(t*1000);
  g.fillText(d.toTimeString().slice(0,8),x(t)-40,H-12);}
 const leg=[];p.series.forEach((s,i)=>{const col=COLORS[i%COLORS.length];
  g.strokeStyle=col;g.fillStyle=col;g.lineWidth=2.5;g.beginPath();
  s.points.forEach(([t,v],j)=>{if(j)g.lineTo(x(t),y(v));else g.moveTo(x(t),y(v));});g.stroke();
  if(s.points.length===1){const [t,v]=s.points[0];g.fillRect(x(t)-3,y(v)-3,6,6);}
  const last=s.points[s.points.length-1][1];
  leg.push('<span><i style="background:'+col+'"></i>'+s.name.replace(/</g,"&lt;")+": "+fmt(last)+" "+p.unit+
   "</span>");});
 el.querySelector(".legend").innerHTML=leg.join("");el.dataset.rendered="1";}
async function refresh(){try{const r=await fetch("/api/data",{cache:"no-store"});const d=await r.json();
 d.panels.forEach(draw);
 const ts=Object.entries(d.targets)
  .map(([n,t])=>'<span class="'+(t.up?"up":"down")+'">'+n+(t.up?" up":" down")+"</span>").join(" · ");
 const tot=Object.entries(d.totals).map(([k,v])=>k+" "+fmt(v)).join(" · ");
 document.getElementById("status").innerHTML=
  "updated "+new Date(d.updated*1000).toTimeString().slice(0,8)+" · "+ts+" · bridge totals: "+tot;
 document.body.dataset.updated=d.updated;setTimeout(refresh,d.refresh_s*1000);}
 catch(e){document.getElementById("status").textContent="dashboard unreachable: "+e;setTimeout(refresh,2000);}}
refresh();
</script></body></html>
"""


def serve(dashboard: Dashboard, host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path in ("/", "/index.html"):
                body, kind = PAGE.encode(), "text/html; charset=utf-8"
            elif self.path.startswith("/api/data"):
                body, kind = json.dumps(dashboard.panels()).encode(), "application/json"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug(fmt, *args)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="dashboard-http", daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="waku-dashboard", description=__doc__.splitlines()[0])
    add_config_arguments(parser)
    parser.add_argument("--port", type=int, help="HTTP port (default dashboard.port; 0: any free port)")
    parser.add_argument("--duration", type=float, default=0, help="stop after this many seconds (0: until Ctrl-C)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = DashboardSettings.from_config(config_from_args(args))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    dashboard = Dashboard(settings)
    try:
        server = serve(dashboard, settings.host, settings.port if args.port is None else args.port)
    except OSError as exc:
        print(f"error: cannot serve on {settings.host}:{settings.port}: {exc.strerror}", file=sys.stderr)
        return 2
    host, port = server.server_address[:2]
    assert isinstance(host, str)  # an AF_INET address: (host, port)
    print(f"dashboard on http://{host}:{port}/", flush=True)
    log.info("reading %s and %s", settings.job_metrics, ", ".join(f"{n}={u}" for n, u in settings.targets.items()))
    collector = threading.Thread(target=dashboard.run, name="dashboard-collector", daemon=True)
    collector.start()
    began = time.monotonic()
    try:
        while not args.duration or time.monotonic() - began < args.duration:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        dashboard.stop()
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
