"""The service pair across two real processes on loopback (ephemeral ports).

Producer and consumer are started through their module entry points, exactly
as the Makefile starts them. Only the processes a test started are signalled.

One file past 500 lines: the pair's tests share one faulty producer (a module fixture) and
its helpers.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replywire.children import stop_process
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.recording import Recording
from replywire.shared.result import lab_view
from tests.processes import (
    Producer,
    consumer_process,
    producer,
    read_trace,
    run_consumer,
    wait_for,
)

pytestmark = pytest.mark.timeout(180)

HERE = Path(__file__).resolve().parents[1]
PUBLISHED = json.loads((HERE / "published/offline-replay.json").read_text(encoding="utf-8"))
#: The lab's own wire (no done digest) and fragments: to reproduce its published values.
LAB = ("--wire", "ndjson-lab", "--chunks", "1,2,7,3,11")
SCENARIO_FAULTS = {
    "controlled_local_cancel": "cancel",
    "controlled_local_error": "error",
    "controlled_transport_eof_before_terminal": "eof-before-terminal",
    "controlled_local_transport_io_error": "transport-abort",
}
COMPLETE_CORE = [
    ("streaming", "terminal_received"),
    ("terminal_received", "validating"),
    ("validating", "complete"),
]


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Producer]:
    """One producer with faults allowed, shared by the tests that do not kill it."""
    with producer(tmp_path_factory.mktemp("faulty"), "--allow-faults", "--log-level", "debug") as p:
        yield p


def without_pauses(states: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [pair for pair in states if "paused" not in pair]


# --- 1. the published scenarios -----------------------------------------------------------


@pytest.mark.parametrize("published", PUBLISHED["development_cases"], ids=lambda c: c["case_id"])
def test_published_development_case_across_processes(
    faulty: Producer, published: dict[str, Any]
) -> None:
    run = run_consumer(faulty.target, "--case", published["case_id"], *LAB)
    assert run.returncode == 0
    assert lab_view(run.result) == published["result"]
    assert run.result["integrity"] == "none"


@pytest.mark.parametrize("published", PUBLISHED["controlled_failures"], ids=lambda c: c["scenario"])
def test_published_controlled_failure_across_processes(
    faulty: Producer, published: dict[str, Any]
) -> None:
    fault = SCENARIO_FAULTS[published["scenario"]]
    # No resume: the lab's outcome of a broken transport (tests/system/test_resume.py resumes it).
    run = run_consumer(
        faulty.target, "--case", "replace-file", *LAB, "--fault", fault, "--resume-attempts", "0"
    )
    assert lab_view(run.result) == published["result"]
    assert run.returncode == {"cancelled": 4, "error": 5, "incomplete": 3}[run.result["status"]]


def test_transport_abort_reports_the_grpc_status(faulty: Producer) -> None:
    run = run_consumer(
        faulty.target,
        "--case",
        "replace-file",
        "--fault",
        "transport-abort",
        "--resume-attempts",
        "0",
    )
    assert run.returncode == 5
    assert run.result["transport"] == {
        "grpc_code": "UNAVAILABLE",
        "grpc_details": "controlled_transport_abort",
    }


@pytest.mark.parametrize("mode", ["stream", "buffered"])
@pytest.mark.parametrize("chunks", ["frame", "whole", "1", "1,2,7,3,11"])
def test_length_prefixed_cases_complete_in_every_mode(
    faulty: Producer, recording: Recording, mode: str, chunks: str
) -> None:
    run = run_consumer(
        faulty.target, "--case", "json-result-type", "--chunks", chunks, "--mode", mode
    )
    assert run.returncode == 0
    assert run.result["status"] == "complete"
    assert run.result["provisional_content"] == recording.case("json-result-type").content
    assert run.result["flow"]["mode"] == mode


# --- 2. truncation ------------------------------------------------------------------------


@pytest.mark.parametrize("wire", ["lp", "ndjson"])
def test_truncate_tail_is_invalid_and_keeps_the_partial_content(
    faulty: Producer, recording: Recording, wire: str
) -> None:
    run = run_consumer(
        faulty.target, "--case", "replace-file", "--wire", wire, "--fault", "truncate-tail"
    )
    assert run.returncode == 6
    assert (run.result["status"], run.result["reason"]) == ("invalid", "truncated_frame")
    assert run.result["accepted_answer"] is None
    assert run.result["provisional_content"] == recording.case("replace-file").content
    assert run.result["local_terminal"] is None


# --- 3. producer disconnect ---------------------------------------------------------------


def applied(trace: Path) -> list[int]:
    """The sequences the consumer's core applied so far (its ``frame_applied`` debug records)."""
    lines = trace.read_text(encoding="utf-8").splitlines() if trace.exists() else []
    records = [json.loads(line) for line in lines if line.startswith("{")]
    return [r["sequence"] for r in records if r.get("event") == "frame_applied"]


