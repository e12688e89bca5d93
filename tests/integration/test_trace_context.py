"""Repeated trace context headers from a real gRPC client, read as W3C Trace Context says:
several ``tracestate`` are one list, in order, of at most 32 members. Two ``traceparent``
would make the context invalid, but gRPC's core keeps only the last before the servicer
sees the call (the test of it says what a caller gets). An in-process producer
with tracing on (no collector: its spans are read from an in-memory exporter)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import grpc
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from structlog.testing import capture_logs

from replywire.producer.edge.server import start_server, stop_server
from replywire.producer.settings import ServerSettings
from replywire.producer.spans import SPAN_NAME
from replywire.runtime.tracing import TracingConfig, start_tracing, stop_tracing
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan
from tests.runs import CASE

pytestmark = pytest.mark.timeout(60)

TRACE_ID: Final = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT: Final = "00f067aa0ba902b7"
TRACEPARENT: Final = f"00-{TRACE_ID}-{PARENT}-01"
OTHER: Final = f"00-{'a' * 32}-{'b' * 16}-01"


class Traced:
    """A producer in this process with tracing on; its spans kept in memory."""

    def __init__(self, loop: asyncio.AbstractEventLoop, port: int, spans: InMemorySpanExporter):
        self.loop, self.port, self.spans = loop, port, spans

    def open(
        self, recording: Recording, stream_id: str, metadata: Sequence[tuple[str, str]]
    ) -> tuple[int, ReadableSpan]:
        """One ``Open`` with ``metadata`` as given (repeated keys and all): its chunks and
        the producer's serve span."""
        request = ReplyRequest(
            case_id=CASE, binding=recording.case(CASE).binding,
            wire=WireFormat.LENGTH_PREFIXED, plan=ChunkPlan.parse("whole"), fault=None,
            stream_id=stream_id,
        ).open_request()  # fmt: skip

        async def run() -> int:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{self.port}") as channel:
                call = pb_grpc.ReplyStreamStub(channel).Open(
                    request, metadata=tuple(metadata), timeout=20
                )
                return len([chunk async for chunk in call])

        chunks = self.loop.run_until_complete(run())
        (span,) = [
            s
            for s in self.spans.get_finished_spans()
            if s.name == SPAN_NAME and (s.attributes or {}).get("replywire.stream_id") == stream_id
        ]
        return chunks, span


@pytest.fixture
def traced(recording: Recording) -> Iterator[Traced]:
    tracing = start_tracing(TracingConfig("replywire-test", None))
    spans = InMemorySpanExporter()
    tracing.provider.add_span_processor(SimpleSpanProcessor(spans))
    loop = asyncio.new_event_loop()
    settings = ServerSettings(host="127.0.0.1", port=0, allow_faults=False)
    server, port, servicer = loop.run_until_complete(start_server(recording, settings))
    try:
        yield Traced(loop, port, spans)
    finally:
        loop.run_until_complete(stop_server(server, servicer, 1.0, asyncio.Event()))
        loop.close()
        stop_tracing()


def ignored(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    return [(r["log_level"], r["why"]) for r in records if r["event"] == "trace_context_ignored"]


@pytest.mark.parametrize("second", [TRACEPARENT, OTHER], ids=["the-same-twice", "two-traces"])
def test_grpc_core_hands_the_servicer_only_the_last_of_two_traceparents(
    recording: Recording, traced: Traced, second: str
) -> None:
    """W3C Trace Context: two ``traceparent`` make the context invalid, and the producer's
    reader says so (``traceparent_repeated``, tests/unit/test_tracing.py) whenever both
    reach it. With grpcio 1.85.3 they never do: gRPC's core holds ``traceparent`` as a
    header of which a call has one (its ``W3CTraceParentMetadata``, not repeatable), so
    the second replaces the first before any of the producer runs. Kept here as what a
    caller gets (the last one continued), so that a gRPC that passes both on is noticed
    (this test then fails, and the rule applies)."""
    with capture_logs() as records:
        chunks, span = traced.open(
            recording, "two-parents", [("traceparent", TRACEPARENT), ("traceparent", second)]
        )
    assert chunks > 0  # served as ever
    assert span.parent is not None
    assert (format(span.parent.trace_id, "032x"), format(span.parent.span_id, "016x")) == tuple(
        second.split("-")[1:3]
    )
    assert ignored(records) == []


def test_one_traceparent_and_several_tracestates_continue_the_trace_with_one_list(
    recording: Recording, traced: Traced
) -> None:
    metadata = [
        ("tracestate", "a=1"),
        ("traceparent", TRACEPARENT),
        ("tracestate", "b=2, c=3"),
        ("tracestate", "d=4"),
    ]
    with capture_logs() as records:
        chunks, span = traced.open(recording, "three-states", metadata)
    assert chunks > 0
    assert span.parent is not None
    assert (format(span.parent.trace_id, "032x"), format(span.parent.span_id, "016x")) == (
        TRACE_ID,
        PARENT,
    )
    assert span.context.trace_state.to_header() == "a=1,b=2,c=3,d=4"
    assert ignored(records) == []


def test_more_than_32_tracestate_members_over_several_headers_keep_the_first_32(
    recording: Recording, traced: Traced
) -> None:
    members = [f"k{i}=v" for i in range(33)]
    metadata = [("traceparent", TRACEPARENT)] + [("tracestate", m) for m in members]
    with capture_logs() as records:
        chunks, span = traced.open(recording, "many-states", metadata)
    assert chunks > 0
    assert span.parent is not None and format(span.parent.trace_id, "032x") == TRACE_ID
    assert span.context.trace_state.to_header() == ",".join(members[:32])
    assert ignored(records) == [("warning", "tracestate_truncated")]
