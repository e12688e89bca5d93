"""A loopback TCP proxy that resets its first client connection after N bytes (or N
seconds).

It forwards both ways between a client (the consumer) and an upstream (the producer).
On the first connection only, once it has forwarded ``reset_after`` bytes from the
upstream to the client, it resets the client's connection (SO_LINGER 0, then close: an
RST, not a FIN) and closes the upstream one; every later connection is forwarded
unchanged. It runs on an event loop of its own in a thread (bench.loopback), so a test
(or a consumer in another process) talks to it like any TCP server; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import socket
import struct

from bench.loopback import READ_BYTES, LoopbackProxy, pipe


class ResetProxy(LoopbackProxy):
    def __init__(
        self, upstream_port: int, reset_after: int | None, *, reset_after_s: float | None = None
    ) -> None:
        super().__init__(upstream_port)
        #: None: never reset (measures an unbroken connection).
        self.reset_after = reset_after
        #: Reset the first connection this long after it opened, whatever it carried.
        self.reset_after_s = reset_after_s
        self.connections = 0
        #: Bytes the upstream sent on the first connection, and where each read ended.
        self.first_bytes = 0
        self.first_read_ends: list[int] = []
        #: The bytes the producer sent on the first connection (a reply is small).
        self.first_downlink = bytearray()
        self.reset_done = False

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            await self._forward(client_r, client_w)
        except asyncio.CancelledError:  # the proxy stops
            client_w.transport.abort()

    async def _forward(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
    ) -> None:
        self.connections += 1
        first = self.connections == 1
        upstream = await self._upstream(client_w)
        if upstream is None:
            return
        up_r, up_w = upstream
        uplink = asyncio.create_task(pipe(client_r, up_w))
        timer = None
        if first and self.reset_after_s is not None:
            loop = asyncio.get_running_loop()
            timer = loop.call_later(self.reset_after_s, self._reset_both, client_w, up_w)
        try:
            await self._downlink(up_r, client_w, first)
        finally:
            if timer is not None:
                timer.cancel()
            uplink.cancel()
            up_w.close()
            client_w.close()

    async def _downlink(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, first: bool
    ) -> None:
        limit = self.reset_after if first else None
        sent = 0
        try:
            while data := await reader.read(READ_BYTES):
                if limit is not None and sent + len(data) >= limit:
                    writer.write(data[: limit - sent])
                    await writer.drain()
                    self._reset(writer)
                    return
                writer.write(data)
                await writer.drain()
                sent += len(data)
                if first:
                    self.first_bytes = sent
                    self.first_read_ends.append(sent)
                    self.first_downlink += data
        except (ConnectionError, OSError):
            return

    def _reset_both(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self._reset(client)
        upstream.transport.abort()

    def _reset(self, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
        self.reset_done = True
