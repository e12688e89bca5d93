"""The producer's request checks over a real gRPC connection (in-process server, ephemeral port)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from harness.children import stop_process
from producer.server import start_server
from producer.settings import ServerSettings
from producer.states import FINAL_STATES, OPEN_STATES, TRANSITIONS, StreamInput, StreamState
from shared.digest import canonical_json
from shared.faults import Fault, FaultKind
from shared.pb import replywire_pb2 as pb
from shared.pb import replywire_pb2_grpc as pb_grpc
from shared.recording import Recording
from shared.requests import ReplyRequest, check_request
from shared.wire import WireFormat
from shared.wire.chunking import ChunkPlan
from tests.processes import ROOT, producer, read_trace, wait_for

pytestmark = pytest.mark.timeout(60)


def good_request(recording: Recording, **changes: object) -> pb.OpenRequest:
    case = recording.case("replace-file")
    request = ReplyRequest(
        case_id=case.case_id,
        binding=case.binding,
        wire=WireFormat.LENGTH_PREFIXED,
        plan=ChunkPlan.parse("frame"),
        fault=None,
        stream_id="t",
    ).open_request()
    for name, value in changes.items():
        if isinstance(value, list):
            getattr(request, name).extend(value)
        else:
            setattr(request, name, value)
    return request


async def open_stream(
    recording: Recording, request: pb.OpenRequest, *, allow_faults: bool = True
) -> tuple[grpc.StatusCode, str, int]:
    server, port, _ = await start_server(
        recording, ServerSettings(host="127.0.0.1", port=0, allow_faults=allow_faults)
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            chunks = 0
            try:
                async for _ in pb_grpc.ReplyStreamStub(channel).Open(request, timeout=20):
                    chunks += 1
            except grpc.aio.AioRpcError as error:
                return error.code(), error.details() or "", chunks
            return grpc.StatusCode.OK, "", chunks
    finally:
        await server.stop(0)


def fault(kind: int, **fields: int) -> pb.Fault:
    return pb.Fault(kind=kind, **fields)  # type: ignore[arg-type]


INVALID: list[tuple[str, Callable[[Recording], pb.OpenRequest]]] = [
    ("unknown wire format", lambda r: good_request(r, wire_format=7)),
    ("zero chunk size", lambda r: good_request(r, chunk_sizes=[3, 0])),
    ("huge chunk size", lambda r: good_request(r, chunk_sizes=[(1 << 20) + 1])),
    ("too many sizes", lambda r: good_request(r, chunk_sizes=[1] * 65)),
    ("whole body and sizes", lambda r: good_request(r, whole_body=True, chunk_sizes=[4])),
    ("interval too long", lambda r: good_request(r, chunk_interval_ms=60_001)),
    ("stream id too long", lambda r: good_request(r, stream_id="s" * 129)),
]


@pytest.mark.parametrize(("label", "make"), INVALID, ids=[label for label, _ in INVALID])
def test_malformed_requests_are_invalid_argument(
    recording: Recording, label: str, make: Callable[[Recording], pb.OpenRequest]
) -> None:
    code, details, chunks = asyncio.run(open_stream(recording, make(recording)))
    assert (code, details, chunks) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_request", 0)


@pytest.mark.parametrize(
    "bad_fault",
    [fault(99), fault(pb.OMIT, target_frame=0, byte_count=0, stall_ms=600_001)],
    ids=["unknown kind", "stall too long"],
)
def test_malformed_faults_are_invalid_argument(recording: Recording, bad_fault: pb.Fault) -> None:
    request = good_request(recording)
    request.fault.CopyFrom(bad_fault)
    code, details, _ = asyncio.run(open_stream(recording, request))
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_request")


@pytest.mark.parametrize(
    "binding_json",
    [b"", b"not json", b"\xff\xfe", b'{"case_id": "replace-file", "case_id": "x"}', b"[]", b"{}"],
)
def test_bindings_that_are_not_the_recordings_are_refused(
    recording: Recording, binding_json: bytes
) -> None:
    request = good_request(recording, binding_json=binding_json)
    code, details, _ = asyncio.run(open_stream(recording, request))
    assert (code, details) == (grpc.StatusCode.FAILED_PRECONDITION, "request_binding_mismatch")


def test_a_binding_for_another_case_is_refused(recording: Recording) -> None:
    request = good_request(
        recording, binding_json=canonical_json(recording.case("utf8-write").binding)
    )
    code, details, _ = asyncio.run(open_stream(recording, request))
    assert (code, details) == (grpc.StatusCode.FAILED_PRECONDITION, "request_binding_mismatch")


def test_binding_json_need_not_be_canonical(recording: Recording) -> None:
    spaced = json.dumps(recording.case("replace-file").binding, indent=2).encode()
    code, _, chunks = asyncio.run(
        open_stream(recording, good_request(recording, binding_json=spaced))
    )
    assert (code, chunks) == (grpc.StatusCode.OK, 10)


def test_fault_permission_is_checked_before_the_binding(recording: Recording) -> None:
    request = good_request(recording, binding_json=b"{}")
    request.fault.CopyFrom(fault(pb.OMIT))
    code, details, _ = asyncio.run(open_stream(recording, request, allow_faults=False))
    assert (code, details) == (grpc.StatusCode.PERMISSION_DENIED, "faults_not_allowed")


@pytest.mark.parametrize(
    ("plan", "chunks"), [("frame", 10), ("whole", 1), ("100", 10), ("1,2,7,3,11", 198)]
)
def test_chunking_is_as_requested(recording: Recording, plan: str, chunks: int) -> None:
    case = recording.case("replace-file")
    request = ReplyRequest(
        case_id=case.case_id,
        binding=case.binding,
        wire=WireFormat.LENGTH_PREFIXED,
        plan=ChunkPlan.parse(plan),
        fault=None,
        stream_id="chunking",
    ).open_request()
    assert asyncio.run(open_stream(recording, request))[::2] == (grpc.StatusCode.OK, chunks)


@pytest.mark.parametrize("wire", list(WireFormat), ids=str)
def test_every_wire_round_trips_through_the_request(recording: Recording, wire: WireFormat) -> None:
    case = recording.case("replace-file")
    request = ReplyRequest(
        case_id=case.case_id,
        binding=case.binding,
        wire=wire,
        plan=ChunkPlan.parse("frame"),
        fault=None,
        stream_id="x",
    ).open_request()
    assert check_request(request, allow_faults=False).wire is wire
    assert (
        request.wire_format
        == {
            WireFormat.LENGTH_PREFIXED: pb.LENGTH_PREFIXED,
            WireFormat.NDJSON: pb.NDJSON,
            WireFormat.NDJSON_LAB: pb.NDJSON_LAB,
        }[wire]
    )
    assert pb.NDJSON_LAB == 3  # field numbers are stable: only added


def test_every_fault_round_trips_through_the_request(recording: Recording) -> None:
    case = recording.case("replace-file")
    for kind in FaultKind:
        sent = Fault(kind=kind, target_frame=4, byte_count=2, stall_ms=10)
        request = ReplyRequest(
            case_id=case.case_id,
            binding=case.binding,
            wire=WireFormat.NDJSON,
            plan=ChunkPlan.parse("1,2"),
            fault=sent,
            stream_id="x",
            chunk_interval_ms=5,
        ).open_request()
        checked = check_request(request, allow_faults=True)
        assert checked.fault == sent
        assert checked.wire is WireFormat.NDJSON
        assert checked.plan == ChunkPlan.parse("1,2")
        assert checked.interval_s == 0.005


def test_producer_state_table() -> None:
    assert set(StreamState) == OPEN_STATES | FINAL_STATES
    for source, _ in TRANSITIONS:
        assert source in OPEN_STATES
    for state in OPEN_STATES:
        assert (
            TRANSITIONS[state, StreamInput.CONSUMER_CANCELLED] is StreamState.CANCELLED_BY_CONSUMER
        )
        assert TRANSITIONS[state, StreamInput.FAIL] is StreamState.FAILED
        assert TRANSITIONS[state, StreamInput.SHUTDOWN] is StreamState.SHUTDOWN


# --- the process ------------------------------------------------------------------------


def test_sigterm_stops_the_producer_cleanly(tmp_path: Path) -> None:
    with producer(tmp_path, "--allow-faults") as running:
        assert stop_process(running.process, signal.SIGTERM) == 0
        records = running.trace()
    events = [record["event"] for record in records]
    assert events[0] == "producer_listening"
    assert events[-2:] == ["producer_stopping", "producer_stopped"]
    assert records[0]["port"] == running.port


def test_environment_variables_configure_the_producer(tmp_path: Path) -> None:
    trace = tmp_path / "env.jsonl"
    env = {**os.environ, "REPLYWIRE_PORT": "0", "REPLYWIRE_ALLOW_FAULTS": "1",
           "REPLYWIRE_LOG_FORMAT": "json"}  # fmt: skip
    with trace.open("w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "producer"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        wait_for(lambda: any(r["event"] == "producer_listening" for r in read_trace(trace)))
        listening = read_trace(trace)[0]
        assert listening["allow_faults"] is True
        assert listening["port"] != 0
    finally:
        stop_process(process)


@pytest.mark.parametrize(
    "args", [["--port", "x"], ["--source", "other"], ["--max-connection-age-s", "0"]]
)
def test_producer_usage_errors_exit_2(args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "producer", *args],
        cwd=ROOT,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
