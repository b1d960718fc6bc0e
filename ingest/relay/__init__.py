"""11/WAKU2-RELAY on py-libp2p gossipsub: codec (message id, WakuMessage validation), the topic
validator, and the adapted gossipsub router and pubsub (see docs/bridge.md)."""
from ingest.relay.codec import (
    DEFAULT_PUBSUB_TOPIC,
    RELAY_CODEC,
    RELAY_CODEC_BETA2,
    RELAY_CODECS,
    Reject,
    relay_message_id,
)

__all__ = [
    "DEFAULT_PUBSUB_TOPIC", "RELAY_CODEC", "RELAY_CODEC_BETA2", "RELAY_CODECS", "Reject",
    "relay_message_id",
]
