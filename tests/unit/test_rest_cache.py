"""The REST relay cache (ingest/rest/cache.py) follows nwaku's message_cache.nim (issue #68 O):
a message is cached once however often it is added, and it is read through the topics it was
cached under (a content topic subscribed again does not hand back what was cached before)."""
from __future__ import annotations

from ingest.rest.cache import MessageCache
from schemas.waku_message_pb2 import WakuMessage

SHARD = "/waku/2/rs/1/3"
CT = "/app/1/chat/proto"


def msg(payload: bytes, ts: int = 1) -> WakuMessage:
    return WakuMessage(payload=payload, content_topic=CT, timestamp=ts)


def test_an_identical_message_is_cached_once():
    cache = MessageCache(10, (SHARD,))
    cache.content_topics.add(CT)
    for _ in range(3):  # relayed back, published, lightpushed: one entry
        cache.add(SHARD, msg(b"a"))
    cache.add(SHARD, msg(b"a", ts=2))  # another timestamp: another message
    assert [m.timestamp for m in cache.take(content_topic=CT) or []] == [1, 2]
    assert cache.take(pubsub_topic=SHARD) == []  # a read takes them out of both indexes


def test_a_resubscribed_content_topic_reads_only_what_came_since():
    cache = MessageCache(10, (SHARD,))  # the node's shard, subscribed at start
    cache.content_topics.add(CT)
    cache.add(SHARD, msg(b"old"))
    cache.unsubscribe(content_topic=CT)
    cache.content_topics.add(CT)
    cache.add(SHARD, msg(b"new"))
    assert [m.payload for m in cache.take(content_topic=CT) or []] == [b"new"]
    assert [m.payload for m in cache.take(pubsub_topic=SHARD) or []] == [b"old"]  # still under its shard


def test_unsubscribing_both_topics_forgets_the_message():
    cache = MessageCache(10, (SHARD,))
    cache.content_topics.add(CT)
    cache.add(SHARD, msg(b"x"))
    cache.unsubscribe(pubsub_topic=SHARD)
    assert len(cache) == 1
    cache.unsubscribe(content_topic=CT)
    assert len(cache) == 0


def test_capacity_drops_the_oldest():
    cache = MessageCache(2, (SHARD,))
    for i in range(3):
        cache.add(SHARD, msg(b"%d" % i))
    assert [m.payload for m in cache.take(pubsub_topic=SHARD) or []] == [b"1", b"2"]
