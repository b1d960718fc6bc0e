"""The bridge's settings, read from the one configuration (section [bridge], plus kafka.*,
topics.messages and limits.*) and checked, with ConfigError one-liners for bad values."""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import multiaddr
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr

from core.config import Config, ConfigError
from core.kafka import unknown_to_kafka_python
from core.topics import check_pubsub_topic, shard_topic, static_shard
from ingest.discv5.settings import Discv5Settings
from ingest.enr import EnrError, decode_text
from ingest.filter.settings import FilterSettings
from ingest.host import StreamLimits
from ingest.identity import IdentityError, key_from_hex
from ingest.metadata.protocol import NodeShards
from ingest.relay.codec import Limits
from ingest.rest.settings import RestSettings
from ingest.rln.settings import RlnSettings
from ingest.store.server import StoreServiceSettings


@dataclass(frozen=True)
class BridgeSettings:
    key_file: str
    listen_host: str
    tcp_port: int
    ws_port: int
    wss_port: int
    tls_cert_file: str
    tls_key_file: str
    announce: tuple[multiaddr.Multiaddr, ...]
    static_peers: tuple[PeerInfo, ...]
    redial_interval_s: float
    pubsub_topics: tuple[str, ...]
    cluster_id: int
    num_shards_in_cluster: int
    metrics_host: str
    metrics_port: int
    bootstrap_servers: str
    client_options: dict[str, str]
    messages_topic: str
    limits: Limits
    producer_max_outstanding: int
    backpressure_timeout_s: float
    producer_linger_ms: int
    producer_delivery_timeout_s: float
    shutdown_timeout_s: float
    max_rpc_bytes: int
    relay_max_messages_per_rpc: int
    relay_out_rate_per_peer: float
    relay_out_burst_per_peer: int
    relay_receive_window_bytes: int
    lightpush_enabled: bool
    lightpush_timeout_s: float
    lightpush_per_peer_per_s: float
    stream_limits: StreamLimits = StreamLimits()
    max_connections: int = 1200  # libp2p connections at once (nwaku's --max-connections)
    peer_store_capacity: int = 2400  # peers the peer store keeps (nwaku's --peer-store-capacity)
    store: StoreServiceSettings | None = None  # the store service ([store_service]); None: off
    filter: FilterSettings | None = None  # the filter service ([filter]); None: off
    rest: RestSettings | None = None  # the REST API ([rest]); None: off
    nodekey: str = ""  # a secp256k1 key, hex (nwaku's --nodekey), used instead of key_file
    enr_udp_port: int | None = None  # the ENR's udp field; None: none
    static_enrs: tuple[bytes, ...] = ()  # the records of static peers given as enr:...
    peer_exchange_enabled: bool = True
    peer_exchange_per_s: float = 5.0
    discv5: Discv5Settings | None = None  # discv5 (bridge.discv5_port >= 0); None: off
    rln: RlnSettings | None = None  # RLN-v2 relay ([rln]); None: off
    relay: bool = True  # bridge.relay (nwaku's --relay): false, no gossipsub topic joined
    lightpush_node: str = ""  # bridge.lightpush_node (nwaku's --lightpushnode); "": serve lightpush ourselves
    store_node: str = ""  # bridge.store_node (nwaku's --storenode); "": none

    @classmethod
    def from_config(cls, config: Config) -> BridgeSettings:
        b = config["bridge"]
        for key in ("tcp_port",):
            _port(f"bridge.{key}", b[key], allow_off=False)
        for key in ("ws_port", "wss_port", "metrics_port"):
            _port(f"bridge.{key}", b[key], allow_off=True)
        if b["wss_port"] >= 0:
            for key in ("tls_cert_file", "tls_key_file"):
                if not b[key]:
                    raise ConfigError(f"bridge.{key}: needed for the wss listener (bridge.wss_port = {b['wss_port']})")
                if not os.path.isfile(config.path(f"bridge.{key}")):
                    raise ConfigError(f"bridge.{key}: no such file: {config.path(f'bridge.{key}')}")
        cluster, n_shards = b["cluster_id"], b["num_shards_in_cluster"]
        if not 0 <= cluster <= 65535:
            raise ConfigError(f"bridge.cluster_id: expected 0-65535, got {cluster}")
        if not 1 <= n_shards <= 1024:
            raise ConfigError(f"bridge.num_shards_in_cluster: expected 1-1024, got {n_shards}")
        topics = tuple(b["pubsub_topics"])
        if b["all_shards"]:
            topics += tuple(t for t in (shard_topic(cluster, s) for s in range(n_shards)) if t not in topics)
        if not topics:
            raise ConfigError("bridge.pubsub_topics: expected at least one pubsub topic (or bridge.all_shards = true)")
        for topic in topics:
            why = check_pubsub_topic(topic)
            if why:
                raise ConfigError(f"bridge.pubsub_topics: {why}")
            shard = static_shard(topic)
            if cluster and shard is not None and shard[0] != cluster:
                raise ConfigError(f"bridge.pubsub_topics: {topic} is not a shard of bridge.cluster_id {cluster}")
        peers = tuple(parse_peer(p, "bridge.static_peers") for p in b["static_peers"])
        service_nodes = service_peers(b)
        static_enrs = tuple(decode_text(p).raw for p in b["static_peers"] if p.strip().startswith("enr:"))
        if b["nodekey"]:
            try:
                key_from_hex(b["nodekey"])
            except IdentityError as exc:
                raise ConfigError(f"bridge.nodekey: {exc}") from None
        _port("bridge.enr_udp_port", b["enr_udp_port"], allow_off=True)
        _port("bridge.discv5_port", b["discv5_port"], allow_off=True)
        discv5 = Discv5Settings.from_config(config) if b["discv5_port"] >= 0 else None
        for key in ("producer_max_outstanding", "max_rpc_bytes", "relay_max_messages_per_rpc",
                    "max_streams_per_peer", "max_streams_total", "max_connections", "peer_store_capacity"):
            if b[key] < 1:
                raise ConfigError(f"bridge.{key}: expected at least 1, got {b[key]}")
        for key in ("redial_interval_s", "backpressure_timeout_s", "producer_delivery_timeout_s", "shutdown_timeout_s",
                    "lightpush_timeout_s"):
            if b[key] <= 0:
                raise ConfigError(f"bridge.{key}: expected a positive number of seconds, got {b[key]}")
        if b["relay_receive_window_bytes"] < 256 * 1024:
            raise ConfigError(f"bridge.relay_receive_window_bytes: expected at least 262144 (yamux's initial "
                              f"window), got {b['relay_receive_window_bytes']}")
        if b["producer_linger_ms"] < 0:
            raise ConfigError(f"bridge.producer_linger_ms: expected 0 or more, got {b['producer_linger_ms']}")
        limits = Limits.from_config(config)
        if b["max_rpc_bytes"] <= limits.max_message_bytes:
            raise ConfigError(f"bridge.max_rpc_bytes: must exceed limits.max_message_bytes "
                              f"({limits.max_message_bytes}), got {b['max_rpc_bytes']}")
        client_options = config.kafka_client_options()
        unknown = unknown_to_kafka_python(client_options)
        if unknown:  # kafka-python would refuse them at its first connection, looking like Kafka down
            raise ConfigError(f"kafka.client_options: the bridge's Kafka client (kafka-python) has no setting "
                              f"{', '.join(unknown)}")
        return cls(
            key_file=config.path("bridge.key_file"),
            listen_host=b["listen_host"],
            tcp_port=b["tcp_port"],
            ws_port=b["ws_port"],
            wss_port=b["wss_port"],
            tls_cert_file=config.path("bridge.tls_cert_file") if b["tls_cert_file"] else "",
            tls_key_file=config.path("bridge.tls_key_file") if b["tls_key_file"] else "",
            announce=tuple(_multiaddr(a, "bridge.announce") for a in b["announce"]),
            static_peers=peers,
            redial_interval_s=b["redial_interval_s"],
            pubsub_topics=topics,
            cluster_id=cluster,
            num_shards_in_cluster=n_shards,
            metrics_host=b["metrics_host"],
            metrics_port=b["metrics_port"],
            bootstrap_servers=config.bootstrap_servers(),
            client_options=client_options,
            messages_topic=config.get("topics.messages"),
            limits=limits,
            producer_max_outstanding=b["producer_max_outstanding"],
            backpressure_timeout_s=b["backpressure_timeout_s"],
            producer_linger_ms=b["producer_linger_ms"],
            producer_delivery_timeout_s=b["producer_delivery_timeout_s"],
            shutdown_timeout_s=b["shutdown_timeout_s"],
            max_rpc_bytes=b["max_rpc_bytes"],
            relay_max_messages_per_rpc=b["relay_max_messages_per_rpc"],
            relay_out_rate_per_peer=max(0.0, b["relay_out_rate_per_peer"]),
            relay_out_burst_per_peer=max(1, b["relay_out_burst_per_peer"]),
            relay_receive_window_bytes=b["relay_receive_window_bytes"],
            lightpush_enabled=b["lightpush_enabled"],
            lightpush_timeout_s=b["lightpush_timeout_s"],
            lightpush_per_peer_per_s=max(0.0, b["lightpush_per_peer_per_s"]),
            stream_limits=StreamLimits(per_peer=b["max_streams_per_peer"], total=b["max_streams_total"]),
            max_connections=b["max_connections"],
            # never below the connections it may hold: a connected peer past the store's capacity
            # loses its key and its identify fails (py-libp2p drops it)
            peer_store_capacity=max(b["peer_store_capacity"], b["max_connections"]),
            store=StoreServiceSettings.from_config(config) if config.get("store_service.enabled") else None,
            filter=FilterSettings.from_config(config, topics[0], topics) if config.get("filter.enabled") else None,
            rest=RestSettings.from_config(config) if config.get("rest.enabled") else None,
            nodekey=b["nodekey"],
            enr_udp_port=b["enr_udp_port"] if b["enr_udp_port"] >= 0 else None,
            static_enrs=static_enrs,
            peer_exchange_enabled=b["peer_exchange_enabled"],
            peer_exchange_per_s=max(0.0, b["peer_exchange_per_s"]),
            discv5=discv5,
            rln=RlnSettings.from_config(config, cluster),
            **service_nodes,
        )


