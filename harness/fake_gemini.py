"""A real loopback HTTP/1.1 server that speaks the Gemini REST streaming protocol.

For tests of a Gemini adapter: no mocks, a real socket. Standard library only
(asyncio streams, a hand-written HTTP/1.1 server) so that every failure mode
(slow drip, reset mid-body, a body that ends early) is under the test's control.

Why one module of 1,100 lines: it is read whole by whoever needs to know what a fake
model answers and why: the protocol facts below with their sources, the scripts that
follow them, and the server that plays a script on one connection (the scripts are
methods of the server: they read its published cases, pacing and per-request log).

Use in-process::

    fake = FakeGemini(api_key="test-key")
    port = await fake.start()              # 127.0.0.1, a free port
    ... POST f"{fake.base_url}/v1beta/models/gemini-3.1-flash-lite:streamGenerateContent?alt=sse"
    await fake.wait_idle()                 # every connection handled
    fake.log[-1]["client_disconnected"]
    await fake.stop()

or as a process: ``python -m harness.fake_gemini --port 0 [--api-key KEY] [--ready-file F]``
(``--host ADDRESS --tls-cert C --tls-key K`` to serve HTTPS on another test host)
prints ``listening on 127.0.0.1:PORT`` (flushed; and writes ``HOST:PORT`` to the
ready file, atomically), serves until SIGTERM/SIGINT and
answers ``GET /_fake/log`` with :attr:`FakeGemini.log` as JSON.

Scripts are chosen by the model name in the path (see :data:`SCRIPTS`):
``gemini-3.1-flash-lite`` (:data:`DEFAULT_MODEL`) answers the four development
cases of the published Gemini run (``fixtures/published-lab-record.json``, block
[3]) with exactly the published provider text events; every ``fake-*`` model is a
failure script. Any other model name gets 404 NOT_FOUND.

Protocol facts, and where they were confirmed
---------------------------------------------
Confirmed (stored public material, looked up with the search tool):

* Endpoint ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse``: the
  Gemini API reference (ai.google.dev/api: "streamGenerateContent uses
  server-sent events"); recorded real traffic in google/adk-go
  ``agent/remoteagent/testdata/TestA2ARemoteAgentStreamingGeminiError.httprr``
  (``POST https://generativelanguage.googleapis.com/v1beta/models/
  gemini-2.5-flash:streamGenerateContent?alt=sse``); googleapis/js-genai
  ``src/_api_client.ts`` ``requestStream`` forces ``alt=sse``. Without ``alt=sse``
  the reply is not SSE (discuss.ai.google.dev thread 2963), so this fake refuses it.
* API key in the ``x-goog-api-key`` header: ai.google.dev/api ("all requests to
  the Gemini API must include an x-goog-api-key header", with a curl example).
* Response ``Content-Type: text/event-stream`` plus ``Content-Disposition:
  attachment``, ``Connection: close``, ``Server: scaffolding on HTTPServer2``,
  ``Vary``/``X-*`` headers: the response heads in the adk-go ``.httprr`` traces.
  (Google answers over HTTP/2; this fake uses HTTP/1.1 ``Transfer-Encoding:
  chunked`` with one chunk per event.)
* Each event is one ``data: <GenerateContentResponse JSON>`` line followed by a
  blank line, terminated ``\\r\\n\\r\\n``: adk-go
  ``TestA2ASingleHopFinalResponse_llm_mid-response_error_response.httprr``
  declares a 2498-byte response; its text with LF line ends is 2476 bytes, and
  the 22 missing bytes are exactly one CR per head line (13 + the blank line)
  plus two per event (4 events), so Google sent CRLF and ``\\r\\n\\r\\n`` after
  each event. js-genai ``processStreamResponse`` splits on ``\\n\\n``, ``\\r\\r``
  and ``\\r\\n\\r\\n``. No ``[DONE]``: the traces end right after the event that
  carries ``finishReason``.
* Event JSON shape and spelling: ``{"candidates": [{"content": {"parts":
  [{"text": ...}],"role": "model"},"finishReason": "STOP","index": 0}],
  "usageMetadata": {...},"modelVersion": ...,"responseId": ...}``, serialised
  with ``": "`` and ``","`` separators and raw UTF-8 (adk-go traces; this fake
  reproduces that spelling). ``modelVersion``/``responseId`` are the same on
  every event of one response.
* ``usageMetadata`` fields promptTokenCount, candidatesTokenCount,
  totalTokenCount, promptTokensDetails, thoughtsTokenCount (adk-go traces),
  cachedContentTokenCount (generativelanguage v1beta ``UsageMetadata`` in the
  Node client docs; LangChain's GenerateContentResponseUsageMetadata).
* FinishReason values STOP, MAX_TOKENS, SAFETY, RECITATION, OTHER, ...
  (ai.google.dev python ``protos.Candidate.FinishReason``); "when streaming the
  Candidate.content will be empty if content filters blocked the output"
  (Vertex AI ``Candidate.FinishReason`` reference), hence the SAFETY event here
  has no ``content``.
* ``generationConfig.responseJsonSchema`` is a JSON Schema object; when it is set
  ``responseMimeType`` must be ``application/json`` and ``responseSchema`` must be
  omitted (Firebase AI ``GenerationConfig`` reference).
* Error bodies ``{"error": {"code", "message", "status", "details"?}}``, pretty
  printed, ``application/json; charset=UTF-8``: 429 RESOURCE_EXHAUSTED with
  details QuotaFailure, Help and ``{"@type":
  "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "26s"}``
  (RooCodeInc/Roo-Code#3883, googleapis/python-genai#2114, which reads the
  delay from the body); 500 INTERNAL; 503 UNAVAILABLE "The model is overloaded.
  Please try again later." (google-gemini/cookbook#425); 400 INVALID_ARGUMENT
  for a malformed request (ai.google.dev troubleshooting table).
* Errors can arrive mid-stream after a 200: vercel/ai#5217 (a raw,
  pretty-printed ``{"error": {"code": 503, ...}}`` after two data events),
  maximhq/bifrost#5262 ("pretty-printed JSON error payload directly into the
  HTTP 200 stream body, outside of SSE framing"), js-genai checks every raw
  chunk for ``{"error": ...}``.

Taken from the brief, NOT confirmed (or contradicted) by what was found:

* ``data: {"error": {...}}`` as an SSE event (``fake-midstream-error``) is what
  proxies emit (e.g. lbjlaq/Antigravity-Manager#2322); the Google form found is
  the un-framed one, served here as ``fake-midstream-error-raw``.
* No ``Retry-After`` header on 429: not contradicted, but no source states it.
* Auth errors: the brief asks for 401 UNAUTHENTICATED (no key) and 403
  PERMISSION_DENIED (wrong key). Real Google answers a missing key with 403
  PERMISSION_DENIED "Method doesn't allow unregistered callers ..." (many
  reports, e.g. googleapis/js-genai#898) and a wrong key with 400
  INVALID_ARGUMENT, details ErrorInfo reason ``API_KEY_INVALID`` (e.g.
  google/timesketch#3703, continuedev/continue#8516). ``google_auth_errors=True``
  (``--google-auth-errors``) serves those real shapes instead.
* A key in the URL (``?key=``) is accepted by Google; this fake answers 400 by
  project policy (the client must send the key only in the header).
* ``usageMetadata`` only on the last event: real Gemini (adk-go traces) sends a
  running ``usageMetadata`` on every event; the final one is authoritative.
  ``fake-running-usage`` serves that form.

Hostile-provider scripts (ours, not Google behaviour): ``fake-usage-negative``,
``fake-usage-huge``, ``fake-usage-non-integer`` and ``fake-usage-missing`` answer
the good reply with the implausible usage in :data:`BAD_USAGE`; ``fake-echo-key``
answers 400 with the received API key quoted in the error body;
``fake-slow-start`` holds the response for ``Pacing.start_delay`` seconds (2 s) after
reading the request, then answers the good reply.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import email.utils
import json
import math
import re
import secrets
import signal
import socket
import ssl
import struct
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from producer.files import write_atomically

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED_RECORD = ROOT / "fixtures" / "published-lab-record.json"
GEMINI_BLOCK = 3

DEFAULT_MODEL = "gemini-3.1-flash-lite"
SCRIPTS: tuple[str, ...] = (
    DEFAULT_MODEL,
    "fake-early-eof",
    "fake-max-tokens",
    "fake-safety",
    "fake-midstream-error",
    "fake-midstream-error-raw",
    "fake-rate-limited",
    "fake-server-error",
    "fake-malformed-sse",
    "fake-invalid-json",
    "fake-slow-drip",
    "fake-connection-reset",
    "fake-after-finish",
    "fake-unterminated",
    "fake-running-usage",
    "fake-usage-negative",
    "fake-usage-huge",
    "fake-usage-non-integer",
    "fake-usage-missing",
    "fake-echo-key",
    "fake-slow-start",
)

#: A hostile provider's usage (the reply itself is the good one): the ledger must not believe it.
BAD_USAGE: dict[str, dict[str, Any]] = {
    "fake-usage-negative": {"promptTokenCount": -1_000_000_000, "totalTokenCount": -999_999_000},
    "fake-usage-huge": {"candidatesTokenCount": 1_000_000_000, "totalTokenCount": 1_000_000_100},
    "fake-usage-non-integer": {"candidatesTokenCount": 12.5, "thoughtsTokenCount": "7"},
    "fake-usage-missing": {"promptTokenCount": None, "candidatesTokenCount": None},
}

EVENT_END = b"\r\n\r\n"
ERROR_CONTENT_TYPE = "application/json; charset=UTF-8"
MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024
READ_TIMEOUT_S = 10.0

FALLBACK_REPLY: dict[str, Any] = {
    "status": "not_in_docs",
    "answer": "The supplied documentation does not answer this question.",
    "source_ids": [],
}

RATE_LIMITED_BODY: dict[str, Any] = {
    "error": {
        "code": 429,
        "message": (
            "You exceeded your current quota, please check your plan and billing details. "
            "For more information on this error, head to: "
            "https://ai.google.dev/gemini-api/docs/rate-limits."
        ),
        "status": "RESOURCE_EXHAUSTED",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": (
                            "generativelanguage.googleapis.com/generate_content_paid_tier_requests"
                        ),
                        "quotaId": "GenerateRequestsPerMinutePerProjectPerModel",
                        "quotaDimensions": {"location": "global", "model": DEFAULT_MODEL},
                        "quotaValue": "4000",
                    }
                ],
            },
            {
                "@type": "type.googleapis.com/google.rpc.Help",
                "links": [
                    {
                        "description": "Learn more about Gemini API quotas",
                        "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
                    }
                ],
            },
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"},
        ],
    }
}

SERVER_ERROR_BODY: dict[str, Any] = {
    "error": {
        "code": 500,
        "message": (
            "An internal error has occurred. Please retry or report in "
            "https://developers.generativeai.google/guide/troubleshooting"
        ),
        "status": "INTERNAL",
    }
}

MIDSTREAM_ERROR: dict[str, Any] = {
    "error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}
}

SAFETY_RATINGS: list[dict[str, Any]] = [
    {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}
]

_PATH_RE = re.compile(r"^/v1beta/models/(?P<model>[^/:]+):(?P<method>[A-Za-z]+)$")


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class PublishedCase:
    """One development case of the published Gemini run."""

    case_id: str
    system_text: str
    user_text: str
    texts: tuple[str, ...]  # one per provider text event, in order
    frame_count: int  # published application frames, ``done`` included


def load_published_cases(path: Path = PUBLISHED_RECORD) -> dict[str, PublishedCase]:
    """Block [3] of the published record: user text -> case."""
    record = json.loads(path.read_text(encoding="utf-8"))
    cases: dict[str, PublishedCase] = {}
    for case in record[GEMINI_BLOCK]["cases"]:
        messages = case["binding"]["messages"]
        frames = case["application_frames"]
        texts = tuple(f["text"] for f in frames if f["kind"] == "content_delta")
        user_text = messages[-1][1]
        cases[user_text] = PublishedCase(
            case_id=case["case_id"],
            system_text=messages[0][1],
            user_text=user_text,
            texts=texts,
            frame_count=len(frames),
        )
    return cases


def encode_json(obj: Any) -> str:
    """Google's event spelling: ``": "`` and ``","`` separators, raw UTF-8."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ": "))


