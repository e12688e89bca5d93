"""A loopback TCP proxy that resets its first client connection after N bytes.

It forwards both ways between a client (the consumer) and an upstream (the producer).
On the first connection only, once it has forwarded ``reset_after`` bytes from the
upstream to the client, it resets the client's connection (SO_LINGER 0, then close: an
RST, not a FIN) and closes the upstream one; every later connection is forwarded
unchanged. It runs on an event loop of its own in a thread, so a test (or a consumer
in another process) talks to it like any TCP server; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from types import TracebackType

STOP_TIMEOUT_S = 10.0
READ_BYTES = 65536


class ResetProxy:
    def __init__(self, upstream_port: int, reset_after: int | None) -> None:
        self.upstream_port = upstream_port
        #: None: never reset (measures an unbroken connection).
        self.reset_after = reset_after
        self.port = 0
        self.connections = 0
        #: Bytes the upstream sent on the first connection, and where each read ended.
        self.first_bytes = 0
        self.first_read_ends: list[int] = []
        #: The bytes the producer sent on the first connection (a reply is small).
        self.first_downlink = bytearray()
        self.reset_done = False
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._server: asyncio.Server | None = None

    def __enter__(self) -> ResetProxy:
        self._thread.start()
        if not self._ready.wait(STOP_TIMEOUT_S):
            raise RuntimeError("the proxy did not start")
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(STOP_TIMEOUT_S)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

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
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_w.close()
            return
        uplink = asyncio.create_task(self._pipe(client_r, up_w))
        try:
            await self._downlink(up_r, client_w, first)
        finally:
            uplink.cancel()
            up_w.close()
            client_w.close()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(READ_BYTES):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

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

    def _reset(self, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
        self.reset_done = True
