"""A relay publisher: a small libp2p node that joins relay topics and publishes WakuMessages
(tests, the demo, benchmarks; CLI: ``waku-bridge publish``).

    async with Publisher().running([DEFAULT_PUBSUB_TOPIC]) as pub:
        await pub.connect("/ip4/127.0.0.1/tcp/60000/p2p/16Uiu2...")
        await pub.wait_for_mesh(DEFAULT_PUBSUB_TOPIC)
        await pub.publish(WakuMessage(payload=b"hi", content_topic="/app/1/chat/proto"))
"""
from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyPair
from libp2p.peer.peerinfo import PeerInfo
from libp2p.pubsub.pb import rpc_pb2
from libp2p.tools.anyio_service import background_trio_service

from core.message import Limits
from ingest.host import build_host, dial, listen_addrs
from ingest.relay.codec import DEFAULT_PUBSUB_TOPIC, RELAY_CODECS, relay_message_id
from ingest.relay.gossipsub import RelayPubsub, WakuRelayRouter, new_relay
from ingest.relay.validator import WakuMessageValidator
from ingest.settings import parse_peer
from schemas.waku_message_pb2 import WakuMessage


class Publisher:
    """A relay node that publishes; it validates its own messages as the bridge would."""

    def __init__(
        self,
        key_pair: KeyPair | None = None,
        *,
        listen_host: str = "127.0.0.1",
        limits: Limits = Limits(),
        protocols: Sequence[str] = RELAY_CODECS,
        muxers: Sequence[str] = ("yamux", "mplex"),
        out_rate_per_peer: float = 0.0,
    ) -> None:
        self.key_pair = key_pair or create_new_key_pair()
        # A websocket listener too, so that the host has the transport to dial /ws addresses.
        self.listen_addrs = listen_addrs(listen_host, 0, 0)
        self.host = build_host(self.key_pair, self.listen_addrs, muxers)
        self.router: WakuRelayRouter
        self.pubsub: RelayPubsub
        self.router, self.pubsub = new_relay(self.host, validator=WakuMessageValidator(limits),
                                             sink=self._count, protocols=protocols,
                                             out_rate_per_peer=out_rate_per_peer)
        self.received = 0  # messages relayed to us by others
        self.published = 0

    async def _count(self, *args: object) -> None:
        self.received += 1

    @asynccontextmanager
    async def running(self, pubsub_topics: Sequence[str] = (DEFAULT_PUBSUB_TOPIC,)) -> AsyncIterator[Publisher]:
        async with self.host.run(self.listen_addrs), background_trio_service(self.pubsub), \
                background_trio_service(self.router):
            await self.pubsub.wait_until_ready()
            for topic in pubsub_topics:
                await self.pubsub.join(topic)
            yield self

    async def connect(self, peer: str | PeerInfo, timeout: float = 10.0) -> None:
        info = parse_peer(peer) if isinstance(peer, str) else peer
        await dial(self.host, info, timeout)

    async def wait_for_mesh(self, pubsub_topic: str = DEFAULT_PUBSUB_TOPIC, peers: int = 1,
                            timeout: float = 10.0) -> None:
        """Until `peers` peers are in our mesh for the topic (so a publish reaches them)."""
        with trio.fail_after(timeout):
            while len(self.router.mesh.get(pubsub_topic, ())) < peers:
                await trio.sleep(0.02)

    async def publish(self, message: WakuMessage | bytes, pubsub_topic: str = DEFAULT_PUBSUB_TOPIC) -> bytes:
        """Publish a WakuMessage (or its encoding); returns the relay message id. Raises
        ValueError for a message the relay would reject."""
        data = message if isinstance(message, bytes) else message.SerializeToString()
        await self.pubsub.publish(pubsub_topic, data)
        self.published += 1
        return relay_message_id(data)

    async def publish_unchecked(self, msg: rpc_pb2.Message) -> None:
        """Send a pubsub message as is to our mesh peers, skipping our own validation: tests
        use it to send what a misbehaving peer would (signed, authored, oversized...)."""
        await self.pubsub.wait_outbound_room()
        self.router.forward(self.pubsub.my_id, msg, relay_message_id(msg.data))


def demo_message(i: int, content_topic: str = "/waku-pipeline/1/demo/proto", payload_size: int = 0,
                 text: str = "hello waku #{i}") -> WakuMessage:
    """Message number `i` of a publisher run: `payload_size` random bytes, else the text."""
    payload = os.urandom(payload_size) if payload_size > 0 else text.format(i=i).encode()
    return WakuMessage(payload=payload, content_topic=content_topic, timestamp=time.time_ns())