def test_producer_killed_mid_stream(tmp_path: Path, recording: Recording) -> None:
    with producer(tmp_path, "--allow-faults") as doomed:
        stream_id = "killed-producer"
        with consumer_process(
            tmp_path,
            doomed.target,
            "--case",
            "replace-file",
            "--fault",
            "stall",
            "--stream-id",
            stream_id,
            "--resume-attempts",
            "0",  # no producer to resume from (tests/system/test_resume.py restarts one)
            "--result",
            str(tmp_path / "result.json"),
            "--log-level",
            "debug",
        ) as consumer:
            wait_for(lambda: ("streaming", "stalled") in doomed.states(stream_id))
            # Killed only once the consumer applied the 3 frames sent before the stall: a
            # reset drops what the consumer's socket held unread, however busy the machine.
            wait_for(lambda: applied(tmp_path / "consumer.trace.jsonl") == [1, 2, 3])
            stop_process(doomed.process, signal.SIGKILL)
            assert consumer.wait(timeout=30) == 5
        # The producer's side of the same stream ends where it was killed.
        assert doomed.states(stream_id) == [
            (None, "received"),
            ("received", "verified"),
            ("verified", "streaming"),
            ("streaming", "stalled"),
        ]
        result = json.loads((tmp_path / "result.json").read_text())
    assert (result["status"], result["reason"]) == ("error", "transport_io_error")
    assert result["accepted_answer"] is None
    assert result["transport"]["grpc_code"] == "UNAVAILABLE"
    assert result["stats"]["application_frames"] == 3  # the stall came after frame 3
    assert result["provisional_content"] == recording.case("replace-file").content[:39]
    trace = read_trace(tmp_path / "consumer.trace.jsonl")
    core = [
        (r["from_state"], r["to_state"])
        for r in trace
        if r.get("component") == "core" and r["event"] == "state_changed"
    ]
    assert core == [("streaming", "error")]
    assert all(r["stream_id"] == stream_id for r in trace)
    reader = [
        (r["from_state"], r["to_state"])
        for r in trace
        if r.get("component") == "reader" and r["event"] == "state_changed"
    ]
    assert without_pauses(reader) == [("connecting", "streaming"), ("streaming", "ended")]


# --- 4. consumer disconnect ---------------------------------------------------------------


def test_consumer_killed_mid_stream_then_the_next_stream_is_served(
    faulty: Producer, tmp_path: Path
) -> None:
    stream_id = "killed-consumer"
    with consumer_process(
        tmp_path,
        faulty.target,
        "--case",
        "backup-schedule",
        "--fault",
        "stall",
        "--stream-id",
        stream_id,
    ) as consumer:
        wait_for(lambda: ("streaming", "stalled") in faulty.states(stream_id))
        stop_process(consumer, signal.SIGKILL)
    wait_for(lambda: ("stalled", "cancelled_by_consumer") in faulty.states(stream_id))
    assert faulty.states(stream_id) == [
        (None, "received"),
        ("received", "verified"),
        ("verified", "streaming"),
        ("streaming", "stalled"),
        ("stalled", "cancelled_by_consumer"),
    ]
    after = run_consumer(faulty.target, "--case", "backup-schedule")
    assert after.returncode == 0
    assert after.result["status"] == "complete"


# --- 5. abort after done ------------------------------------------------------------------


@pytest.mark.parametrize("wire", ["lp", "ndjson"])
def test_abort_after_done_is_not_accepted(faulty: Producer, wire: str) -> None:
    run = run_consumer(
        faulty.target,
        "--case",
        "utf8-write",
        "--wire",
        wire,
        "--fault",
        "abort-after-done",
        "--resume-attempts",
        "0",
    )
    assert run.returncode == 5
    assert (run.result["status"], run.result["reason"]) == ("error", "transport_io_error")
    assert run.result["local_terminal"] == "done"
    assert run.result["accepted_answer"] is None
    assert run.states("core") == [
        ("streaming", "terminal_received"),
        ("terminal_received", "error"),
    ]


# --- 6. backpressure ----------------------------------------------------------------------


