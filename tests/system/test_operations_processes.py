"""The producer's operations surface: stream limit, health, reflection, metrics, connection
age, its own trace file, and a hostile HTTP/2 peer.

Real producer processes on ephemeral loopback ports and real gRPC clients; raw TCP
peers built by hand (tests/http2.py). Only what a test started is signalled, by pid;
every wait is bounded; no assertion is on elapsed time.

One file past 500 lines: the surface's tests share the channel, request and trace helpers
below.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
import structlog
import structlog.testing
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from replywire.consumer.reader import StreamEnded
from replywire.consumer.session import refused_by_http2
from replywire.producer.edge.health import BoundedHealthServicer
from replywire.producer.flags import build_parser
from replywire.producer.metrics import ProducerMetrics
from replywire.runtime.library_logs import FOREIGN_LOG_EVENT
from replywire.shared.digest import canonical_json
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.reasons import Reason
from replywire.shared.recording import Recording
from tests import http2
from tests.hostile_input import INJECTED
from tests.processes import ROOT, Producer, consumer_command, producer, run_consumer, wait_for
from tests.producer_records import (
    NOT_SERVING,
    SERVING,
    check_exposition,
    exposition,
    finals,
    metrics_port,
    samples,
    stopped_record,
)
from tests.runs import until

pytestmark = pytest.mark.timeout(120)


def slow_request(
    recording: Recording, stream_id: str, *, chunk_bytes: int = 1, interval_ms: int = 50
) -> pb.OpenRequest:
    """utf8-write in ``chunk_bytes`` chunks ``interval_ms`` apart: with the defaults 2,258
    chunks, some two minutes: held for as long as a test needs it."""
    binding = recording.case("utf8-write").binding
    return pb.OpenRequest(
        case_id="utf8-write",
        binding_json=canonical_json(binding),
        chunk_sizes=[chunk_bytes],
        chunk_interval_ms=interval_ms,
        stream_id=stream_id,
    )


@asynccontextmanager
async def channel(target: str, *, shared: bool = False) -> AsyncIterator[grpc.aio.Channel]:
    """A channel of its own TCP connection, as a consumer process has; ``shared``: the
    process-wide connection that grpc's channels to one target share by default."""
    options = [] if shared else [("grpc.use_local_subchannel_pool", 1)]
    async with grpc.aio.insecure_channel(target, options=options) as opened:
        yield opened


async def read_to_end(call: Any) -> tuple[str, str, int]:
    """Read a call to its end: (status code name, details, chunks read)."""
    chunks = 0
    try:
        while await call.read() is not grpc.aio.EOF:  # type: ignore[attr-defined]
            chunks += 1
    except grpc.aio.AioRpcError as error:
        return error.code().name, error.details() or "", chunks
    return "OK", "", chunks


def test_the_stream_over_the_limit_is_refused_and_a_freed_slot_serves_again(
    tmp_path: Path, recording: Recording
) -> None:
    async def scenario(p: Producer) -> None:
        async with (
            channel(p.target) as c1,
            channel(p.target) as c2,
            channel(p.target) as c3,
            channel(p.target) as c4,
        ):
            held = [
                pb_grpc.ReplyStreamStub(c).Open(slow_request(recording, f"held-{i}"), timeout=60)
                for i, c in enumerate((c1, c2, c3))
            ]
            for call in held:  # each is streaming: its first chunk has arrived
                assert await call.read() is not grpc.aio.EOF  # type: ignore[attr-defined]
            fourth = pb_grpc.ReplyStreamStub(c4).Open(slow_request(recording, "fourth"), timeout=60)
            assert await read_to_end(fourth) == ("RESOURCE_EXHAUSTED", "stream_limit", 0)

            held[0].cancel()
            await until(lambda: "held-0" in finals(p))
            again = pb_grpc.ReplyStreamStub(c4).Open(
                slow_request(recording, "again", chunk_bytes=1000, interval_ms=0), timeout=60
            )
            assert (await read_to_end(again))[:2] == ("OK", "")
            for call in held[1:]:
                call.cancel()

    with producer(tmp_path, "--max-streams", "3") as p:
        asyncio.run(scenario(p))
        wait_for(lambda: {"held-1", "held-2"} <= set(finals(p)))
        ended = finals(p)
        stopped = stopped_record(p)
    assert ended["fourth"]["to_state"] == "refused"
    assert ended["fourth"]["reason"] == "stream_limit"
    assert ended["again"]["to_state"] == "completed"
    assert {ended[f"held-{i}"]["to_state"] for i in range(3)} == {"cancelled_by_consumer"}
    assert (stopped["streams_opened"], stopped["streams_refused"]) == (5, 1)
    assert (stopped["streams_completed"], stopped["streams_cancelled"]) == (1, 3)


