"""ReplyRequest and its OpenRequest: built by the consumer, checked by the producer.

Pure: no grpc here."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.consumer_limits import Limits
from replywire.shared.digest import canonical_digest, canonical_json, strict_json, within_depth
from replywire.shared.errors import ConfigurationError, RequestRefused
from replywire.shared.faults import Fault, FaultKind
from replywire.shared.kinds import ReplyKind, kind_of
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.reasons import Reason
from replywire.shared.recording import Recording
from replywire.shared.trace_logger import TraceLogger
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkMode, ChunkPlan

MAX_CHUNK_INTERVAL_MS: Final = 60_000
#: Bindings are about 3 KB (the recording's) or a question with up to 20 passages.
MAX_BINDING_BYTES: Final = 64 * 1024
MAX_BINDING_DEPTH: Final = 16
MAX_STREAM_ID_CHARS: Final = 128
MAX_CASE_ID_CHARS: Final = 128
#: The largest serialized OpenRequest looked at: the binding plus room for every other field.
MAX_REQUEST_BYTES: Final = MAX_BINDING_BYTES + 4096
#: The request metadata a producer reads by default (``--max-metadata-bytes``), counted as
#: HTTP/2 counts a header list (RFC 9113 §6.5.2: name + value + 32 octets each), and the
#: least it may be set to: a consumer's own metadata (a token of at most 512 characters, a
#: ``traceparent`` and a ``tracestate`` of at most 512, its user agent) is under 1.5 KiB.
DEFAULT_MAX_METADATA_BYTES: Final = 16 * 1024
MIN_MAX_METADATA_BYTES: Final = 4096
#: Ids are logged in every record of a stream: visible ASCII only, no spaces or controls.
_ID_PATTERN: Final = re.compile(r"[\x21-\x7e]*")

_WIRES: Final = {
    pb.WIRE_FORMAT_UNSPECIFIED: WireFormat.LENGTH_PREFIXED,
    pb.LENGTH_PREFIXED: WireFormat.LENGTH_PREFIXED,
    pb.NDJSON: WireFormat.NDJSON,
    pb.NDJSON_LAB: WireFormat.NDJSON_LAB,
}
_KINDS: Final = {
    pb.REPLY_KIND_GROUNDED: ReplyKind.GROUNDED,
    pb.REPLY_KIND_TEXT: ReplyKind.TEXT,
    pb.REPLY_KIND_CHAT: ReplyKind.CHAT,
}
#: A kind as the request names it.
KIND_CODES: Final = {kind: code for code, kind in _KINDS.items()}
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
FRAME_PLAN: Final = ChunkPlan(ChunkMode.FRAME)
DEFAULT_LIMITS: Final = Limits()


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckedRequest:
    """An ``OpenRequest`` read once, at the producer's edge: everything past it reads this,
    never the protobuf message."""

    stream_id: str
    case_id: str
    #: The last frame the consumer has (0: none; a resume otherwise).
    resume_after: int
    wire: WireFormat
    #: The kind of reply asked for (the binding's kind is the source's to compare).
    kind: ReplyKind
    plan: ChunkPlan
    fault: Fault | None
    interval_s: float
    #: The binding's canonical bytes as sent, and their digest (every frame carries it).
    binding_json: bytes
    binding_sha256: str


def check_envelope(request: pb.OpenRequest) -> None:
    """What must hold before anything of a request is logged: its ids are short and plain."""
    for name, value, limit in (
        ("stream id", request.stream_id, MAX_STREAM_ID_CHARS),
        ("case id", request.case_id, MAX_CASE_ID_CHARS),
    ):
        problem = id_problem(name, value, limit)
        if problem is not None:
            raise RequestRefused(Reason.INVALID_REQUEST, problem)


def id_problem(name: str, value: str, limit: int = MAX_STREAM_ID_CHARS) -> str | None:
    """Why ``value`` breaks the ids' rule (at most ``limit`` visible ASCII characters), in
    words that never repeat it; None when it keeps it. A consumer checks its own stream id
    by it before connecting, as the producer does on arrival."""
    if len(value) > limit:
        return f"{name} over {limit} characters"
    if not _ID_PATTERN.fullmatch(value):
        return f"{name} is not visible ASCII"
    return None


def check_request(request: pb.OpenRequest, *, allow_faults: bool) -> CheckedRequest:
    """Shape checks (``invalid_request``), the binding's bytes (``binding_not_canonical``),
    then the fault permission (``faults_not_allowed``). What needs the reply (the case, the
    binding's value, the fault's parameters against the reply) is the source's, after."""
    if request.wire_format not in _WIRES:
        raise RequestRefused(Reason.INVALID_REQUEST, f"wire format {request.wire_format}")
    if request.kind not in _KINDS:
        raise RequestRefused(Reason.INVALID_REQUEST, f"reply kind {request.kind}")
    if request.kind != pb.REPLY_KIND_GROUNDED and request.wire_format == pb.NDJSON_LAB:
        raise RequestRefused(Reason.INVALID_REQUEST, "the lab's wire carries grounded replies")
    if request.whole_body and request.chunk_sizes:
        raise RequestRefused(Reason.INVALID_REQUEST, "whole_body with chunk_sizes")
    plan = _plan(request.whole_body, tuple(request.chunk_sizes))
    if request.chunk_interval_ms > MAX_CHUNK_INTERVAL_MS:
        raise RequestRefused(Reason.INVALID_REQUEST, "chunk interval over 60000 ms")
    check_envelope(request)
    if len(request.binding_json) > MAX_BINDING_BYTES:
        raise RequestRefused(Reason.INVALID_REQUEST, f"binding over {MAX_BINDING_BYTES} bytes")
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
    digest = binding_sha256(request.binding_json)
    if fault is not None and not allow_faults:
        raise RequestRefused(Reason.FAULTS_NOT_ALLOWED, fault.kind.value)
    return CheckedRequest(
        stream_id=request.stream_id,
        case_id=request.case_id,
        resume_after=request.resume_after,
        wire=_WIRES[request.wire_format],
        kind=_KINDS[request.kind],
        plan=plan,
        fault=fault,
        interval_s=request.chunk_interval_ms / 1000,
        binding_json=request.binding_json,
        binding_sha256=digest,
    )


