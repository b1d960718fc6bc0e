"""The relay message cache of GET /relay/v1/messages (nwaku's `rest_api/message_cache.nim`):
the messages of the subscribed pubsub topics and content topics, our own publishes included, at
most `capacity` in all (the oldest go first); a read takes a topic's messages out.

As nwaku's: a message already cached is not added again (one entry however many ways it came:
relayed back, published, lightpushed, on a subscribed pubsub topic and content topic), and a
message is read through the topics it was cached under: a content topic unsubscribed and
subscribed again does not hand back what was cached before (it stays readable through its
pubsub topic while that one is subscribed)."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from schemas.waku_message_pb2 import WakuMessage


@dataclass
class _Entry:
    pubsub_topic: str
    msg: WakuMessage
    data: bytes          # the message's bytes: the identity of nwaku's `message == msg`
    by_pubsub: bool      # cached under its pubsub topic (readable by GET /relay/v1/messages)
    by_content: bool     # under its content topic (GET /relay/v1/auto/messages)


class MessageCache:
    def __init__(self, capacity: int = 50, pubsub_topics: tuple[str, ...] = (),
                 content_topics: tuple[str, ...] = ()) -> None:
        self.capacity = capacity
        self.pubsub_topics: set[str] = set(pubsub_topics)
        self.content_topics: set[str] = set(content_topics)
        self._messages: deque[_Entry] = deque()

    def __len__(self) -> int:
        return len(self._messages)

    def add(self, pubsub_topic: str, msg: WakuMessage) -> None:
        """Keep `msg` if its pubsub topic or content topic is subscribed and it is not cached
        already (the bridge's relay sink calls this for every accepted message)."""
        by_pubsub, by_content = pubsub_topic in self.pubsub_topics, msg.content_topic in self.content_topics
        if not (by_pubsub or by_content):
            return
        data = msg.SerializeToString(deterministic=True)
        if any(e.data == data for e in self._messages):
            return
        self._messages.append(_Entry(pubsub_topic, msg, data, by_pubsub, by_content))
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
        kept: deque[_Entry] = deque()
        for e in self._messages:
            if (pubsub_topic is not None and e.by_pubsub and e.pubsub_topic == pubsub_topic) or \
                    (content_topic is not None and e.by_content and e.msg.content_topic == content_topic
                     and on_pubsub_topic in (None, e.pubsub_topic)):
                taken.append(e.msg)
            else:
                kept.append(e)
        self._messages = kept
        return taken

    def unsubscribe(self, *, pubsub_topic: str | None = None, content_topic: str | None = None) -> None:
        """Forget a topic and the messages cached only under it."""
        if pubsub_topic is not None:
            self.pubsub_topics.discard(pubsub_topic)
            for e in self._messages:
                if e.pubsub_topic == pubsub_topic:
                    e.by_pubsub = False
        if content_topic is not None:
            self.content_topics.discard(content_topic)
            for e in self._messages:
                if e.msg.content_topic == content_topic:
                    e.by_content = False
        self._messages = deque(e for e in self._messages if e.by_pubsub or e.by_content)

    def reset(self) -> None:
        """Forget every topic and message (nwaku's `MessageCache.reset`)."""
        self.pubsub_topics.clear()
        self.content_topics.clear()
        self._messages.clear()
