"""The relay message cache of GET /relay/v1/messages (nwaku's `rest_api/message_cache.nim`):
the messages of the subscribed pubsub topics and content topics, our own publishes included, at
most `capacity` in all (the oldest go first); a read takes a topic's messages out."""
from __future__ import annotations

from collections import deque

from schemas.waku_message_pb2 import WakuMessage


class MessageCache:
    def __init__(self, capacity: int = 50, pubsub_topics: tuple[str, ...] = ()) -> None:
        self.capacity = capacity
        self.pubsub_topics: set[str] = set(pubsub_topics)
        self.content_topics: set[str] = set()
        self._messages: deque[tuple[str, WakuMessage]] = deque()

    def __len__(self) -> int:
        return len(self._messages)

    def add(self, pubsub_topic: str, msg: WakuMessage) -> None:
        """Keep `msg` if its pubsub topic or content topic is subscribed (the bridge's relay
        sink calls this for every accepted message)."""
        if pubsub_topic in self.pubsub_topics or msg.content_topic in self.content_topics:
            self._messages.append((pubsub_topic, msg))
            if len(self._messages) > self.capacity:
                self._messages.popleft()

    def take(self, *, pubsub_topic: str | None = None, content_topic: str | None = None,
             on_pubsub_topic: str | None = None) -> list[WakuMessage] | None:
        """The cached messages of a pubsub topic (or content topic; `on_pubsub_topic`: only those
        of the content topic received on that pubsub topic), oldest first, removed from the
        cache; None when that topic is not subscribed."""
        if pubsub_topic is not None and pubsub_topic not in self.pubsub_topics:
            return None
        if content_topic is not None and content_topic not in self.content_topics:
            return None
        taken: list[WakuMessage] = []
        kept: deque[tuple[str, WakuMessage]] = deque()
        for topic, msg in self._messages:
            if (pubsub_topic is not None and topic == pubsub_topic) or \
                    (content_topic is not None and msg.content_topic == content_topic
                     and on_pubsub_topic in (None, topic)):
                taken.append(msg)
            else:
                kept.append((topic, msg))
        self._messages = kept
        return taken

    def unsubscribe(self, *, pubsub_topic: str | None = None, content_topic: str | None = None) -> None:
        """Forget a topic and its messages."""
        if pubsub_topic is not None:
            self.pubsub_topics.discard(pubsub_topic)
            self._messages = deque((t, m) for t, m in self._messages if t != pubsub_topic
                                   or m.content_topic in self.content_topics)
        if content_topic is not None:
            self.content_topics.discard(content_topic)
            self._messages = deque((t, m) for t, m in self._messages if m.content_topic != content_topic
                                   or t in self.pubsub_topics)

    def reset(self) -> None:
        """Forget every topic and message (nwaku's `MessageCache.reset`)."""
        self.pubsub_topics.clear()
        self.content_topics.clear()
        self._messages.clear()
