"""nwaku's metric names beside ours, on the bridge's Prometheus endpoint, so that dashboards and
test suites written for nwaku (waku-interop-tests' tests/metrics) read the bridge: the node-level
families of nwaku v0.38.1 (`waku/node/waku_node.nim`, `peer_manager.nim`,
`node/kernel_api/relay.nim`) and nim-libp2p's peer and pubsub gauges. Values that are state
(peers, topics, mesh) are read from the bridge when scraped; the relay message counter and size
histogram are counted as messages are accepted (`on_relay_message`).

    nw = NwakuMetrics(registry, bridge)     # registers its collector
    nw.on_relay_message(len(data))          # in the relay sink
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

# nwaku's waku_histogram_message_size buckets, in kB (node/kernel_api/relay.nim)
MESSAGE_SIZE_BUCKETS_KB = (0.0, 1.0, 3.0, 5.0, 15.0, 50.0, 75.0, 100.0, 125.0, 150.0, 500.0, 700.0, 1000.0)
LIGHTPUSH_V2 = "/vac/waku/lightpush/2.0.0-beta1"
LIGHTPUSH_V3 = "/vac/waku/lightpush/3.0.0"
STORE_V3 = "/vac/waku/store-query/3.0.0"
FILTER_SUBSCRIBE = "/vac/waku/filter-subscribe/2.0.0-beta1"


class _State(Collector):
    """The gauges read from the bridge at each scrape (a bridge not started reads as zeros)."""

    def __init__(self, node: Any) -> None:
        self.node = node

    def describe(self) -> list[Any]:
        return []  # not checked for clashes: these names are nwaku's, none of ours

    def collect(self) -> Iterator[Any]:
        node = self.node
        host, pubsub, router = node.host, node.pubsub, node.router
        connected = stored = 0
        try:
            if host is not None:
                conns = host.get_network().connections
                connected = sum(1 for c in list(conns.values()) if c)
                stored = sum(1 for p in list(host.get_peerstore().peer_ids()) if p != host.get_id())
        except RuntimeError:  # changed while read from the metrics thread: next scrape
            pass
        topics = list(pubsub.topic_ids) if pubsub is not None else []
        yield _gauge("libp2p_peers", "total connected peers", connected)
        yield _gauge("libp2p_pubsub_peers", "pubsub peer instances", len(pubsub.peers) if pubsub else 0)
        yield _gauge("libp2p_pubsub_topics", "pubsub subscribed topics", len(topics))
        subs = CounterMetricFamily("libp2p_pubsub_subscriptions", "pubsub subscribed topics")
        subs.add_metric([], len(topics))
        yield subs
        mesh = GaugeMetricFamily("libp2p_gossipsub_peers_per_topic_mesh", "gossipsub peers per topic in mesh",
                                 labels=["topic"])
        in_mesh = 0
        if router is not None:
            try:
                in_mesh = sum(len(v) for v in list(router.mesh.values()))
            except RuntimeError:
                pass
        mesh.add_metric(["other"], in_mesh)  # nim-libp2p labels topics it does not know "other"
        yield mesh
        dials = CounterMetricFamily("libp2p_total_dial_attempts", "total attempted dials")
        dials.add_metric([], getattr(host, "waku_dial_attempts", 0) if host is not None else 0)
        yield dials
        yield _gauge("waku_peer_store_size", "Number of peers managed by the peer store", stored)
        service = GaugeMetricFamily("waku_service_peers", "Service peer protocol and multiaddress",
                                    labels=["protocol", "peerId"])
        settings = node.settings
        for protocols, addr in (((LIGHTPUSH_V2, LIGHTPUSH_V3), settings.lightpush_node),
                                ((STORE_V3,), settings.store_node),
                                ((FILTER_SUBSCRIBE,), settings.rest.filter_peer if settings.rest else "")):
            for protocol in protocols if addr else ():
                service.add_metric([protocol, addr], 1)
        yield service
        yield _gauge("waku_lightpush_peers", "number of lightpush peers", 1 if settings.lightpush_node else 0)
        yield _gauge("waku_store_peers", "number of store peers", 1 if settings.store_node else 0)
        yield _gauge("waku_filter_peers", "number of filter peers",
                     1 if settings.rest is not None and settings.rest.filter_peer else 0)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc)
    g.add_metric([], value)
    return g


class NwakuMetrics:
    def __init__(self, registry: CollectorRegistry, node: Any) -> None:
        self.messages = Counter("waku_node_messages", "number of messages received", ["type"], registry=registry)
        self.messages.labels("relay")
        self.message_size = Histogram("waku_histogram_message_size", "message size histogram in kB",
                                      buckets=MESSAGE_SIZE_BUCKETS_KB, registry=registry)
        registry.register(_State(node))

    def on_relay_message(self, size_bytes: int) -> None:
        self.messages.labels("relay").inc()
        self.message_size.observe(size_bytes / 1024)