@pytest.mark.parametrize("shared", [False, True], ids=["own-connections", "one-connection"])
def test_far_past_the_limit_every_stream_is_served_or_refused_stream_limit(
    tmp_path: Path, recording: Recording, shared: bool
) -> None:
    clients = 40
    by_http2 = ("UNAVAILABLE", "REFUSED_STREAM")

    async def one(target: str, index: int) -> tuple[str, str]:
        async with channel(target, shared=shared) as c:
            call = pb_grpc.ReplyStreamStub(c).Open(
                slow_request(recording, f"burst-{index}", chunk_bytes=200, interval_ms=20),
                timeout=60,
            )
            code, details, chunks = await read_to_end(call)
            end = StreamEnded(getattr(grpc.StatusCode, code), details)
            return by_http2 if chunks == 0 and refused_by_http2(end) else (code, details)

    async def burst(target: str) -> list[tuple[str, str]]:
        async with channel(target, shared=shared) as warm:
            # The shared connection up first, the producer's SETTINGS heard: a burst on a
            # connection still starting opens more streams than its limit before the client
            # knows it (docs/operations.md#known-limits).
            await check(warm, "")
            return await asyncio.gather(*(one(target, i) for i in range(clients)))

    with producer(tmp_path, "--max-streams", "3") as p:
        outcomes = Counter(asyncio.run(burst(p.target)))
        seen = clients - outcomes[by_http2]
        try:
            wait_for(lambda: len(finals(p)) == seen)  # the trace is written in batches
        except TimeoutError:
            missing = sorted({f"burst-{i}" for i in range(clients)} - set(finals(p)))
            pytest.fail(f"no final record for {missing}; the clients heard {dict(outcomes)}")
        ended = finals(p)
        stopped = stopped_record(p)
    # Every client hears one of the two answers; none is cut by gRPC with a bare status.
    # On one connection a third: a stream queued in the client opens as a refused one ends,
    # and for an instant the producer's HTTP/2 still counts the ended one, so it refuses
    # the new one unprocessed (REFUSED_STREAM). grpcio retries that once by itself (gRFC
    # A6); refused again it is UNAVAILABLE, which the consumer names stream_limit. Such a
    # stream never reached the servicer: no record, not opened. Seen once, in a CI run;
    # impossible on connections of their own (one stream each).
    answers = {("OK", ""), ("RESOURCE_EXHAUSTED", "stream_limit")}
    assert set(outcomes) <= (answers | {by_http2} if shared else answers), outcomes
    assert outcomes["OK", ""] >= 3
    assert sum(outcomes.values()) == clients
    by_state = Counter(r["to_state"] for r in ended.values())
    assert by_state == {
        "completed": outcomes["OK", ""],
        "refused": outcomes["RESOURCE_EXHAUSTED", "stream_limit"],
    }
    assert stopped["streams_opened"] == seen


async def check(c: grpc.aio.Channel, service: str) -> int:
    response = await health_pb2_grpc.HealthStub(c).Check(
        health_pb2.HealthCheckRequest(service=service), timeout=10
    )
    return int(response.status)