@functools.lru_cache(maxsize=256)
def _plan(whole_body: bool, sizes: tuple[int, ...]) -> ChunkPlan:
    """The request's chunking, checked once per distinct request (a refusal raises, and is
    not remembered): streams ask for the same few."""
    if whole_body:
        return ChunkPlan(ChunkMode.WHOLE)
    if sizes:
        return ChunkPlan(ChunkMode.SIZES, sizes)
    return FRAME_PLAN


def _parsed_binding(binding_json: bytes) -> object:
    """The binding's value, when its bytes are exactly its canonical JSON (``canonical_json``:
    keys sorted, no whitespace, UTF-8, nothing escaped that need not be); refused
    ``binding_not_canonical`` otherwise (not UTF-8, not strict JSON, any other spelling of a
    value), ``invalid_request`` past the depth bound (as past the size bound)."""
    if len(binding_json) > MAX_BINDING_BYTES:
        raise RequestRefused(Reason.INVALID_REQUEST, f"binding over {MAX_BINDING_BYTES} bytes")
    try:
        value = strict_json(binding_json.decode("utf-8"))
    except RecursionError as error:
        raise RequestRefused(
            Reason.INVALID_REQUEST, f"binding nested deeper than {MAX_BINDING_DEPTH}"
        ) from error
    except ValueError as error:  # UnicodeDecodeError is a ValueError
        raise RequestRefused(Reason.BINDING_NOT_CANONICAL, "binding is not strict JSON") from error
    if not within_depth(value, MAX_BINDING_DEPTH):
        raise RequestRefused(
            Reason.INVALID_REQUEST, f"binding nested deeper than {MAX_BINDING_DEPTH}"
        )
    try:
        canonical = canonical_json(value)
    except ValueError as error:  # a lone surrogate escaped in a string has no UTF-8
        raise RequestRefused(Reason.BINDING_NOT_CANONICAL, "binding has no UTF-8 form") from error
    if canonical != binding_json:
        raise RequestRefused(Reason.BINDING_NOT_CANONICAL, "binding bytes are not canonical")
    return value


