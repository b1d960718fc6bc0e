"""The bridge's Prometheus metrics (own registry, so several bridges can live in one process)
and the HTTP endpoint that serves them in the text format."""
from __future__ import annotations

import logging
from wsgiref.simple_server import WSGIServer

from libp2p.peer.id import ID
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from ingest.kafka_producer import ProducerStats
from ingest.relay.codec import Reject
from ingest.relay.gossipsub import RelayObserver

log = logging.getLogger("ingest.metrics")

DROP_REASONS = ("kafka_backlog", "kafka_rejected", "shutdown", "forward_queue_full", "subscription_full")
LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5,
                   0.75, 1.0, 2.0, 5.0, 10.0, 30.0)


class BridgeMetrics(RelayObserver):
    """received / accepted / rejected{reason} / produced / dropped{reason} and a few gauges."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.received = Counter("waku_bridge_received",
                                "Relay messages received on joined topics (duplicates included)", registry=r)
        self.duplicates = Counter("waku_bridge_duplicates", "Relay messages already seen (not produced again)",
                                  registry=r)
        self.accepted = Counter("waku_bridge_accepted", "Relay messages that passed validation", registry=r)
        self.rejected = Counter("waku_bridge_rejected", "Relay messages rejected, by reason", ["reason"], registry=r)
        self.produced = Counter("waku_bridge_produced", "Ingest records acknowledged by Kafka (acks=all)", registry=r)
        self.dropped = Counter("waku_bridge_dropped", "Messages dropped, by reason", ["reason"], registry=r)
        self.outstanding = Gauge("waku_bridge_kafka_outstanding",
                                 "Records handed to the producer, not yet acknowledged", registry=r)
        self.peers = Gauge("waku_bridge_relay_peers", "Peers with a relay stream", registry=r)
        self.streams_open = Gauge("waku_bridge_streams_open", "Inbound streams whose handler runs", registry=r)
        self.streams_refused = Counter("waku_bridge_streams_refused",
                                       "Inbound streams reset over a cap, by protocol and cap (peer, total)",
                                       ["protocol", "scope"], registry=r)
        self.stream_failures = Counter("waku_bridge_stream_failures",
                                       "Inbound streams whose handler ended in an error, by protocol "
                                       "and kind (network: the peer reset or left; handler: a bug)",
                                       ["protocol", "kind"], registry=r)
        self.thread_failures = Gauge("waku_bridge_thread_failures",
                                     "Times a background thread failed and was started again, by thread",
                                     ["thread"], registry=r)
        self.thread_alive = Gauge("waku_bridge_thread_alive", "1 while a background thread runs, by thread",
                                  ["thread"], registry=r)
        self.ack_latency = Histogram("waku_bridge_ack_latency_seconds",
                                     "From a message's arrival to Kafka's acknowledgement",
                                     buckets=LATENCY_BUCKETS, registry=r)
        for reason in Reject:
            self.rejected.labels(reason.value)
        for drop in DROP_REASONS:
            self.dropped.labels(drop)

    # RelayObserver
    def on_received(self, topic: str) -> None:
        self.received.inc()

    def on_duplicate(self, topic: str) -> None:
        self.duplicates.inc()

    def on_accepted(self, topic: str) -> None:
        self.accepted.inc()

    def on_rejected(self, reason: Reject) -> None:
        self.rejected.labels(reason.value).inc()

    def on_forward_dropped(self, peer_id: ID, count: int) -> None:
        self.dropped.labels("forward_queue_full").inc(count)

    def on_subscription_dropped(self, topic: str) -> None:
        self.dropped.labels("subscription_full").inc()

    def on_stream_refused(self, protocol: str, scope: str) -> None:
        self.streams_refused.labels(protocol, scope).inc()

    def on_stream_failed(self, protocol: str, kind: str) -> None:
        self.stream_failures.labels(protocol, kind).inc()

    def producer_stats(self) -> ProducerStats:
        return ProducerStats(
            produced=self.produced.inc,
            dropped=lambda reason, n: self.dropped.labels(reason).inc(n),
            ack_latency=self.ack_latency.observe,
            outstanding=self.outstanding.set,
        )

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value (tests, the benchmark); `name` as exposed, e.g. waku_bridge_produced_total."""
        v = self.registry.get_sample_value(name, labels or None)
        return 0.0 if v is None else v

    def serve(self, host: str, port: int) -> tuple[WSGIServer, int]:
        """Start the HTTP endpoint (a daemon thread); returns (server, bound port)."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        bound = server.server_address[1]
        log.info("metrics on http://%s:%d/metrics", host, bound)
        return server, bound
