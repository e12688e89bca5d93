"""Request metadata has one documented bound, ``--max-metadata-bytes``, refused the same way
every time: at the bound a stream is served; one byte past it the servicer refuses it
``RESOURCE_EXHAUSTED`` / ``metadata_too_large`` with a record, a count and a metric; past
gRPC's own limit (twice the bound) gRPC refuses it before the servicer, and the consumer
names that ``metadata_too_large`` too. Sizes are HTTP/2's (name + value + 32 a header).

gRPC's defaults refused at random between 8 KiB and 16 KiB (its soft and hard limits):
a real consumer on real gRPC sends each size several times here, with the same outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import pytest
from prometheus_client import generate_latest
from structlog.testing import capture_logs

from replywire.consumer.client import ReplyClient
from replywire.consumer.options import StreamOptions
from replywire.consumer.security import MAX_TOKEN_CHARS
from replywire.consumer.session import StreamSession
from replywire.producer.edge.rpc import HEADER_OVERHEAD_BYTES, grpc_metadata_limit, metadata_bytes
from replywire.producer.edge.server import start_server, stop_server
from replywire.producer.edge.servicer import ReplyStreamServicer
from replywire.producer.metrics import ProducerMetrics
from replywire.producer.settings import ServerSettings
from replywire.runtime.otel import MAX_TRACEPARENT_CHARS, MAX_TRACESTATE_CHARS
from replywire.shared.recording import Recording
from replywire.shared.requests import (
    DEFAULT_MAX_METADATA_BYTES,
    MIN_MAX_METADATA_BYTES,
    ReplyRequest,
)
from replywire.shared.result import StreamResult
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan
from tests.runs import CASE

pytestmark = pytest.mark.timeout(60)

BOUND: Final = DEFAULT_MAX_METADATA_BYTES
PAD: Final = "x-pad"
#: Each size is sent this often: gRPC's soft limit refused some of a size, not all.
TRIES: Final = 5


def request(recording: Recording) -> ReplyRequest:
    return ReplyRequest(
        case_id=CASE,
        binding=recording.case(CASE).binding,
        wire=WireFormat.LENGTH_PREFIXED,
        plan=ChunkPlan.parse("frame"),
        fault=None,
    )


class Producer:
    """A producer in this process, on a loop of its own, its records captured."""

    def __init__(self, loop: asyncio.AbstractEventLoop, port: int, servicer: Any) -> None:
        self.loop, self.port = loop, port
        self.servicer: ReplyStreamServicer = servicer

    def stream(self, recording: Recording, pad_chars: int) -> StreamResult:
        """One stream from a real consumer whose call carries ``x-pad`` of ``pad_chars``."""

        def pad(session: StreamSession) -> None:
            session.trace_metadata = ((PAD, "a" * pad_chars),)

        async def run() -> StreamResult:
            options = StreamOptions(target=f"127.0.0.1:{self.port}", deadline_s=20)
            async with ReplyClient(options) as client:
                return await client.stream(request(recording), observer=pad)

        return self.loop.run_until_complete(run())

    def refused_metric(self) -> float:
        text = generate_latest(self.servicer.metrics.registry).decode()
        line = 'replywire_requests_refused_total{reason="metadata_too_large"} '
        found = [row for row in text.splitlines() if row.startswith(line)]
        return float(found[0].split()[-1]) if found else 0.0


@pytest.fixture
def producer(recording: Recording) -> Iterator[Producer]:
    loop = asyncio.new_event_loop()
    settings = ServerSettings(
        host="127.0.0.1", port=0, allow_faults=False, metrics=ProducerMetrics()
    )
    server, port, servicer = loop.run_until_complete(start_server(recording, settings))
    try:
        yield Producer(loop, port, servicer)
    finally:
        loop.run_until_complete(stop_server(server, servicer, 1.0, asyncio.Event()))
        loop.close()


def refusals(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if r["event"] == "request_metadata_too_large"]


def test_metadata_is_counted_as_http2_counts_a_header_list() -> None:
    assert metadata_bytes([("ab", "cde"), ("k-bin", b"\x00\x01")]) == 2 + 3 + 5 + 2 + 2 * 32
    assert metadata_bytes([("k", "é")]) == 1 + 2 + HEADER_OVERHEAD_BYTES  # octets, not chars
    assert grpc_metadata_limit(BOUND) == 2 * BOUND


def test_at_the_bound_a_stream_is_served_and_one_past_it_is_refused_every_time(
    recording: Recording, producer: Producer
) -> None:
    # What the consumer's call carries besides the pad (its user agent): read from the
    # producer's own refusal record of a pad surely past the bound.
    with capture_logs() as records:
        result = producer.stream(recording, BOUND)
    (first,) = refusals(records)
    besides = first["metadata_bytes"] - (len(PAD) + BOUND + HEADER_OVERHEAD_BYTES)
    at_bound = BOUND - besides - len(PAD) - HEADER_OVERHEAD_BYTES
    assert (result.status.value, result.reason) == ("refused", "metadata_too_large")
    # The most a consumer of ours sends: the longest token it reads (as plain metadata),
    # trace context at the producer's own length bounds, and that user agent.
    most = besides + metadata_bytes([
        ("authorization", "Bearer " + "t" * MAX_TOKEN_CHARS),
        ("traceparent", "0" * MAX_TRACEPARENT_CHARS),
        ("tracestate", "k" * MAX_TRACESTATE_CHARS),
    ])  # fmt: skip
    assert most < MIN_MAX_METADATA_BYTES, most

    with capture_logs() as records:
        served = [producer.stream(recording, at_bound) for _ in range(TRIES)]
        refused = [producer.stream(recording, at_bound + 1) for _ in range(TRIES)]
    assert [(r.status.value, r.reason, r.accepted) for r in served] == [
        ("complete", None, True)
    ] * TRIES
    assert [(r.status.value, r.reason) for r in refused] == [
        ("refused", "metadata_too_large")
    ] * TRIES
    assert all(r.transport is not None for r in refused)
    assert {(r.transport or {}).get("grpc_code") for r in refused} == {"RESOURCE_EXHAUSTED"}
    assert [
        (r["log_level"], r["metadata_bytes"], r["max_metadata_bytes"]) for r in refusals(records)
    ] == [("warning", BOUND + 1, BOUND)] * TRIES
    # Refused before a stream began: counted as requests, not streams.
    counters = producer.servicer.counters
    assert counters.requests_metadata_too_large == TRIES + 1
    assert (counters.streams_opened, counters.streams_completed) == (TRIES, TRIES)
    assert producer.refused_metric() == TRIES + 1


def test_past_grpcs_own_limit_grpc_refuses_and_the_consumer_names_it(
    recording: Recording, producer: Producer
) -> None:
    """Past twice the bound gRPC refuses before the servicer: no record, no count there
    (nothing of the producer's runs), and the consumer names it all the same."""
    with capture_logs() as records:
        results = [producer.stream(recording, 2 * BOUND + 1) for _ in range(TRIES)]
    assert [(r.status.value, r.reason) for r in results] == [
        ("refused", "metadata_too_large")
    ] * TRIES
    assert {(r.transport or {}).get("grpc_details") for r in results} == {
        f"received metadata size exceeds hard limit (value length {2 * BOUND + 1} vs. {2 * BOUND})"
    }
    assert refusals(records) == []
    assert producer.servicer.counters.requests_metadata_too_large == 0
    assert producer.servicer.counters.streams_opened == 0


def test_between_grpcs_old_soft_and_hard_limits_every_stream_is_served(
    recording: Recording, producer: Producer
) -> None:
    """12 KiB of metadata: between gRPC's default 8 KiB soft and 16 KiB hard limit, where
    some streams were refused at random; under the bound, every one is served."""
    results = [producer.stream(recording, 12 * 1024) for _ in range(2 * TRIES)]
    assert {(r.status.value, r.accepted) for r in results} == {("complete", True)}
