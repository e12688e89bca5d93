"""OpenTelemetry across replicas sharing a Redis reply log, with real processes: two
producers on the fake Gemini server and a private Redis, a consumer started with a given
``traceparent``, all exporting over OTLP/gRPC to a collector in this test.

A ``Cancel`` that lands on the replica that does not generate the reply is relayed
through the log with the trace context: the generator's stop is a ``CONSUMER`` span
(``replywire.cancel_relayed``) in the caller's trace, a child of the relaying replica's
``replywire.cancel`` span and linked to it, and its record carries the ids. A resume on
the replica that did not serve the first delivery links to that delivery's span, which the
log keeps with the reply.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import grpc
import pytest

from replywire.children import stop_process
from replywire.runtime.recording_file import load_recording
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan
from tests.gemini_runs import API_KEY
from tests.otlp_collector import KIND_CONSUMER, KIND_SERVER, Collector, otlp_collector
from tests.processes import (
    REPLICA_GRACE_S,
    FakeGeminiProcess,
    Producer,
    consumer_process,
    fake_gemini,
    gemini_replicas,
    wait_for,
)
from tests.redis_server import RedisServer, redis_server

pytestmark = pytest.mark.timeout(180)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
CASE = "backup-schedule"
SERVE = "replywire.serve"
CONSUME, CANCEL, RELAYED = "replywire.consume", "replywire.cancel", "replywire.cancel_relayed"
#: A consumer that left keeps its reply generated this long (the Cancel stops it first).
GRACE_S = REPLICA_GRACE_S


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGeminiProcess]:
    """Its slow drip slowed further (some 17 s a reply), so the Cancel lands mid-reply."""
    with fake_gemini(API_KEY, "--drip-delay-s", "0.1") as server:
        yield server


@pytest.fixture(autouse=True)
def prompt_export(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spans batched for 50 ms, not 5 s: the collector has them soon after a stream."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")


def two_traced_replicas(
    tmp_path: Path, fake: FakeGeminiProcess, server: RedisServer, collector: Collector
) -> AbstractContextManager[tuple[Producer, Producer]]:
    """Replicas a and b (``tests.processes.gemini_replicas``) sharing ``server``'s reply
    log, both exporting to ``collector``."""
    return gemini_replicas(
        tmp_path, fake, server.url, "--reply-log-lease-s", "2.0",
        "--otlp-endpoint", collector.endpoint, api_key=API_KEY,
    )  # fmt: skip


def sent(p: Producer, stream_id: str) -> int:
    return sum(1 for r in p.stream_trace(stream_id) if r["event"] == "chunk_sent")


def test_a_relayed_cancel_is_in_the_callers_trace(tmp_path: Path, fake: FakeGeminiProcess) -> None:
    """The reply is generated on a (its first consumer gone without a Cancel); a second
    consumer of the stream on b, given the caller's traceparent, is stopped with Ctrl-C:
    its Cancel lands on b, which relays it through the log; a stops the generation, and
    that stop is a span of the caller's trace under b's Cancel span, linked to it."""
    sid = "otel-relayed-cancel"
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    common = ("--case", CASE, "--stream-id", sid, "--traceparent", TRACEPARENT,
              "--resume-attempts", "0", "--idle-timeout-s", GRACE_S)  # fmt: skip
    with (
        redis_server() as server,
        otlp_collector() as collector,
        two_traced_replicas(tmp_path, fake, server, collector) as (a, b),
    ):
        with consumer_process(tmp_path / "first", a.target, *common) as first:
            wait_for(lambda: sent(a, sid) >= 1, timeout=30)
            stop_process(first, signal.SIGKILL)  # gone without a Cancel of its own
        with consumer_process(
            tmp_path / "second", b.target, *common, "--otlp-endpoint", collector.endpoint
        ) as second:
            wait_for(lambda: sent(b, sid) >= 1, timeout=30)
            assert stop_process(second, signal.SIGINT) == 3
        collector.wait_for(CONSUME, CANCEL, RELAYED)
        wait_for(lambda: any(r["event"] == "stream_cancel_relayed" for r in a.stream_trace(sid)))
        relayed_records = [r for r in a.stream_trace(sid) if r["event"] == "stream_cancel_relayed"]
        requested = [r for r in b.stream_trace(sid) if r["event"] == "stream_cancel_requested"]
    (consume,) = [s for s in collector.named(CONSUME) if s.attributes["replywire.stream_id"] == sid]
    (cancel,) = collector.named(CANCEL)
    (relayed,) = collector.named(RELAYED)
    assert [(r["relayed"], r["cancelled"]) for r in requested] == [(True, True)]
    # b's Cancel span: the consumer's child, in the caller's trace.
    assert (cancel.kind, cancel.trace_id, cancel.parent_span_id) == (
        KIND_SERVER,
        TRACE_ID,
        consume.span_id,
    )
    # a's stop: the Cancel span's child (the relayed message's creation context), linked to it.
    assert (relayed.kind, relayed.trace_id, relayed.parent_span_id) == (
        KIND_CONSUMER,
        TRACE_ID,
        cancel.span_id,
    )
    assert relayed.links == [(TRACE_ID, cancel.span_id)]
    assert relayed.attributes["replywire.cancelled"] is True
    assert relayed.attributes["replywire.stream_id"] == sid
    assert relayed.attributes["messaging.operation.type"] == "process"
    assert [(r["cancelled"], r["trace_id"], r["span_id"]) for r in relayed_records] == [
        (True, TRACE_ID, relayed.span_id)
    ]


def test_a_resume_on_another_replica_links_to_the_first_delivery(
    tmp_path: Path, fake: FakeGeminiProcess
) -> None:
    """The first delivery is served by a (its consumer then gone); a resume of the stream,
    in the same trace, lands on b, which never served it: b's span links to a's, whose
    context the shared log kept with the reply."""
    sid = "otel-resume-elsewhere"
    resumer_span = "00f067aa0ba902b8"
    with (
        redis_server() as server,
        otlp_collector() as collector,
        two_traced_replicas(tmp_path, fake, server, collector) as (a, b),
    ):
        with consumer_process(
            tmp_path, a.target, "--case", CASE, "--stream-id", sid, "--traceparent",
            TRACEPARENT, "--resume-attempts", "0", "--idle-timeout-s", GRACE_S,
        ) as first:  # fmt: skip
            wait_for(lambda: sent(a, sid) >= 2, timeout=30)
            stop_process(first, signal.SIGKILL)
        case = load_recording().case(CASE)
        request = ReplyRequest(
            case_id=case.case_id, binding=case.binding, wire=WireFormat.LENGTH_PREFIXED,
            plan=ChunkPlan.parse("whole"), fault=None, stream_id=sid,
        ).open_request()  # fmt: skip
        request.resume_after = 1
        metadata = (("traceparent", f"00-{TRACE_ID}-{resumer_span}-01"),)
        with grpc.insecure_channel(b.target) as channel:
            call = pb_grpc.ReplyStreamStub(channel).Open(request, metadata=metadata, timeout=30)
            assert next(iter(call)).data  # frame 2, from the log; then the caller goes
            call.cancel()
        wait_for(
            lambda: {s.attributes["replywire.resume_after"] for s in collector.named(SERVE)
                     if s.attributes.get("replywire.stream_id") == sid} == {0, 1},
            timeout=20,
        )  # fmt: skip
    served = [s for s in collector.named(SERVE) if s.attributes.get("replywire.stream_id") == sid]
    first_span, resumed = sorted(served, key=lambda s: s.attributes["replywire.resume_after"])
    assert first_span.trace_id == resumed.trace_id == TRACE_ID
    assert resumed.parent_span_id == resumer_span
    assert resumed.links == [(TRACE_ID, first_span.span_id)]
