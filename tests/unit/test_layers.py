"""The layers of docs/architecture.md as contracts over the source: every `import` (at module
level, inside functions and under TYPE_CHECKING alike) is read with `ast` and checked against
what its package may import. A forbidden import fails the test with the file, the line and the
rule it breaks.
"""
from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass
from pathlib import Path

from core.config import REPO_ROOT

PROJECT = ("core", "schemas", "ingest", "pipeline", "jobs", "tools")


@dataclass(frozen=True)
class Rule:
    """Modules under `scope` may not import modules under any of `forbidden` (prefix match on
    dotted names)."""
    scope: str
    forbidden: tuple[str, ...]
    why: str


PROTOCOLS = ("relay", "store", "filter", "metadata", "lightpush", "discv5", "peer_exchange", "rln")

RULES: tuple[Rule, ...] = (
    # The shared core imports neither side, nor the tools.
    Rule("core", ("ingest", "pipeline", "jobs", "tools"), "the core is shared: it imports neither side"),
    Rule("core", ("pyspark", "delta", "libp2p", "trio", "deltalake"),
         "the core runs anywhere: no engine, no network stack"),
    Rule("schemas", ("core", "ingest", "pipeline", "jobs", "tools"), "generated wire types import nothing of ours"),
    # The two sides never import each other.
    Rule("ingest", ("pipeline", "jobs", "tools"), "the bridge does not import the Spark side or the tools"),
    Rule("pipeline", ("ingest", "jobs", "tools"), "the Spark side does not import the bridge or the tools"),
    Rule("jobs", ("ingest", "tools"), "jobs wire pipeline pieces only"),
    # Tools start the bridge and the jobs as processes, never by import.
    Rule("tools", ("ingest", "pipeline", "jobs"), "tools start the bridge and jobs as processes"),
    # Inside the Spark side: the platform is below the capabilities, and capabilities are apart.
    Rule("pipeline.spark", ("pipeline.store", "pipeline.filter"), "the Spark platform knows no capability"),
    Rule("pipeline.store", ("pipeline.filter",), "one package per capability"),
    Rule("pipeline.filter", ("pipeline.store",), "one package per capability"),
    # Inside the bridge: one package per protocol, assembled by the composition layer: ingest.node
    # (the libp2p node and its services) and ingest.rest (the REST API over those services, started
    # by the node). Composition points one way: node -> rest -> protocols.
    *(Rule(f"ingest.{p}",
           tuple(f"ingest.{q}" for q in PROTOCOLS if q != p) + ("ingest.node", "ingest.rest", "ingest.cli"),
           "protocols are apart; only the composition layer (ingest.node, ingest.rest) assembles them")
      for p in PROTOCOLS),
    Rule("ingest.rest", ("ingest.node", "ingest.cli"), "the node starts the REST API, never the other way"),
    # Kafka clients by role (docs/architecture.md): Spark's own Kafka source and sink on the Spark
    # side; librdkafka (confluent-kafka) on the bridge's hot paths and in tools; kafka-python for
    # the shared admin (core.kafka.ensure_topics), the load generator and the embedded broker.
    *(Rule(side, ("kafka", "confluent_kafka"), "the Spark side reads and writes Kafka through Spark's source and sink")
      for side in ("pipeline", "jobs")),
    Rule("core", ("confluent_kafka",),
         "core's Kafka helpers are kafka-python's; librdkafka is the bridge's hot-path client"),
    # Protocol handlers are pure functions: no service, no I/O.
    Rule("ingest.filter.protocol", ("ingest.filter.service", "ingest.filter.pusher", "trio", "libp2p", "kafka",
                                    "confluent_kafka"), "a protocol handler is a pure function"),
    Rule("ingest.store.protocol", ("ingest.store.server", "ingest.store.reader", "ingest.store.tail", "trio", "libp2p",
                                   "deltalake", "confluent_kafka"),
         "a protocol handler is a pure function"),
    Rule("ingest.metadata.protocol", ("ingest.metadata.service", "trio", "libp2p"),
         "a protocol handler is a pure function"),
    Rule("ingest.lightpush.protocol", ("ingest.lightpush.service", "trio", "libp2p", "kafka", "confluent_kafka"),
         "a protocol handler is a pure function"),
    Rule("ingest.peer_exchange.protocol", ("ingest.peer_exchange.service", "trio", "libp2p"),
         "a protocol handler is a pure function"),
    *(Rule(f"ingest.discv5.{m}", ("ingest.discv5.service", "trio", "libp2p", "socket"),
           "discv5's codec, protocol and routing table are pure: the service owns the socket and the loop")
      for m in ("codec", "protocol", "table")),
)