def test_a_paused_consumer_holds_the_producer_to_the_window(faulty: Producer) -> None:
    window, queue = 1024, 1
    stream_id = "backpressure"
    run = run_consumer(
        faulty.target,
        "--case",
        "utf8-write",
        "--wire",
        "ndjson",
        "--chunks",
        "1",
        "--queue-size",
        str(queue),
        "--process-delay-ms",
        "1",
        "--window-bytes",
        str(window),
        "--log-level",
        "debug",
        "--stream-id",
        stream_id,
    )
    assert run.returncode == 0
    # One byte per chunk: utf8-write's NDJSON wire is 2258 bytes (its done carries the digest).
    wire_bytes = 2258
    assert run.result["stats"]["transport_fragments"] == wire_bytes
    assert run.result["flow"]["reads_paused"] > 0
    sent = [
        (r["timestamp"], r["bytes_sent"])
        for r in faulty.stream_trace(stream_id)
        if r["event"] == "chunk_sent"
    ]
    applied = [
        (r["timestamp"], r["bytes_applied"]) for r in run.trace if r["event"] == "chunk_applied"
    ]
    assert len(sent) == len(applied) == wire_bytes
    # Each 1-byte chunk costs this much HTTP/2 window: the gRPC message header and the Chunk.
    per_chunk = 5 + len(pb.Chunk(data=b"x").SerializeToString())
    # The window, the queue, the chunk the reader holds and the one being applied.
    bound = window // per_chunk + queue + 2
    lead, index, done = 0, 0, 0
    for stamp, bytes_sent in sent:
        while index < len(applied) and applied[index][0] <= stamp:
            done = applied[index][1]
            index += 1
        lead = max(lead, bytes_sent - done)
    assert 0 < lead <= bound


# --- 7. time bounds -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "reason"),
    [("--deadline-s", "deadline_exceeded"), ("--idle-timeout-s", "idle_timeout")],
)
def test_time_bounds_end_a_stalled_stream(
    faulty: Producer, recording: Recording, flag: str, reason: str
) -> None:
    stream_id = f"stalled-{reason}"
    run = run_consumer(
        faulty.target,
        "--case",
        "replace-file",
        "--fault",
        "stall",
        flag,
        "0.5",
        "--stream-id",
        stream_id,
    )
    assert run.returncode == 3
    assert (run.result["status"], run.result["reason"]) == ("incomplete", reason)
    assert run.result["provisional_content"] == recording.case("replace-file").content[:39]
    assert run.result["accepted_answer"] is None
    assert run.states("core") == [("streaming", "incomplete")]
    wait_for(lambda: ("stalled", "cancelled_by_consumer") in faulty.states(stream_id))


# --- 8. refusals --------------------------------------------------------------------------


def test_tampered_binding_is_refused(
    faulty: Producer, recording: Recording, tmp_path: Path
) -> None:
    binding = json.loads(json.dumps(dict(recording.case("replace-file").binding)))
    binding["selected_context"][0]["text"] += " Also, it is always safe."
    path = tmp_path / "binding.json"
    path.write_text(json.dumps(binding))
    run = run_consumer(faulty.target, "--case", "replace-file", "--binding", str(path))
    assert run.returncode == 7
    assert (run.result["status"], run.result["reason"]) == ("refused", "request_binding_mismatch")
    assert run.result["transport"]["grpc_code"] == "FAILED_PRECONDITION"


def test_case_outside_the_allowlist_is_refused(
    faulty: Producer, recording: Recording, tmp_path: Path
) -> None:
    binding = dict(recording.case("replace-file").binding)
    binding["case_id"] = "held-out-case"
    path = tmp_path / "binding.json"
    path.write_text(json.dumps(binding))
    run = run_consumer(faulty.target, "--case", "held-out-case", "--binding", str(path))
    assert run.returncode == 7
    assert (run.result["status"], run.result["reason"]) == ("refused", "development_case_required")
    assert run.result["transport"]["grpc_code"] == "FAILED_PRECONDITION"


def test_faults_need_permission(tmp_path: Path) -> None:
    with producer(tmp_path) as strict:
        run = run_consumer(strict.target, "--case", "replace-file", "--fault", "omit")
        assert run.returncode == 7
        assert (run.result["status"], run.result["reason"]) == ("refused", "faults_not_allowed")
        assert run.result["transport"]["grpc_code"] == "PERMISSION_DENIED"
        ok = run_consumer(strict.target, "--case", "replace-file")
        assert ok.returncode == 0


def test_no_producer_is_a_transport_error(tmp_path: Path) -> None:
    with producer(tmp_path) as gone:
        target = gone.target
    run = run_consumer(target, "--case", "replace-file")
    assert run.returncode == 5
    assert (run.result["status"], run.result["reason"]) == ("error", "transport_io_error")
    assert run.result["transport"]["grpc_code"] == "UNAVAILABLE"
    assert run.result["stats"]["transport_fragments"] == 0


# --- 9. traces joined by stream id --------------------------------------------------------