def test_health_is_serving_once_listening(tmp_path: Path) -> None:
    async def scenario(target: str) -> None:
        async with channel(target) as c:
            assert await check(c, "") == SERVING
            assert await check(c, "replywire.v1.ReplyStream") == SERVING
            with pytest.raises(grpc.aio.AioRpcError) as unknown:
                await check(c, "no.such.Service")
            assert unknown.value.code() == grpc.StatusCode.NOT_FOUND

    with producer(tmp_path) as p:
        asyncio.run(scenario(p.target))


def test_health_says_not_serving_at_sigterm_while_a_stream_is_in_its_grace(
    tmp_path: Path, recording: Recording
) -> None:
    async def scenario(p: Producer) -> None:
        async with channel(p.target) as c:
            held = pb_grpc.ReplyStreamStub(c).Open(slow_request(recording, "held"), timeout=60)
            assert await held.read() is not grpc.aio.EOF  # type: ignore[attr-defined]
            watch = health_pb2_grpc.HealthStub(c).Watch(
                health_pb2.HealthCheckRequest(service="replywire.v1.ReplyStream"), timeout=60
            )
            assert (await watch.read()).status == SERVING
            p.process.send_signal(signal.SIGTERM)
            assert (await watch.read()).status == NOT_SERVING
            # Heard while the stream is still open: its grace has not run out.
            assert "held" not in finals(p)
            watch.cancel()
            assert (await read_to_end(held))[:2] == ("UNAVAILABLE", "producer_shutdown")

    with producer(tmp_path, "--shutdown-grace-s", "3") as p:
        asyncio.run(scenario(p))
        p.process.wait(timeout=30)
        assert p.process.returncode == 0
    assert finals(p)["held"]["to_state"] == "shutdown"


async def watch(c: grpc.aio.Channel, service: str = "") -> Any:
    """A health Watch, its first answer read (SERVING, or the refusal raised)."""
    call = health_pb2_grpc.HealthStub(c).Watch(
        health_pb2.HealthCheckRequest(service=service), timeout=60
    )
    assert (await call.read()).status == SERVING
    return call


def test_health_watches_are_bounded_and_a_closed_one_frees_its_slot(tmp_path: Path) -> None:
    """--max-health-watches 3: three held open (on connections of their own and on one),
    the fourth refused RESOURCE_EXHAUSTED / health_watch_limit while Check still answers;
    one closed, a new one is served; SIGTERM still reaches the ones held."""
    limit = 3

    async def scenario(p: Producer) -> int:
        refusals = 0
        async with channel(p.target) as first, channel(p.target) as second:
            held = [await watch(first), await watch(first, "replywire.v1.ReplyStream")]
            held.append(await watch(second))
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await watch(second)
            refusals += 1
            assert (refused.value.code(), refused.value.details()) == (
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "health_watch_limit",
            )
            assert await check(first, "") == SERVING
            held.pop(0).cancel()
            # The producer sees the cancel a moment later: bounded retries, each refusal counted.
            for _attempt in range(100):
                try:
                    held.append(await watch(second))
                    break
                except grpc.aio.AioRpcError as error:
                    assert error.details() == "health_watch_limit"
                    refusals += 1
                    await asyncio.sleep(0.05)
            assert len(held) == limit
            p.process.send_signal(signal.SIGTERM)
            for call in held:
                assert (await call.read()).status == NOT_SERVING
                call.cancel()
        return refusals

    with producer(tmp_path, "--max-health-watches", str(limit)) as p:
        refusals = asyncio.run(scenario(p))
        p.process.wait(timeout=30)
        assert p.process.returncode == 0
    records = p.trace()
    (listening,) = [r for r in records if r["event"] == "producer_listening"]
    assert listening["max_health_watches"] == limit
    (first_refusal, *_) = [r for r in records if r["event"] == "health_watch_refused"]
    assert first_refusal["reason"] == "health_watch_limit"
    assert first_refusal["level"] == "warning"
    assert (first_refusal["open_watches"], first_refusal["max_health_watches"]) == (limit, limit)
    assert first_refusal["refused"] == 1
    assert records[-1]["event"] == "producer_stopped"
    assert records[-1]["health_watches_refused"] == refusals


