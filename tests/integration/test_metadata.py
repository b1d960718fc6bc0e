"""/vac/waku/metadata/1.0.0 between real libp2p hosts: the bridge answers with its cluster and
shards, asks every peer on connect, and disconnects a peer of another cluster."""
from __future__ import annotations

import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerinfo import info_from_p2p_addr
import multiaddr

from core.config import load_config
from ingest.host import build_host, listen_addrs
from ingest.metadata.protocol import NodeShards
from ingest.metadata.service import MetadataService
from ingest.metrics import BridgeMetrics
from ingest.node import Bridge
from ingest.settings import BridgeSettings

pytestmark = pytest.mark.integration


def test_bridge_checks_clusters(kafka, tmp_path):
    cfg = load_config([f"kafka.bootstrap_servers={kafka}", f"bridge.key_file={tmp_path / 'key'}",
                       "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=-1",
                       "bridge.metrics_port=-1", "bridge.cluster_id=1", "bridge.pubsub_topics=", "bridge.all_shards=true",
                       "filter.enabled=false", "store_service.enabled=false"], environ={})
    metrics = BridgeMetrics()
    bridge = Bridge(BridgeSettings.from_config(cfg), metrics=metrics, out=open("/dev/null", "w"))
    outcome: dict = {}

    async def client(cluster: int, nursery) -> tuple[object, MetadataService]:
        la = listen_addrs("127.0.0.1", 0, -1)
        host = build_host(create_new_key_pair(), la)
        svc = MetadataService(host, NodeShards(cluster, (0,)), check_peers=False)
        await nursery.start(_run_host, host, la, svc)
        await host.connect(info_from_p2p_addr(multiaddr.Multiaddr(outcome["addr"])))
        return host, svc

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(bridge.run)
            outcome["addr"] = str(bridge.addrs[0])
            same, same_svc = await client(1, nursery)
            other, _ = await client(2, nursery)
            bridge_id = info_from_p2p_addr(multiaddr.Multiaddr(outcome["addr"])).peer_id
            outcome["answer"] = await same_svc.query(bridge_id)
            with trio.fail_after(20):
                while other.get_network().connections.get(bridge_id):
                    await trio.sleep(0.05)
            await trio.sleep(1.0)
            outcome["same_connected"] = bool(same.get_network().connections.get(bridge_id))
            bridge.stop()
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert outcome["answer"] == (1, tuple(range(8)))
    assert outcome["same_connected"]
    assert metrics.value("waku_metadata_disconnected_peers_total") == 1
    assert metrics.value("waku_metadata_peer_checks_total", outcome="same_cluster") == 1


async def _run_host(host, la, svc, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    async with host.run(la):
        async with trio.open_nursery() as nursery:
            await nursery.start(svc.run)
            task_status.started()
            await trio.sleep_forever()