def service_peers(b: Mapping[str, Any]) -> dict[str, Any]:
    """bridge.relay, bridge.lightpush_node and bridge.store_node (nwaku's --relay, --lightpushnode,
    --storenode), checked: each node a multiaddr ending in /p2p/<peer id> (or an ENR), "" none."""
    out: dict[str, Any] = {"relay": bool(b.get("relay", True))}
    for key in ("lightpush_node", "store_node"):
        text = str(b.get(key, "") or "").strip()
        if text:
            parse_peer(text, f"bridge.{key}")
        out[key] = text
    return out


def node_shards(settings: BridgeSettings) -> NodeShards:
    """What the metadata protocol announces: the cluster and the shards of the joined topics."""
    shards = tuple(sorted({s for t in settings.pubsub_topics if (cs := static_shard(t)) is not None
                           and cs[0] == settings.cluster_id for s in [cs[1]]}))
    return NodeShards(settings.cluster_id, shards)


def _multiaddr(text: str, key: str) -> multiaddr.Multiaddr:
    try:
        return multiaddr.Multiaddr(text)
    except Exception as exc:  # noqa: BLE001 - multiaddr raises many types
        raise ConfigError(f"{key}: {text!r} is not a multiaddr ({exc})") from None


def _port(key: str, value: int, allow_off: bool) -> None:
    low = -1 if allow_off else 0
    if not low <= value <= 65535:
        extra = " (-1: off)" if allow_off else ""
        raise ConfigError(f"{key}: expected a port 0-65535{extra}, got {value}")


def parse_peer(text: str, key: str = "peer") -> PeerInfo:
    """A multiaddr with /p2p/<peer id>, or an ENR (enr:...), as PeerInfo, or ConfigError."""
    if text.strip().startswith("enr:"):
        try:
            info = decode_text(text).peer_info()
        except EnrError as exc:
            raise ConfigError(f"{key}: not a valid ENR ({exc})") from None
        if not info.addrs:
            raise ConfigError(f"{key}: the ENR has no address to dial (no ip/tcp, no multiaddrs)")
        return info
    try:
        return info_from_p2p_addr(multiaddr.Multiaddr(text))
    except Exception as exc:  # noqa: BLE001 - multiaddr raises many types
        raise ConfigError(f"{key}: {text!r} is not a multiaddr ending in /p2p/<peer id> ({exc})") from None
