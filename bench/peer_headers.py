"""Trace bytes a peer's request headers cost a producer: raw HTTP/2 requests, from a peer
with no token, each with one header whose value is not UTF-8, against a real producer
(its trace in a file, tokens required); the trace's bytes per request, for each size
of header, and for a burst of requests on one connection.

The producer's own start and stop records are not counted: what is counted is every
record the requests made (``request_unauthenticated``, gRPC's own ``library_log``
records, ``library_log_suppressed``). A header gRPC refuses on its own (too large) is
measured the same way: its request too must not write an unbounded record.

    .venv/bin/python -m bench.peer_headers            # JSON: bytes per request, by case

The requests are built by hand (RFC 9113 frames, RFC 7541 literal header fields without
Huffman coding): gRPC's own client refuses to send a header value that is not text.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench.common import start_server
from bench.window_proxy import ACK, PREFACE, SETTINGS
from replywire.children import stop_process

ROOT: Final = Path(__file__).resolve().parent.parent

HEADERS: Final = 0x1
DATA: Final = 0x0
RST_STREAM: Final = 0x3
GOAWAY: Final = 0x7
CONTINUATION: Final = 0x9
END_STREAM: Final = 0x1
END_HEADERS: Final = 0x4
#: The largest frame payload a peer may send before the server says otherwise (RFC 9113).
MAX_FRAME: Final = 16384
#: A request's header whose value is the peer's bytes: not UTF-8 (0xff never is).
HEADER_NAME: Final = b"x-peer-bytes"
NOT_UTF8: Final = b"\xff"
#: The cases measured: (name, header bytes, requests).
CASES: Final = (("1KiB", 1024, 1), ("64KiB", 65536, 1), ("256KiB", 262144, 1), ("burst", 1024, 300))
#: Records of the producer's own start and stop, not of the requests.
LIFECYCLE: Final = frozenset(
    {"producer_listening", "producer_stopping", "producer_stopped", "producer_insecure"}
)
#: A token nobody sends: the producer requires one, so every request here is refused.
TOKEN_LINE: Final = "bench " + "t" * 32 + "\n"
REPLY_TIMEOUT_S: Final = 30.0


def frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", kind, flags, stream_id) + payload
    )


def hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """RFC 7541 §5.1: ``value`` in a ``prefix_bits``-bit prefix, ``first``'s high bits kept."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append((value % 128) + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def literal(name: bytes, value: bytes) -> bytes:
    """A literal header field without indexing, new name, no Huffman (RFC 7541 §6.2.2)."""
    return b"\x00" + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value


def request_headers(authority: str, extra: bytes) -> bytes:
    """An ``Open`` request's header block, with ``extra`` as the value of ``HEADER_NAME``."""
    fields = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/replywire.v1.ReplyStream/Open"),
        (b":authority", authority.encode()),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
        (HEADER_NAME, extra),
    ]
    return b"".join(literal(name, value) for name, value in fields)


def request(stream_id: int, authority: str, extra: bytes) -> bytes:
    """HEADERS (and CONTINUATION frames past ``MAX_FRAME``), then one empty gRPC message
    that ends the stream."""
    block = request_headers(authority, extra)
    pieces = [block[at : at + MAX_FRAME] for at in range(0, len(block), MAX_FRAME)]
    frames = []
    for index, piece in enumerate(pieces):
        last = END_HEADERS if index == len(pieces) - 1 else 0
        frames.append(frame(HEADERS if index == 0 else CONTINUATION, last, stream_id, piece))
    frames.append(frame(DATA, END_STREAM, stream_id, b"\x00\x00\x00\x00\x00"))
    return b"".join(frames)


def send_requests(port: int, size: int, count: int) -> dict[str, int]:
    """``count`` requests on one connection, each with a ``size``-byte non-UTF-8 header;
    reads until every stream is answered (its trailers or a reset) or the server closes
    the connection (bounded). Returns how the streams ended (``unanswered``: streams still
    open when the server closed the connection, or when the time ran out)."""
    authority = f"127.0.0.1:{port}"
    ids = [1 + 2 * n for n in range(count)]
    ended = {"trailers": 0, "reset": 0, "goaway": 0, "closed": 0}
    with socket.create_connection(("127.0.0.1", port), timeout=REPLY_TIMEOUT_S) as peer:
        peer.sendall(PREFACE + frame(SETTINGS, 0, 0, b""))
        payload = NOT_UTF8 * size
        for stream_id in ids:
            peer.sendall(request(stream_id, authority, payload))
        open_ids = set(ids)
        buffer = b""
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        while open_ids and (left := deadline - time.monotonic()) > 0:
            peer.settimeout(left)
            try:
                data = peer.recv(65536)
            except TimeoutError:
                break
            except OSError:  # reset by the server
                data = b""
            if not data:
                ended["closed"] = 1
                break
            buffer = _read_frames(peer, buffer + data, open_ids, ended)
    ended["unanswered"] = len(open_ids)
    return ended


