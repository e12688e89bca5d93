"""The producer's request checks over a real gRPC connection (in-process server, ephemeral port)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import grpc
import pytest

from producer.server import start_server
from producer.settings import ServerSettings
from shared.digest import canonical_json
from shared.pb import replywire_pb2 as pb
from shared.pb import replywire_pb2_grpc as pb_grpc
from shared.recording import Recording
from shared.requests import ReplyRequest
from shared.wire import WireFormat
from shared.wire.chunking import ChunkPlan

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
