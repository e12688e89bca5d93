"""The ``replywire.v1.ReplyStream`` servicer and the grpc.aio server around it.

A thin I/O edge: it turns an ``OpenRequest`` into a checked request
(``shared.requests``), asks the pure pipeline (``shared.faults.transmit``) for
the chunks, and yields them one at a time. grpc.aio writes each yielded chunk
before resuming the generator, and a write waits for HTTP/2 flow control, so a
consumer that stops reading stops the producer and nothing is buffered without
bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

import grpc
import structlog

from producer.sources import Source, StreamPlan
from producer.sources.recording import RecordingSource
from producer.states import ProducerStream, StreamState
from shared.errors import ReplywireError
from shared.pb import replywire_pb2 as pb
from shared.pb import replywire_pb2_grpc as pb_grpc
from shared.recording import Recording
from shared.requests import check_request
from shared.wire.chunking import MAX_CHUNK_BYTES

MAX_MESSAGE_BYTES: Final = 4 * MAX_CHUNK_BYTES


@dataclass
class ProducerCounters:
    """What the producer has done, for its operator and for the backpressure test."""

    streams_opened: int = 0
    streams_completed: int = 0
    streams_cancelled: int = 0
    streams_refused: int = 0
    chunks_written: int = 0
    bytes_written: int = 0


class ReplyStreamServicer(pb_grpc.ReplyStreamServicer):
    def __init__(self, source: Source, *, allow_faults: bool) -> None:
        self.source = source
        self.allow_faults = allow_faults
        self.counters = ProducerCounters()
        self._log: structlog.typing.FilteringBoundLogger = structlog.get_logger()

    async def Open(  # noqa: N802 - the RPC's name in the .proto
        self, request: pb.OpenRequest, context: grpc.aio.ServicerContext[pb.OpenRequest, pb.Chunk]
    ) -> AsyncIterator[pb.Chunk]:
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(stream_id=request.stream_id or None)
        log = self._log.bind(case_id=request.case_id, peer=context.peer())
        stream = ProducerStream(log)
        self.counters.streams_opened += 1
        plan: StreamPlan | None = None
        try:
            try:
                checked = check_request(request, allow_faults=self.allow_faults)
                plan = await self.source.prepare(request, checked)
            except ReplywireError as error:
                self.counters.streams_refused += 1
                stream.transition(StreamState.REFUSED, reason=error.code, detail=error.detail)
                if error.metadata:
                    context.set_trailing_metadata(tuple(error.metadata.items()))
                await context.abort(grpc.StatusCode[error.reason.grpc_code], error.code)
            stream.transition(StreamState.VERIFIED, source=self.source.name, **plan.description)
            stream.transition(StreamState.STREAMING)
            async for data in plan.chunks(stream):
                if stream.chunks_sent and checked.interval_s:
                    await asyncio.sleep(checked.interval_s)
                # Written before the generator resumes: the write waits for the consumer's
                # HTTP/2 window, so a paused consumer pauses this loop.
                yield pb.Chunk(data=data)
                stream.bytes_sent += len(data)
                stream.chunks_sent += 1
                self.counters.chunks_written += 1
                self.counters.bytes_written += len(data)
                log.debug(
                    "chunk_sent",
                    index=stream.chunks_sent - 1,
                    size=len(data),
                    bytes_sent=stream.bytes_sent,
                )
            if plan.abort_details is not None:
                stream.transition(StreamState.ABORTED, reason=plan.abort_details, **stream.sent)
                await plan.close("aborted")
                await context.abort(grpc.StatusCode.UNAVAILABLE, plan.abort_details)
            self.counters.streams_completed += 1
            stream.transition(StreamState.COMPLETED, **stream.sent)
            await plan.close("completed")
        except asyncio.CancelledError:
            # grpc.aio cancels the handler when the consumer cancels or its connection drops.
            if stream.open:
                self.counters.streams_cancelled += 1
                stream.transition(StreamState.CANCELLED_BY_CONSUMER, **stream.sent)
                if plan is not None:
                    await plan.close("cancelled_by_consumer")
            raise
        except Exception:
            if stream.open:
                log.exception("stream_failed")
                stream.transition(StreamState.FAILED)
                if plan is not None:
                    await plan.close("failed")
            raise


DEFAULT_MAX_CONNECTION_AGE_S: Final = 300.0


def server_options(
    max_connection_age_s: float = DEFAULT_MAX_CONNECTION_AGE_S,
) -> list[tuple[str, int]]:
    age_ms = int(max_connection_age_s * 1000)
    return [
        # Bounded time: a connection older than this is drained (GOAWAY) and closed after
        # the same again, so no stream, even one whose writes are blocked by a consumer
        # that stopped reading without cancelling, outlives twice this.
        ("grpc.max_connection_age_ms", age_ms),
        ("grpc.max_connection_age_grace_ms", age_ms),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        # Notice a consumer that vanished without closing its connection.
        ("grpc.keepalive_time_ms", 20_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ]


async def start_server(
    source: Source | Recording,
    *,
    host: str,
    port: int,
    allow_faults: bool,
    max_connection_age_s: float = DEFAULT_MAX_CONNECTION_AGE_S,
) -> tuple[grpc.aio.Server, int, ReplyStreamServicer]:
    """Start a server; returns it with the bound port (``port=0`` picks a free one)."""
    server = grpc.aio.server(options=server_options(max_connection_age_s))
    if isinstance(source, Recording):
        source = RecordingSource(source)
    servicer = ReplyStreamServicer(source, allow_faults=allow_faults)
    pb_grpc.add_ReplyStreamServicer_to_server(servicer, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind {host}:{port}")
    await server.start()
    return server, bound, servicer
