"""The store service's per-peer limits over real hosts: with the shipped defaults
(conf/pipeline.toml) a peer paging one query after another is never refused, however fast;
a peer running many queries at once is bounded (store_service.max_concurrent_queries_per_peer):
its extra queries get 429 (v3) / an empty page (beta2), counted as "busy", while another peer
is still served. Issue 36 item 6; the js-waku walk is in tests/interop/test_js_paging_and_transports.py."""
from __future__ import annotations

import dataclasses
import threading

import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair

from core.config import load_config
from core.store_page import Page, StoreQuery
from ingest.host import build_host, listen_addrs
from ingest.store import codec_v3
from ingest.store.client import StoreClient
from ingest.store.reader import NotCached
from ingest.store.server import StoreServer, StoreServiceSettings

pytestmark = pytest.mark.integration


class FakeReader:
    """An empty store. `hold`: queries that read storage block until `release` is set (each in a
    reader thread), counting how many run at once."""

    def __init__(self, hold: bool = False) -> None:
        self.hold = hold
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.served = 0

    def query(self, query, cached_only: bool = False) -> Page:
        if self.hold and cached_only:
            raise NotCached()
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            if self.hold:
                assert self.release.wait(60)
            return Page(forward=query.forward)
        finally:
            with self.lock:
                self.running -= 1
                self.served += 1

    def locate(self, _hash):
        return None


def shipped_settings() -> StoreServiceSettings:
    s = StoreServiceSettings.from_config(load_config([], environ={}))
    return dataclasses.replace(s, reader=None, tail=None)


async def serving(reader, settings):
    host = build_host(create_new_key_pair(), listen_addrs("127.0.0.1", 0, -1))
    server = StoreServer(reader, settings)
    server.mount(host)
    return host, server


def test_sequential_paging_is_never_refused_with_the_defaults():
    """500 queries back to back from one peer (v3 and beta2), as fast as the loop goes: all
    served. The old default (20/s, burst 40) refused from about the 41st."""
    settings = shipped_settings()
    assert settings.max_queries_per_peer_per_s == 0.0 and settings.max_concurrent_queries_per_peer >= 1
    reader = FakeReader()

    async def main():
        host, server = await serving(reader, settings)
        async with host.run(listen_addrs("127.0.0.1", 0, -1)), StoreClient.running(timeout=20) as client:
            peer = await client.connect(f"{host.get_addrs()[0]}")
            began = trio.current_time()
            codes = [(await client.query_v3(peer, codec_v3.request(f"q{i}", limit=1, forward=i % 2 == 0))).status_code
                     for i in range(400)]
            for _ in range(100):
                await client.query(peer, StoreQuery(page_size=1))
            return codes, server.metrics, trio.current_time() - began

    codes, metrics, took = trio.run(main)
    print(f"500 sequential queries in {took:.1f} s ({500 / took:.0f}/s)")
    assert codes == [200] * 400
    assert reader.served == 500
    for reason in ("rate_limited", "busy"):
        assert metrics.value("waku_store_rejected_total", reason=reason) == 0


def test_many_queries_at_once_from_one_peer_are_bounded():
    """One peer opens 12 v3 queries at once (and 3 beta2) while the reader is held: 4 run, the
    others are refused at once (429 / empty, counted "busy"); another peer is served meanwhile;
    once they finish the first peer is served again."""
    reader = FakeReader(hold=True)
    settings = dataclasses.replace(shipped_settings(), max_concurrent_queries=16, max_concurrent_queries_per_peer=4)

    async def main():
        host, server = await serving(reader, settings)
        async with host.run(listen_addrs("127.0.0.1", 0, -1)), StoreClient.running(timeout=30) as a, \
                StoreClient.running(timeout=30) as b:
            addr = f"{host.get_addrs()[0]}"
            pa, pb_ = await a.connect(addr), await b.connect(addr)
            codes: list[int] = []
            beta2: list = []

            async def one(i: int) -> None:
                codes.append((await a.query_v3(pa, codec_v3.request(f"a{i}", limit=5))).status_code)

            async def old(i: int) -> None:
                beta2.append(await a.query(pa, StoreQuery(page_size=5)))

            async with trio.open_nursery() as nursery:
                for i in range(12):
                    nursery.start_soon(one, i)
                for i in range(3):
                    nursery.start_soon(old, i)
                # The refusals come back while four queries are held in the reader.
                with trio.fail_after(30):
                    while len(codes) + len(beta2) < 11 or reader.running < 4:
                        await trio.sleep(0.02)
                assert reader.running == 4 and sorted(codes) == [429] * len(codes)
                # Another peer is not held to the first peer's bound.
                nursery.start_soon(lambda: b.query_v3(pb_, codec_v3.request("b", limit=5)))
                with trio.fail_after(30):
                    while reader.running < 5:
                        await trio.sleep(0.02)
                reader.release.set()
            after = (await a.query_v3(pa, codec_v3.request("again", limit=5))).status_code
            return codes, after, server.metrics

    codes, after, metrics = trio.run(main)
    assert len(codes) == 12 and set(codes) <= {200, 429}
    assert metrics.value("waku_store_rejected_total", reason="busy") == 11  # 15 sent at once, 4 ran
    assert reader.most == 5 and reader.served == 6  # 4 of peer a and 1 of peer b at once; then a again
    assert after == 200