def test_traces_of_a_complete_stream(faulty: Producer) -> None:
    run = run_consumer(faulty.target, "--case", "replace-file", "--stream-id", "joined-complete")
    assert run.returncode == 0
    assert {r["stream_id"] for r in run.trace} == {"joined-complete"}
    for record in run.trace + faulty.stream_trace("joined-complete"):
        assert {"timestamp", "level", "event", "side", "stream_id"} <= set(record)
    assert faulty.states("joined-complete") == [
        (None, "received"),
        ("received", "verified"),
        ("verified", "streaming"),
        ("streaming", "completed"),
    ]
    assert without_pauses(run.states("reader")) == [
        ("connecting", "streaming"),
        ("streaming", "ended"),
    ]
    assert run.states("core") == COMPLETE_CORE


def test_traces_of_a_truncated_stream(faulty: Producer) -> None:
    run = run_consumer(
        faulty.target,
        "--case",
        "replace-file",
        "--fault",
        "truncate-tail",
        "--stream-id",
        "joined-truncated",
    )
    assert run.returncode == 6
    assert {r["stream_id"] for r in run.trace} == {"joined-truncated"}
    assert faulty.states("joined-truncated") == [
        (None, "received"),
        ("received", "verified"),
        ("verified", "streaming"),
        ("streaming", "completed"),
    ]
    assert without_pauses(run.states("reader")) == [
        ("connecting", "streaming"),
        ("streaming", "ended"),
    ]
    assert run.states("core") == [("streaming", "invalid")]
    final = [r for r in run.trace if r.get("component") == "core"][-1]
    assert final["reason"] == "truncated_frame"


def test_producer_refuses_to_start_on_a_tampered_recording(tmp_path: Path) -> None:
    tampered = tmp_path / "recording.json"
    tampered.write_bytes((HERE.parent / "fixtures/recording.json").read_bytes() + b"\n")
    done = subprocess.run(
        [sys.executable, "-m", "replywire.producer", "--port", "0", "--recording", str(tampered)],
        cwd=HERE.parent,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith("refused: recording_hash_mismatch")


# --- Ctrl-C ---------------------------------------------------------------------------


def test_ctrl_c_cancels_and_keeps_the_partial_content(
    faulty: Producer, recording: Recording, tmp_path: Path
) -> None:
    stream_id = "interrupted"
    result_path = tmp_path / "result.json"
    with consumer_process(
        tmp_path, faulty.target, "--case", "replace-file", "--fault", "stall",
        "--stream-id", stream_id, "--result", str(result_path),
    ) as consumer:  # fmt: skip
        wait_for(lambda: ("streaming", "stalled") in faulty.states(stream_id))
        stop_process(consumer, signal.SIGINT)
        assert consumer.returncode == 3
    result = json.loads(result_path.read_text())
    assert (result["status"], result["reason"]) == ("incomplete", "consumer_cancelled")
    assert result["provisional_content"] == recording.case("replace-file").content[:39]
    assert result["accepted_answer"] is None
    wait_for(lambda: ("stalled", "cancelled_by_consumer") in faulty.states(stream_id))


# --- 10. scripts: the ready file, a stall the consumer gives up on --------------------------


def test_the_ready_file_holds_the_listening_address(tmp_path: Path) -> None:
    flag_file, env_file = tmp_path / "flag.ready", tmp_path / "env.ready"
    flag_file.write_text("stale")  # a file left from an earlier run must not announce this one
    with producer(tmp_path, "--ready-file", str(flag_file), name="by-flag") as by_flag:
        wait_for(lambda: flag_file.read_text() != "stale" if flag_file.exists() else False)
        assert flag_file.read_text() == by_flag.target
        assert run_consumer(flag_file.read_text(), "--case", "replace-file").returncode == 0
    with producer(tmp_path, name="by-env", env={"REPLYWIRE_READY_FILE": str(env_file)}) as by_env:
        wait_for(env_file.exists)
        assert env_file.read_text() == by_env.target
    assert not list(tmp_path.glob(".*.tmp")), "the atomic write left a temporary file"


@pytest.mark.parametrize(
    ("stall_ms", "idle_timeout_s", "status", "reason"),
    [("3000", "1", "incomplete", "idle_timeout"), ("200", "10", "complete", None)],
)
def test_stall_ms_sets_the_length_of_the_stall(
    faulty: Producer, stall_ms: str, idle_timeout_s: str, status: str, reason: str | None
) -> None:
    run = run_consumer(
        faulty.target,
        "--case",
        "replace-file",
        "--fault",
        "stall",
        "--stall-ms",
        stall_ms,
        "--idle-timeout-s",
        idle_timeout_s,
    )
    assert (run.result["status"], run.result["reason"]) == (status, reason)
    assert run.returncode == (0 if status == "complete" else 3)
