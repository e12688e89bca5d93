"""OpenRequest: built by the consumer, checked by the producer. Pure: no grpc here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from shared.digest import canonical_json, strict_json
from shared.errors import Reason, RequestRefused
from shared.faults import Fault, FaultKind
from shared.pb import replywire_pb2 as pb
from shared.wire import WireFormat
from shared.wire.chunking import ChunkMode, ChunkPlan

MAX_CHUNK_INTERVAL_MS: Final = 60_000
MAX_BINDING_BYTES: Final = 1 << 20
MAX_STREAM_ID_CHARS: Final = 128

_WIRES: Final = {
    pb.WIRE_FORMAT_UNSPECIFIED: WireFormat.LENGTH_PREFIXED,
    pb.LENGTH_PREFIXED: WireFormat.LENGTH_PREFIXED,
    pb.NDJSON: WireFormat.NDJSON,
    pb.NDJSON_LAB: WireFormat.NDJSON_LAB,
}
FAULT_KINDS: Final = {
    pb.CANCEL: FaultKind.CANCEL,
    pb.ERROR: FaultKind.ERROR,
    pb.EOF_BEFORE_TERMINAL: FaultKind.EOF_BEFORE_TERMINAL,
    pb.TRANSPORT_ABORT: FaultKind.TRANSPORT_ABORT,
    pb.TRUNCATE_TAIL: FaultKind.TRUNCATE_TAIL,
    pb.OMIT: FaultKind.OMIT,
    pb.REPEAT: FaultKind.REPEAT,
    pb.CORRUPT: FaultKind.CORRUPT,
    pb.FOREIGN_BINDING: FaultKind.FOREIGN_BINDING,
    pb.STALL: FaultKind.STALL,
    pb.ABORT_AFTER_DONE: FaultKind.ABORT_AFTER_DONE,
}
FAULT_CODES: Final = {kind: code for code, kind in FAULT_KINDS.items()}


@dataclass(frozen=True, slots=True)
class CheckedRequest:
    case_id: str
    wire: WireFormat
    plan: ChunkPlan
    fault: Fault | None
    interval_s: float


def check_request(request: pb.OpenRequest, *, allow_faults: bool) -> CheckedRequest:
    """Shape checks (``invalid_request``), then the fault permission (``faults_not_allowed``)."""
    if request.wire_format not in _WIRES:
        raise RequestRefused(Reason.INVALID_REQUEST, f"wire format {request.wire_format}")
    if request.whole_body and request.chunk_sizes:
        raise RequestRefused(Reason.INVALID_REQUEST, "whole_body with chunk_sizes")
    if request.whole_body:
        plan = ChunkPlan(ChunkMode.WHOLE)
    elif request.chunk_sizes:
        plan = ChunkPlan(ChunkMode.SIZES, tuple(request.chunk_sizes))
    else:
        plan = ChunkPlan(ChunkMode.FRAME)
    if request.chunk_interval_ms > MAX_CHUNK_INTERVAL_MS:
        raise RequestRefused(Reason.INVALID_REQUEST, "chunk interval over 60000 ms")
    if len(request.stream_id) > MAX_STREAM_ID_CHARS:
        raise RequestRefused(Reason.INVALID_REQUEST, "stream id too long")
    if len(request.binding_json) > MAX_BINDING_BYTES:
        raise RequestRefused(Reason.INVALID_REQUEST, "binding too large")
    fault = None
    if request.HasField("fault") and request.fault.kind != pb.FAULT_KIND_UNSPECIFIED:
        kind = FAULT_KINDS.get(request.fault.kind)
        if kind is None:
            raise RequestRefused(Reason.INVALID_REQUEST, f"fault kind {request.fault.kind}")
        fault = Fault(
            kind=kind,
            target_frame=request.fault.target_frame or None,
            byte_count=request.fault.byte_count or None,
            stall_ms=request.fault.stall_ms or None,
        )
        if not allow_faults:
            raise RequestRefused(Reason.FAULTS_NOT_ALLOWED, kind.value)
    return CheckedRequest(
        case_id=request.case_id,
        wire=_WIRES[request.wire_format],
        plan=plan,
        fault=fault,
        interval_s=request.chunk_interval_ms / 1000,
    )


def parse_binding(binding_json: bytes) -> object:
    try:
        return strict_json(binding_json.decode("utf-8"))
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        raise RequestRefused(
            Reason.REQUEST_BINDING_MISMATCH, "binding is not strict JSON"
        ) from error


WIRE_CODES: Final = {
    WireFormat.LENGTH_PREFIXED: pb.LENGTH_PREFIXED,
    WireFormat.NDJSON: pb.NDJSON,
    WireFormat.NDJSON_LAB: pb.NDJSON_LAB,
}


def build_request(
    *,
    case_id: str,
    binding: Any,
    wire: WireFormat,
    plan: ChunkPlan,
    fault: Fault | None,
    stream_id: str,
    chunk_interval_ms: int = 0,
) -> pb.OpenRequest:
    request = pb.OpenRequest(
        case_id=case_id,
        binding_json=canonical_json(binding),
        wire_format=WIRE_CODES[wire],
        stream_id=stream_id,
        chunk_interval_ms=chunk_interval_ms,
        whole_body=plan.mode is ChunkMode.WHOLE,
        chunk_sizes=list(plan.sizes),
    )
    if fault is not None:
        request.fault.CopyFrom(
            pb.Fault(
                kind=FAULT_CODES[fault.kind],
                target_frame=fault.target_frame or 0,
                byte_count=fault.byte_count or 0,
                stall_ms=fault.stall_ms or 0,
            )
        )
    return request
