"""The lightpush client (ingest/lightpush/client.py, issue #68 F) against real libp2p hosts on
loopback: a peer that speaks no lightpush is nwaku's dial failure; a peer that speaks only
2.0.0-beta1 (as go-waku v0.10.0) is pushed to over it when v3 is preferred, and the other way
round."""
from __future__ import annotations

import pytest
import trio
from libp2p.crypto.secp256k1 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.peerinfo import info_from_p2p_addr
from multiaddr import Multiaddr

from ingest.framing import FrameReader, frame
from ingest.host import build_host, dial, listen_addrs
from ingest.lightpush import codec
from ingest.lightpush.client import LightpushClient
from schemas import lightpush_pb2 as pb
from schemas.waku_message_pb2 import WakuMessage

pytestmark = pytest.mark.integration

MSG = WakuMessage(payload=b"x", content_topic="/app/1/chat/proto", timestamp=1)
TOPIC = "/waku/2/rs/1/0"


def test_no_lightpush_is_a_dial_failure_and_one_version_is_spoken():
    out: dict = {}

    async def only_v2(stream) -> None:
        rpc = pb.PushRPC.FromString(await FrameReader(stream, 1 << 20).read_frame())
        out["v2_topic"] = rpc.request.pubsub_topic
        await stream.write(frame(codec.v2_response(rpc.request_id, codec.SUCCESS)))
        await stream.close()

    async def only_v3(stream) -> None:
        req = pb.LightpushRequest.FromString(await FrameReader(stream, 1 << 20).read_frame())
        await stream.write(frame(codec.v3_response(req.request_id, codec.SUCCESS, relay_peers=2)))
        await stream.close()

    async def main() -> None:
        addrs = listen_addrs("127.0.0.1", 0, -1)
        plain, v2, v3 = (build_host(create_new_key_pair(), addrs) for _ in range(3))
        v2.set_stream_handler(TProtocol(codec.LIGHTPUSH_V2_CODEC), only_v2)
        v3.set_stream_handler(TProtocol(codec.LIGHTPUSH_V3_CODEC), only_v3)
        me = build_host(create_new_key_pair(), [])
        with trio.fail_after(60):
            async with plain.run(addrs), v2.run(addrs), v3.run(addrs), me.run([]):
                def client(h) -> LightpushClient:
                    return LightpushClient(me, f"{h.get_addrs()[0]}", timeout=5)
                out["plain"] = await client(plain).push(TOPIC, MSG, prefer="v3")
                out["v2"] = await client(v2).push(TOPIC, MSG, prefer="v3")
                out["v3"] = await client(v3).push(TOPIC, MSG, prefer="v2")
                out["down"] = await LightpushClient(me, f"/ip4/127.0.0.1/tcp/1/p2p/{plain.get_id()}",
                                                    timeout=5).push(TOPIC, MSG)

    trio.run(main)
    assert out["plain"].dial_failed and out["plain"].code == codec.NO_PEERS_TO_RELAY
    assert (out["v2"].ok, out["v2"].version, out["v2_topic"]) == (True, "v2", TOPIC)
    assert (out["v3"].ok, out["v3"].version, out["v3"].relay_peers) == (True, "v3", 2)
    assert out["down"].dial_failed


def test_a_stopped_service_node_is_a_dial_failure_at_once():
    """The suite's test_light_push_while_peer_is_paused (which stops the service node): nwaku's
    client answers `dial_failure` at once, its dial makes one attempt. Before, py-libp2p's three
    retries of a refused connection took ~0.7 s (seconds under load: the REST route's 5 s ran
    out first, `Push request timed out`)."""
    out: dict = {}

    async def only_v2(stream) -> None:
        rpc = pb.PushRPC.FromString(await FrameReader(stream, 1 << 20).read_frame())
        await stream.write(frame(codec.v2_response(rpc.request_id, codec.SUCCESS)))
        await stream.close()

    async def main() -> None:
        addrs = listen_addrs("127.0.0.1", 0, -1)
        me = build_host(create_new_key_pair(), [])
        with trio.fail_after(60):
            async with me.run([]):
                peer = build_host(create_new_key_pair(), addrs)
                peer.set_stream_handler(TProtocol(codec.LIGHTPUSH_V2_CODEC), only_v2)
                async with peer.run(addrs):
                    client = LightpushClient(me, f"{peer.get_addrs()[0]}", timeout=5)
                    out["up"] = await client.push(TOPIC, MSG, prefer="v2")
                await trio.sleep(0.2)
                start = trio.current_time()
                out["stopped"] = await client.push(TOPIC, MSG, prefer="v2")
                out["stopped_s"] = trio.current_time() - start
                start = trio.current_time()
                out["never"] = await LightpushClient(me, f"/ip4/127.0.0.1/tcp/1/p2p/{peer.get_id()}",
                                                     timeout=5).push(TOPIC, MSG, prefer="v2")
                out["never_s"] = trio.current_time() - start
                retries = me.get_network().retry_config.max_retries  # type: ignore[attr-defined]
                out["retries_after"] = retries

    trio.run(main)
    assert out["up"].ok
    assert out["stopped"].dial_failed and out["never"].dial_failed
    assert out["stopped_s"] < 0.35 and out["never_s"] < 0.35, out
    assert out["retries_after"] == 3  # the swarm's own setting is back for other dials


def test_a_dial_of_the_same_peer_hanging_elsewhere_is_not_waited_for():
    """The suite's stopped service node, as it went under the suite: the bridge's discv5 loop
    was dialling that node while it shut down (a connection accepted and never answered) and
    py-libp2p makes a second dial of a peer wait for the one in flight: the lightpush client
    waited past the REST route's 5 s (`Push request timed out`). Its own single attempt at
    the (now refused) address answers dial_failure at once."""
    out: dict = {}

    async def main() -> None:
        me = build_host(create_new_key_pair(), [])
        silent = trio.socket.socket()
        await silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # accepts (the kernel does) and never answers: a node shutting down
        silent_port = silent.getsockname()[1]
        peer_id = build_host(create_new_key_pair(), []).get_id()
        with trio.fail_after(60):
            async with me.run([]), trio.open_nursery() as nursery:
                async def elsewhere() -> None:
                    try:
                        await dial(me, info_from_p2p_addr(Multiaddr(f"/ip4/127.0.0.1/tcp/{silent_port}/p2p/{peer_id}")),
                                   30)
                    except Exception:  # noqa: BLE001 - it fails or hangs: not what is measured
                        pass
                nursery.start_soon(elsewhere)
                await trio.sleep(0.3)
                start = trio.current_time()
                out["result"] = await LightpushClient(me, f"/ip4/127.0.0.1/tcp/1/p2p/{peer_id}",
                                                      timeout=5).push(TOPIC, MSG, prefer="v2")
                out["seconds"] = trio.current_time() - start
                nursery.cancel_scope.cancel()
        silent.close()

    trio.run(main)
    assert out["result"].dial_failed
    assert out["seconds"] < 1.0, out
