"""OpenTelemetry across the pair, with real processes: a consumer started with a given
``traceparent``, a producer on the fake Gemini server, both exporting over OTLP/gRPC to a
collector in this test (``tests/otlp_collector.py``).

One trace id throughout; the consumer's span the parent of the producer's; the
generation and the provider call under it; a resume a second producer span with a link
to the first; a refusal and a truncated stream with an error status and their reason;
every record of the stream, both sides, with the trace id, and ``join-traces
--trace-id`` finding them; a collector that never answers changing nothing but the drops
counted; malformed context ignored with a record.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replywire.children import stop_process
from replywire.runtime.recording_file import load_recording
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan
from tests.gemini_runs import API_KEY, gemini_producer
from tests.otlp_collector import (
    KIND_CLIENT,
    KIND_SERVER,
    STATUS_ERROR,
    STATUS_OK,
    Collector,
    Received,
    otlp_collector,
)
from tests.processes import (
    ROOT,
    FakeGeminiProcess,
    consumer_process,
    fake_gemini,
    producer,
    run_consumer,
    wait_for,
)
from tests.producer_records import metrics_port, scrape
from tests.reset_proxy import ResetProxy
from tests.runs import essence

pytestmark = pytest.mark.timeout(180)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"
CASE = "backup-schedule"
CONSUME, SERVE = "replywire.consume", "replywire.serve"
GENERATION, PROVIDER = "replywire.generation", "gemini.stream_generate_content"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGeminiProcess]:
    with fake_gemini(API_KEY) as server:
        yield server


@pytest.fixture(autouse=True)
def prompt_export(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spans batched for 50 ms, not 5 s: the collector has them soon after a stream."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")


def of_stream(collector: Collector, name: str, stream_id: str) -> list[Received]:
    return [
        s for s in collector.named(name) if s.attributes.get("replywire.stream_id") == stream_id
    ]


def stream_records(records: list[dict[str, Any]], stream_id: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("stream_id") == stream_id]


def test_one_trace_across_the_pair_with_a_resume(tmp_path: Path, fake: FakeGeminiProcess) -> None:
    sid = "otel-resume"
    with (
        otlp_collector() as collector,
        gemini_producer(
            tmp_path, fake, "--otlp-endpoint", collector.endpoint, model="fake-slow-drip"
        ) as running,
        ResetProxy(running.port, 400) as proxy,
    ):
        run = run_consumer(
            proxy.target, "--case", CASE, "--stream-id", sid, "--chunk-interval-ms", "20",
            "--resume-backoff-s", "0.05", "--traceparent", TRACEPARENT,
            "--otlp-endpoint", collector.endpoint,
        )  # fmt: skip
        assert proxy.reset_done
        collector.wait_for(CONSUME, PROVIDER, GENERATION)
        wait_for(lambda: len(of_stream(collector, SERVE, sid)) >= 2, timeout=20)
        producer_records = running.trace()
    assert run.returncode == 0, run.result
    assert run.result["stats"]["reconnects"] >= 1

    (consume,) = of_stream(collector, CONSUME, sid)
    serves = sorted(
        of_stream(collector, SERVE, sid), key=lambda s: s.attributes["replywire.resume_after"]
    )
    (generation,) = of_stream(collector, GENERATION, sid)
    (provider,) = collector.named(PROVIDER)
    spans = [consume, *serves, generation, provider]
    assert {s.trace_id for s in spans} == {TRACE_ID}
    # The caller's span -> consume -> each delivery; the first delivery -> generation -> call.
    assert (consume.parent_span_id, consume.kind, consume.service) == (
        CALLER_SPAN,
        KIND_CLIENT,
        "replywire-consumer",
    )
    assert [(s.parent_span_id, s.kind, s.service) for s in serves] == [
        (consume.span_id, KIND_SERVER, "replywire-producer")
    ] * len(serves)
    first, resumed = serves[0], serves[-1]
    assert generation.parent_span_id == first.span_id
    assert provider.parent_span_id == generation.span_id
    assert (first.links, resumed.links) == ([], [(TRACE_ID, first.span_id)])
    assert resumed.attributes["replywire.resume_after"] > 0
    # Attributes and status.
    assert consume.status_code == STATUS_OK
    assert {
        key: consume.attributes[key]
        for key in ("rpc.system.name", "rpc.method", "server.address", "replywire.status",
                    "replywire.case_id", "rpc.response.status_code")
    } == {
        "rpc.system.name": "grpc", "rpc.method": "replywire.v1.ReplyStream/Open",
        "server.address": "127.0.0.1", "replywire.status": "complete", "replywire.case_id": CASE,
        "rpc.response.status_code": "OK",
    }  # fmt: skip
    # Each state change of the core and the reader an event, and the resume.
    assert consume.events[-1] == "complete"
    assert {"streaming", "terminal_received", "validating", "ended"} <= set(consume.events)
    assert consume.events.count("stream_resuming") == run.result["stats"]["reconnects"]
    assert consume.attributes["replywire.reconnects"] == run.result["stats"]["reconnects"]
    assert consume.attributes["replywire.frames"] == run.result["stats"]["application_frames"]
    assert (resumed.status_code, resumed.attributes["replywire.status"]) == (STATUS_OK, "completed")
    assert "completed" in resumed.events
    assert provider.status_code == STATUS_OK
    assert provider.attributes["http.response.status_code"] == 200
    assert provider.attributes["gen_ai.request.model"] == "fake-slow-drip"
    assert provider.attributes["gen_ai.usage.input_tokens"] > 0
    assert provider.attributes["replywire.ledger.outcome"].startswith("completed")
    # Every record of the stream, both sides, carries the trace id.
    consumer_records = stream_records(run.trace, sid)
    for record in consumer_records + stream_records(producer_records, sid):
        assert record.get("trace_id") == TRACE_ID, record
        assert len(record["span_id"]) == 16
    # join-traces --trace-id finds them all.
    (tmp_path / "consumer.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in run.trace), encoding="utf-8"
    )
    joined = subprocess.run(
        [sys.executable, "-m", "replywire", "join-traces", str(tmp_path / "consumer.jsonl"),
         str(running.trace_path), "--trace-id", TRACE_ID.upper()],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    got = [json.loads(line) for line in joined.stdout.splitlines()]
    assert {r["side"] for r in got} == {"consumer", "producer"}
    assert len(got) >= len(consumer_records) + len(stream_records(producer_records, sid))
    assert {r["trace_id"] for r in got} == {TRACE_ID}
    # trace --trace-id draws the stream whose records carry it.
    drawn = subprocess.run(
        [sys.executable, "-m", "replywire", "trace", str(tmp_path / "consumer.jsonl"),
         str(running.trace_path), "--trace-id", TRACE_ID],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert sid in drawn.stdout.splitlines()[0]


@pytest.mark.parametrize(
    ("model", "status", "reason"),
    [
        ("fake-rate-limited", "refused", "provider_rate_limited"),
        ("fake-early-eof", "incomplete", "missing_terminal"),
    ],
)
def test_a_refusal_and_a_truncated_stream_are_errors_with_their_reason(
    tmp_path: Path, fake: FakeGeminiProcess, model: str, status: str, reason: str
) -> None:
    sid = f"otel-{model}"
    with (
        otlp_collector() as collector,
        gemini_producer(tmp_path, fake, "--otlp-endpoint", collector.endpoint, model=model) as p,
    ):
        run = run_consumer(
            p.target, "--case", CASE, "--stream-id", sid, "--traceparent", TRACEPARENT,
            "--otlp-endpoint", collector.endpoint,
        )  # fmt: skip
        collector.wait_for(CONSUME, SERVE, PROVIDER)
        producer_records = p.trace()
    assert (run.result["status"], run.result["reason"]) == (status, reason)
    (consume,) = of_stream(collector, CONSUME, sid)
    (serve,) = of_stream(collector, SERVE, sid)
    assert {consume.trace_id, serve.trace_id} == {TRACE_ID}
    assert serve.parent_span_id == consume.span_id
    assert (consume.status_code, consume.status_message) == (STATUS_ERROR, reason)
    assert consume.attributes["replywire.reason"] == reason
    assert consume.attributes["replywire.status"] == status
    (provider,) = collector.named(PROVIDER)
    print(serve, provider, collector.named(GENERATION))
    assert provider.trace_id == TRACE_ID
    if status == "refused":
        assert (serve.attributes["replywire.status"], serve.attributes["replywire.reason"]) == (
            "refused",
            reason,
        )
        assert provider.attributes["http.response.status_code"] == 429
        assert provider.status_code == STATUS_ERROR
    for record in stream_records(run.trace, sid) + stream_records(producer_records, sid):
        assert record.get("trace_id") == TRACE_ID, record


def test_a_collector_that_never_answers_changes_nothing_but_the_drops(
    tmp_path: Path, fake: FakeGeminiProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "5")  # each export waits 5 s, then fails
    (tmp_path / "plain").mkdir()
    with gemini_producer(tmp_path / "plain", fake) as plain:
        untraced = run_consumer(plain.target, "--case", CASE)
    with (
        otlp_collector(answering=False) as collector,
        gemini_producer(
            tmp_path, fake, "--otlp-endpoint", collector.endpoint, "--metrics-port", "0"
        ) as running,
    ):
        traced = run_consumer(
            running.target, "--case", CASE, "--traceparent", TRACEPARENT,
            "--otlp-endpoint", collector.endpoint,
        )  # fmt: skip
        port = metrics_port(running)

        def dropped() -> float:
            return scrape(port).get(("replywire_trace_spans_dropped_total", ()), 0.0)

        wait_for(lambda: dropped() >= 1, timeout=30)
        assert collector.calls >= 1
        assert running.logged("trace_spans_dropped")
    assert traced.returncode == untraced.returncode == 0
    assert essence(traced.result) == essence(untraced.result)
    (ended,) = [r for r in traced.trace if r["event"] == "trace_export_ended"]
    assert (ended["spans_exported"], ended["spans_dropped"], ended["unfinished"]) == (0, 1, True)
    assert collector.spans == []


@pytest.fixture(scope="module")
def plain_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A producer (recording source, tracing off) for every fuzzed example."""
    with producer(tmp_path_factory.mktemp("fuzz")) as running:
        yield running.target


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    value=st.one_of(
        st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80),
        st.builds(
            lambda head, tail: f"{head}-{TRACE_ID}-{CALLER_SPAN}-{tail}",
            st.sampled_from(["00", "ff", "0", "zz", "01"]),
            st.sampled_from(["01", "00", "1", "xx", "01-extra"]),
        ),
        st.just("00-" + "0" * 32 + "-" + CALLER_SPAN + "-01"),
        st.just("00-" + TRACE_ID + "-" + CALLER_SPAN + "-01" + "x" * 300),
    )
)
def test_fuzzed_traceparent_the_stream_is_served(plain_target: str, value: str) -> None:
    """Whatever the consumer is handed: the stream completes; a value the propagator does
    not accept is said in a record and the span starts a trace of its own."""
    run = run_consumer(plain_target, "--case", "replace-file", f"--traceparent={value}")
    assert run.returncode == 0, run.result
    ignored = [r for r in run.trace if r["event"] == "trace_context_ignored"]
    (finished,) = [r for r in run.trace if r["event"] == "stream_finished"]
    if not value:  # no context, no collector: tracing off
        assert "trace_id" not in finished and not ignored
    elif ignored:
        assert ignored[0]["why"] in {"traceparent_malformed", "traceparent_oversized"}
        assert len(finished["trace_id"]) == 32
    else:
        assert finished["trace_id"] == value.split("-")[1]


