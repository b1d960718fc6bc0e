"""The pusher: consumes the bridge's push topic (waku.push.<bridge_id>, written by the Spark
filter job) and sends each match to its peer over the existing connection.

A Kafka consumer thread (librdkafka; no group: it starts at the end of the topic, pushes are
live only) hands batches of values to trio through ``TrioToken.run_sync_soon``. On the trio
side each record is checked against the bridge's view (a peer that unsubscribed since the job
matched gets nothing), de-duplicated per peer (``Dedup``: the source offset's high-water mark per
source partition, and the last message hashes), and queued to that peer's
``PeerPusher``: MessagePush{waku_message, pubsub_topic} for v2, FilterRPC{requestId, push} for v00.

Streams. A push stream per message costs a multistream-select round trip and ~3 ms of CPU; a
reused stream costs one write. Clients differ: nwaku's and js-waku's read every push of a stream
until it ends; go-waku's reads one push and closes, and a write racing its close is lost. So a
``PeerPusher`` keeps its first v2 push stream open as a probe and writes further pushes on it
at once; once the peer closes (or resets) a push stream (go-waku), every push gets its own
stream for good. A reader on the kept stream notices the peer's close or reset; the pushes
written on it that are not confirmed yet are sent again on new streams (all of them on a reset,
all but the stream's first on a close: a client that closes has read one), as is a push whose
write fails. A write is confirmed ``push_unconfirmed_s`` after it was made or after the stream's
first ``push_reuse_after_s``, whichever is later (a slow peer's close of the probe still finds
everything written on it meanwhile). A
per-message stream is confirmed the same way: the bridge closes its side and waits (without
holding a slot) for the peer's close; a reset means the push was not read (go-waku resets when
its rate limiter refuses), and it is sent again.

Pacing. Only pushes on streams of their own are paced, by the peer's token bucket: that is what a
client reading one push per stream gets, and go-waku's light client refuses (resets) more than
15 push streams/s per peer (burst 20, counted per stream on arrival). Writes on a kept stream are
not paced: a client that keeps reading a push stream (nwaku, js-waku) reads as fast as we write,
and the stream's flow control holds the writes back if it does not. The kind of client is told by
what it does (closing or resetting push streams), not by its identify agent version, so clients
built on go-waku under another name are paced too.
"""
from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import trio
from libp2p.network.stream.exceptions import StreamEOF
from libp2p.stream_muxer.exceptions import MuxedStreamEOF
from libp2p.stream_muxer.yamux.yamux import YamuxStream
from libp2p.utils import encode_delim

from core.kafka import follower_config
from ingest.host import take_now_or_wait, write_in_one_frame, write_on_stream, yamux_until_end
from ingest.kafka_follow import Follower
from ingest.ratelimit import TokenBucket

log = logging.getLogger("ingest.filter.pusher")

TAKE_MAX = 5000  # records handed over at most in one batch
# A poll returns at the first record: its wait only sets how often an idle loop wakes (and how
# soon it sees a stop).
IDLE_POLL_S = 1.0
# librdkafka's own log lines (named "kafka...": the bridge's Kafka log limit applies to them).
_LIBRDKAFKA_LOG = logging.getLogger("kafka.librdkafka.pusher")


