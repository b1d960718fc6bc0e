"""Every third-party package the code imports is declared in pyproject.toml: product code
(core, ingest, pipeline, jobs, tools, schemas) in `dependencies`, tests in those or the `dev`
extra. A package that only arrives as another's dependency today may vanish with its next
release."""
from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OURS = {"core", "ingest", "pipeline", "jobs", "tools", "schemas", "tests"}
PRODUCT = ("core", "ingest", "pipeline", "jobs", "tools", "schemas")
# Developer tools inside product packages: their imports belong to the `dev` extra.
DEV_TOOLS = {"schemas/generate.py"}
# ... and whole folders of them: the docker-less launcher of the community's interop suite (a
# pytest plugin run by hand).
DEV_TOOL_DIRS = ("tools/interop_suite/",)
# The project's own native extensions, built by scripts/setup.sh from native/<name> (not on PyPI).
NATIVE = {"waku_rln"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(*groups: str) -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for g in groups:
        reqs += project["optional-dependencies"][g]
    return {_norm(re.match(r"[A-Za-z0-9_.-]+", r).group(0)) for r in reqs}


def _imports(*dirs: str, dev: bool = False) -> dict[str, set[str]]:
    """Top-level module imported -> files importing it (absolute imports outside our packages
    and the standard library)."""
    found: dict[str, set[str]] = {}
    for d in dirs:
        for f in (REPO / d).rglob("*.py"):
            if any(part in {"node_modules", ".venv"} for part in f.parts):
                continue
            rel = str(f.relative_to(REPO))
            if (rel in DEV_TOOLS or rel.startswith(DEV_TOOL_DIRS)) != dev:
                continue
            for node in ast.walk(ast.parse(f.read_text(), str(f))):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for n in names:
                    top = n.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in OURS and (REPO / d / f"{top}.py") != f:
                        found.setdefault(top, set()).add(str(f.relative_to(REPO)))
    return found


def _undeclared(imports: dict[str, set[str]], declared: set[str]) -> list[str]:
    dists = md.packages_distributions()
    missing = []
    for module, files in sorted(imports.items()):
        if module in NATIVE and (REPO / "native" / module).is_dir():
            continue
        names = dists.get(module)
        if names is None:
            # A sibling module of the importing script (tests/benchmarks import each other).
            if all((REPO / f).with_name(f"{module}.py").exists() for f in files):
                continue
            missing.append(f"{module} (no installed distribution provides it; imported by {sorted(files)[0]})")
        elif not any(_norm(n) in declared for n in names):
            missing.append(f"{module} (distribution {names[0]}; imported by {sorted(files)[0]})")
    return missing


def test_product_imports_are_declared_dependencies():
    assert _undeclared(_imports(*PRODUCT), _declared()) == []


def test_test_and_tool_imports_are_declared():
    assert _undeclared(_imports("tests"), _declared("dev")) == []
    assert _undeclared(_imports(*PRODUCT, dev=True), _declared("dev")) == []
