"""A connection's age belongs to the connection, not to its client port: a new connection
from a port an old one used is young, and a stream the consumer's gRPC deadline ended is
never ``connection_aged_out``.

The producer sees a connection only as its peer address (``ipv4:127.0.0.1:PORT``). A
proxy whose connections to the producer all come from one local port stands for a
client port reused by the kernel: the producer sees the same address for each.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import grpc
import pytest
from structlog.testing import capture_logs

from bench.loopback import LoopbackProxy
from replywire.producer.edge.server import start_server, stop_server
from replywire.producer.settings import ServerSettings
from replywire.shared.faults import Fault, FaultKind
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan
from tests.producer_records import FINAL_VALUES
from tests.redis_server import free_port
from tests.runs import CASE

pytestmark = pytest.mark.timeout(60)

#: Connections age out after 2 s (plus 2 s of grace): a stream cut once its connection
#: has been seen for 0.9 x 4 = 3.6 s is taken as aged out; the table forgets a connection
#: after 1.1 x 2 + 2 + 1 = 5.2 s. A connection without a stream is closed after 0.5 s.
AGE_S: Final = 2.0
IDLE_S: Final = 0.5
#: Between the two: an old entry still remembered, and its connection long closed.
REUSED_AFTER_S: Final = 4.0


class FixedPortProxy(LoopbackProxy):
    """Forwards each client to the producer from one local port (closed with a reset,
    so no TIME_WAIT keeps the next connection from binding it)."""

    def __init__(self, upstream_port: int, local_port: int) -> None:
        super().__init__(upstream_port)
        self.local_port = local_port

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.bind(("127.0.0.1", self.local_port))
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", self.upstream_port))
        up_r, up_w = await asyncio.open_connection(sock=sock)
        uplink = asyncio.create_task(forward(client_r, up_w))
        try:
            await forward(up_r, client_w)
        finally:
            uplink.cancel()
            up_w.transport.abort()  # SO_LINGER 0: a reset, no TIME_WAIT on the port
            client_w.close()


async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """``reader`` to ``writer`` until either side ends (the writer is left open)."""
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()


def request(recording: Recording, stream_id: str, stall_ms: int | None) -> pb.OpenRequest:
    return ReplyRequest(
        case_id=CASE,
        binding=recording.case(CASE).binding,
        wire=WireFormat.LENGTH_PREFIXED,
        plan=ChunkPlan.parse("frame"),
        fault=None if stall_ms is None else Fault(kind=FaultKind.STALL, stall_ms=stall_ms),
        stream_id=stream_id,
    ).open_request()


@pytest.fixture
def serving(recording: Recording) -> Iterator[tuple[asyncio.AbstractEventLoop, int]]:
    loop = asyncio.new_event_loop()
    settings = ServerSettings(
        host="127.0.0.1", port=0, allow_faults=True,
        max_connection_age_s=AGE_S, max_connection_idle_s=IDLE_S,
    )  # fmt: skip
    server, port, servicer = loop.run_until_complete(start_server(recording, settings))
    try:
        yield loop, port
    finally:
        loop.run_until_complete(stop_server(server, servicer, 1.0, asyncio.Event()))
        loop.close()


async def complete(target: str, sent: pb.OpenRequest) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        return len([c async for c in pb_grpc.ReplyStreamStub(channel).Open(sent, timeout=20)])


async def cancel_after_first_chunk(target: str, sent: pb.OpenRequest) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        call = pb_grpc.ReplyStreamStub(channel).Open(sent, timeout=20)
        await call.read()
        call.cancel()
        await asyncio.sleep(0.3)  # the producer hears the reset


def finals(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str | None]]:
    """Each stream's final state, in order (the stream id is in the context, not here)."""
    return [
        (r["peer"], r["to_state"], r.get("reason"))
        for r in records
        if r["event"] == "state_changed" and r["to_state"] in FINAL_VALUES
    ]


def test_a_new_connection_from_a_reused_port_is_young(
    recording: Recording, serving: tuple[asyncio.AbstractEventLoop, int]
) -> None:
    """The old connection's stream completes; after 4 s (its entry still remembered, and
    it closed: idle) a new connection from the same port opens a stream whose consumer
    cancels it at once: ``consumer_cancelled``, not ``connection_aged_out``."""
    loop, port = serving
    local_port = free_port()
    with capture_logs() as records, FixedPortProxy(port, local_port) as proxy:
        assert loop.run_until_complete(complete(proxy.target, request(recording, "old", None)))
        loop.run_until_complete(asyncio.sleep(REUSED_AFTER_S))
        loop.run_until_complete(
            cancel_after_first_chunk(proxy.target, request(recording, "new", 10_000))
        )
    peer = f"ipv4:127.0.0.1:{local_port}"
    assert finals(records) == [
        (peer, "completed", None),
        (peer, "cancelled_by_consumer", "consumer_cancelled"),
    ]


def test_a_stream_its_grpc_deadline_ended_is_deadline_exceeded(
    recording: Recording, serving: tuple[asyncio.AbstractEventLoop, int]
) -> None:
    loop, port = serving

    async def until_deadline() -> grpc.StatusCode:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = pb_grpc.ReplyStreamStub(channel).Open(
                request(recording, "timed", 10_000), timeout=1.0
            )
            try:
                async for _ in call:
                    pass
            except grpc.aio.AioRpcError as error:
                await asyncio.sleep(0.3)  # the producer hears it
                return error.code()
            return grpc.StatusCode.OK

    with capture_logs() as records:
        assert loop.run_until_complete(until_deadline()) is grpc.StatusCode.DEADLINE_EXCEEDED
    ((_, state, reason),) = finals(records)
    assert (state, reason) == ("cancelled_by_consumer", "deadline_exceeded")