class PushConsumer(Follower):
    """Thread consuming every partition of `topic` from its end with librdkafka (its fetches run
    on librdkafka's threads, without the GIL); `deliver(values)` runs on the trio thread for each
    batch taken. A failed loop starts again from the record after the last one handed over
    (`ingest.kafka_follow.Follower`: a dead consumer would leave the bridge answering SUBSCRIBE
    with 200 and pushing nothing)."""

    def __init__(self, bootstrap_servers: str, topic: str, client_options: Mapping[str, str],
                 deliver: Callable[[list[bytes]], None], token: trio.lowlevel.TrioToken) -> None:
        super().__init__("pusher", "push-consumer", log)
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.client_options = client_options
        self.deliver = deliver
        self.token = token
        # Per partition, the offset after the last record handed over: a restarted loop goes on
        # from there (the first start begins at the end of the topic).
        self._next: dict[int, int] = {}
        self.consumed = 0
        self.cpu_s = 0.0  # this thread's CPU time taking records in (stage "consume")

    def consumer_config(self) -> dict[str, Any]:
        """librdkafka's properties for the push topic's consumer (`core.kafka.follower_config`:
        a fetch answered as soon as a record is there, no wait added to a push)."""
        return follower_config(self.bootstrap_servers, "waku-bridge-pusher", self.client_options,
                               logger=_LIBRDKAFKA_LOG, error_cb=self._kafka_error)

    def _loop(self) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        consumer = self._take_consumer()
        try:
            parts = None
            while not parts:
                try:
                    meta = consumer.list_topics(self.topic, timeout=5.0).topics[self.topic]
                except KafkaException as exc:  # cannot reach Kafka: retried, one line per error
                    self._kafka_error(exc.args[0])
                    meta = None
                parts = meta.partitions if meta is not None and meta.error is None else None
                if not parts and self._stop.wait(0.5):
                    return
            # The start fixed now, before subscriptions are accepted: the end of each partition
            # (an offset, not librdkafka's "end", which it resolves later), or where a failed
            # loop stopped.
            starts = {p: self._next[p] if p in self._next
                      else consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10.0)[1]
                      for p in sorted(parts)}
            consumer.assign([TopicPartition(self.topic, p, offset) for p, offset in starts.items()])
            self._next.update(starts)
            self.ready.set()
            log.info("pusher: consuming %s (%d partitions)", self.topic, len(starts))
            thread_time = time.thread_time
            while not self._stop.is_set():
                first = consumer.poll(IDLE_POLL_S)  # returns at the first record
                if first is None:
                    continue
                t0 = thread_time()
                values = self._values([first, *consumer.consume(TAKE_MAX - 1, 0)])
                self.cpu_s += thread_time() - t0
                if values:
                    self.consumed += len(values)
                    try:
                        self.token.run_sync_soon(self.deliver, values)
                    except trio.RunFinishedError:
                        return
        finally:
            consumer.close()

    def _values(self, messages: list[Any]) -> list[bytes]:
        """The records' values; each partition's next offset noted; errors reported."""
        values = []
        for m in messages:
            err = m.error()
            if err is not None:
                self._kafka_error(err)
                continue
            value, partition, offset = m.value(), m.partition(), m.offset()
            assert partition is not None and offset is not None  # a record has both
            self._next[partition] = offset + 1
            if value is not None:
                values.append(value)
        return values


REPLAYED = "replayed"
DUPLICATE = "duplicate"


