"""The fake Gemini server: it listens, reads each request, plays its script, logs it.

``FakeGemini`` serves one request per connection (``Connection: close``): the request is
read (``http1``), checked (``checks``), planned by the model's script (``scripts``) and
written as Google writes it (``protocol``), at the pace of :class:`Pacing`; or refused
with a Google-style error body. Every request but the ``/_fake/*`` control requests is
logged (:attr:`FakeGemini.log`); ``GET /_fake/log`` answers the log as JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from harness.fake_gemini import http1
from harness.fake_gemini.checks import check
from harness.fake_gemini.http1 import ClientGone, Conn, Request, response_head
from harness.fake_gemini.protocol import (
    ERROR_CONTENT_TYPE,
    HttpError,
    error_body,
    google_headers,
)
from harness.fake_gemini.scripts import DEFAULT_MODEL, PUBLISHED_RECORD, Scripts, Step


@dataclass(frozen=True)
class Pacing:
    """How fast the fake writes: seconds between events (``event_delay``), bytes per piece
    and seconds between pieces for ``fake-slow-drip``, seconds before a scripted reset, and
    seconds ``fake-slow-start`` holds the response."""

    event_delay: float = 0.0
    drip_bytes: int = 8
    drip_delay: float = 0.02
    reset_delay: float = 0.05
    start_delay: float = 2.0


class FakeGemini:
    """A loopback Gemini ``streamGenerateContent?alt=sse`` server with scripted replies.

    ``log`` holds one dict per request received (``/_fake/*`` requests excepted):
    method, path, target, query, headers (lower-case names), body (parsed JSON or
    None), body_bytes, model, script, case_id, status, error_status,
    error_message, events_sent (SSE events fully written), bytes_sent (body bytes
    written), client_disconnected (the client closed before the body ended),
    body_completed (the whole body was written), server_reset (the script reset
    the connection), finished (the handler is done).
    """

    def __init__(
        self,
        api_key: str = "test-key",
        *,
        record_path: Path = PUBLISHED_RECORD,
        google_auth_errors: bool = False,
        extra_usage: dict[str, int] | None = None,
        pacing: Pacing = Pacing(),
    ) -> None:
        self.api_key = api_key
        self.google_auth_errors = google_auth_errors
        self.event_delay = pacing.event_delay
        self.drip_bytes = max(1, pacing.drip_bytes)
        self.drip_delay = pacing.drip_delay
        self.reset_delay = pacing.reset_delay
        self.start_delay = pacing.start_delay
        self.scripts = Scripts(record_path, extra_usage)
        self.log: list[dict[str, Any]] = []
        self._server: asyncio.Server | None = None
        self._host = "127.0.0.1"
        self._port = 0
        self._scheme = "http"
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(
        self, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None
    ) -> int:
        """Listen on ``host:port`` (0 = a free port), over TLS with ``tls``; return the
        bound port."""
        if self._server is not None:
            raise RuntimeError("already started")
        self._server = await asyncio.start_server(
            self._handle, host, port, limit=http1.MAX_HEAD_BYTES, reuse_address=True, ssl=tls
        )
        self._scheme = "http" if tls is None else "https"
        self._host = host
        self._port = int(self._server.sockets[0].getsockname()[1])
        return self._port

    async def stop(self) -> None:
        """Stop listening, cancel connections still being served, wait for them."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5.0)

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        return f"{self._scheme}://{self._host}:{self._port}"

    def url(self, model: str = DEFAULT_MODEL, query: str = "alt=sse") -> str:
        """The streaming URL for ``model`` (the script name)."""
        suffix = f"?{query}" if query else ""
        return f"{self.base_url}/v1beta/models/{model}:streamGenerateContent{suffix}"

    async def wait_idle(self, timeout: float = 5.0) -> None:
        """Wait (bounded) until no connection is being served."""
        deadline = time.monotonic() + timeout
        while self._tasks:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{len(self._tasks)} connection(s) still open")
            await asyncio.sleep(0.01)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection: its one request, logged, checked, and answered."""
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        conn: Conn | None = None
        watcher: asyncio.Task[None] | None = None
        try:
            request = await self._accept(reader, writer)
            if request is None:
                return
            entry = self._new_entry(request)
            self.log.append(entry)
            conn = Conn(reader, writer, entry)
            watcher = asyncio.create_task(http1.watch_peer(conn))
            try:
                turn = check(
                    request,
                    entry,
                    api_key=self.api_key,
                    google_auth_errors=self.google_auth_errors,
                )
                steps = self.scripts.plan(turn, entry)
            except HttpError as exc:
                await self._send_error(conn, exc)
                return
            await self._stream(conn, steps, drip=entry["script"] == "fake-slow-drip")
        except ClientGone:
            if conn is not None:
                conn.entry["client_disconnected"] = True
        except asyncio.CancelledError:
            if conn is not None:
                conn.entry["cancelled_by_server"] = True
            raise
        finally:
            await self._end(writer, conn, watcher)
            if task is not None:
                self._tasks.discard(task)

    async def _accept(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Request | None:
        """The request to serve, or None: none came, or it was answered here (malformed
        HTTP, logging nothing; or a ``/_fake/*`` control request)."""
        try:
            request = await http1.read_request(reader)
        except HttpError as exc:  # malformed HTTP: answer, log nothing
            await http1.write_plain(writer, exc.code, exc.message)
            return None
        if request is None:
            return None
        split = urlsplit(request.target)
        if split.path.startswith("/_fake/"):
            await self._serve_control(writer, request.method, split.path)
            return None
        return request

    async def _end(
        self,
        writer: asyncio.StreamWriter,
        conn: Conn | None,
        watcher: asyncio.Task[None] | None,
    ) -> None:
        """Stop watching the peer, mark the log entry finished, close the connection."""
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(BaseException):
                await watcher
        if conn is not None:
            conn.entry["finished"] = True
        await http1.close(writer)

    @staticmethod
    def _new_entry(request: Request) -> dict[str, Any]:
        """The log entry of ``request``, before it is checked."""
        split = urlsplit(request.target)
        body: Any = None
        if request.body:
            try:
                body = json.loads(request.body)
            except (UnicodeDecodeError, json.JSONDecodeError):
                body = None
        return {
            "method": request.method,
            "path": split.path,
            "target": request.target,
            "query": dict(parse_qsl(split.query, keep_blank_values=True)),
            "headers": dict(request.headers),
            "body": body,
            "body_bytes": len(request.body),
            "model": None,
            "script": None,
            "case_id": None,
            "status": None,
            "error_status": None,
            "error_message": None,
            "events_sent": 0,
            "bytes_sent": 0,
            "client_disconnected": False,
            "body_completed": False,
            "server_reset": False,
            "finished": False,
        }

    async def _stream(self, conn: Conn, steps: list[Step], *, drip: bool) -> None:
        """Answer 200 and write the script's ``steps`` as a chunked SSE body, at the pace
        asked (``drip``: a few bytes at a time)."""
        if conn.entry["script"] == "fake-slow-start":
            await http1.pause(conn, self.start_delay)  # the request is in; no answer yet
        conn.entry["status"] = 200
        head = response_head(
            200,
            [
                ("Content-Type", "text/event-stream"),
                ("Content-Disposition", "attachment"),
                *google_headers(),
                ("Transfer-Encoding", "chunked"),
                ("Connection", "close"),
            ],
        )
        await http1.write(conn, head, count=False)
        for step in steps:
            if step.kind == "reset":
                await http1.pause(conn, self.reset_delay)
                http1.reset(conn.writer)
                conn.entry["server_reset"] = True
                return
            if drip:
                for i in range(0, len(step.data), self.drip_bytes):
                    await http1.write(conn, http1.chunk(step.data[i : i + self.drip_bytes]))
                    await http1.pause(conn, self.drip_delay)
            else:
                await http1.write(conn, http1.chunk(step.data))
                await http1.pause(conn, self.event_delay)
            if step.kind == "event":
                conn.entry["events_sent"] += 1
        await http1.write(conn, b"0\r\n\r\n")
        conn.entry["body_completed"] = True

    async def _send_error(self, conn: Conn, exc: HttpError) -> None:
        """Refuse the request: ``exc``'s status and Google-style error body."""
        conn.entry.update(status=exc.code, error_status=exc.status, error_message=exc.message)
        body = error_body(exc.code, exc.status, exc.message, exc.details)
        head = response_head(
            exc.code,
            [
                ("Content-Type", ERROR_CONTENT_TYPE),
                *google_headers(),
                ("Content-Length", str(len(body))),
                ("Connection", "close"),
            ],
        )
        await http1.write(conn, head, count=False)
        await http1.write(conn, body)
        conn.entry["body_completed"] = True

    async def _serve_control(self, writer: asyncio.StreamWriter, method: str, path: str) -> None:
        """A ``/_fake/*`` request: ``GET /_fake/log`` is the log as JSON; the rest, 404."""
        if method == "GET" and path == "/_fake/log":
            body = json.dumps(self.log, ensure_ascii=False).encode("utf-8")
            status = 200
        else:
            body, status = error_body(404, "NOT_FOUND", f"no control endpoint {path}"), 404
        writer.write(
            response_head(
                status,
                [
                    ("Content-Type", ERROR_CONTENT_TYPE),
                    ("Content-Length", str(len(body))),
                    ("Connection", "close"),
                ],
            )
            + body
        )
        with contextlib.suppress(ConnectionError, OSError):
            await writer.drain()
