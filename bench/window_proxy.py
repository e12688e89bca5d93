"""A loopback TCP proxy that counts HTTP/2 flow control on the wire, both ways.

It sits between a consumer (the client) and a producer (the upstream), forwards every
byte unchanged, and reads the frames as they pass (RFC 9113 §4.1: a 9-byte header,
length, type, flags, stream id, then the payload; the client's side starts with the
24-byte preface). It keeps what bounds a server stream's data:

* the stream window the client announces (``SETTINGS_INITIAL_WINDOW_SIZE``, its last);
* per stream, each ``WINDOW_UPDATE`` increment the client sends (the window it returns);
* per stream, the DATA bytes the server sends (the flow-controlled length: the whole
  payload, padding included).

So ``data_bytes <= initial_window + sum(updates)`` always (the server's transport obeys
the window), with equality once the server has used every byte it was given: the
stream is blocked by flow control. Plaintext HTTP/2 (h2c) only. It runs on an event
loop of its own in a thread (bench.loopback); every wait is bounded.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final

from bench.loopback import LoopbackProxy, pipe

PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADER_BYTES: Final = 9
DATA: Final = 0x0
SETTINGS: Final = 0x4
WINDOW_UPDATE: Final = 0x8
ACK: Final = 0x1
INITIAL_WINDOW_SIZE: Final = 0x4


@dataclass(frozen=True, slots=True)
class Frame:
    kind: int
    flags: int
    stream_id: int
    payload: bytes


@dataclass
class FrameReader:
    """Frames out of a byte stream fed in pieces; ``skip`` bytes first (the preface)."""

    skip: int = 0
    _buffer: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes) -> Iterator[Frame]:
        self._buffer += data
        if self.skip:
            dropped = min(self.skip, len(self._buffer))
            del self._buffer[:dropped]
            self.skip -= dropped
        while len(self._buffer) >= HEADER_BYTES:
            length = int.from_bytes(self._buffer[:3], "big")
            if len(self._buffer) < HEADER_BYTES + length:
                return
            kind, flags, stream_id = struct.unpack(">BBI", self._buffer[3:HEADER_BYTES])
            payload = bytes(self._buffer[HEADER_BYTES : HEADER_BYTES + length])
            del self._buffer[: HEADER_BYTES + length]
            yield Frame(kind, flags, stream_id & 0x7FFFFFFF, payload)


@dataclass(frozen=True, slots=True)
class StreamWindow:
    """One stream's flow control as seen on the wire."""

    #: DATA bytes the server sent on the stream (flow-controlled length).
    data_bytes: int = 0
    #: WINDOW_UPDATE increments the client sent for the stream, in order.
    updates: tuple[int, ...] = ()

    @property
    def returned(self) -> int:
        return sum(self.updates)


def initial_window(frame: Frame) -> int | None:
    """The ``SETTINGS_INITIAL_WINDOW_SIZE`` a SETTINGS frame sets, if it sets one."""
    if frame.kind != SETTINGS or frame.flags & ACK:
        return None
    found = None
    for offset in range(0, len(frame.payload) - 5, 6):
        setting, value = struct.unpack(">HI", frame.payload[offset : offset + 6])
        if setting == INITIAL_WINDOW_SIZE:
            found = value
    return found


class WindowProxy(LoopbackProxy):
    """Forwards ``127.0.0.1:port`` to the upstream; counts the first connection's flow
    control (a consumer's ``stream_reply`` opens one connection per call)."""

    def __init__(self, upstream_port: int) -> None:
        super().__init__(upstream_port)
        self._initial_window: int | None = None
        self._streams: dict[int, StreamWindow] = {}
        self._connections = 0
        self._lock = threading.Lock()

    @property
    def announced_window(self) -> int | None:
        """The stream window the client announced (None: no SETTINGS seen yet)."""
        with self._lock:
            return self._initial_window

    def stream(self, stream_id: int) -> StreamWindow:
        with self._lock:
            return self._streams.get(stream_id, StreamWindow())

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self._connections += 1
        counted = self._connections == 1
        upstream = await self._upstream(client_w)
        if upstream is None:
            return
        up_r, up_w = upstream
        uplink = pipe(client_r, up_w, self._counter(FrameReader(len(PREFACE)), counted, True))
        downlink = pipe(up_r, client_w, self._counter(FrameReader(), counted, False))
        try:
            await asyncio.gather(uplink, downlink)
        except asyncio.CancelledError:  # the proxy stops
            client_w.transport.abort()
            up_w.transport.abort()

    def _counter(
        self, frames: FrameReader, counted: bool, from_client: bool
    ) -> Callable[[bytes], None] | None:
        """What reads one direction's frames as they pass (nothing on a later connection)."""
        if not counted:
            return None

        def count(data: bytes) -> None:
            for frame in frames.feed(data):
                self._count(frame, from_client=from_client)

        return count

    def _count(self, frame: Frame, *, from_client: bool) -> None:
        with self._lock:
            if from_client:
                window = initial_window(frame)
                if window is not None:
                    self._initial_window = window
                if frame.kind == WINDOW_UPDATE and frame.stream_id:
                    (increment,) = struct.unpack(">I", frame.payload[:4])
                    seen = self._streams.get(frame.stream_id, StreamWindow())
                    self._streams[frame.stream_id] = StreamWindow(
                        seen.data_bytes, (*seen.updates, increment & 0x7FFFFFFF)
                    )
            elif frame.kind == DATA and frame.stream_id:
                seen = self._streams.get(frame.stream_id, StreamWindow())
                self._streams[frame.stream_id] = StreamWindow(
                    seen.data_bytes + len(frame.payload), seen.updates
                )
