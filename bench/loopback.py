"""A loopback TCP proxy on an event loop of its own, in a thread: the part every proxy
between a consumer and a producer shares (bench.window_proxy counts HTTP/2 flow
control through it; tests/reset_proxy.py resets a connection through it).

It listens on an ephemeral port of 127.0.0.1 and opens a connection to the upstream
port for each client; a subclass says what flows between the two (``_serve``). A test,
or a consumer in another process, talks to it like any TCP server; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Final, Self

#: How long starting or stopping the proxy's thread may take.
THREAD_TIMEOUT_S: Final = 10.0
READ_BYTES: Final = 65536


class LoopbackProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self._thread.start()
        if not self._ready.wait(THREAD_TIMEOUT_S):
            raise RuntimeError("the proxy did not start")
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(THREAD_TIMEOUT_S)

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
        """One client connection, for as long as it lasts (cancelled when the proxy stops)."""
        raise NotImplementedError

    async def _upstream(
        self, client_w: asyncio.StreamWriter
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to the upstream for a client; None (the client closed) if refused."""
        try:
            return await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_w.close()
            return None


async def pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    observe: Callable[[bytes], None] | None = None,
) -> None:
    """Forward ``reader`` to ``writer`` unchanged until either side ends, showing each
    piece to ``observe`` once it is forwarded; the writer is closed after."""
    try:
        while data := await reader.read(READ_BYTES):
            writer.write(data)
            await writer.drain()
            if observe is not None:
                observe(data)
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()
