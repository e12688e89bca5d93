"""Every stream ends in both traces; the producer starts and stops like a service.

Real producer processes on ephemeral loopback ports; consumers in this process
(the demo's own code path) or as processes. Only what a test started is
signalled, by pid; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import json
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from replywire.children import stop_process
from replywire.demo import demo_runs, stream_all
from replywire.producer.cli import stopping_line
from replywire.producer.flags import build_parser
from replywire.producer.states import FINAL_STATES, OPEN_STATES
from replywire.runtime.logs import configure_logging
from replywire.shared.digest import canonical_json
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.recording import Recording
from tests.processes import ROOT, producer, wait_for

pytestmark = pytest.mark.timeout(180)

FINAL_COUNTERS = (
    "streams_completed",
    "streams_refused",
    "streams_aborted",
    "streams_cancelled",
    "streams_failed",
    "streams_shutdown",
    "streams_aged_out",
)
#: The consumer core's final state for each result status.
VERDICT_STATE = {
    "complete": "complete",
    "incomplete": "incomplete",
    "cancelled": "cancelled",
    "error": "error",
    "invalid": "invalid",
}


def state_records(records: list[dict[str, Any]], stream_id: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("stream_id") == stream_id and r["event"] == "state_changed"]


def assert_counters_add_up(trace: list[dict[str, Any]]) -> dict[str, Any]:
    """``producer_stopped`` is the last record, after every stream's final record, and
    its counters add up."""
    stopped = trace[-1]
    assert stopped["event"] == "producer_stopped"
    assert stopped["open_streams"] == 0
    assert stopped["streams_opened"] == sum(stopped[name] for name in FINAL_COUNTERS)
    finals = [
        r
        for r in trace
        if r["event"] == "state_changed" and r["to_state"] in {s.value for s in FINAL_STATES}
    ]
    assert len(finals) == stopped["streams_opened"]
    by_state = Counter(r["to_state"] for r in finals)
    assert by_state["completed"] == stopped["streams_completed"]
    assert by_state["cancelled_by_consumer"] == stopped["streams_cancelled"]
    assert by_state["shutdown"] == stopped["streams_shutdown"]
    return stopped


# --- every stream of the demo's catalogue ends in both traces ------------------------------


def test_every_demo_stream_ends_in_both_traces(tmp_path: Path, recording: Recording) -> None:
    consumer_trace = io.StringIO()
    configure_logging("consumer", log_format="json", level="info", stream=consumer_trace)
    results: list[dict[str, Any]] = []
    with producer(tmp_path, "--allow-faults") as p:
        # As the demo runs them: in turn, on the channels one ReplyClient keeps.
        done = asyncio.run(stream_all(demo_runs(recording), recording, p.target))
        results.extend(streamed.to_dict() for _, _, streamed in done)
        stop_process(p.process)
        assert p.process.returncode == 0
        producer_trace = p.trace()
    consumer_records = [json.loads(line) for line in consumer_trace.getvalue().splitlines()]

    assert len(results) == 27
    open_values = {s.value for s in OPEN_STATES}
    for result in results:
        stream_id = result["stream_id"]
        produced = state_records(producer_trace, stream_id)
        # Exactly one final state on the producer's side, and it is the last record.
        finals = [r for r in produced if r["to_state"] not in open_values]
        assert len(finals) == 1, (stream_id, produced)
        assert produced[-1] is finals[0]
        consumed = state_records(consumer_records, stream_id)
        reader = [r for r in consumed if r.get("component") == "reader"]
        assert reader[-1]["to_state"] == "ended"
        if result["status"] == "refused":
            assert finals[0]["to_state"] == "refused"
            assert [r for r in consumed if r.get("component") == "core"] == []
        else:
            core = [r for r in consumed if r.get("component") == "core"]
            assert core[-1]["to_state"] == VERDICT_STATE[result["status"]], stream_id
        finished = [
            r
            for r in consumer_records
            if r.get("stream_id") == stream_id and r["event"] == "stream_finished"
        ]
        assert [(r["status"], r["reason"]) for r in finished] == [
            (result["status"], result["reason"])
        ]

    stopped = assert_counters_add_up(producer_trace)
    assert stopped["streams_opened"] == 27
    for result in results:
        final = state_records(producer_trace, result["stream_id"])[-1]["to_state"]
        assert final in producer_ends_for(result), (result["stream_id"], result["reason"], final)


def producer_ends_for(result: dict[str, Any]) -> set[str]:
    """The producer's possible final states, given the consumer's verdict."""
    status, reason = result["status"], result["reason"]
    if status == "refused":
        return {"refused"}
    if reason == "transport_io_error":  # transport-abort, abort-after-done
        return {"aborted"}
    if reason == "idle_timeout":  # the consumer gave up during the producer's stall
        return {"cancelled_by_consumer"}
    if status == "invalid" and reason != "truncated_frame":
        # Refused mid-stream, then the RPC is cancelled: the producer sees the cancel, or
        # has already written its last chunk and completed.
        return {"cancelled_by_consumer", "completed"}
    return {"completed"}


# --- shutdown -----------------------------------------------------------------------------


def _open_slow_stream(
    target: str, stream_id: str, recording: Recording, chunk_bytes: int = 1
) -> Callable[[], Coroutine[Any, Any, tuple[str, str]]]:
    """A raw gRPC client of a slow stream (chunks of ``chunk_bytes``, 50 ms apart: 2,154
    chunks, about 108 s, by default); returns the call's final code and details."""

    async def run() -> tuple[str, str]:
        binding = recording.case("utf8-write").binding
        request = pb.OpenRequest(
            case_id="utf8-write",
            binding_json=canonical_json(binding),
            chunk_sizes=[chunk_bytes],
            chunk_interval_ms=50,
            stream_id=stream_id,
        )
        async with grpc.aio.insecure_channel(target) as channel:
            call = pb_grpc.ReplyStreamStub(channel).Open(request, timeout=60)
            try:
                while await call.read() is not grpc.aio.EOF:  # type: ignore[attr-defined]
                    pass
            except grpc.aio.AioRpcError as error:
                return error.code().name, error.details() or ""
            return "OK", ""

    return run