@pytest.fixture(scope="module")
def traced_producer(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Collector, Any]]:
    """A producer (recording source) exporting to a collector, for the fuzzed callers."""
    with (
        otlp_collector() as collector,
        producer(
            tmp_path_factory.mktemp("fuzz-producer"),
            "--otlp-endpoint",
            collector.endpoint,
            env={"OTEL_BSP_SCHEDULE_DELAY": "50"},  # the function-scoped fixture's is too late
        ) as running,
    ):
        yield collector, running


_CALLS = iter(range(1_000_000))
#: What gRPC lets a caller send as a metadata value: printable ASCII.
PRINTABLE = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    traceparent=st.one_of(
        PRINTABLE.filter(lambda text: text.strip() == text and text != ""),
        st.just("00-" + "0" * 32 + "-" + CALLER_SPAN + "-01"),
        st.just("00-" + TRACE_ID + "-" + "f" * 400),
        st.just(TRACEPARENT),
    ),
    tracestate=st.none()
    | PRINTABLE.filter(lambda text: text.strip() == text)
    | st.just("k=" + "v" * 600),
)
def test_any_context_a_caller_sends_the_stream_is_served(
    traced_producer: tuple[Collector, Any], traceparent: str, tracestate: str | None
) -> None:
    """A caller (not our consumer) sends whatever context: the stream is served; a
    traceparent the producer cannot continue is said in a record, and the span starts a
    trace of its own."""
    collector, running = traced_producer
    sid = f"fuzzed-{next(_CALLS)}"
    case = load_recording().case("replace-file")
    request = ReplyRequest(
        case_id=case.case_id, binding=case.binding, wire=WireFormat.LENGTH_PREFIXED,
        plan=ChunkPlan.parse("whole"), fault=None, stream_id=sid,
    ).open_request()  # fmt: skip
    metadata = [("traceparent", traceparent)]
    if tracestate is not None:
        metadata.append(("tracestate", tracestate))
    with grpc.insecure_channel(running.target) as channel:
        chunks = list(
            pb_grpc.ReplyStreamStub(channel).Open(request, metadata=tuple(metadata), timeout=30)
        )
    assert chunks
    wait_for(lambda: len(of_stream(collector, SERVE, sid)) == 1, timeout=20)
    (serve,) = of_stream(collector, SERVE, sid)
    assert serve.status_code == STATUS_OK
    records = running.stream_trace(sid)
    assert {r["trace_id"] for r in records} == {serve.trace_id}
    ignored = {r["why"] for r in records if r["event"] == "trace_context_ignored"}
    if serve.parent_span_id:  # continued: the caller's trace
        assert (serve.trace_id, serve.parent_span_id) == tuple(traceparent.split("-")[1:3])
        assert ignored <= {"tracestate_oversized", "tracestate_malformed"}
    else:
        assert ignored & {"traceparent_malformed", "traceparent_oversized"}