def parse_binding(binding_json: bytes) -> object:
    """The request's binding: its canonical bytes parsed, or refused (``_parsed_binding``)."""
    return _parsed_binding(binding_json)


@functools.lru_cache(maxsize=64)
def binding_sha256(binding_json: bytes) -> str:
    """The SHA-256 of the binding's bytes, once they are known canonical (refused if not):
    the digest every frame carries, the same as the consumer's over the bytes it sent.
    Remembered for the last few bindings: every stream of a case carries the same bytes
    (a refusal raises, and is not remembered)."""
    _parsed_binding(binding_json)
    return canonical_digest(binding_json)


WIRE_CODES: Final = {
    WireFormat.LENGTH_PREFIXED: pb.LENGTH_PREFIXED,
    WireFormat.NDJSON: pb.NDJSON,
    WireFormat.NDJSON_LAB: pb.NDJSON_LAB,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyRequest:
    """Everything that describes one request for a bound reply, checked when it is made.

    The consumer's edges (``consumer.client.stream_reply``, ``shared.replay.replay``)
    take one of these; the CLI builds it once, before anything runs, so a bad value
    is a configuration error (exit 2), never something raised mid-stream. Checks the
    producer makes itself (e.g. the chunk interval's upper bound) stay the producer's:
    they are refusals, with their own reason codes.
    """

    case_id: str
    binding: Mapping[str, Any]
    wire: WireFormat = WireFormat.LENGTH_PREFIXED
    plan: ChunkPlan = FRAME_PLAN
    fault: Fault | None = None
    stream_id: str = ""
    chunk_interval_ms: int = 0
    limits: Limits = DEFAULT_LIMITS
    ignore_duplicates: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.wire, WireFormat) or not isinstance(self.plan, ChunkPlan):
            raise ConfigurationError(f"wire {self.wire!r} / chunks {self.plan!r}")
        kind = kind_of(self.binding)
        if kind is not ReplyKind.GROUNDED and self.wire is WireFormat.NDJSON_LAB:
            raise ConfigurationError(f"the lab's wire carries grounded replies, not {kind}")
        if type(self.chunk_interval_ms) is not int or self.chunk_interval_ms < 0:
            raise ConfigurationError(f"chunk interval must be >= 0 ms: {self.chunk_interval_ms}")

    @classmethod
    def for_case(cls, recording: Recording, case_id: str, **fields: Any) -> ReplyRequest:
        """A request for a recorded case, bound as the recording binds it (``RequestRefused``
        when the case is not one of the recording's)."""
        return cls(case_id=case_id, binding=recording.case(case_id).binding, **fields)

    def open_request(self) -> pb.OpenRequest:
        """The gRPC request that asks a producer for this reply."""
        request = pb.OpenRequest(
            case_id=self.case_id,
            binding_json=canonical_json(self.binding),
            wire_format=WIRE_CODES[self.wire],
            kind=KIND_CODES[kind_of(self.binding)],
            stream_id=self.stream_id,
            chunk_interval_ms=self.chunk_interval_ms,
            whole_body=self.plan.mode is ChunkMode.WHOLE,
            chunk_sizes=list(self.plan.sizes),
        )
        fault = self.fault
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

    def consumer(
        self,
        logger: TraceLogger | None = None,
        *,
        sent: pb.OpenRequest | None = None,
    ) -> ReplyConsumer:
        """A consumer core that judges the reply to this request (``sent``: the request's
        ``open_request()``, whose canonical binding bytes give the binding's digest)."""
        return ReplyConsumer(
            self.binding,
            wire=self.wire,
            limits=self.limits,
            ignore_duplicates=self.ignore_duplicates,
            logger=logger,
            binding_sha256=None if sent is None else _sent_binding_sha256(sent.binding_json),
        )


@functools.lru_cache(maxsize=64)
def _sent_binding_sha256(canonical: bytes) -> str:
    """The digest of a binding's canonical bytes, remembered for the last few: a consumer's
    streams of a case send the same bytes."""
    return canonical_digest(canonical)