def test_refused_watches_are_logged_at_most_once_a_second_with_the_running_count() -> None:
    """In-process: the servicer alone on a loopback port, its clock a fake one."""
    now = [100.0]

    async def scenario() -> list[Any]:
        servicer = BoundedHealthServicer(1, clock=lambda: now[0])
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with channel(f"127.0.0.1:{port}") as c:
                held = await watch(c)
                with structlog.testing.capture_logs() as logs:
                    for at in (100.0, 100.5, 100.9, 101.0, 101.2):
                        now[0] = at
                        with pytest.raises(grpc.aio.AioRpcError):
                            await watch(c)
                assert (servicer.watches, servicer.refused) == (1, 5)
                held.cancel()
            return logs
        finally:
            await server.stop(None)

    logs = asyncio.run(scenario())
    assert [(r["event"], r["refused"]) for r in logs] == [
        ("health_watch_refused", 1),
        ("health_watch_refused", 4),
    ]


def test_reflection_lists_the_services(tmp_path: Path) -> None:
    async def scenario(target: str) -> tuple[set[str], bool]:
        async with channel(target) as c:
            stub = reflection_pb2_grpc.ServerReflectionStub(c)
            requests = [
                reflection_pb2.ServerReflectionRequest(list_services=""),
                reflection_pb2.ServerReflectionRequest(
                    file_containing_symbol="replywire.v1.ReplyStream"
                ),
            ]
            answers = [answer async for answer in stub.ServerReflectionInfo(iter(requests))]
        names = {s.name for s in answers[0].list_services_response.service}
        found = bool(answers[1].file_descriptor_response.file_descriptor_proto)
        return names, found

    with producer(tmp_path) as p:
        names, found = asyncio.run(scenario(p.target))
    assert names == {
        "replywire.v1.ReplyStream",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    }
    assert found


def test_metrics_count_a_complete_and_a_refused_stream_exactly(tmp_path: Path) -> None:
    with producer(tmp_path, "--metrics-port", "0") as p:
        port = metrics_port(p)
        complete = run_consumer(p.target, "--case", "replace-file")
        refused = run_consumer(p.target, "--case", "replace-file", "--fault", "omit")
        text = exposition(port)
        stopped = stopped_record(p)
    check_exposition(text)
    values = samples(text)
    assert (complete.result["status"], refused.result["reason"]) == (
        "complete",
        "faults_not_allowed",
    )
    stats = complete.result["stats"]
    assert values["replywire_streams_ended_total", (("outcome", "completed"), ("reason", ""))] == 1
    refused_key = (("outcome", "refused"), ("reason", "faults_not_allowed"))
    assert values["replywire_streams_ended_total", refused_key] == 1
    assert sum(v for (name, _), v in values.items() if name == "replywire_streams_ended_total") == 2
    assert values["replywire_streams_open", ()] == 0
    assert values["replywire_chunks_written_total", ()] == stats["transport_fragments"]
    assert values["replywire_bytes_written_total", ()] == stats["bytes_received"]
    assert values["replywire_chunk_write_wait_seconds_count", ()] == stats["transport_fragments"]
    assert values["replywire_ledger_spend_usd_total", ()] == 0
    assert (stopped["chunks_written"], stopped["bytes_written"]) == (
        stats["transport_fragments"],
        stats["bytes_received"],
    )


def test_metrics_are_off_by_default(tmp_path: Path) -> None:
    with producer(tmp_path) as p:
        stopped_record(p)
    assert not p.logged("metrics_listening")
    assert build_parser().parse_args([]).metrics_port is None