@contextmanager
def _run_in_thread(
    coroutine_function: Callable[[], Coroutine[Any, Any, tuple[str, str]]],
) -> Iterator[concurrent.futures.Future[tuple[str, str]]]:
    """Run a raw client in its own thread and event loop while the test drives the producer."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    future = pool.submit(asyncio.run, coroutine_function())
    try:
        yield future
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def test_sigterm_ends_open_streams_as_shutdown_after_the_grace(
    tmp_path: Path, recording: Recording
) -> None:
    with producer(tmp_path, "--shutdown-grace-s", "0.5") as p:
        runner = _open_slow_stream(p.target, "held", recording)
        with _run_in_thread(runner) as future:
            wait_for(lambda: ("verified", "streaming") in p.states("held"))
            p.process.send_signal(signal.SIGTERM)
            assert future.result(timeout=30) == ("UNAVAILABLE", "producer_shutdown")
        p.process.wait(timeout=30)
        assert p.process.returncode == 0
        trace = p.trace()
    assert p.states("held")[-1] == ("streaming", "shutdown")
    stopped = assert_counters_add_up(trace)
    assert (stopped["streams_opened"], stopped["streams_shutdown"]) == (1, 1)
    text = p.trace_path.read_text()
    assert "Traceback" not in text
    assert all(line.startswith("{") for line in text.splitlines()), text


def test_streams_that_finish_within_the_grace_complete(
    tmp_path: Path, recording: Recording
) -> None:
    with producer(tmp_path, "--shutdown-grace-s", "30") as p:
        # 22 chunks 50 ms apart: still streaming when the signal comes, done well within 30 s.
        request_done = _open_slow_stream(p.target, "short", recording, chunk_bytes=100)
        with _run_in_thread(request_done) as future:
            wait_for(lambda: ("verified", "streaming") in p.states("short"))
            p.process.send_signal(signal.SIGTERM)
            # Stop accepting at once: a new connection is refused while the stream goes on.
            wait_for(lambda: not _accepts(p.port), timeout=10)
            assert future.result(timeout=60) == ("OK", "")
        p.process.wait(timeout=30)
    assert p.process.returncode == 0
    assert p.states("short")[-1] == ("streaming", "completed")
    assert_counters_add_up(p.trace())


def test_a_second_signal_ends_the_grace_at_once(tmp_path: Path, recording: Recording) -> None:
    with producer(tmp_path, "--shutdown-grace-s", "600") as p:
        runner = _open_slow_stream(p.target, "held2", recording)
        with _run_in_thread(runner) as future:
            wait_for(lambda: ("verified", "streaming") in p.states("held2"))
            p.process.send_signal(signal.SIGINT)
            wait_for(lambda: p.logged("producer_stopping"))
            p.process.send_signal(signal.SIGINT)
            # Bounded far below the 600 s grace: the second signal ended it.
            assert future.result(timeout=30) == ("UNAVAILABLE", "producer_shutdown")
            p.process.wait(timeout=30)
    assert p.process.returncode == 0
    assert p.states("held2")[-1] == ("streaming", "shutdown")
    assert_counters_add_up(p.trace())


@pytest.mark.parametrize("trace_to_file", [True, False], ids=["trace-file", "trace-stderr"])
def test_a_first_ctrl_c_is_acknowledged_on_the_terminal(
    tmp_path: Path, trace_to_file: bool
) -> None:
    """A first SIGINT gets one plain line on stderr, whatever the trace's target: with
    ``--trace-file`` that line is all stderr holds; a SIGTERM (a supervisor's) gets none."""
    flags = ["--trace-file", str(tmp_path / "producer.jsonl")] if trace_to_file else []
    with producer(tmp_path, *flags) as p:
        p.process.send_signal(signal.SIGINT)
        p.process.wait(timeout=30)
    assert p.process.returncode == 0
    said = [line for line in p.trace_path.read_text().splitlines() if not line.startswith("{")]
    assert said == [stopping_line(5)]
    assert "Ctrl-C again" in said[0]
    if trace_to_file:
        assert p.trace_path.read_text() == said[0] + "\n"
    with producer(tmp_path, *flags, name="term") as p:
        p.process.send_signal(signal.SIGTERM)
        p.process.wait(timeout=30)
    assert not [line for line in p.trace_path.read_text().splitlines() if not line.startswith("{")]


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


# --- the producer at its edges --------------------------------------------------------------


def _producer_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "replywire.producer", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_taken_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with producer(tmp_path) as p:
        done = _producer_command("--port", str(p.port), "--log-format", "json")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines == [
        f"producer: cannot listen on 127.0.0.1:{p.port}: "
        "the address is in use or not an address of this host"
    ]
    assert done.stdout == ""


def test_two_producers_never_share_a_port(tmp_path: Path) -> None:
    """gRPC's default SO_REUSEPORT would let a second server bind the port too."""
    with producer(tmp_path, name="first") as first:
        second = _producer_command("--port", str(first.port))
        assert second.returncode == 2
        assert first.process.poll() is None


@pytest.mark.parametrize("port", ["70000", "65536", "-1", "http"])
def test_an_out_of_range_port_is_a_usage_error(port: str) -> None:
    done = _producer_command("--port", port)
    assert done.returncode == 2
    assert "--port" in done.stderr
    assert "listening on" not in done.stdout


@pytest.mark.parametrize("port", ["0", "65535"])
def test_port_bounds_are_accepted(port: str) -> None:
    assert build_parser().parse_args(["--port", port]).port == int(port)


def test_records_held_for_a_batch_are_written_when_the_producer_stops(
    tmp_path: Path, recording: Recording
) -> None:
    """With records held up to a second (``--trace-flush-ms 1000``), a stream that just
    ended and the stop are still in the trace once the process exits."""
    with producer(tmp_path, "--trace-flush-ms", "1000") as p:
        run = _open_slow_stream(p.target, "held-records", recording, chunk_bytes=4096)
        assert asyncio.run(run()) == ("OK", "")
        p.process.send_signal(signal.SIGTERM)
        p.process.wait(timeout=30)
    assert p.process.returncode == 0
    assert p.states("held-records") == [
        (None, "received"),
        ("received", "verified"),
        ("verified", "streaming"),
        ("streaming", "completed"),
    ]
    assert_counters_add_up(p.trace())
