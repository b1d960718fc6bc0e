"""A filter client: subscribes to one service node, keeps the subscription alive with pings,
receives pushes and checks each one: it must come from the node subscribed to (the stream's
authenticated peer id) and match the client's criteria; anything else is counted as rejected.

    client = FilterClient()
    async with client.running():
        await client.connect("/ip4/127.0.0.1/tcp/60000/p2p/16Uiu2...")
        resp = await client.subscribe(pubsub_topic, ["/app/1/chat/proto"])   # status_code 200
        async for push in client.pushes():  # Push(pubsub_topic, message, protocol)
            ...

``legacy=True`` speaks v00 instead (FilterRPC subscribe / unsubscribe; no answers).
"""
from __future__ import annotations

import argparse
import logging
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio
from libp2p.abc import INetStream
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyPair
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo

from ingest.filter.codec import (
    FILTER_PUSH_CODEC,
    FILTER_SUBSCRIBE_CODEC,
    FILTER_V00_CODEC,
    MAX_PUSH_BYTES,
    MAX_REQUEST_BYTES,
    TOO_MANY_REQUESTS,
)
from ingest.framing import frame, read_frame
from ingest.host import build_host, dial, forget_closed, listen_addrs
from ingest.settings import parse_peer
from schemas import filter_v00_pb2 as f00
from schemas import filter_v2_pb2 as fv2
from schemas.waku_message_pb2 import WakuMessage

log = logging.getLogger("ingest.filter.client")
Req = fv2.FilterSubscribeRequest


@dataclass
class Push:
    pubsub_topic: str
    message: WakuMessage
    protocol: str          # "v2" or "v00"
    request_id: str = ""   # v00: the subscribing request's id
    received: float = 0.0  # trio.current_time() on arrival


