"""The producer's request checks over a real gRPC connection (in-process server, ephemeral port)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable

import grpc
import pytest

from replywire.producer.edge.server import start_server
from replywire.producer.settings import ServerSettings
from replywire.shared.digest import canonical_json
from replywire.shared.faults import transmit
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan

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


def _spelled(recording: Recording, spelling: str) -> bytes:
    """The replace-file binding's value, spelled another way than its canonical bytes."""
    binding = dict(recording.case("replace-file").binding)
    canonical = canonical_json(binding)
    if spelling == "pretty-printed":
        return json.dumps(binding, indent=2, sort_keys=True, ensure_ascii=False).encode()
    if spelling == "keys unsorted":
        return json.dumps(
            dict(reversed(list(binding.items()))), separators=(",", ":"), ensure_ascii=False
        ).encode()
    if spelling == "an escaped character":
        return canonical.replace(b'"case_id"', b'"case\\u005fid"', 1)
    if spelling == "an escaped solidus":
        return canonical.replace(b"https://", b"https:\\/\\/", 1)
    if spelling == "trailing newline":
        return canonical + b"\n"
    assert spelling == "a BOM"
    return b"\xef\xbb\xbf" + canonical


SPELLINGS = [
    "pretty-printed",
    "keys unsorted",
    "an escaped character",
    "an escaped solidus",
    "trailing newline",
    "a BOM",
]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_binding_that_is_not_canonical_json_is_refused_before_any_frame(
    recording: Recording, spelling: str
) -> None:
    """The same value, other bytes: the frames would carry the digest of bytes the client
    never sent, so the request is refused instead (INVALID_ARGUMENT)."""
    request = good_request(recording, binding_json=_spelled(recording, spelling))
    code, details, chunks = asyncio.run(open_stream(recording, request))
    assert (code, details, chunks) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "binding_not_canonical",
        0,
    )


@pytest.mark.parametrize(
    "binding_json",
    [b"", b"not json", b"\xff\xfe", b'{"case_id":"replace-file","case_id":"x"}', b'"\\ud800"'],
    ids=["empty", "not JSON", "not UTF-8", "duplicate keys", "a lone surrogate"],
)
def test_bytes_that_are_no_json_value_are_not_canonical(
    recording: Recording, binding_json: bytes
) -> None:
    request = good_request(recording, binding_json=binding_json)
    code, details, chunks = asyncio.run(open_stream(recording, request))
    assert (code, details, chunks) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "binding_not_canonical",
        0,
    )


@pytest.mark.parametrize("binding_json", [b"[]", b"{}", b"null"])
def test_canonical_bindings_that_are_not_the_recordings_are_refused(
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


@pytest.mark.parametrize("named", ["replace-file ", "held-out-case", "utf8-write"])
def test_a_binding_naming_another_case_is_a_binding_mismatch(
    recording: Recording, named: str
) -> None:
    """The documented order: the request's case against the allowlist, then the binding. A
    request for replace-file whose binding names any other case (on the allowlist or not)
    passes the first and fails the second."""
    binding = dict(recording.case("replace-file").binding)
    binding["case_id"] = named
    request = good_request(recording, binding_json=canonical_json(binding))
    code, details, chunks = asyncio.run(open_stream(recording, request))
    assert (code, details, chunks) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "request_binding_mismatch",
        0,
    )


def test_the_allowlist_comes_before_the_binding(recording: Recording) -> None:
    request = good_request(recording, case_id="held-out-case", binding_json=b"{}")
    code, details, _ = asyncio.run(open_stream(recording, request))
    assert (code, details) == (grpc.StatusCode.FAILED_PRECONDITION, "development_case_required")


