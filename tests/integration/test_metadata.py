"""/vac/waku/metadata/1.0.0 between real libp2p hosts: the bridge answers with its cluster and
shards, asks every peer on connect, and disconnects a peer of another cluster."""
from __future__ import annotations

import multiaddr
import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerinfo import info_from_p2p_addr

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
                       "bridge.metrics_port=-1", "bridge.cluster_id=1", "rln.enabled=false", "bridge.pubsub_topics=",
                       "bridge.all_shards=true", "filter.enabled=false", "store_service.enabled=false"], environ={})
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


def self_signed(tmp_path) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 made at test time (PEM files)."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_file), str(key_file)


def test_wss_listener_and_announced_addresses(kafka, tmp_path):
    """A client dials the bridge over wss (a certificate made now) and talks metadata over it;
    the bridge advertises its announce addresses instead of its listen addresses."""
    import ssl

    from tests.conftest import free_port

    cert, key = self_signed(tmp_path)
    wss_port = free_port()
    announce = f"/dns4/node.example.org/tcp/443/wss,/ip4/127.0.0.1/tcp/{wss_port}/wss"
    cfg = load_config([f"kafka.bootstrap_servers={kafka}", f"bridge.key_file={tmp_path / 'key'}",
                       "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=-1",
                       f"bridge.wss_port={wss_port}", f"bridge.tls_cert_file={cert}", f"bridge.tls_key_file={key}",
                       f"bridge.announce={announce}", "bridge.metrics_port=-1", "bridge.cluster_id=1",
                       "rln.enabled=false",
                       "bridge.pubsub_topics=/waku/2/rs/1/4", "filter.enabled=false",
                       "store_service.enabled=false"], environ={})
    bridge = Bridge(BridgeSettings.from_config(cfg), out=open("/dev/null", "w"))
    client_tls = ssl.create_default_context()
    client_tls.check_hostname = False
    client_tls.verify_mode = ssl.CERT_NONE
    out: dict = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(bridge.run)
            out["advertised"] = [str(a).rsplit("/p2p/", 1)[0] for a in bridge.addrs]
            wss = next(a for a in bridge.addrs if "/ip4/127.0.0.1" in str(a))
            la = listen_addrs("127.0.0.1", 0, 0)
            host = build_host(create_new_key_pair(), la, tls_client=client_tls)
            svc = MetadataService(host, NodeShards(1, (4,)), check_peers=False)
            await nursery.start(_run_host, host, la, svc)
            info = info_from_p2p_addr(wss)
            await host.connect(info)
            out["answer"] = await svc.query(info.peer_id)
            bridge.stop()
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert out["advertised"] == announce.split(",")
    assert out["answer"] == (1, (4,))