class Dedup:
    """Which push records a peer already got, in bounded memory: per peer the last `size` message
    hashes admitted, and per (peer, source partition of waku.messages) the highest source offset
    admitted (a high-water mark: one integer per partition, however long a replay is).

    The mark is sound because the filter job writes a source partition's records of a peer in
    offset order (a lookup and an explode, no shuffle: pipeline/filter/matching.py): a
    record at or below the mark comes again from a restarted or retried filter task (its replay
    of up to an epoch, beyond any hash memory). Records from different partitions interleave
    freely. The hashes stay for what the mark cannot see: the same message relayed by two
    bridges (two source records) and records without coordinates (none from today's filter job)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._seen: dict[str, collections.OrderedDict[bytes, None]] = {}
        self._marks: dict[str, dict[int, int]] = {}

    def admit(self, peer: str, message_hash: bytes, partition: int = -1, offset: int = -1) -> str | None:
        """None when the record is new to `peer`, and it is remembered (its hash, and its offset
        as the partition's mark); else why it is dropped: REPLAYED (at or below the mark of its
        source partition) or DUPLICATE (its hash among the last `size`). A negative partition or
        offset: no coordinates, hashes only."""
        known = partition >= 0 and offset >= 0
        if known:
            marks = self._marks.get(peer)
            if marks is None:
                marks = self._marks[peer] = {}
            if offset <= marks.get(partition, -1):
                return REPLAYED
            # A later offset of the partition: the records before it reached this point already
            # (in order), so the mark moves even when this one is a hash duplicate.
            marks[partition] = offset
        seen = self._seen.get(peer)
        if seen is None:
            seen = self._seen[peer] = collections.OrderedDict()
        if message_hash in seen:
            return DUPLICATE
        seen[message_hash] = None
        if len(seen) > self.size:
            seen.popitem(last=False)
        return None

    def forget(self, peer: str) -> None:
        self._seen.pop(peer, None)
        self._marks.pop(peer, None)


PUSHES_IN_FLIGHT = 8  # per peer: streams being opened at a time (each costs a round trip)
STAGES = ("consume", "deliver", "open", "write", "close")


class PushStats:
    """Push outcomes and per-stage seconds, counted in plain attributes on the hot path; the
    service adds them to its Prometheus counters once a second (``take``). Stages: consume (the
    consumer thread's CPU in polls), deliver (decode, view, de-duplication, queueing: CPU), open
    (new stream, multistream-select round trip included), write, close (wall time of the awaits,
    so they include other tasks run meanwhile)."""

    def __init__(self) -> None:
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.stages = dict.fromkeys(STAGES, 0.0)

    def take(self) -> tuple[collections.Counter[str], dict[str, float]]:
        out = self.outcomes, self.stages
        self.outcomes, self.stages = collections.Counter(), dict.fromkeys(STAGES, 0.0)
        return out


class PushItem:
    """One push to one peer: the framed bytes of its stream, the protocol id, attempts so far."""
    __slots__ = ("data", "codec", "attempts")

    def __init__(self, data: bytes, codec: str) -> None:
        self.data = data
        self.codec = codec
        self.attempts = 0


class _Kept:
    """A push stream the bridge keeps open; `written`: (time it counts as read, item, first on
    the stream) of the writes not confirmed yet (sent again if the peer ends the stream)."""
    __slots__ = ("stream", "since", "probation_end", "unconfirmed_s", "alive", "ended", "written")

    def __init__(self, stream: Any, since: float, item: PushItem, probation_s: float, unconfirmed_s: float) -> None:
        self.stream = stream
        self.since = since
        self.probation_end = since + probation_s
        self.unconfirmed_s = unconfirmed_s
        self.alive = True
        self.ended = trio.Event()
        self.written: collections.deque[tuple[float, PushItem, bool]] = collections.deque()
        self.wrote(since, item, True)

    def wrote(self, now: float, item: PushItem, first: bool) -> None:
        written = self.written
        written.append((max(now, self.probation_end) + self.unconfirmed_s, item, first))
        while written[0][0] <= now:
            written.popleft()


class PeerPusher:
    """Pushes to one peer (see the module doc): a v2 stream kept open and reused, unpaced, once
    the peer showed it keeps reading; otherwise a stream per push, paced by a token bucket
    (push_rate_per_peer, burst push_burst_per_peer), up to PUSHES_IN_FLIGHT new streams at a
    time; a push whose stream fails,
    or which a peer's close or reset may have lost, is sent again (paced like the others) up to
    push_retries times before it counts as failed. `report(ok)` is called when the peer's
    pushes start or stop failing; `connected()` tells whether the connection is still there."""

    def __init__(self, peer_id: Any, host: Any, settings: Any, stats: PushStats, reuse_codec: str,
                 connected: Callable[[], bool], report: Callable[[bool], None]) -> None:
        self.peer_id = peer_id
        self.host = host
        self.s = settings
        self.stats = stats
        self.reuse_codec = reuse_codec if settings.push_reuse_stream else None
        self.connected = connected
        self.report = report
        self.bucket = TokenBucket(settings.push_rate_per_peer, settings.push_burst_per_peer, trio.current_time)
        self.slots = trio.Semaphore(PUSHES_IN_FLIGHT)
        self.kept: _Kept | None = None
        self.closes_streams = False   # the peer ended a push stream: a stream per push from now on
        self.failing = False
        self.retry: collections.deque[PushItem] = collections.deque()
        self._wake: trio.MemorySendChannel | None = None
        self._nursery: trio.Nursery | None = None

    async def run(self, recv: trio.MemoryReceiveChannel, send: trio.MemorySendChannel) -> None:
        """Until `send` is closed (the peer has no criteria left); a None sent wakes the loop
        for a retry."""
        self._wake = send
        try:
            async with recv, trio.open_nursery() as nursery:
                self._nursery = nursery
                while True:
                    if self.retry:
                        item = self.retry.popleft()
                    else:
                        try:
                            item = await recv.receive()
                        except (trio.EndOfChannel, trio.ClosedResourceError):
                            break
                        if item is None:
                            continue
                    await self._send(item, recv)
                nursery.cancel_scope.cancel()  # nothing is wanted any more: no retries, no waits
        finally:
            kept, self.kept = self.kept, None
            if kept is not None:
                kept.alive = False
                kept.ended.set()
                with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                    await _close_quietly(kept.stream)

    async def _send(self, item: PushItem, recv: trio.MemoryReceiveChannel | None = None) -> None:
        """`item` pushed: on the kept stream when there is one (with the pushes queued behind it
        in `recv`, in one write), else on a stream of its own."""
        if item.codec == self.reuse_codec and not self.closes_streams:
            k = self.kept
            if k is None:
                # The probe: opened here, in line (one round trip), and kept open.
                await self.bucket.take()
                await take_now_or_wait(self.slots)
                await self._push_new(item, keep=True)
                return
            if k.alive:
                # At once, even on the probe: a peer that reads one push and closes (go-waku)
                # gets what it did not read again on streams of their own once its close arrives.
                # Not paced: the peer reads as fast as we write.
                batch, other = _take_queued(recv, item) if recv is not None else ([item], None)
                await self._write_kept(k, batch)
                if other is not None:
                    await self._send(other)
                return
        await self.bucket.take()
        await take_now_or_wait(self.slots)
        assert self._nursery is not None
        self._nursery.start_soon(self._push_new, item, False)

    async def _write_kept(self, k: _Kept, items: list[PushItem]) -> None:
        """`items` written on the kept stream in one write (`write_on_stream`: one yamux frame,
        one noise message, one syscall when the window holds them)."""
        stats = self.stats
        t0 = time.perf_counter()
        try:
            with trio.fail_after(self.s.push_timeout_s):
                await write_on_stream(k.stream, items[0].data if len(items) == 1
                                      else b"".join(item.data for item in items))
        except BaseException as exc:
            stats.stages["write"] += time.perf_counter() - t0
            if isinstance(exc, trio.Cancelled):
                raise
            log.debug("filter: write to the kept push stream of %s failed: %s: %s", self.peer_id,
                      type(exc).__name__, exc)
            self._ended(k, "reset")
            assert self._nursery is not None
            self._nursery.start_soon(_reset_quietly, k.stream)  # ends its watcher too
            for item in items:
                self._again(item)
            return
        stats.stages["write"] += time.perf_counter() - t0
        if not k.alive:
            # The peer ended the stream while this write was under way: as the unconfirmed ones.
            stats.outcomes["resent"] += len(items)
            for item in items:
                self._again(item, lost=False)
            return
        now = trio.current_time()
        for item in items:
            k.wrote(now, item, False)
        stats.outcomes["pushed"] += len(items)
        stats.outcomes["reused"] += len(items)
        stats.outcomes["kept_writes"] += 1
        if self.failing:
            self.failing = False
            self.report(True)

    async def _push_new(self, item: PushItem, keep: bool) -> None:
        """A push on a new stream: kept open when `keep` (the probe), else closed and confirmed."""
        stats, stages = self.stats, self.stats.stages
        try:
            if not self.connected():
                raise ConnectionError("not connected")  # only over an existing connection
            with trio.fail_after(self.s.push_timeout_s):
                t0 = time.perf_counter()
                # A peer that took pushes on streams of their own already speaks the codec: the
                # proposal goes with the push (multistream-select's lazy form, as go-libp2p's
                # dialers do), no round trip and no negotiation slot. A peer that refused it
                # would reset the stream: sent again as any reset push.
                lazy = self.closes_streams and not keep
                sent = None
                if lazy:
                    # Over yamux: proposal, push and close in one frame write (no open or close
                    # of their own: the whole time counts as the write).
                    data = lazy_proposal(item.codec) + item.data
                    sent = await write_in_one_frame(self.host, self.peer_id, data)
                if sent is not None:
                    stream = sent
                    stages["write"] += time.perf_counter() - t0
                    stats.outcomes["streams"] += 1
                    stats.outcomes["one_frame"] += 1
                else:
                    if lazy:
                        stream = await self.host.get_network().new_stream(self.peer_id)
                        stream.set_protocol(item.codec)
                    else:
                        stream = await self.host.new_stream(self.peer_id, [item.codec])
                        data = item.data
                    t1 = time.perf_counter()
                    stages["open"] += t1 - t0
                    stats.outcomes["streams"] += 1
                    try:
                        await stream.write(data)
                        t2 = time.perf_counter()
                        stages["write"] += t2 - t1
                        if not keep:
                            await stream.close()
                            stages["close"] += time.perf_counter() - t2
                    except BaseException:
                        with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                            await _reset_quietly(stream)
                        raise
        except Exception as exc:  # noqa: BLE001 - any failure: sent again, or failed
            log.debug("filter: push to %s failed: %s: %s", self.peer_id, type(exc).__name__, exc)
            self.slots.release()
            self._again(item)
            return
        self.slots.release()
        if keep:
            k = _Kept(stream, trio.current_time(), item, self.s.push_reuse_after_s, self.s.push_unconfirmed_s)
            self.kept = k
            assert self._nursery is not None
            self._nursery.start_soon(self._watch, k)
        else:
            # Confirmed when the peer closes (or says nothing for push_unconfirmed_s); a reset
            # means it did not read the push (go-waku resets when its rate limiter refuses).
            ended = None
            with trio.move_on_after(self.s.push_unconfirmed_s):
                ended = await _until_end(stream)
            if ended == "reset":
                self._again(item)
                return
        stats.outcomes["pushed"] += 1
        if self.failing:
            self.failing = False
            self.report(True)

    async def _watch(self, k: _Kept) -> None:
        """Reads the kept stream (a client sends nothing on it) until the peer ends it."""
        how = await _until_end(k.stream)
        if k.alive:
            self._ended(k, how)
            await _close_quietly(k.stream)

    def _ended(self, k: _Kept, how: str) -> None:
        """The kept stream ended (peer's close: "eof"; reset or failed write: "reset"): pushes
        written on it and not confirmed yet are sent again, except the stream's first after a
        close (a client closes once it read)."""
        if not k.alive:
            return
        k.alive = False
        k.ended.set()
        if self.kept is k:
            self.kept = None
        if self.connected():
            self.closes_streams = True  # the peer ends push streams: one per push from now on
        now = trio.current_time()
        for confirmed_at, item, first in k.written:
            if confirmed_at > now and (how == "reset" or not first):
                self.stats.outcomes["resent"] += 1
                self._again(item, lost=False)
        k.written.clear()

    def _again(self, item: PushItem, lost: bool = True) -> None:
        """Send `item` again (paced), unless it was tried push_retries times already or the
        peer is no longer connected: then it failed. `lost`: its last attempt failed."""
        item.attempts += 1
        if item.attempts > self.s.push_retries or not self.connected():
            self.stats.outcomes["failed"] += 1
            if not self.failing:
                self.failing = True
                self.report(False)
            return
        if lost:
            self.stats.outcomes["retried"] += 1
        self.retry.append(item)
        if self._wake is not None:
            try:
                self._wake.send_nowait(None)
            except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
                pass  # the loop is busy (or over): it looks at the retries first


# The most bytes of queued pushes a kept stream's write takes (`_take_queued`).
KEPT_WRITE_BYTES = 16 * 1024


def _take_queued(recv: trio.MemoryReceiveChannel, first: PushItem) -> tuple[list[PushItem], PushItem | None]:
    """`first` and the pushes queued behind it with its codec, up to KEPT_WRITE_BYTES, without
    waiting; the first queued push of another codec is handed back (sent next, on its own)."""
    batch, size = [first], len(first.data)
    while size < KEPT_WRITE_BYTES:
        try:
            item = recv.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            break
        if item is None:
            continue
        if item.codec != first.codec:
            return batch, item
        batch.append(item)
        size += len(item.data)
    return batch, None


MULTISTREAM = b"/multistream/1.0.0"


def lazy_proposal(codec: str) -> bytes:
    """What a dialer writes before its first bytes when it does not wait for the answers
    (the listener's echoes are read, and dropped, with the rest of the stream)."""
    return encode_delim(MULTISTREAM) + encode_delim(codec.encode())


async def _until_end(stream: Any) -> str:
    """Until the peer ends the stream: "eof" (it closed) or "reset" (reset, error). Yamux: by
    reading (a client sends nothing on a push stream). Mplex: by waiting for the stream's close
    or reset events, since a pending mplex read holds the stream's lock against writes."""
    if isinstance(stream, YamuxStream):  # a one-frame push (`write_in_one_frame`)
        return await yamux_until_end(stream)
    muxed = getattr(stream, "muxed_stream", stream)  # a NetStream's, or a bare muxed stream
    remote_closed = getattr(muxed, "event_remote_closed", None)
    reset = getattr(muxed, "event_reset", None)
    if remote_closed is not None and reset is not None:
        async with trio.open_nursery() as nursery:
            for event in (remote_closed, reset):
                nursery.start_soon(_wait_then_cancel, event, nursery.cancel_scope)
        return "reset" if reset.is_set() else "eof"
    try:
        while await stream.read(4096):
            pass
    except (StreamEOF, MuxedStreamEOF):
        pass
    except Exception:  # noqa: BLE001 - reset, connection gone
        return "reset"
    # A reset that arrives behind unread bytes (the listener's multistream echoes of a lazy
    # proposal) reads as the end of the stream in py-libp2p's yamux: its flag says which it was.
    return "reset" if getattr(muxed, "reset_received", False) else "eof"


async def _wait_then_cancel(event: Any, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _close_quietly(stream: Any) -> None:
    try:
        await stream.close()
    except Exception:  # noqa: BLE001
        pass


async def _reset_quietly(stream: Any) -> None:
    try:
        await stream.reset()
    except Exception:  # noqa: BLE001
        pass
