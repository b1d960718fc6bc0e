"""The one length-prefixed frame format of every protocol the bridge speaks (relay RPCs, store,
filter, and whatever comes next): an unsigned varint length, then that many bytes.

`frame(data)` writes one; `FrameReader` reads them from a libp2p stream through a buffer
(py-libp2p's own reader takes the prefix byte by byte, and with yamux every read sends a window
update), so many small frames cost one read.

    frames = FrameReader(stream, max_len=64 * 1024)
    while (data := await frames.read_frame()) is not None:
        ...
"""
from __future__ import annotations

import time

import trio
from libp2p.abc import INetStream
from libp2p.network.stream.exceptions import StreamEOF
from libp2p.utils.varint import encode_uvarint

READ_CHUNK = 64 * 1024

uvarint = encode_uvarint  # py-libp2p's unsigned varint


class FrameError(Exception):
    """The peer sent something that is not a frame we accept (oversized, a bad length prefix,
    or the stream ended inside a frame); the stream should be closed."""


class FrameTimeout(FrameError):
    """The peer sent nothing for the reader's idle timeout."""


def frame(data: bytes) -> bytes:
    return encode_uvarint(len(data)) + data


class FrameReader:
    """Length-prefixed frames read from one stream through a buffer (one reader per stream: it
    may read ahead of the frame it returns)."""

    def __init__(self, stream: INetStream, max_len: int, chunk: int = READ_CHUNK,
                 idle_timeout_s: float | None = None) -> None:
        self.stream = stream
        self.max_len = max_len
        self.chunk = chunk
        # Silence (no byte at all) for this long raises FrameTimeout; a peer that keeps sending,
        # however slowly, is not cut off.
        self.idle_timeout_s = idle_timeout_s
        self.buf = bytearray()
        self.pos = 0
        # When the bytes that completed the frame last returned came off the stream: the wall
        # clock (a message's receive time) and perf_counter (latency measurements).
        self.arrived_time = 0.0
        self.arrived_perf = 0.0

    async def _fill(self) -> bool:
        if self.pos and self.pos * 2 >= len(self.buf):
            del self.buf[: self.pos]
            self.pos = 0
        try:
            if self.idle_timeout_s is None:
                data = await self.stream.read(self.chunk)
            else:
                with trio.move_on_after(self.idle_timeout_s) as idle:
                    data = await self.stream.read(self.chunk)
                if idle.cancelled_caught:
                    raise FrameTimeout(f"nothing received for {self.idle_timeout_s:g} s")
        except StreamEOF:
            return False
        if not data:
            return False
        self.arrived_time, self.arrived_perf = time.time(), time.perf_counter()
        self.buf += data
        return True

    async def read_frame(self) -> bytes | None:
        """The next frame, or None at a clean end of stream; FrameError otherwise."""
        while True:
            value = shift = 0
            i, end = self.pos, len(self.buf)
            complete = False
            while i < end:
                b = self.buf[i]
                i += 1
                value |= (b & 0x7F) << shift
                if not b & 0x80:
                    complete = True
                    break
                shift += 7
                if shift > 63:
                    raise FrameError("invalid varint length prefix")
            if complete:
                if value > self.max_len:
                    raise FrameError(f"frame of {value} bytes exceeds the limit of {self.max_len}")
                if end - i >= value:
                    data = bytes(self.buf[i: i + value])
                    self.pos = i + value
                    return data
            if not await self._fill():
                if len(self.buf) > self.pos:
                    raise FrameError("stream ended inside a frame")
                return None


async def read_frame(stream: INetStream, max_len: int) -> bytes:
    """The one frame of a stream that carries one (a request or a push); FrameError when the
    stream ends first or the frame is not acceptable."""
    data = await FrameReader(stream, max_len).read_frame()
    if data is None:
        raise FrameError("stream closed before a frame")
    return data


def peer_of(stream: INetStream) -> str:
    """The base58 peer id at the other end of a stream ("?" when the connection is gone)."""
    try:
        return stream.muxed_conn.peer_id.to_base58()
    except Exception:  # noqa: BLE001
        return "?"


async def close_quietly(stream: INetStream) -> None:
    """Close a stream we are done with, within a second; a stream already gone is fine."""
    with trio.move_on_after(1):
        try:
            await stream.close()
        except Exception:  # noqa: BLE001 - the stream is gone either way
            pass