def _read_frames(
    peer: socket.socket, buffer: bytes, open_ids: set[int], ended: dict[str, int]
) -> bytes:
    """Each whole frame in ``buffer``: SETTINGS acknowledged, a stream's end counted in
    ``ended`` (and the stream taken from ``open_ids``); returns what is left."""
    while len(buffer) >= 9 and len(buffer) >= 9 + int.from_bytes(buffer[:3], "big"):
        length, kind, flags = int.from_bytes(buffer[:3], "big"), buffer[3], buffer[4]
        stream_id = int.from_bytes(buffer[5:9], "big") & 0x7FFFFFFF
        buffer = buffer[9 + length :]
        if kind == SETTINGS and not flags & ACK:
            peer.sendall(frame(SETTINGS, ACK, 0, b""))
        elif kind == HEADERS and flags & END_STREAM and stream_id in open_ids:
            open_ids.discard(stream_id)
            ended["trailers"] += 1
        elif kind == RST_STREAM and stream_id in open_ids:
            open_ids.discard(stream_id)
            ended["reset"] += 1
        elif kind == GOAWAY:
            ended["goaway"] += 1
    return buffer


@dataclass(frozen=True)
class Measured:
    case: str
    header_bytes: int
    requests: int
    trace_bytes: int
    records: dict[str, int]
    ended: dict[str, int]
    stopped: dict[str, Any]
    #: The counted records, each a line of the trace (its newline included).
    lines: list[bytes]

    @property
    def bytes_per_request(self) -> float:
        return self.trace_bytes / self.requests

    def report(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "header_bytes": self.header_bytes,
            "requests": self.requests,
            "trace_bytes": self.trace_bytes,
            "trace_bytes_per_request": round(self.bytes_per_request, 1),
            "records": self.records,
            "ended": self.ended,
        }


@contextmanager
def producer(
    workdir: Path, *flags: str, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    """A producer that requires a token, its trace in ``workdir``; stopped by its pid."""
    tokens = workdir / "tokens"
    tokens.write_text(TOKEN_LINE)
    trace = workdir / "producer.jsonl"
    command = [
        sys.executable, "-m", "replywire.producer", "--port", "0", "--log-format", "json",
        "--auth-tokens", str(tokens), "--trace-file", str(trace), *flags,
    ]  # fmt: skip
    process, port = start_server(
        command, "the producer", cwd=ROOT, env={**os.environ, **(env or {})}
    )
    try:
        yield process, port, trace
    finally:
        stop_process(process)
        if process.stdout:
            process.stdout.close()


def measure(
    case: str, size: int, count: int, *flags: str, env: dict[str, str] | None = None
) -> Measured:
    """One producer, ``count`` requests with a ``size``-byte header, then a clean stop: the
    bytes of every record the requests made."""
    with tempfile.TemporaryDirectory(prefix="peer-headers-") as name:
        workdir = Path(name)
        with producer(workdir, *flags, env=env) as (process, port, trace):
            ended = send_requests(port, size, count)
            os.kill(process.pid, signal.SIGTERM)
            process.wait(timeout=30)
        return read_measured(case, size, count, trace.read_bytes(), ended)


def read_measured(
    case: str, size: int, count: int, trace: bytes, ended: dict[str, int]
) -> Measured:
    records: dict[str, int] = {}
    total = 0
    stopped: dict[str, Any] = {}
    lines = []
    for line in trace.splitlines(keepends=True):
        try:
            event = json.loads(line)
        except ValueError:  # not a record (nothing else writes to the trace file)
            event = {"event": "unparsed"}
        if event.get("event") == "producer_stopped":
            stopped = event
        if event.get("event") in LIFECYCLE:
            continue
        records[event.get("event", "?")] = records.get(event.get("event", "?"), 0) + 1
        total += len(line)
        lines.append(line)
    return Measured(case, size, count, total, records, ended, stopped, lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peer_headers", description=__doc__)
    parser.parse_args(argv)
    report = [measure(case, size, count).report() for case, size, count in CASES]
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