# The third-party libraries the core may import, and why each: core runs in every process (the
# bridge, Spark's driver and executors, the tools), so it carries only what every one of them
# already has and needs from the core. Each is imported inside the function that uses it, so that
# importing the core costs none of them.
CORE_THIRD_PARTY = {
    "google.protobuf": "the wire types (schemas/) the Kafka records hold",
    "kafka": "kafka-python's admin: ensure_topics, the one topic-creation helper of the bridge, the broker and tools",
    "pyarrow": "ObjectStoreSettings.arrow_filesystem: the one S3 file system of the bridge's reader and the tools",
}


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, imported module) of every import in the file, relative imports resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.append((node.lineno, base))
            # `from pkg import sub` may name a submodule: check pkg.sub too.
            out += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return out


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(root: Path) -> list[str]:
    found = []
    for top in PROJECT:
        for path in sorted((root / top).rglob("*.py")):
            if "__pycache__" in path.parts or path.name.endswith("_pb2.py"):
                continue
            module = module_name(root, path)
            for line, imported in imports_of(path, module):
                for rule in RULES:
                    if _under(module, rule.scope) and any(_under(imported, f) for f in rule.forbidden):
                        found.append(f"{path.relative_to(root)}:{line}: {module} imports {imported} ({rule.why})")
    return sorted(set(found))


def test_the_tree_keeps_its_layers():
    assert violations(REPO_ROOT) == []


def core_third_party(root: Path) -> list[str]:
    """Imports in core/ of a library neither ours nor the standard library's nor allowed by
    CORE_THIRD_PARTY, and allowed ones at module level (they belong inside their function)."""
    import sys

    found = []
    ours = set(PROJECT)
    for path in sorted((root / "core").rglob("*.py")):
        module = module_name(root, path)
        tree = ast.parse(path.read_text(), str(path))
        top_level = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in ours or top in sys.stdlib_module_names or top == "__future__":
                    continue
                allowed = next((a for a in CORE_THIRD_PARTY if _under(name, a) or _under(a, name)), None)
                if allowed is None:
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {module} imports {name} "
                                 "(not in CORE_THIRD_PARTY)")
                elif id(node) in top_level and top != "google":
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {module} imports {name} at module level")
    return found


def test_the_core_carries_only_its_named_libraries(tmp_path):
    assert core_third_party(REPO_ROOT) == []
    root = _copy_tree(tmp_path)
    topics = root / "core" / "topics.py"
    topics.write_text("import requests\nimport kafka\n" + topics.read_text())
    found = core_third_party(root)
    assert any("core.topics imports requests (not in CORE_THIRD_PARTY)" in v for v in found), found
    assert any("core.topics imports kafka at module level" in v for v in found), found


def _copy_tree(tmp_path: Path) -> Path:
    for top in PROJECT:
        shutil.copytree(REPO_ROOT / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_a_forbidden_import_fails(tmp_path):
    root = _copy_tree(tmp_path)
    (root / "ingest" / "store" / "server.py").write_text(
        (root / "ingest" / "store" / "server.py").read_text()
        + "\n\ndef _sneak():\n    from pipeline.store import tables  # noqa: F401\n")
    (root / "core" / "records.py").write_text((root / "core" / "records.py").read_text() + "\nimport ingest.node\n")
    (root / "pipeline" / "spark" / "kafka_io.py").write_text(
        "from ..store.settings import StoreJobSettings\n" + (root / "pipeline" / "spark" / "kafka_io.py").read_text())
    (root / "ingest" / "filter" / "protocol.py").write_text(
        (root / "ingest" / "filter" / "protocol.py").read_text() + "\nimport trio\n")
    found = violations(root)
    assert any("ingest.store.server imports pipeline.store" in v for v in found), found
    assert any("core.records imports ingest.node" in v for v in found), found
    assert any("pipeline.spark.kafka_io imports pipeline.store.settings" in v for v in found), found
    assert any("ingest.filter.protocol imports trio" in v for v in found), found


# Below the entry points, code takes typed settings: the whole Config is read only by the
# `from_config` builders, and by the entry points of processes (command lines, tools).
ENTRY_MODULES = ("ingest.cli", "ingest.store.cli", "ingest.filter.client", "ingest.rln.register", "tools",
                 "core.config")
CONFIG_READS = ("get", "path", "table_path", "checkpoint_path", "bootstrap_servers", "kafka_client_options",
                "spark_options", "uses_embedded_kafka", "push_topic")


def config_lookups(root: Path) -> list[str]:
    found = []
    for top in ("core", "ingest", "pipeline", "jobs"):
        for path in sorted((root / top).rglob("*.py")):
            module = module_name(root, path)
            if "__pycache__" in path.parts or any(_under(module, e) for e in ENTRY_MODULES):
                continue
            tree = ast.parse(path.read_text(), str(path))
            for fn in ast.walk(tree):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name == "from_config":
                    continue
                for node in ast.walk(fn):
                    target = None
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                            and node.func.attr in CONFIG_READS:
                        target = node.func.value
                    elif isinstance(node, ast.Subscript):
                        target = node.value
                    if isinstance(target, ast.Name) and target.id in ("config", "cfg"):
                        found.append(f"{path.relative_to(root)}:{node.lineno}: {module}.{fn.name} reads the Config")
    return sorted(set(found))


def test_no_string_lookups_below_the_entry_points(tmp_path):
    assert config_lookups(REPO_ROOT) == []
    root = _copy_tree(tmp_path)
    writer = root / "pipeline" / "store" / "writer.py"
    writer.write_text(writer.read_text() + '\n\ndef _window(config):\n    return config.get("store.dedup_window_s")\n')
    assert config_lookups(root) == [f"pipeline/store/writer.py:{len(writer.read_text().splitlines())}: "
                                    "pipeline.store.writer._window reads the Config"]
