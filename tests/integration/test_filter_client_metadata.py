"""Issue #68 N: the REST filter client's libp2p host (ingest/rest/server.answer_metadata)
answers /vac/waku/metadata/1.0.0 with the node's cluster and shards, as the bridge's main host
does, so that a service node of a cluster (go-waku, nwaku) that asks every connection keeps it.
Real hosts on loopback: the filter client's, and another one asking it as go-waku would."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import trio
from libp2p.crypto.secp256k1 import create_new_key_pair
from libp2p.peer.peerinfo import PeerInfo

from ingest.filter.client import FilterClient
from ingest.host import build_host, dial, listen_addrs
from ingest.metadata.protocol import NodeShards
from ingest.metadata.service import MetadataService
from ingest.rest.server import answer_metadata

pytestmark = pytest.mark.integration


def test_filter_client_host_answers_metadata():
    settings = SimpleNamespace(pubsub_topics=("/waku/2/rs/3/0", "/waku/2/rs/3/5"), cluster_id=3)
    out: dict = {}

    async def main() -> None:
        client = FilterClient()
        answer_metadata(client, SimpleNamespace(settings=settings))  # type: ignore[arg-type]
        asker = build_host(create_new_key_pair(), listen_addrs("127.0.0.1", 0, -1))
        with trio.fail_after(30):
            await serve_and_ask(client, asker)

    async def serve_and_ask(client: FilterClient, asker) -> None:
        async with client.running(), asker.run(listen_addrs("127.0.0.1", 0, -1)):
            await dial(asker, PeerInfo(client.peer_id, list(client.host.get_addrs())), 10)
            out["answer"] = await MetadataService(asker, NodeShards(3, (0,)), check_peers=False).query(client.peer_id)

    trio.run(main)
    assert out["answer"] == (3, (0, 5))
