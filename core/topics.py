"""Pubsub topics of the Waku message model: the default topic and static shards
`/waku/2/rs/<cluster>/<shard>`; shared by the bridge's settings, its relay and its clients."""
from __future__ import annotations

import re

DEFAULT_PUBSUB_TOPIC = "/waku/2/default-waku/proto"
_STATIC_SHARD = re.compile(r"^/waku/2/rs/(\d{1,5})/(\d{1,4})$")


def check_pubsub_topic(topic: str) -> str | None:
    """None when `topic` is the default topic or a static shard `/waku/2/rs/<cluster>/<shard>`
    (cluster 0-65535, shard 0-1023); otherwise a one-line reason."""
    if topic == DEFAULT_PUBSUB_TOPIC:
        return None
    m = _STATIC_SHARD.match(topic)
    if not m:
        return f"{topic!r} is neither {DEFAULT_PUBSUB_TOPIC} nor /waku/2/rs/<cluster>/<shard>"
    cluster, shard = int(m.group(1)), int(m.group(2))
    if cluster > 65535 or shard > 1023:
        return f"{topic!r}: cluster must be 0-65535 and shard 0-1023"
    return None


_STATIC_SHARD_ANY = re.compile(r"^/waku/2/rs/(\d+)/(\d+)$")


def static_shard(topic: str) -> tuple[int, int] | None:
    """(cluster, shard) of a static-shard pubsub topic, None for any other topic."""
    m = _STATIC_SHARD_ANY.match(topic)
    return (int(m.group(1)), int(m.group(2))) if m else None


def shard_topic(cluster: int, shard: int) -> str:
    return f"/waku/2/rs/{cluster}/{shard}"


def content_topic_parts(content_topic: str) -> tuple[int, str, str, str, str] | None:
    """(generation, application, version, name, encoding) of a 23/WAKU2-TOPICS content topic
    `/app/version/name/encoding` or `/generation/app/version/name/encoding`; None when the
    topic does not have that form (it then cannot be autosharded)."""
    parts = content_topic.split("/")
    if len(parts) == 5 and parts[0] == "":
        gen, rest = 0, parts[1:]
    elif len(parts) == 6 and parts[0] == "" and parts[1].isdigit():
        gen, rest = int(parts[1]), parts[2:]
    else:
        return None
    if any(not p for p in rest):
        return None
    app, version, name, encoding = rest
    return gen, app, version, name, encoding


def autoshard(content_topic: str, shards_in_cluster: int) -> int | None:
    """The shard a content topic maps to under autosharding, as nwaku, go-waku and js-waku
    compute it: the last 8 bytes of sha256(application || version), big-endian, modulo the
    number of shards in the cluster. None for a topic that is not a 23/WAKU2-TOPICS content
    topic of generation 0."""
    import hashlib

    parts = content_topic_parts(content_topic)
    if parts is None or parts[0] != 0 or shards_in_cluster < 1:
        return None
    digest = hashlib.sha256((parts[1] + parts[2]).encode()).digest()
    return int.from_bytes(digest[24:], "big") % shards_in_cluster