def test_a_taken_metrics_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "replywire.producer",
                "--port",
                "0",
                "--metrics-port",
                str(port),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert done.returncode == 2
    assert done.stderr.startswith(f"producer: cannot serve metrics on 127.0.0.1:{port}: ")
    assert len(done.stderr.splitlines()) == 1


def test_every_metric_is_named_for_what_it_counts_with_no_created_series() -> None:
    """Each counter and the histogram with samples in them (labelled ones included): the
    renames of docs/operations.md, and nothing prometheus_client would add beside them."""
    from prometheus_client import generate_latest  # noqa: PLC0415 - this test only

    metrics = ProducerMetrics()
    metrics.stream_ended("completed", "")
    metrics.stream_ended("refused", "faults_not_allowed")
    metrics.generation_ended("reply_log_limit")
    metrics.ledger_settled(0.25)
    metrics.chunk_written(3, 0.002)
    metrics.spans_dropped(2)
    metrics.request_refused(Reason.METADATA_TOO_LARGE)
    text = generate_latest(metrics.registry).decode()
    check_exposition(text)
    assert {name for name, _ in samples(text)} == {
        "replywire_streams_ended_total",
        "replywire_streams_open",
        "replywire_bytes_written_total",
        "replywire_chunks_written_total",
        "replywire_chunk_write_wait_seconds_bucket",
        "replywire_chunk_write_wait_seconds_count",
        "replywire_chunk_write_wait_seconds_sum",
        "replywire_ledger_spend_usd_total",
        "replywire_generations_ended_total",
        "replywire_trace_spans_dropped_total",
        "replywire_requests_refused_total",
    }
    values = samples(text)
    assert values["replywire_trace_spans_dropped_total", ()] == 2
    assert values["replywire_requests_refused_total", (("reason", "metadata_too_large"),)] == 1
    assert values["replywire_generations_ended_total", (("outcome", "reply_log_limit"),)] == 1
    assert values["replywire_ledger_spend_usd_total", ()] == 0.25


def test_a_stream_cut_by_connection_age_ends_connection_aged_out(
    tmp_path: Path, recording: Recording
) -> None:
    async def scenario(target: str) -> tuple[str, str, int]:
        async with channel(target) as c:
            call = pb_grpc.ReplyStreamStub(c).Open(slow_request(recording, "aged"), timeout=60)
            return await read_to_end(call)

    with producer(tmp_path, "--max-connection-age-s", "0.5") as p:
        code, _, chunks = asyncio.run(scenario(p.target))
        wait_for(lambda: "aged" in finals(p))
        final = finals(p)["aged"]
        stopped = stopped_record(p)
    assert code == "UNAVAILABLE"
    assert 0 < chunks < 2258  # cut mid-stream
    assert (final["from_state"], final["to_state"]) == ("streaming", "connection_aged_out")
    assert (final["input"], final["reason"]) == ("connection_aged", "connection_aged_out")
    assert final["chunks_sent"] >= chunks
    assert (stopped["streams_aged_out"], stopped["streams_cancelled"]) == (1, 0)


PRODUCER_EVENTS = frozenset(
    {
        "producer_listening",
        "metrics_listening",
        "state_changed",
        "chunk_sent",
        "stream_failed",
        "producer_stopping",
        "producer_stopped",
        FOREIGN_LOG_EVENT,
    }
)


