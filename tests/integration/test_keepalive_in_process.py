"""The consumer's gRPC keepalive (how it notices a producer cut off mid-stream; the cut
itself is in tests/system/test_cross_host.py) and the producer's ping policy, at their edge:
pings every ``MIN_KEEPALIVE_S`` through a long silence are accepted (no GOAWAY: the
stream completes on its one connection); faster pings are refused by the consumer's own
flags and options, and a client that sends them anyway is cut off by the producer."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from replywire.consumer.channels import channel_options
from replywire.consumer.client import stream_reply
from replywire.consumer.options import (
    DEFAULT_KEEPALIVE_S,
    DEFAULT_KEEPALIVE_TIMEOUT_S,
    MIN_KEEPALIVE_S,
    StreamOptions,
)
from replywire.producer.edge.server import start_server, stop_server
from replywire.producer.settings import MIN_PING_INTERVAL_S, ServerSettings
from replywire.shared.faults import Fault, FaultKind
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan
from tests import http2
from tests.runs import CASE

PING = 0x6


#: RFC 9113 §7: the error code of a GOAWAY for a peer that "is exhibiting a behavior
#: that might be generating excessive load".
ENHANCE_YOUR_CALM = 0xB


#: Silence long enough for several pings at the minimum interval (more than the strikes).
STALL_MS = 4500


def stalled_request(recording: Recording, stream_id: str) -> ReplyRequest:
    return ReplyRequest(
        case_id=CASE,
        binding=recording.case(CASE).binding,
        wire=WireFormat.LENGTH_PREFIXED,
        plan=ChunkPlan.parse("frame"),
        fault=Fault(kind=FaultKind.STALL, stall_ms=STALL_MS),
        stream_id=stream_id,
    )


@contextmanager
def serving(
    recording: Recording, min_ping_interval_s: float = MIN_PING_INTERVAL_S
) -> Iterator[tuple[asyncio.AbstractEventLoop, int]]:
    """A producer in this process (faults allowed) on its own event loop, and its port."""
    loop = asyncio.new_event_loop()
    settings = ServerSettings(
        host="127.0.0.1", port=0, allow_faults=True, min_ping_interval_s=min_ping_interval_s
    )
    server, port, servicer = loop.run_until_complete(start_server(recording, settings))
    try:
        yield loop, port
    finally:
        loop.run_until_complete(stop_server(server, servicer, 1.0, asyncio.Event()))
        loop.close()


@pytest.fixture
def server_port(recording: Recording) -> Iterator[tuple[asyncio.AbstractEventLoop, int]]:
    with serving(recording) as running:
        yield running


def test_the_consumer_never_pings_faster_than_the_producer_accepts() -> None:
    assert MIN_KEEPALIVE_S == MIN_PING_INTERVAL_S
    assert DEFAULT_KEEPALIVE_S >= MIN_KEEPALIVE_S
    options = dict(channel_options(StreamOptions(target="x")))
    assert options["grpc.keepalive_time_ms"] == DEFAULT_KEEPALIVE_S * 1000
    assert options["grpc.keepalive_timeout_ms"] == DEFAULT_KEEPALIVE_TIMEOUT_S * 1000
    assert options["grpc.http2.max_pings_without_data"] == 0  # pings while only receiving
    StreamOptions(target="x", keepalive_s=MIN_KEEPALIVE_S)
    for bad in ({"keepalive_s": MIN_KEEPALIVE_S - 0.001}, {"keepalive_timeout_s": 0}):
        with pytest.raises(ValueError, match="keepalive"):
            StreamOptions(target="x", **bad)


def test_pings_at_the_minimum_through_a_long_silence_keep_the_stream(
    recording: Recording, server_port: tuple[asyncio.AbstractEventLoop, int]
) -> None:
    """At the edge: a ping a second through 4.5 s with no data (the stall fault): the
    producer accepts every one, so the stream completes on its first connection (no
    resume is allowed: a GOAWAY would end it ``error``)."""
    loop, port = server_port
    options = StreamOptions(
        target=f"127.0.0.1:{port}", deadline_s=30, idle_timeout_s=10, keepalive_s=MIN_KEEPALIVE_S
    )
    result = loop.run_until_complete(
        stream_reply(stalled_request(recording, "edge"), options)
    ).to_dict()
    assert (result["status"], result["reason"]) == ("complete", None)
    assert result["stats"]["reconnects"] == 0


def pings(port: int, interval_s: float, count: int) -> tuple[int, bytes] | None:
    """A raw HTTP/2 client (no call in flight) that sends ``count`` PINGs ``interval_s``
    apart: the producer's GOAWAY (error code, debug data) if one came, else None."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(http2.PREFACE + http2.settings())
        received = b""
        for index in range(count):
            time.sleep(interval_s)
            try:
                connection.sendall(http2.frame(PING, 0, 0, struct.pack(">Q", index)))
            except OSError:
                break
            received += _drain(connection)
            if (away := goaway_in(received)) is not None:
                return away
        return goaway_in(received + _drain(connection, wait_s=0.5))


def _drain(connection: socket.socket, wait_s: float = 0.05) -> bytes:
    connection.settimeout(wait_s)
    data = b""
    with contextlib.suppress(OSError):
        while chunk := connection.recv(65536):
            data += chunk
    return data


def goaway_in(data: bytes) -> tuple[int, bytes] | None:
    """The first GOAWAY among these frames (error code, debug data), if any."""
    offset = 0
    while offset + 9 <= len(data):
        length = int.from_bytes(data[offset : offset + 3], "big")
        kind = data[offset + 3]
        payload = data[offset + 9 : offset + 9 + length]
        if kind == http2.GOAWAY and len(payload) >= 8:
            return struct.unpack(">I", payload[4:8])[0], payload[8:]
        offset += 9 + length
    return None


@pytest.mark.parametrize("minimum_s", [MIN_PING_INTERVAL_S, 0.5])
@pytest.mark.parametrize("pace", [1.1, 0.1])
def test_the_producer_accepts_pings_down_to_its_minimum_interval_and_no_faster(
    recording: Recording, minimum_s: float, pace: float
) -> None:
    """``--min-ping-interval-s`` (default 1, gRPC's own client floor) at and past the edge.
    Just above it, five pings are all answered. Ten times faster (only a client that is
    not replywire's consumer gets there: gRPC's own client sends no more than one a
    second), the producer sends GOAWAY ENHANCE_YOUR_CALM "too_many_pings" after its
    strikes."""
    with serving(recording, minimum_s) as (loop, port):
        away = loop.run_until_complete(asyncio.to_thread(pings, port, minimum_s * pace, 5))
    if pace > 1:
        assert away is None
    else:
        assert away == (ENHANCE_YOUR_CALM, b"too_many_pings")