def test_the_canonical_binding_streams_frames_bound_to_the_bytes_sent(
    recording: Recording,
) -> None:
    """Every frame carries the SHA-256 of exactly the bytes the client sent."""
    request = good_request(recording)
    sent = hashlib.sha256(request.binding_json).hexdigest()

    async def frames() -> list[pb.Frame]:
        server, port, _ = await start_server(
            recording, ServerSettings(host="127.0.0.1", port=0, allow_faults=False)
        )
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                data = b"".join(
                    [
                        chunk.data
                        async for chunk in pb_grpc.ReplyStreamStub(channel).Open(
                            request, timeout=20
                        )
                    ]
                )
        finally:
            await server.stop(0)
        parsed = []
        while data:
            length = int.from_bytes(data[1:5], "big")
            parsed.append(pb.Frame.FromString(data[5 : 5 + length]))
            data = data[5 + length :]
        return parsed

    received = asyncio.run(frames())
    assert len(received) == 10
    assert {frame.binding_sha256 for frame in received} == {sent}


def test_a_binding_that_is_not_canonical_is_refused_before_the_fault_permission(
    recording: Recording,
) -> None:
    request = good_request(recording, binding_json=b"{ }")
    request.fault.CopyFrom(fault(pb.OMIT))
    code, details, _ = asyncio.run(open_stream(recording, request, allow_faults=False))
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, "binding_not_canonical")


def _done_bytes(recording: Recording, wire: WireFormat) -> int:
    plain = transmit(recording.case("replace-file"), wire=wire, plan=ChunkPlan.parse("frame"))
    return len(plain.encoded[-1])


OUT_OF_RANGE: list[tuple[str, Callable[[Recording], pb.Fault]]] = [
    ("omit past the last content frame", lambda r: fault(pb.OMIT, target_frame=10)),
    ("repeat past the last content frame", lambda r: fault(pb.REPEAT, target_frame=10)),
    ("corrupt past the last content frame", lambda r: fault(pb.CORRUPT, target_frame=10)),
    ("foreign-binding past it", lambda r: fault(pb.FOREIGN_BINDING, target_frame=10)),
    ("stall past it", lambda r: fault(pb.STALL, target_frame=10, stall_ms=1)),
    (
        "truncate-tail of the whole done frame",
        lambda r: fault(pb.TRUNCATE_TAIL, byte_count=_done_bytes(r, WireFormat.LENGTH_PREFIXED)),
    ),
    ("a frame for cancel", lambda r: fault(pb.CANCEL, target_frame=1)),
    ("bytes for omit", lambda r: fault(pb.OMIT, byte_count=1)),
    ("a stall length for transport-abort", lambda r: fault(pb.TRANSPORT_ABORT, stall_ms=1)),
]


@pytest.mark.parametrize(("label", "make"), OUT_OF_RANGE, ids=[label for label, _ in OUT_OF_RANGE])
def test_fault_parameters_that_do_not_fit_the_reply_are_refused_before_any_frame(
    recording: Recording, label: str, make: Callable[[Recording], pb.Fault]
) -> None:
    request = good_request(recording)  # replace-file: 9 content frames, then done
    request.fault.CopyFrom(make(recording))
    code, details, chunks = asyncio.run(open_stream(recording, request))
    assert (code, details, chunks) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "fault_parameter_out_of_range",
        0,
    )


def test_fault_parameters_at_the_edge_are_served(recording: Recording) -> None:
    request = good_request(recording)
    request.fault.CopyFrom(fault(pb.OMIT, target_frame=9))
    code, _, chunks = asyncio.run(open_stream(recording, request))
    assert (code, chunks) == (grpc.StatusCode.OK, 9)
    request.fault.CopyFrom(
        fault(pb.TRUNCATE_TAIL, byte_count=_done_bytes(recording, WireFormat.LENGTH_PREFIXED) - 1)
    )
    code, _, chunks = asyncio.run(open_stream(recording, request))
    assert (code, chunks) == (grpc.StatusCode.OK, 10)


def test_fault_parameters_are_checked_after_the_binding(recording: Recording) -> None:
    request = good_request(recording, binding_json=b"{}")
    request.fault.CopyFrom(fault(pb.OMIT, target_frame=10))
    code, details, _ = asyncio.run(open_stream(recording, request))
    assert (code, details) == (grpc.StatusCode.FAILED_PRECONDITION, "request_binding_mismatch")


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