@pytest.mark.parametrize("verbosity", ["", "info"], ids=["default", "operator-asked-for-info"])
def test_a_peer_cannot_write_into_the_trace(tmp_path: Path, verbosity: str) -> None:
    """A GOAWAY's debug data is the peer's text; gRPC's C core logs it (at INFO). By
    default those logs are off, so stderr stays empty; an operator who turns them on
    gets them on stderr, and the trace file still holds only the producer's records."""
    trace_file = tmp_path / "producer.jsonl"
    env = {"GRPC_VERBOSITY": verbosity}
    with producer(tmp_path, "--trace-file", str(trace_file), env=env) as p:
        for error_code in (http2.NO_ERROR, http2.INTERNAL_ERROR):
            with socket.create_connection(("127.0.0.1", p.port), timeout=10) as peer:
                peer.sendall(
                    http2.PREFACE
                    + http2.settings()
                    + http2.goaway(error_code, (INJECTED + "\n").encode())
                    + http2.ping()
                )
                # The PING's ACK: the producer has read (and logged) the GOAWAY before it.
                # (It keeps a connection the peer said GOAWAY on open: waiting for it to close
                # ran out a 10 s read timeout each time.)
                assert http2.read_until_ping_ack(peer)
        assert run_consumer(p.target, "--case", "replace-file").returncode == 0
        p.process.send_signal(signal.SIGTERM)
        p.process.wait(timeout=30)
    assert p.process.returncode == 0
    stderr = p.trace_path.read_text()
    if not verbosity:
        assert stderr == "", stderr  # the human one-liners only: none on a clean run
    else:  # the C core's own lines, the peer's text in them: never in the trace file
        assert "forged-by-peer" in stderr
        assert not any(line.startswith("{") for line in stderr.splitlines())
    lines = trace_file.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["event"] for r in records][-1] == "producer_stopped"
    assert all(r["side"] == "producer" for r in records)
    assert {r["event"] for r in records} <= PRODUCER_EVENTS
    assert not any("forged-by-peer" in line for line in lines)
    assert not any(r.get("stream_id") == "forged-by-peer" for r in records)


def test_the_trace_file_is_appended_to(tmp_path: Path) -> None:
    trace_file = tmp_path / "producer.jsonl"
    trace_file.write_text('{"earlier": true}\n')
    with producer(tmp_path, "--trace-file", str(trace_file)) as p:
        stopped_record_from_file(p, trace_file)
    lines = trace_file.read_text().splitlines()
    assert lines[0] == '{"earlier": true}'
    assert json.loads(lines[-1])["event"] == "producer_stopped"


def stopped_record_from_file(p: Producer, trace_file: Path) -> None:
    p.process.send_signal(signal.SIGTERM)
    p.process.wait(timeout=30)
    assert p.process.returncode == 0
    assert p.trace_path.read_text() == ""


def test_an_unwritable_trace_file_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "replywire.producer",
            "--trace-file",
            str(tmp_path / "no" / "such.jsonl"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert "--trace-file" in done.stderr


@pytest.mark.parametrize("error_code", [0xFF, 70007, 0xFFFFFFFF])
def test_an_undefined_goaway_error_code_does_not_crash_the_consumer(error_code: int) -> None:
    """A GOAWAY whose error code HTTP/2 does not define (RFC 9113 §7: unknown codes "MUST
    NOT trigger any special behavior"). Reported to abort a grpcio client in its C core
    (SIGABRT, http2_status.h "UNREACHABLE CODE"); grpc-java crashed on the same frame
    (grpc/grpc-java#13031, Apache httpd's 70007) and fixed it (grpc/grpc-java#13035).
    Written as a strict xfail, it passed: grpcio 1.85.3 does not crash, the stream fails
    UNAVAILABLE and the consumer ends error / transport_io_error (exit 5). A normal test
    now, so an upgrade that brings the crash back fails here."""
    reply = http2.settings() + http2.settings(ack=True) + http2.goaway(error_code, b"bye")
    with http2.OneShotServer(reply) as peer:
        done = subprocess.run(
            consumer_command(
                f"127.0.0.1:{peer.port}", "--case", "replace-file", "--resume-attempts", "0"
            ),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert peer.received.startswith(http2.PREFACE)
    assert done.returncode == 5, (done.returncode, done.stderr[-2000:])
    result = json.loads(done.stdout)
    assert (result["status"], result["reason"]) == ("error", "transport_io_error")
    assert result["transport"]["grpc_code"] == "UNAVAILABLE"