def test_off_nothing_of_it_is_loaded() -> None:
    """Without a collector or a context: the consumer's command line imports nothing of
    OpenTelemetry, and neither process loads the module that makes spans (redis 8.1 imports
    OpenTelemetry's API itself, for metrics of its own it leaves off: the producer's import
    of it is redis's)."""
    probe = (
        "import sys, consumer.cli, consumer.client; "
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')]; "
        "import producer.cli, producer.edge.servicer, producer.sources.gemini.source; "
        "assert 'runtime.otel' not in sys.modules and 'opentelemetry.sdk.trace' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True, timeout=60)


def test_off_records_carry_no_trace_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_SDK_DISABLED=true wins over a collector and a context: no span, no ids."""
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    with producer(tmp_path, "--otlp-endpoint", "http://127.0.0.1:9") as p:
        run = run_consumer(
            p.target, "--case", "replace-file", "--stream-id", "off", "--traceparent",
            TRACEPARENT, "--otlp-endpoint", "http://127.0.0.1:9",
        )  # fmt: skip
        producer_records = p.stream_trace("off")
    assert run.returncode == 0
    records = stream_records(run.trace, "off") + producer_records
    assert records and not [r for r in records if "trace_id" in r]


def test_a_cancel_carries_the_trace_context(tmp_path: Path, fake: FakeGeminiProcess) -> None:
    """Ctrl-C mid-stream: the Cancel is a span of the stream's trace on the producer, under
    the consumer's span; the consumer's span ends consumer_cancelled."""
    sid = "otel-cancel"
    with (
        otlp_collector() as collector,
        gemini_producer(
            tmp_path, fake, "--otlp-endpoint", collector.endpoint, model="fake-slow-drip"
        ) as running,
    ):
        with consumer_process(
            tmp_path, running.target, "--case", CASE, "--stream-id", sid,
            "--chunk-interval-ms", "300", "--traceparent", TRACEPARENT,
            "--otlp-endpoint", collector.endpoint,
        ) as consumer:  # fmt: skip
            wait_for(
                lambda: any(r["event"] == "chunk_sent" for r in running.stream_trace(sid)),
                timeout=30,
            )
            assert stop_process(consumer, signal.SIGINT) == 3
        collector.wait_for(CONSUME, "replywire.cancel")
        requested = [
            r for r in running.stream_trace(sid) if r["event"] == "stream_cancel_requested"
        ]
    (consume,) = of_stream(collector, CONSUME, sid)
    (cancel,) = collector.named("replywire.cancel")
    assert (consume.status_code, consume.status_message) == (STATUS_ERROR, "consumer_cancelled")
    assert (cancel.trace_id, cancel.parent_span_id) == (TRACE_ID, consume.span_id)
    assert cancel.attributes["rpc.method"] == "replywire.v1.ReplyStream/Cancel"
    assert cancel.attributes["replywire.cancelled"] is True
    assert [r["trace_id"] for r in requested] == [TRACE_ID]
