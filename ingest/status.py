"""The one status text of every request/response protocol the bridge answers (filter, store v3,
lightpush): nwaku's form, the status name, then the cause ("BAD_REQUEST: too many content
topics"). Each protocol keeps its own table of names."""
from __future__ import annotations

from collections.abc import Mapping


def status_desc(names: Mapping[int, str], code: int, detail: str = "") -> str:
    name = names.get(code, str(code))
    return f"{name}: {detail}" if detail else name
