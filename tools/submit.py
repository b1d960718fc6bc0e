"""Build and run the spark-submit command line for a job (backs ./spark-submit.sh).

    ./spark-submit.sh <job> [spark-submit options] [job options]

Spark options (--master, --conf, --deploy-mode, --driver-memory, --executor-memory,
--executor-cores, --num-executors, --total-executor-cores, --name, --queue) go to
spark-submit; everything else goes to the job (for example --set warehouse.root=s3a://b/w).
The jars are the ones cached at set-up, so nothing is downloaded; on a non-local master the
pipeline's Python code is shipped as a zip with --py-files.
"""
from __future__ import annotations

import ast
import hashlib
import os
import re
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from core.config import REPO_ROOT, REPO_ROOT_ENV, Config, ConfigError, load_config
from core.spark_conf import SPARK_DEFAULTS, SUBMITTED_ENV, SparkSettings, master_defaults, spark_defaults

JOBS_DIR = REPO_ROOT / "jobs"
SPARK_VALUE_OPTIONS = {
    "--master", "--conf", "-c", "--deploy-mode", "--driver-memory", "--executor-memory",
    "--executor-cores", "--num-executors", "--total-executor-cores", "--name", "--queue",
    "--driver-cores",
}


def jobs() -> dict[str, str]:
    """Job name -> first line of its docstring."""
    out = {}
    for path in sorted(JOBS_DIR.glob("*.py")):
        if path.name.startswith("_"):
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        out[path.stem] = doc.splitlines()[0] if doc else ""
    return out


def usage() -> str:
    lines = ["usage: ./spark-submit.sh <job> [spark-submit options] [job options]", "", "jobs:"]
    lines += [f"  {name:<14} {desc}" for name, desc in jobs().items()]
    lines += ["", "spark-submit options passed through: " + " ".join(sorted(SPARK_VALUE_OPTIONS)),
              "job options: --config FILE, --set section.key=value (see README, Configuration)",
              "`./spark-submit.sh <job> --help` shows the job's own options."]
    return "\n".join(lines)


def split_args(args: list[str]) -> tuple[list[str], list[str]]:
    """Separate spark-submit options (normalised to `--opt value` pairs) from job options."""
    spark: list[str] = []
    job: list[str] = []
    it = iter(args)
    for arg in it:
        name, has_value, value = arg.partition("=")
        if name in SPARK_VALUE_OPTIONS:
            spark += [name, value if has_value else next(it, "")]
        else:
            job.append(arg)
    return spark, job


def option_value(args: list[str], name: str) -> str | None:
    """The value of the last `name value` pair in args, if any."""
    values = [args[i + 1] for i, a in enumerate(args[:-1]) if a == name]
    return values[-1] if values else None


ZIP_KEEP_S = 7 * 86400  # a zip not submitted for a week is deleted


