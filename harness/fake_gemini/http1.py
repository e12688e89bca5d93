"""HTTP/1.1 on one connection, by hand: a request read, an answer's bytes written.

Hand-written (asyncio streams, no HTTP library) so that each way a reply can go wrong
is the fake's to choose: a body written a few bytes at a time, a connection reset
(RST, not FIN) mid-body, a chunked body that never ends. A malformed request raises
:class:`~harness.fake_gemini.protocol.HttpError` with an empty status (answered in
plain text); a client that goes away raises :class:`ClientGone` at the next write or pause.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from harness.fake_gemini.protocol import HttpError

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024
READ_TIMEOUT_S = 10.0


class ClientGone(Exception):
    """The client closed (or reset) the connection before the body ended."""


@dataclass
class Request:
    method: str
    target: str
    version: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Conn:
    """One connection being answered: its streams, its log entry, whether the peer left."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    entry: dict[str, Any]
    peer_gone: asyncio.Event = field(default_factory=asyncio.Event)


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request, or None when none came (EOF, reset, or nothing in time)."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
    except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
        return None
    except asyncio.LimitOverrunError as exc:
        raise HttpError(431, "", "request head too large") from exc
    lines = head[:-4].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, "", "bad request line")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpError(400, "", "bad header line")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    body = await read_body(reader, headers)
    return Request(method, target, version, headers, body)


async def read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return await asyncio.wait_for(read_chunked(reader), READ_TIMEOUT_S)
        length_text = headers.get("content-length")
        if length_text is None:
            return b""
        if not length_text.isdigit():
            raise HttpError(400, "", "bad Content-Length")
        length = int(length_text)
        if length > MAX_BODY_BYTES:
            raise HttpError(413, "", "body too large")
        return await asyncio.wait_for(reader.readexactly(length), READ_TIMEOUT_S)
    except (asyncio.IncompleteReadError, TimeoutError) as exc:
        raise HttpError(400, "", "incomplete request body") from exc


async def read_chunked(reader: asyncio.StreamReader) -> bytes:
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
            raise HttpError(413, "", "body too large")
        if await reader.readexactly(2) != b"\r\n":
            raise HttpError(400, "", "bad chunk")


async def watch_peer(conn: Conn) -> None:
    """Flag the peer as gone when it closes its side (EOF) or resets."""
    try:
        while await conn.reader.read(4096):
            pass
    except (ConnectionError, OSError):
        pass
    conn.peer_gone.set()


async def write(conn: Conn, data: bytes, *, count: bool = True) -> None:
    """Write ``data`` (counted in the log entry's ``bytes_sent`` unless ``count`` is false)."""
    if conn.peer_gone.is_set():
        raise ClientGone
    try:
        conn.writer.write(data)
        await conn.writer.drain()
    except (ConnectionError, OSError) as exc:
        raise ClientGone from exc
    if count:
        conn.entry["bytes_sent"] += len(data)


async def pause(conn: Conn, delay: float) -> None:
    """Sleep ``delay`` seconds, or stop early with :class:`ClientGone`."""
    if delay > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(conn.peer_gone.wait(), delay)
    if conn.peer_gone.is_set():
        raise ClientGone


async def write_plain(writer: asyncio.StreamWriter, code: int, message: str) -> None:
    """Answer a malformed request: ``code`` and ``message`` in plain text."""
    body = (message + "\n").encode()
    writer.write(
        response_head(
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


async def close(writer: asyncio.StreamWriter) -> None:
    """Close the connection (unless it is closing already), waiting at most 2 s."""
    if writer.transport.is_closing():
        return
    writer.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(writer.wait_closed(), 2.0)


def response_head(code: int, headers: list[tuple[str, str]]) -> bytes:
    """The status line and ``headers`` of a response, and the blank line after them."""
    phrase = HTTPStatus(code).phrase
    lines = [f"HTTP/1.1 {code} {phrase}", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunk(data: bytes) -> bytes:
    """``data`` as one chunk of a ``Transfer-Encoding: chunked`` body."""
    return f"{len(data):X}\r\n".encode() + data + b"\r\n"


def reset(writer: asyncio.StreamWriter) -> None:
    """Abort the TCP connection with RST (SO_LINGER 0), not a clean FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