class FilterClient:
    def __init__(self, key_pair: KeyPair | None = None, *, listen_host: str = "127.0.0.1",
                 muxers: Sequence[str] = ("yamux", "mplex"), push_buffer: int = 100_000) -> None:
        self.key_pair = key_pair or create_new_key_pair()
        self.listen_addrs = listen_addrs(listen_host, 0, -1)
        self.host = build_host(self.key_pair, self.listen_addrs, muxers)
        self.peer_id = self.host.get_id()
        self.service: ID | None = None
        # Criteria subscribed to: (pubsub topic, content topic) -> v00 request id ("" for v2).
        self.criteria: dict[tuple[str, str], str] = {}
        self.rejected = 0
        self._send, self._recv = trio.open_memory_channel(push_buffer)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[FilterClient]:
        self.host.set_stream_handler(TProtocol(FILTER_PUSH_CODEC), self._on_push)
        self.host.set_stream_handler(TProtocol(FILTER_V00_CODEC), self._on_v00_push)
        async with self.host.run(self.listen_addrs):
            yield self

    async def connect(self, peer: str | PeerInfo, timeout: float = 10.0) -> None:
        info = parse_peer(peer) if isinstance(peer, str) else peer
        await dial(self.host, info, timeout)
        self.service = info.peer_id

    async def connect_and_subscribe(self, peer: str | PeerInfo, pubsub_topic: str, content_topics: Sequence[str],
                                    attempts: int = 5, timeout: float = 30.0) -> fv2.FilterSubscribeResponse:
        """Connect and subscribe, trying again (backoff 1 s, 2 s, ...) on a failed dial, a
        stream error or a non-200 answer, each logged in one line; the 200 answer, else
        RuntimeError after `attempts`."""
        for attempt in range(attempts):
            try:
                await self.connect(peer, timeout=timeout)
                resp = await self.subscribe(pubsub_topic, content_topics, timeout=timeout)
                assert resp is not None  # a request with an id is answered
                if resp.status_code == 200:
                    return resp
                log.warning("filter: subscribe answered %d %s (attempt %d)", resp.status_code, resp.status_desc,
                            attempt + 1)
            except Exception as exc:  # noqa: BLE001 - a dial or stream failure: try again
                log.warning("filter: connect/subscribe failed (attempt %d): %s: %s", attempt + 1,
                            type(exc).__name__, exc)
            await trio.sleep(1 + attempt)
        raise RuntimeError(f"could not subscribe to {list(content_topics)} after {attempts} attempts")

    def forget_closed(self, peer_id: ID) -> int:
        """Drop connections to `peer_id` that are closed but still listed (see ingest.host.dial)."""
        return forget_closed(self.host, peer_id)

    # -- v2 requests --------------------------------------------------------------------------

    async def request(self, kind: Req.FilterSubscribeType, pubsub_topic: str | None = None,
                      content_topics: Sequence[str] = (), request_id: str | None = None,
                      timeout: float = 10.0) -> fv2.FilterSubscribeResponse | None:
        """Send one FilterSubscribeRequest; the response (None when request_id is "": no answer
        is expected; waits up to 1 s to check that none comes)."""
        assert self.service is not None, "connect() first"
        rid = uuid.uuid4().hex if request_id is None else request_id
        req = Req(request_id=rid, filter_subscribe_type=kind, content_topics=list(content_topics))
        if pubsub_topic is not None:
            req.pubsub_topic = pubsub_topic
        stream = await self.host.new_stream(self.service, [TProtocol(FILTER_SUBSCRIBE_CODEC)])
        try:
            await stream.write(frame(req.SerializeToString()))
            if not rid:
                with trio.move_on_after(1.0):
                    data = await read_frame(stream, MAX_REQUEST_BYTES)
                    raise RuntimeError(f"unexpected answer to a request without id: {data!r}")
                return None
            with trio.fail_after(timeout):
                resp = fv2.FilterSubscribeResponse.FromString(await read_frame(stream, MAX_REQUEST_BYTES))
        finally:
            await stream.close()
        # A rate-limit refusal may carry another id: the service refuses before it reads the
        # request (go-waku answers "N/A"); nwaku's client takes it (waku_filter_v2/client.nim).
        if resp.request_id != rid and resp.status_code != TOO_MANY_REQUESTS:
            raise RuntimeError(f"response for {resp.request_id!r}, expected {rid!r}")
        if resp.status_code == 200:
            if kind == Req.SUBSCRIBE:
                for ct in content_topics:
                    self.criteria[(pubsub_topic or "", ct)] = ""
            elif kind == Req.UNSUBSCRIBE:
                for ct in content_topics:
                    self.criteria.pop((pubsub_topic or "", ct), None)
            elif kind == Req.UNSUBSCRIBE_ALL:
                self.criteria.clear()
        return resp

    async def subscribe(self, pubsub_topic: str, content_topics: Sequence[str], *,
                        request_id: str | None = None,
                        timeout: float = 10.0) -> fv2.FilterSubscribeResponse | None:
        return await self.request(Req.SUBSCRIBE, pubsub_topic, content_topics, request_id, timeout)

    async def unsubscribe(self, pubsub_topic: str, content_topics: Sequence[str], *,
                          request_id: str | None = None,
                          timeout: float = 10.0) -> fv2.FilterSubscribeResponse | None:
        return await self.request(Req.UNSUBSCRIBE, pubsub_topic, content_topics, request_id, timeout)

    async def unsubscribe_all(self, *, request_id: str | None = None,
                              timeout: float = 10.0) -> fv2.FilterSubscribeResponse | None:
        return await self.request(Req.UNSUBSCRIBE_ALL, request_id=request_id, timeout=timeout)

    async def ping(self, *, request_id: str | None = None,
                   timeout: float = 10.0) -> fv2.FilterSubscribeResponse | None:
        return await self.request(Req.SUBSCRIBER_PING, request_id=request_id, timeout=timeout)

    async def keep_alive(self, interval_s: float = 60.0) -> None:
        """Ping every interval (run in a nursery); logs a lost subscription."""
        while True:
            await trio.sleep(interval_s)
            resp = await self.ping()
            if resp is not None and resp.status_code != 200:
                log.warning("filter: ping answered %d %s: subscription lost", resp.status_code, resp.status_desc)

    # -- v00 requests -------------------------------------------------------------------------

    async def subscribe_v00(self, topic: str, content_topics: Sequence[str], subscribe: bool = True,
                            single_topic_shape: bool = False) -> str:
        """Send a v00 FilterRPC request (no answer); returns its requestId. `single_topic_shape`
        sends one ContentFilter per content topic (the other published ContentFilter shape)."""
        assert self.service is not None, "connect() first"
        rid = uuid.uuid4().hex
        if single_topic_shape:
            filters = [f00.FilterRequest.ContentFilter(contentTopics=[ct]) for ct in content_topics]
        else:
            filters = [f00.FilterRequest.ContentFilter(contentTopics=list(content_topics))]
        rpc = f00.FilterRPC(requestId=rid, request=f00.FilterRequest(subscribe=subscribe, topic=topic,
                                                                      contentFilters=filters))
        stream = await self.host.new_stream(self.service, [TProtocol(FILTER_V00_CODEC)])
        try:
            await stream.write(frame(rpc.SerializeToString()))
        finally:
            await stream.close()
        for ct in content_topics:
            if subscribe:
                self.criteria[(topic, ct)] = rid
            else:
                self.criteria.pop((topic, ct), None)
        return rid

    # -- pushes -------------------------------------------------------------------------------

    def _accept(self, stream: INetStream, push: Push) -> None:
        sender = stream.muxed_conn.peer_id
        if self.service is None or sender != self.service:
            self.rejected += 1
            log.warning("filter: push from %s, not the node subscribed to: dropped", sender)
            return
        key = (push.pubsub_topic, push.message.content_topic)
        if key not in self.criteria and not (push.protocol == "v00" and any(
                ct == push.message.content_topic and rid == push.request_id
                for (_, ct), rid in self.criteria.items())):
            self.rejected += 1
            log.warning("filter: push on %s %s matches no criterion: dropped", *key)
            return
        push.received = trio.current_time()
        try:
            self._send.send_nowait(push)
        except trio.WouldBlock:
            self.rejected += 1

    async def _on_push(self, stream: INetStream) -> None:
        try:
            data = await read_frame(stream, MAX_PUSH_BYTES)
            mp = fv2.MessagePush.FromString(data)
            self._accept(stream, Push(mp.pubsub_topic, mp.waku_message, "v2"))
        except Exception as exc:  # noqa: BLE001
            self.rejected += 1
            log.debug("filter: bad push: %s", exc)
        finally:
            await stream.close()

    async def _on_v00_push(self, stream: INetStream) -> None:
        try:
            rpc = f00.FilterRPC.FromString(await read_frame(stream, MAX_PUSH_BYTES))
            for msg in rpc.push.messages:
                self._accept(stream, Push("", msg, "v00", rpc.requestId))
        except Exception as exc:  # noqa: BLE001
            self.rejected += 1
            log.debug("filter: bad v00 push: %s", exc)
        finally:
            await stream.close()

    async def pushes(self) -> AsyncIterator[Push]:
        async for push in self._recv:
            yield push

    def received_nowait(self) -> list[Push]:
        out = []
        while True:
            try:
                out.append(self._recv.receive_nowait())
            except trio.WouldBlock:
                return out


