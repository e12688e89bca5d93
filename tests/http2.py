"""Raw HTTP/2 frames, built by hand (RFC 9113 §4.1), for peers that misbehave on purpose.

A frame is a 9-byte header — length (3 bytes), type, flags, stream id (31 bits) —
then its payload. Only what the tests send: the client preface, SETTINGS, GOAWAY and PING.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Final

# The preface and frame types the proxy reads, for the tests that send them.
from bench.window_proxy import ACK, PREFACE, SETTINGS

__all__ = [
    "ACK", "GOAWAY", "INTERNAL_ERROR", "NO_ERROR", "PING", "PREFACE", "SETTINGS",
    "OneShotServer", "frame", "goaway", "ping", "read_some", "read_until_ping_ack", "settings",
]  # fmt: skip

PING: Final = 0x6
GOAWAY: Final = 0x7
#: RFC 9113 §7: the defined error codes are 0x0 (NO_ERROR) .. 0xd (HTTP_1_1_REQUIRED).
NO_ERROR: Final = 0x0
INTERNAL_ERROR: Final = 0x2


def frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", kind, flags, stream_id) + payload
    )


def settings(*, ack: bool = False) -> bytes:
    return frame(SETTINGS, ACK if ack else 0, 0, b"")


def goaway(error_code: int, debug_data: bytes = b"", last_stream_id: int = 0) -> bytes:
    return frame(GOAWAY, 0, 0, struct.pack(">II", last_stream_id, error_code) + debug_data)


def ping(opaque: bytes = b"replywir", *, ack: bool = False) -> bytes:
    return frame(PING, ACK if ack else 0, 0, opaque)


def read_until_ping_ack(
    connection: socket.socket, opaque: bytes = b"replywir", timeout_s: float = 10.0
) -> bool:
    """Read frames until the peer acknowledges our PING (bounded): it then has read every
    frame sent before that PING (a peer reads a connection's frames in order). False if
    the peer closed the connection, or the time ran out, first."""
    deadline = time.monotonic() + timeout_s
    buffer = b""
    while (left := deadline - time.monotonic()) > 0:
        connection.settimeout(left)
        data = read_some(connection)
        if not data:
            return False
        buffer += data
        while len(buffer) >= 9 and len(buffer) >= 9 + int.from_bytes(buffer[:3], "big"):
            length, kind, flags = int.from_bytes(buffer[:3], "big"), buffer[3], buffer[4]
            payload, buffer = buffer[9 : 9 + length], buffer[9 + length :]
            if kind == PING and flags & ACK and payload == opaque:
                return True
    return False


def read_some(connection: socket.socket, limit: int = 65536) -> bytes:
    try:
        return connection.recv(limit)
    except OSError:
        return b""


class OneShotServer:
    """A TCP server on loopback that accepts one connection and answers it with ``reply``
    once the client has sent its first bytes (its preface and SETTINGS, usually its
    first HEADERS as well); then reads until the client closes (bounded)."""

    def __init__(self, reply: bytes, timeout_s: float = 10.0) -> None:
        self.reply = reply
        self.timeout_s = timeout_s
        self.received = b""
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(timeout_s)
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> OneShotServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()
        self._thread.join(timeout=self.timeout_s)

    def _serve(self) -> None:
        try:
            connection, _ = self._listener.accept()
        except OSError:
            return
        with connection:
            connection.settimeout(self.timeout_s)
            self.received += read_some(connection)
            connection.sendall(self.reply)
            while data := read_some(connection):
                self.received += data