def python_zip() -> Path:
    """The Spark side's Python packages (the jobs' library, the core, the generated schemas),
    zipped for executors on a cluster. Named by its content and written by rename: a driver
    that is running imports from its zip lazily, so a zip is never rewritten in place (jobs
    submitted together, or after the code changed, each get a complete one)."""
    files = sorted(path for package in ("pipeline", "core", "schemas") for path in (REPO_ROOT / package).rglob("*")
                   if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc")
    digest = hashlib.sha256()
    contents = []
    for path in files:
        data = path.read_bytes()
        name = str(path.relative_to(REPO_ROOT))
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
        contents.append((name, data))
    target = REPO_ROOT / ".cache" / "py-files" / f"waku-pipeline-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        os.utime(target)  # in use: kept by the pruning below
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    for old in target.parent.glob("waku-pipeline-*.zip"):  # zips of code a week old
        if time.time() - old.stat().st_mtime > ZIP_KEEP_S:
            old.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in contents:
                zf.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def spark_submit_binary() -> str:
    if os.environ.get("SPARK_HOME"):
        return str(Path(os.environ["SPARK_HOME"]) / "bin" / "spark-submit")
    local = Path(sys.executable).parent / "spark-submit"
    return str(local) if local.exists() else (shutil.which("spark-submit") or "spark-submit")


LIVE_BATCH_SLOTS = 2  # jobs/live.py: the store's and subscriptions' batches beside the filter's tasks


def local_slots_for(job: str, master: str, config: Config, realtime_flag: bool = False) -> str:
    """The filter job in real-time mode runs one long task per partition of the messages topic,
    all at once: a local master gets at least that many task slots (threads; they mostly wait on
    Kafka); the live job (all three queries) LIVE_BATCH_SLOTS more. Other jobs and masters are
    unchanged."""
    if job not in ("filter", "live") or not (realtime_flag or config.get("filter.trigger") == "realtime"):
        return master
    m = re.fullmatch(r"local\[(\d+)\]", master)
    need = int(config.get("topics.messages_partitions")) + (LIVE_BATCH_SLOTS if job == "live" else 0)
    slots = 1 if master == "local" else int(m.group(1)) if m else None
    if slots is not None and slots < need:
        return f"local[{need}]"
    return master


def local_driver_memory(job: str, master: str, config: Config) -> str | None:
    """The store job on a local master: its driver is also its executor and holds a whole
    micro-batch (the cache and the sort of the messages write); with Spark's 1 GiB default a
    250,000-record batch spills (docs/benchmarks.md). `store.local_driver_memory`; "" keeps
    Spark's default. The live job holds the store query too; other jobs and masters are unchanged."""
    if job not in ("store", "live") or not master.startswith("local"):
        return None
    return config.get("store.local_driver_memory") or None


# The setting whose JVM options are added to a job's driver (none for the other jobs).
DRIVER_JAVA_OPTIONS = {"store": "store.driver_java_options",
                       "subscriptions": "filter.subscriptions_driver_java_options"}


def driver_java_options(job: str, config: Config, spark: SparkSettings) -> str | None:
    """JVM options of a job's driver (`DRIVER_JAVA_OPTIONS`), appended to
    spark.driver.extraJavaOptions of [spark].options or conf/spark-defaults.conf. The
    subscriptions job runs C1 only: its batches are a few small MERGEs whose plans and generated
    classes are new each time, and C2 recompiling them cost ~2.6 of a warm batch's ~5.3 CPU-s (C1
    only: ~3.3). The store job compiles after 10x the usual calls: at a trickle C2 compiling its
    batches' planning code was half the job's CPU (docs/decisions.md). None for other jobs, or
    when the setting is empty."""
    extra = config.get(DRIVER_JAVA_OPTIONS[job]) if job in DRIVER_JAVA_OPTIONS else ""
    if not extra:
        return None
    key = "spark.driver.extraJavaOptions"
    base = spark.options.get(key, spark_defaults().get(key, ""))
    return f"{base} {extra}".strip()


def job_config(job_args: list[str]) -> Config:
    """The settings a job runs with: its `--config` file and `--set` overrides over the defaults."""
    overrides = [job_args[i + 1] for i, a in enumerate(job_args[:-1]) if a == "--set"]
    return load_config(overrides, option_value(job_args, "--config"))


# The setting of a job's CPU niceness (inherited by spark-submit's JVM and a local master's
# executors); the other jobs run as started.
NICE = {"maintain": "store.maintain_nice"}


def job_nice(job: str, args: list[str]) -> int:
    """The niceness a job asks for (`NICE`; 0 for the others), checked: 0-19."""
    if job not in NICE:
        return 0
    value = job_config(split_args(args)[1]).get(NICE[job])
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 19:
        raise ConfigError(f"{NICE[job]}: a niceness 0-19, got {value!r}")
    return value


def lower_priority(job: str, args: list[str]) -> None:
    """Raise this process's niceness to the job's (exec keeps it: the JVM and its children
    inherit it); never lowers it."""
    want = job_nice(job, args)
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if want > current:
        os.nice(want - current)


def command(job: str, args: list[str]) -> list[str]:
    if job not in jobs():
        raise ConfigError(f"unknown job {job!r}; jobs: {', '.join(jobs())}")
    spark_args, job_args = split_args(args)
    config = job_config(job_args)
    spark = SparkSettings.from_config(config)
    master = option_value(spark_args, "--master")
    cmd = [spark_submit_binary(), "--properties-file", str(SPARK_DEFAULTS)]
    if master is None:
        master = local_slots_for(job, spark.master, config, "--realtime" in job_args)
        cmd += ["--master", master]
    cmd += ["--jars", ",".join(spark.jars())]
    cmd += ["--conf", f"spark.sql.shuffle.partitions={spark.shuffle_partitions}"]
    cmd += ["--conf", "spark.log.level=WARN"]
    for key, value in {**master_defaults(master), **spark.options}.items():
        cmd += ["--conf", f"{key}={value}"]
    java_options = driver_java_options(job, config, spark)
    if java_options and option_value(spark_args, "--driver-java-options") is None:
        cmd += ["--conf", f"spark.driver.extraJavaOptions={java_options}"]
    memory = local_driver_memory(job, master, config)
    if memory and option_value(spark_args, "--driver-memory") is None and "spark.driver.memory" not in spark.options:
        cmd += ["--driver-memory", memory]
    if not master.startswith("local"):
        cmd += ["--py-files", str(python_zip())]
    cmd += spark_args
    cmd += [str(JOBS_DIR / f"{job}.py"), *job_args]
    return cmd


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    try:
        cmd = command(argv[0], argv[1:])
        lower_priority(argv[0], argv[1:])
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    env = dict(os.environ, **{SUBMITTED_ENV: "1", REPO_ROOT_ENV: str(REPO_ROOT)})
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    os.execvpe(cmd[0], cmd, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