# -- `waku-bridge filter` -------------------------------------------------------------------------

def add_filter_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `filter` subcommand on waku-bridge's subparsers."""
    from core.config import add_config_arguments
    from core.topics import DEFAULT_PUBSUB_TOPIC

    p = sub.add_parser("filter", help="subscribe to a filter service node and print the pushes (JSON lines)")
    add_config_arguments(p)
    p.add_argument("--peer", required=True, metavar="MULTIADDR", help="the service node, /.../p2p/<peer id>")
    p.add_argument("--pubsub-topic", default=DEFAULT_PUBSUB_TOPIC)
    p.add_argument("--content-topic", action="append", required=True, help="repeatable")
    p.add_argument("--count", type=int, default=0, help="stop after N pushes (0: until SIGINT/SIGTERM)")
    p.add_argument("--ping-interval", type=float, default=60.0, help="seconds between SUBSCRIBER_PINGs")
    p.add_argument("--legacy", action="store_true", help="speak filter v00 (/vac/waku/filter/2.0.0-beta1)")
    p.add_argument("--wait-s", type=float, default=30.0, help="how long to wait for the connection")
    p.set_defaults(func=cmd_filter)


def _show(push: Push) -> str:
    import json

    payload = push.message.payload
    try:
        text: str | None = payload.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return json.dumps({"event": "push", "protocol": push.protocol, "pubsub_topic": push.pubsub_topic,
                       "content_topic": push.message.content_topic,
                       "timestamp": push.message.timestamp if push.message.HasField("timestamp") else None,
                       "payload": text if text is not None else payload.hex(),
                       "ephemeral": push.message.ephemeral, "request_id": push.request_id or None})


def cmd_filter(args: argparse.Namespace) -> int:
    import json
    import signal

    from core.config import ConfigError, config_from_args
    from core.topics import check_pubsub_topic

    config_from_args(args)  # validates --config / --set like the other subcommands
    why = check_pubsub_topic(args.pubsub_topic)
    if why:
        raise ConfigError(f"--pubsub-topic: {why}")

    async def main() -> int:
        client = FilterClient()
        async with client.running(), trio.open_nursery() as nursery:
            try:
                await client.connect(args.peer, timeout=args.wait_s)
            except Exception as exc:  # noqa: BLE001 - dial errors come in many types
                print(f"error: cannot connect to {args.peer}: {type(exc).__name__}: {str(exc).splitlines()[0]}",
                      file=sys.stderr)
                nursery.cancel_scope.cancel()
                return 1
            if args.legacy:
                rid = await client.subscribe_v00(args.pubsub_topic, args.content_topic)
                print(json.dumps({"event": "subscribed", "protocol": "v00", "request_id": rid}), flush=True)
            else:
                resp = await client.subscribe(args.pubsub_topic, args.content_topic)
                assert resp is not None  # a request with an id is answered
                print(json.dumps({"event": "subscribed", "status_code": resp.status_code,
                                  "status_desc": resp.status_desc}), flush=True)
                if resp.status_code != 200:
                    nursery.cancel_scope.cancel()
                    return 1
                nursery.start_soon(client.keep_alive, args.ping_interval)

            async def on_signal() -> None:
                with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        nursery.cancel_scope.cancel()
                        return
            nursery.start_soon(on_signal)
            count = 0
            async for push in client.pushes():
                print(_show(push), flush=True)
                count += 1
                if args.count and count >= args.count:
                    break
            with trio.move_on_after(5):  # done: leave (v2), else the bridge expires us after the TTL
                if not args.legacy:
                    await client.unsubscribe_all()
                else:
                    await client.subscribe_v00(args.pubsub_topic, args.content_topic, subscribe=False)
            print(json.dumps({"event": "done", "pushes": count, "rejected": client.rejected}), flush=True)
            nursery.cancel_scope.cancel()
        return 0

    return trio.run(main)
