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
