"""ingest/p2p_patches.py: every replacement, override and relied-on piece of py-libp2p 0.8.1 has a
record whose fingerprint still matches the installed source (an upgrade fails here, naming the
records to re-read), every record names code of ours, every override of ours has a record, and
applying the patches again changes nothing."""
from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import pkgutil

from libp2p.crypto.secp256k1 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.stream_muxer.yamux.yamux import DEFAULT_WINDOW_SIZE, YamuxStream

import ingest
from ingest import p2p_patches
from ingest.host import build_host
from ingest.p2p_patches import OVERRIDDEN, REGISTRY, RELIED_ON, REPLACED, resolve


def test_libp2p_is_the_pinned_version():
    assert importlib.metadata.version("libp2p") == p2p_patches.LIBP2P_VERSION, (
        "ingest/p2p_patches.py's REGISTRY was taken from libp2p 0.8.1: re-read every record against the new version")


def test_every_fingerprint_matches_the_installed_libp2p():
    changed = p2p_patches.changed_upstream()
    assert not changed, "py-libp2p changed the code these were written against; re-read each, then update its " \
        "fingerprint in ingest/p2p_patches.py:\n" + "\n".join(
            f"  {r.kind}: {r.upstream} -> {r.ours} ({r.fixes})" for r in changed)


def test_every_record_names_code_of_ours_and_is_described():
    assert len({r.upstream for r in REGISTRY}) == len(REGISTRY), "one record per upstream symbol"
    for r in REGISTRY:
        assert r.kind in (REPLACED, OVERRIDDEN, RELIED_ON), r
        assert r.ours.startswith("ingest.") and resolve(r.ours) is not None, r
        assert len(r.fingerprint) == 12 and r.fixes and r.gain, r
        if r.kind == OVERRIDDEN:
            module, _, qualname = r.ours.partition(":")
            cls_name, _, method = qualname.rpartition(".")
            cls = resolve(f"{module}:{cls_name}")
            upstream_cls = resolve(r.upstream.rpartition(".")[0])
            assert issubclass(cls, upstream_cls) and method in vars(cls), r
            assert method == r.upstream.rpartition(".")[2], r


def test_apply_puts_every_class_level_replacement_in_place():
    p2p_patches.apply()
    p2p_patches.bound_receive_windows(DEFAULT_WINDOW_SIZE)
    for name in p2p_patches._ORIGINALS:
        record = next(r for r in REGISTRY if r.upstream == name)
        assert record.kind == REPLACED
        assert resolve(name) is resolve(record.ours), name


def _our_modules() -> list[str]:
    names = ["ingest"]
    for info in pkgutil.walk_packages(ingest.__path__, "ingest."):
        names.append(info.name)
    return names


def test_the_registry_lists_every_override_of_ours():
    """Every method a class of ours defines over a concrete one of a py-libp2p (or trio) base."""
    registered = {r.ours for r in REGISTRY if r.kind == OVERRIDDEN}
    missing = []
    for name in _our_modules():
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != name:
                continue
            upstream = [b for b in cls.__mro__[1:] if b.__module__.split(".")[0] in ("libp2p", "trio")]
            for attr, value in vars(cls).items():
                if not callable(value) or attr in ("__init_subclass__", "__class_getitem__"):
                    continue
                bases = [b for b in upstream if attr in vars(b)]
                if not bases or all(getattr(vars(b)[attr], "__isabstractmethod__", False) for b in bases):
                    continue
                if f"{name}:{cls.__qualname__}.{attr}" not in registered:
                    missing.append(f"{name}:{cls.__qualname__}.{attr}")
    assert not missing, f"overrides of py-libp2p without a record in ingest/p2p_patches.py: {missing}"


def test_applying_the_patches_twice_is_harmless():
    p2p_patches.apply()
    first = {name: resolve(name) for name in p2p_patches._ORIGINALS}
    p2p_patches.apply()
    assert {name: resolve(name) for name in p2p_patches._ORIGINALS} == first

    wrapped: list[str] = []

    def wrap(protocol, handler):
        wrapped.append(protocol)
        return handler

    host = build_host(create_new_key_pair(), [])
    before = set(host.get_mux().handlers)  # type: ignore[attr-defined]
    p2p_patches.apply(host, wrap)
    p2p_patches.apply(host, wrap)
    assert sorted(wrapped) == sorted(str(p) for p in before if p is not None)  # each existing handler once

    async def handler(stream) -> None: ...

    wrapped.clear()
    host.set_stream_handler(TProtocol("/test/1"), handler)
    assert wrapped == ["/test/1"]  # gated once, not once per apply
    assert host.get_network().auto_connector.maybe_connect is p2p_patches._no_auto_dials  # type: ignore[attr-defined]

    p2p_patches.bound_receive_windows(2 * DEFAULT_WINDOW_SIZE)
    p2p_patches.bound_receive_windows(DEFAULT_WINDOW_SIZE)
    assert YamuxStream._apply_autotune_epoch is p2p_patches._bounded_autotune
    assert p2p_patches._receive_window_limit == DEFAULT_WINDOW_SIZE  # the last call's bound


def _short(name: str) -> str:
    module, _, qualname = name.partition(":")
    return f"{module.rpartition('.')[2]}.{qualname}" if module.startswith("ingest.") else qualname


def registry_rows() -> list[str]:
    """docs/bridge.md's tables of the registry, row by row (How py-libp2p 0.8.1 was adapted)."""
    rows = []
    for r in REGISTRY:
        if r.kind == RELIED_ON:
            rows.append(f"| `{_short(r.upstream)}` | `{_short(r.ours)}` | {r.fixes} |")
        else:
            rows.append(f"| `{_short(r.upstream)}` | {r.kind} | `{_short(r.ours)}` | {r.fixes} | {r.gain} | "
                        f"{'yes' if r.upstream_worthy else ''} |")
    return rows


def test_docs_hold_the_registry_as_tables():
    from core.config import REPO_ROOT

    text = (REPO_ROOT / "docs" / "bridge.md").read_text()
    missing = [row for row in registry_rows() if row not in text]
    assert not missing, "docs/bridge.md (How py-libp2p 0.8.1 was adapted) lacks the rows:\n" + "\n".join(missing)
