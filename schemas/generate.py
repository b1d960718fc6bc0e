"""Regenerate the Python protobuf modules and the descriptor set from the .proto files.

    python -m schemas.generate           # rewrite schemas/*_pb2.py(i) and schemas/waku.desc
    python -m schemas.generate --check   # exit 1 if the committed files are stale

Uses the protoc bundled in the pinned grpcio-tools, so output is the same on every machine.
Proto files import each other as "schemas/<name>.proto" (the repo root is the proto path), so
the generated modules import each other as `schemas.<name>_pb2`.
"""
from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

SCHEMAS_DIR = Path(__file__).resolve().parent
REPO_ROOT = SCHEMAS_DIR.parent
DESCRIPTOR_SET = "waku.desc"


def proto_files() -> list[Path]:
    return sorted(SCHEMAS_DIR.glob("*.proto"))


def generated_names() -> list[str]:
    names = [DESCRIPTOR_SET]
    for proto in proto_files():
        names += [f"{proto.stem}_pb2.py", f"{proto.stem}_pb2.pyi"]
    return names


def generate(out_dir: Path) -> None:
    """Run protoc into out_dir (which receives a schemas/ subfolder and the descriptor set)."""
    from grpc_tools import protoc  # dev dependency: only needed to regenerate

    protos = [str(p.relative_to(REPO_ROOT)) for p in proto_files()]
    args = [
        "protoc",
        f"--proto_path={REPO_ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        "--include_imports",
        f"--descriptor_set_out={out_dir / 'schemas' / DESCRIPTOR_SET}",
        *protos,
    ]
    (out_dir / "schemas").mkdir(parents=True, exist_ok=True)
    if protoc.main(args) != 0:
        raise SystemExit("error: protoc failed on " + " ".join(protos))


def stale_files() -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh = Path(tmp) / "schemas"
        return [
            name
            for name in generated_names()
            if not (SCHEMAS_DIR / name).exists()
            or not filecmp.cmp(fresh / name, SCHEMAS_DIR / name, shallow=False)
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if generated files are stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        if stale:
            print("stale generated files (run `python -m schemas.generate`): " + ", ".join(stale))
            return 1
        print("generated files are up to date")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        for name in generated_names():
            (SCHEMAS_DIR / name).write_bytes((Path(tmp) / "schemas" / name).read_bytes())
    print(f"regenerated {len(generated_names())} files in {SCHEMAS_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