def sse_event(obj: Any, *, terminated: bool = True) -> bytes:
    """``data: <json>`` plus ``\\r\\n\\r\\n`` (or only ``\\r\\n`` when unterminated)."""
    return b"data: " + encode_json(obj).encode("utf-8") + (EVENT_END if terminated else b"\r\n")


def error_body(code: int, status: str, message: str, details: list[Any] | None = None) -> bytes:
    err: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details is not None:
        err["details"] = details
    return pretty_json({"error": err})


def pretty_json(obj: Any) -> bytes:
    """Google pretty-prints error bodies (two-space indent, trailing newline)."""
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _split_in_three(text: str) -> tuple[str, ...]:
    a, b = len(text) // 3, 2 * len(text) // 3
    return (text[:a], text[a:b], text[b:])


@dataclass(frozen=True)
class _Step:
    kind: Literal["event", "raw", "reset"]
    data: bytes = b""


@dataclass
class _Turn:
    """What the validated request asked for."""

    model: str
    system_text: str
    user_text: str
    schema: dict[str, Any]
    max_output_tokens: int
    response_id: str = field(default_factory=lambda: secrets.token_urlsafe(16)[:22])


class _ClientGone(Exception):
    """The client closed (or reset) the connection before the body ended."""


class _HttpError(Exception):
    """Answer with this status and Google-style error body."""

    def __init__(
        self, code: int, status: str, message: str, details: list[Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message
        self.details = details


@dataclass
class _Request:
    method: str
    target: str
    version: str
    headers: dict[str, str]
    body: bytes


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    entry: dict[str, Any]
    peer_gone: asyncio.Event = field(default_factory=asyncio.Event)


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


# --------------------------------------------------------------------------- server


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
        self.extra_usage = dict(extra_usage or {})
        self.event_delay = pacing.event_delay
        self.drip_bytes = max(1, pacing.drip_bytes)
        self.drip_delay = pacing.drip_delay
        self.reset_delay = pacing.reset_delay
        self.start_delay = pacing.start_delay
        self.cases = load_published_cases(record_path)
        self.log: list[dict[str, Any]] = []
        self._server: asyncio.Server | None = None
        self._host = "127.0.0.1"
        self._port = 0
        self._scheme = "http"
        self._tasks: set[asyncio.Task[Any]] = set()
        self._scripts: dict[str, Callable[[_Turn], list[_Step]]] = {
            DEFAULT_MODEL: self._script_ok,
            "fake-early-eof": self._script_early_eof,
            "fake-max-tokens": self._script_max_tokens,
            "fake-safety": self._script_safety,
            "fake-midstream-error": self._script_midstream_error,
            "fake-midstream-error-raw": self._script_midstream_error_raw,
            "fake-malformed-sse": self._script_malformed_sse,
            "fake-invalid-json": self._script_invalid_json,
            "fake-slow-drip": self._script_ok,
            "fake-connection-reset": self._script_connection_reset,
            "fake-after-finish": self._script_after_finish,
            "fake-unterminated": self._script_unterminated,
            "fake-running-usage": self._script_running_usage,
            "fake-slow-start": self._script_ok,
            **{name: self._script_bad_usage for name in BAD_USAGE},
        }

    # ---------------------------------------------------------------- lifecycle

    async def start(
        self, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None
    ) -> int:
        """Listen on ``host:port`` (0 = a free port), over TLS with ``tls``; return the
        bound port."""
        if self._server is not None:
            raise RuntimeError("already started")
        self._server = await asyncio.start_server(
            self._handle, host, port, limit=MAX_HEAD_BYTES, reuse_address=True, ssl=tls
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

    # ---------------------------------------------------------------- connection

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        conn: _Conn | None = None
        watcher: asyncio.Task[None] | None = None
        try:
            request = await self._accept(reader, writer)
            if request is None:
                return
            entry = self._new_entry(request)
            self.log.append(entry)
            conn = _Conn(reader, writer, entry)
            watcher = asyncio.create_task(self._watch_peer(conn))
            try:
                turn = self._check(request, entry)
                steps = self._plan(turn, entry)
            except _HttpError as exc:
                await self._send_error(conn, exc)
                return
            await self._stream(conn, steps, drip=entry["script"] == "fake-slow-drip")
        except _ClientGone:
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
    ) -> _Request | None:
        """The request to serve, or None: none came, or it was answered here (malformed
        HTTP, logging nothing; or a ``/_fake/*`` control request)."""
        try:
            request = await self._read_request(reader)
        except _HttpError as exc:  # malformed HTTP: answer, log nothing
            await self._write_plain(writer, exc.code, exc.message)
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
        conn: _Conn | None,
        watcher: asyncio.Task[None] | None,
    ) -> None:
        """Stop watching the peer, mark the log entry finished, close the connection."""
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(BaseException):
                await watcher
        if conn is not None:
            conn.entry["finished"] = True
        await self._close(writer)

    async def _read_request(self, reader: asyncio.StreamReader) -> _Request | None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            return None
        except asyncio.LimitOverrunError as exc:
            raise _HttpError(431, "", "request head too large") from exc
        lines = head[:-4].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise _HttpError(400, "", "bad request line")
        method, target, version = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise _HttpError(400, "", "bad header line")
            key = name.lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        body = await self._read_body(reader, headers)
        return _Request(method, target, version, headers, body)

    async def _read_body(self, reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
        try:
            if "chunked" in headers.get("transfer-encoding", "").lower():
                return await asyncio.wait_for(self._read_chunked(reader), READ_TIMEOUT_S)
            length_text = headers.get("content-length")
            if length_text is None:
                return b""
            if not length_text.isdigit():
                raise _HttpError(400, "", "bad Content-Length")
            length = int(length_text)
            if length > MAX_BODY_BYTES:
                raise _HttpError(413, "", "body too large")
            return await asyncio.wait_for(reader.readexactly(length), READ_TIMEOUT_S)
        except (asyncio.IncompleteReadError, TimeoutError) as exc:
            raise _HttpError(400, "", "incomplete request body") from exc

    async def _read_chunked(self, reader: asyncio.StreamReader) -> bytes:
        body = bytearray()
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                    pass
                return bytes(body)
            body += await reader.readexactly(size)
            if len(body) > MAX_BODY_BYTES:
                raise _HttpError(413, "", "body too large")
            if await reader.readexactly(2) != b"\r\n":
                raise _HttpError(400, "", "bad chunk")

    async def _watch_peer(self, conn: _Conn) -> None:
        """Flag the peer as gone when it closes its side (EOF) or resets."""
        try:
            while await conn.reader.read(4096):
                pass
        except (ConnectionError, OSError):
            pass
        conn.peer_gone.set()

    @staticmethod
    def _new_entry(request: _Request) -> dict[str, Any]:
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

    # ---------------------------------------------------------------- checks

    def _check(self, request: _Request, entry: dict[str, Any]) -> _Turn:
        """Route, authenticate and validate; raise :class:`_HttpError` to refuse."""
        match = _PATH_RE.match(entry["path"])
        if match is None:
            raise _HttpError(
                404, "NOT_FOUND", f"The requested URL {entry['path']} was not found on this server."
            )
        model = unquote(match["model"])
        entry["model"] = model
        if match["method"] != "streamGenerateContent" or request.method != "POST":
            raise _HttpError(
                404,
                "NOT_FOUND",
                f"{request.method} models/{model}:{match['method']} is not served by this fake.",
            )
        query: dict[str, str] = entry["query"]
        if "key" in query:
            raise _HttpError(
                400,
                "INVALID_ARGUMENT",
                "An API key in the URL query (?key=) is refused: "
                "send it in the x-goog-api-key header.",
            )
        self._check_key(request.headers.get("x-goog-api-key"))
        if query.get("alt") != "sse":
            raise _HttpError(
                400, "INVALID_ARGUMENT", "This fake serves streamGenerateContent only with alt=sse."
            )
        if model not in SCRIPTS:
            raise _HttpError(
                404,
                "NOT_FOUND",
                f"models/{model} is not found for API version v1beta, "
                "or is not supported for generateContent.",
            )
        entry["script"] = "ok" if model == DEFAULT_MODEL else model
        body = entry["body"]
        if body is None and request.body:
            raise _HttpError(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
        return _validate(model, body)

    def _check_key(self, key: str | None) -> None:
        if key == self.api_key:
            return
        if self.google_auth_errors:
            if not key:
                raise _HttpError(
                    403,
                    "PERMISSION_DENIED",
                    "Method doesn't allow unregistered callers (callers without established "
                    "identity). Please use API Key or other form of API consumer identity "
                    "to call this API.",
                )
            message = "API key not valid. Please pass a valid API key."
            raise _HttpError(
                400,
                "INVALID_ARGUMENT",
                message,
                [
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "API_KEY_INVALID",
                        "domain": "googleapis.com",
                        "metadata": {"service": "generativelanguage.googleapis.com"},
                    },
                    {
                        "@type": "type.googleapis.com/google.rpc.LocalizedMessage",
                        "locale": "en-US",
                        "message": message,
                    },
                ],
            )
        if not key:
            raise _HttpError(
                401,
                "UNAUTHENTICATED",
                "Request is missing an API key: pass it in the x-goog-api-key header.",
            )
        raise _HttpError(
            403, "PERMISSION_DENIED", "API key not valid. Please pass a valid API key."
        )

    # ---------------------------------------------------------------- scripts

    def _plan(self, turn: _Turn, entry: dict[str, Any]) -> list[_Step]:
        case = self.cases.get(turn.user_text)
        entry["case_id"] = case.case_id if case is not None else None
        if turn.model == "fake-rate-limited":
            raise _HttpError(
                429,
                "RESOURCE_EXHAUSTED",
                RATE_LIMITED_BODY["error"]["message"],
                RATE_LIMITED_BODY["error"]["details"],
            )
        if turn.model == "fake-server-error":
            raise _HttpError(500, "INTERNAL", SERVER_ERROR_BODY["error"]["message"])
        if turn.model == "fake-echo-key":
            # A provider (or a proxy) that quotes the credential back in its error body.
            key = entry["headers"].get("x-goog-api-key", "")
            raise _HttpError(400, "INVALID_ARGUMENT", f"API key {key} is not valid for {key[:8]}")
        return self._scripts[turn.model](turn)

    def _texts(self, turn: _Turn) -> tuple[str, ...]:
        case = self.cases.get(turn.user_text)
        if case is not None:
            return case.texts
        return _split_in_three(json.dumps(FALLBACK_REPLY))

    def usage(self, turn: _Turn, output_text: str) -> dict[str, Any]:
        """Deterministic token counts (about four characters a token)."""
        prompt_chars = len(turn.system_text) + len(turn.user_text) + len(encode_json(turn.schema))
        prompt = math.ceil(prompt_chars / 4)
        candidates = math.ceil(len(output_text) / 4)
        usage: dict[str, Any] = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": candidates,
            "totalTokenCount": prompt + candidates + self.extra_usage.get("thoughtsTokenCount", 0),
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
        }
        usage.update(self.extra_usage)
        return usage

    def response(
        self,
        turn: _Turn,
        text: str | None,
        *,
        finish: str | None = None,
        usage: dict[str, Any] | None = None,
        safety: bool = False,
    ) -> dict[str, Any]:
        """One GenerateContentResponse, in the order Google writes its fields."""
        candidate: dict[str, Any] = {}
        if text is not None:
            candidate["content"] = {"parts": [{"text": text}], "role": "model"}
        if finish is not None:
            candidate["finishReason"] = finish
        candidate["index"] = 0
        if safety:
            candidate["safetyRatings"] = SAFETY_RATINGS
        out: dict[str, Any] = {"candidates": [candidate]}
        if usage is not None:
            out["usageMetadata"] = usage
        out["modelVersion"] = turn.model
        out["responseId"] = turn.response_id
        return out

    def _text_events(
        self, turn: _Turn, texts: Sequence[str], finish: str | None, *, last_terminated: bool = True
    ) -> list[_Step]:
        steps = []
        for i, text in enumerate(texts):
            last = i == len(texts) - 1
            if last and finish is not None:
                obj = self.response(
                    turn, text, finish=finish, usage=self.usage(turn, "".join(texts))
                )
            else:
                obj = self.response(turn, text)
            steps.append(_Step("event", sse_event(obj, terminated=not last or last_terminated)))
        return steps

    def _script_ok(self, turn: _Turn) -> list[_Step]:
        return self._text_events(turn, self._texts(turn), "STOP")

    def _script_early_eof(self, turn: _Turn) -> list[_Step]:
        return self._text_events(turn, self._texts(turn)[:2], None)

    def _script_max_tokens(self, turn: _Turn) -> list[_Step]:
        texts = self._texts(turn)
        return self._text_events(turn, texts[: max(1, len(texts) - 1)], "MAX_TOKENS")

    def _script_safety(self, turn: _Turn) -> list[_Step]:
        first = self._texts(turn)[0]
        blocked = self.response(
            turn, None, finish="SAFETY", usage=self.usage(turn, first), safety=True
        )
        return [*self._text_events(turn, [first], None), _Step("event", sse_event(blocked))]

    def _script_midstream_error(self, turn: _Turn) -> list[_Step]:
        first = self._text_events(turn, self._texts(turn)[:1], None)
        return [*first, _Step("event", sse_event(MIDSTREAM_ERROR))]

    def _script_midstream_error_raw(self, turn: _Turn) -> list[_Step]:
        first = self._text_events(turn, self._texts(turn)[:1], None)
        return [*first, _Step("raw", pretty_json(MIDSTREAM_ERROR))]

    def _script_malformed_sse(self, turn: _Turn) -> list[_Step]:
        first = self._text_events(turn, self._texts(turn)[:1], None)
        return [*first, _Step("raw", b"this is not sse" + EVENT_END)]

    def _script_invalid_json(self, turn: _Turn) -> list[_Step]:
        return [_Step("event", b'data: {"candidates": [' + EVENT_END)]

    def _script_connection_reset(self, turn: _Turn) -> list[_Step]:
        return [*self._text_events(turn, self._texts(turn)[:1], None), _Step("reset")]

    def _script_after_finish(self, turn: _Turn) -> list[_Step]:
        texts = self._texts(turn)
        head, tail = texts[0], "".join(texts[1:]) or " "
        done = self.response(turn, head, finish="STOP", usage=self.usage(turn, head))
        return [
            _Step("event", sse_event(done)),
            _Step("event", sse_event(self.response(turn, tail))),
        ]

    def _script_unterminated(self, turn: _Turn) -> list[_Step]:
        return self._text_events(turn, self._texts(turn), "STOP", last_terminated=False)

    def _script_bad_usage(self, turn: _Turn) -> list[_Step]:
        texts = self._texts(turn)
        usage = self.usage(turn, "".join(texts))
        for key, value in BAD_USAGE[turn.model].items():
            if value is None:
                usage.pop(key, None)
            else:
                usage[key] = value
        steps = self._text_events(turn, texts[:-1], None)
        last = self.response(turn, texts[-1], finish="STOP", usage=usage)
        return [*steps, _Step("event", sse_event(last))]

    def _script_running_usage(self, turn: _Turn) -> list[_Step]:
        texts = self._texts(turn)
        steps = []
        for i, text in enumerate(texts):
            last = i == len(texts) - 1
            usage = self.usage(turn, "".join(texts[: i + 1]))
            obj = self.response(turn, text, finish="STOP" if last else None, usage=usage)
            steps.append(_Step("event", sse_event(obj)))
        return steps

    # ---------------------------------------------------------------- writing

    async def _stream(self, conn: _Conn, steps: list[_Step], *, drip: bool) -> None:
        if conn.entry["script"] == "fake-slow-start":
            await self._pause(conn, self.start_delay)  # the request is in; no answer yet
        conn.entry["status"] = 200
        head = _head(
            200,
            [
                ("Content-Type", "text/event-stream"),
                ("Content-Disposition", "attachment"),
                *_google_headers(),
                ("Transfer-Encoding", "chunked"),
                ("Connection", "close"),
            ],
        )
        await self._write(conn, head, count=False)
        for step in steps:
            if step.kind == "reset":
                await self._pause(conn, self.reset_delay)
                _reset(conn.writer)
                conn.entry["server_reset"] = True
                return
            if drip:
                for i in range(0, len(step.data), self.drip_bytes):
                    await self._write(conn, _chunk(step.data[i : i + self.drip_bytes]))
                    await self._pause(conn, self.drip_delay)
            else:
                await self._write(conn, _chunk(step.data))
                await self._pause(conn, self.event_delay)
            if step.kind == "event":
                conn.entry["events_sent"] += 1
        await self._write(conn, b"0\r\n\r\n")
        conn.entry["body_completed"] = True

    async def _send_error(self, conn: _Conn, exc: _HttpError) -> None:
        conn.entry.update(status=exc.code, error_status=exc.status, error_message=exc.message)
        body = error_body(exc.code, exc.status, exc.message, exc.details)
        head = _head(
            exc.code,
            [
                ("Content-Type", ERROR_CONTENT_TYPE),
                *_google_headers(),
                ("Content-Length", str(len(body))),
                ("Connection", "close"),
            ],
        )
        await self._write(conn, head, count=False)
        await self._write(conn, body)
        conn.entry["body_completed"] = True

    async def _write(self, conn: _Conn, data: bytes, *, count: bool = True) -> None:
        if conn.peer_gone.is_set():
            raise _ClientGone
        try:
            conn.writer.write(data)
            await conn.writer.drain()
        except (ConnectionError, OSError) as exc:
            raise _ClientGone from exc
        if count:
            conn.entry["bytes_sent"] += len(data)

    @staticmethod
    async def _pause(conn: _Conn, delay: float) -> None:
        """Sleep ``delay`` seconds, or stop early with :class:`_ClientGone`."""
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(conn.peer_gone.wait(), delay)
        if conn.peer_gone.is_set():
            raise _ClientGone

    async def _serve_control(self, writer: asyncio.StreamWriter, method: str, path: str) -> None:
        if method == "GET" and path == "/_fake/log":
            body = json.dumps(self.log, ensure_ascii=False).encode("utf-8")
            status = 200
        else:
            body, status = error_body(404, "NOT_FOUND", f"no control endpoint {path}"), 404
        writer.write(
            _head(
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

    @staticmethod
    async def _write_plain(writer: asyncio.StreamWriter, code: int, message: str) -> None:
        body = (message + "\n").encode()
        writer.write(
            _head(
                code,
                [
                    ("Content-Type", "text/plain; charset=UTF-8"),
                    ("Content-Length", str(len(body))),
                    ("Connection", "close"),
                ],
            )
            + body
        )
        with contextlib.suppress(ConnectionError, OSError):
            await writer.drain()

    @staticmethod
    async def _close(writer: asyncio.StreamWriter) -> None:
        if writer.transport.is_closing():
            return
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 2.0)


# --------------------------------------------------------------------------- helpers


def _bad(message: str) -> _HttpError:
    return _HttpError(400, "INVALID_ARGUMENT", message)


def _validate(model: str, body: Any) -> _Turn:
    """The request shape the adapter must send; 400 INVALID_ARGUMENT otherwise."""
    if not isinstance(body, dict):
        raise _bad("Invalid JSON payload received: the body must be a JSON object.")
    user_text = _user_text(body.get("contents"))
    system = body.get("systemInstruction")
    system_text = _first_text(system) if isinstance(system, dict) else None
    if system_text is None:
        raise _bad("systemInstruction.parts[0].text must be a string.")
    schema, max_tokens = _generation_config(body.get("generationConfig"))
    return _Turn(model, system_text, user_text, schema, max_tokens)


def _user_text(contents: Any) -> str:
    """The one user turn's text."""
    if not isinstance(contents, list) or len(contents) != 1 or not isinstance(contents[0], dict):
        raise _bad("contents must be a list holding exactly one user turn.")
    turn = contents[0]
    if turn.get("role", "user") != "user":
        raise _bad("contents[0].role must be 'user'.")
    user_text = _first_text(turn)
    if user_text is None:
        raise _bad("contents[0].parts[0].text must be a string.")
    return user_text


def _generation_config(config: Any) -> tuple[dict[str, Any], int]:
    """The response schema and maxOutputTokens of a JSON-only generationConfig."""
    if not isinstance(config, dict):
        raise _bad("generationConfig must be an object.")
    if config.get("responseMimeType") != "application/json":
        raise _bad("generationConfig.responseMimeType must be 'application/json'.")
    schema = config.get("responseJsonSchema")
    if not isinstance(schema, dict):
        raise _bad("generationConfig.responseJsonSchema must be a JSON Schema object.")
    if "responseSchema" in config:
        raise _bad("responseSchema must be omitted when responseJsonSchema is set.")
    max_tokens = config.get("maxOutputTokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens <= 0:
        raise _bad("generationConfig.maxOutputTokens must be a positive integer.")
    return schema, max_tokens


def _first_text(content: dict[str, Any]) -> str | None:
    parts = content.get("parts")
    if not isinstance(parts, list) or not parts or not isinstance(parts[0], dict):
        return None
    text = parts[0].get("text")
    return text if isinstance(text, str) else None


def _head(code: int, headers: list[tuple[str, str]]) -> bytes:
    phrase = HTTPStatus(code).phrase
    lines = [f"HTTP/1.1 {code} {phrase}", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _google_headers() -> list[tuple[str, str]]:
    return [
        ("Date", email.utils.formatdate(usegmt=True)),
        ("Server", "scaffolding on HTTPServer2"),
        ("Vary", "Origin"),
        ("Vary", "X-Origin"),
        ("Vary", "Referer"),
        ("X-XSS-Protection", "0"),
        ("X-Frame-Options", "SAMEORIGIN"),
        ("X-Content-Type-Options", "nosniff"),
        ("Server-Timing", "gfet4t7; dur=1"),
    ]


def _chunk(data: bytes) -> bytes:
    return f"{len(data):X}\r\n".encode() + data + b"\r\n"


def _reset(writer: asyncio.StreamWriter) -> None:
    """Abort the TCP connection with RST (SO_LINGER 0), not a clean FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


# --------------------------------------------------------------------------- process


async def _serve(args: argparse.Namespace) -> int:
    fake = FakeGemini(
        api_key=args.api_key,
        google_auth_errors=args.google_auth_errors,
        pacing=Pacing(drip_delay=args.drip_delay_s),
    )
    tls = None
    if args.tls_cert is not None:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
    port = await fake.start(args.host, args.port, tls)
    print(f"listening on {args.host}:{port}", flush=True)
    if args.ready_file is not None:
        write_atomically(args.ready_file, f"{args.host}:{port}".encode())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await fake.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.fake_gemini",
        description="A fake Gemini streaming server on loopback: try the gemini source, "
        "--record and record-to-replay without a key (point --gemini-base-url at it).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--api-key", default="test-key", help="the key it accepts (GEMINI_API_KEY of the producer)"
    )
    parser.add_argument(
        "--ready-file",
        type=Path,
        default=None,
        help="once listening, write HOST:PORT to this file (atomically)",
    )
    parser.add_argument(
        "--tls-cert", type=Path, default=None, help="serve HTTPS with this certificate"
    )
    parser.add_argument("--tls-key", type=Path, default=None, help="... and this key")
    parser.add_argument(
        "--google-auth-errors",
        action="store_true",
        help="answer a missing key with 403 and a wrong key with 400 API_KEY_INVALID (as Google)",
    )
    parser.add_argument(
        "--drip-delay-s",
        type=float,
        default=Pacing().drip_delay,
        help="seconds between the 8-byte pieces of a fake-slow-drip reply",
    )
    return asyncio.run(_serve(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
