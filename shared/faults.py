"""The producing side as a pure pipeline, with the controlled fault catalogue.

``transmit()`` turns a bound case into what a producer puts on the wire::

    frames (derive_frames, chat_frames) -> frame faults (omit, repeat, foreign-binding, ...)
    -> encoded frames       -> frame-bytes faults (corrupt)
    -> wire bytes           -> wire faults (truncate-tail)
    -> chunks (ChunkPlan)   -> how the stream ends (clean, or a transport error)

A content frame is one of the six kinds a chat reply has (``CONTENT_KINDS``): a grounded
or text reply's are its deltas, a chat reply's every part too (docs/protocol.md#faults).

Nothing here does I/O: the same ``Transmission`` is fed to the consumer in
one process (``consumer replay``) and sent over gRPC by the producer.

Faults exist to prove the consumer's refusals; each has one documented
outcome (``EXPECTED_OUTCOMES``) which the tests check in every wire; the two that break
the transport have a second, over gRPC with the consumer's default resume
(``RESUMED_OUTCOMES``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from replywire.shared.chat_frames import chat_frames
from replywire.shared.errors import RequestRefused
from replywire.shared.frames import (
    CONTENT_KINDS,
    Frame,
    FrameKind,
    derive_frames,
    frames_from_deltas,
)
from replywire.shared.reasons import Reason
from replywire.shared.recording import BoundCase
from replywire.shared.status import Status
from replywire.shared.wire import WireCodec, WireFormat, codec_for
from replywire.shared.wire.chunking import ChunkPlan, cut

DEFAULT_TARGET_FRAME: Final = 3
DEFAULT_TRUNCATE_BYTES: Final = 3
MAX_TRUNCATE_BYTES: Final = 1 << 20
DEFAULT_STALL_MS: Final = 60_000
MAX_STALL_MS: Final = 600_000


class FaultKind(StrEnum):
    CANCEL = "cancel"
    ERROR = "error"
    EOF_BEFORE_TERMINAL = "eof-before-terminal"
    TRANSPORT_ABORT = "transport-abort"
    TRUNCATE_TAIL = "truncate-tail"
    OMIT = "omit"
    REPEAT = "repeat"
    CORRUPT = "corrupt"
    FOREIGN_BINDING = "foreign-binding"
    # Faults of a real connection: they need a clock or a transport.
    STALL = "stall"
    ABORT_AFTER_DONE = "abort-after-done"


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    kind: FaultKind
    #: 1-based frame for omit / repeat / corrupt / foreign-binding (None = default).
    target_frame: int | None = None
    #: Bytes dropped by truncate-tail (None = default).
    byte_count: int | None = None
    #: How long a stall lasts (None = default).
    stall_ms: int | None = None

    def __post_init__(self) -> None:
        if self.target_frame is not None and self.target_frame < 1:
            raise RequestRefused(Reason.INVALID_REQUEST, "fault target frame must be >= 1")
        if self.byte_count is not None and not 1 <= self.byte_count <= MAX_TRUNCATE_BYTES:
            raise RequestRefused(Reason.INVALID_REQUEST, "fault byte count out of range")
        if self.stall_ms is not None and not 1 <= self.stall_ms <= MAX_STALL_MS:
            raise RequestRefused(Reason.INVALID_REQUEST, "fault stall out of range")


@dataclass(frozen=True, slots=True)
class Outcome:
    status: Status
    reason: str | None


def _outcome(status: Status, reason: Reason) -> Outcome:
    return Outcome(status, reason.value)


#: What the consumer must conclude for each fault, per wire. The same in every
#: wire except ``corrupt``, whose broken frame is not JSON in NDJSON (both) and not a
#: well-formed Frame message in the length-prefixed wire.
EXPECTED_OUTCOMES: Final[dict[FaultKind, dict[WireFormat, Outcome]]] = {
    kind: {wire: outcome for wire in WireFormat}
    for kind, outcome in {
        FaultKind.CANCEL: _outcome(Status.CANCELLED, Reason.CONTROLLED_LOCAL_CANCEL),
        FaultKind.ERROR: _outcome(Status.ERROR, Reason.CONTROLLED_LOCAL_ERROR),
        FaultKind.EOF_BEFORE_TERMINAL: _outcome(Status.INCOMPLETE, Reason.MISSING_TERMINAL),
        FaultKind.TRANSPORT_ABORT: _outcome(Status.ERROR, Reason.TRANSPORT_IO_ERROR),
        FaultKind.TRUNCATE_TAIL: _outcome(Status.INVALID, Reason.TRUNCATED_FRAME),
        FaultKind.OMIT: _outcome(Status.INVALID, Reason.INVALID_SEQUENCE),
        FaultKind.REPEAT: _outcome(Status.INVALID, Reason.INVALID_SEQUENCE),
        FaultKind.FOREIGN_BINDING: _outcome(Status.INVALID, Reason.FRAME_REQUEST_MISMATCH),
        FaultKind.ABORT_AFTER_DONE: _outcome(Status.ERROR, Reason.TRANSPORT_IO_ERROR),
        # In one process there is no clock: the stall passes unnoticed and the reply completes.
        # Across processes the consumer's idle timeout or deadline ends it (incomplete).
        FaultKind.STALL: Outcome(Status.COMPLETE, None),
    }.items()
} | {
    FaultKind.CORRUPT: {
        WireFormat.NDJSON: _outcome(Status.INVALID, Reason.INVALID_FRAME_JSON),
        WireFormat.NDJSON_LAB: _outcome(Status.INVALID, Reason.INVALID_FRAME_JSON),
        WireFormat.LENGTH_PREFIXED: _outcome(Status.INVALID, Reason.INVALID_FRAME_PAYLOAD),
    }
}
#: With the duplicate policy on, an exact repeat is dropped and the reply completes.
REPEAT_WITH_DUPLICATE_POLICY: Final = Outcome(Status.COMPLETE, None)
#: Over gRPC with the consumer's default resume (``--resume-attempts``, 3): a transport fault
#: hits a stream's first delivery only, so the consumer reconnects once, is delivered the
#: rest from the producer's reply log and completes. ``EXPECTED_OUTCOMES`` is the outcome
#: without resume (``--resume-attempts 0``, and in one process).
RESUMED_OUTCOMES: Final[dict[FaultKind, Outcome]] = {
    FaultKind.TRANSPORT_ABORT: Outcome(Status.COMPLETE, None),
    FaultKind.ABORT_AFTER_DONE: Outcome(Status.COMPLETE, None),
}
#: The reconnects a resumed transport fault takes.
RESUMED_RECONNECTS: Final = 1

_FRAME_K: Final = "content frame K (1 to the last; default 3, or the last when fewer)"
FAULT_DESCRIPTIONS: Final[dict[FaultKind, str]] = {
    FaultKind.CANCEL: "half the content, then a cancel terminal (controlled_local_cancel)",
    FaultKind.ERROR: "half the content, then an error terminal (controlled_local_error)",
    FaultKind.EOF_BEFORE_TERMINAL: "every content frame, no terminal, clean end of stream",
    FaultKind.TRANSPORT_ABORT: "the first two frames as one chunk, then a transport error",
    FaultKind.TRUNCATE_TAIL: "the final N wire bytes dropped (default 3; N from 1 to the done "
    "frame's length - 1), clean end of stream",
    FaultKind.OMIT: f"{_FRAME_K} never sent",
    FaultKind.REPEAT: f"{_FRAME_K} sent twice",
    FaultKind.CORRUPT: f"{_FRAME_K} sent with a broken payload",
    FaultKind.FOREIGN_BINDING: f"{_FRAME_K} carries another binding hash",
    FaultKind.STALL: f"after {_FRAME_K} nothing is sent for N ms (default 60000), the stream "
    "kept open",
    FaultKind.ABORT_AFTER_DONE: "everything including done, then the RPC ends UNAVAILABLE",
}

#: The parameters each fault takes; any other it is given is refused
#: (``fault_parameter_out_of_range``). ``target_frame`` is a content frame, 1 to the
#: reply's last; ``byte_count`` ends the stream inside the done frame, 1 to its length - 1.
FAULT_PARAMETERS: Final[dict[FaultKind, frozenset[str]]] = {
    kind: frozenset() for kind in FaultKind
} | {
    FaultKind.OMIT: frozenset({"target_frame"}),
    FaultKind.REPEAT: frozenset({"target_frame"}),
    FaultKind.CORRUPT: frozenset({"target_frame"}),
    FaultKind.FOREIGN_BINDING: frozenset({"target_frame"}),
    FaultKind.STALL: frozenset({"target_frame", "stall_ms"}),
    FaultKind.TRUNCATE_TAIL: frozenset({"byte_count"}),
}


#: Faults of the transport, not of the reply: they leave the frames as they are, so the
#: reply can be logged whole and resumed; they apply to a stream's first delivery only.
TRANSPORT_FAULTS: Final = frozenset(
    {
        FaultKind.TRANSPORT_ABORT,
        FaultKind.TRUNCATE_TAIL,
        FaultKind.ABORT_AFTER_DONE,
        FaultKind.STALL,
    }
)
#: Faults that need a clock: in one process they change nothing.
TIMING_FAULTS: Final = frozenset({FaultKind.STALL})


class Ending(StrEnum):
    CLEAN = "clean"
    TRANSPORT_ERROR = "transport_error"


@dataclass(frozen=True, slots=True)
class Stall:
    #: Pause after this many chunks have been sent.
    after_chunks: int
    milliseconds: int


@dataclass(frozen=True, slots=True)
class Transmission:
    frames: tuple[Frame, ...]
    chunks: tuple[bytes, ...]
    ending: Ending
    stall: Stall | None = None
    #: Each frame on the wire (with any byte-level fault), before it is cut into chunks.
    encoded: tuple[bytes, ...] = ()


@dataclass(frozen=True, slots=True)
class ParameterRanges:
    """The values a fault's parameters may take for one reply on one wire (inclusive)."""

    #: The content frames: a target frame is one of them.
    content_frames: int
    #: The done frame's bytes on the wire: truncate-tail cuts inside it.
    done_bytes: int

    @property
    def target_frame(self) -> tuple[int, int]:
        return 1, self.content_frames

    @property
    def byte_count(self) -> tuple[int, int]:
        return 1, min(self.done_bytes - 1, MAX_TRUNCATE_BYTES)


def parameter_ranges(frames: Sequence[Frame], codec: WireCodec) -> ParameterRanges:
    """The ranges for a reply's fault-free frames (content frames, then done)."""
    content = sum(1 for frame in frames if frame.kind in CONTENT_KINDS)
    done_bytes = len(codec.encode_frame(frames[-1])) if frames else 0
    return ParameterRanges(content, done_bytes)


def check_fault_parameters(fault: Fault, ranges: ParameterRanges) -> None:
    """Each parameter the fault is given is one it takes and fits this reply, or the
    request is refused (``fault_parameter_out_of_range``) before anything is sent: a
    fault's documented outcome holds for every parameter it accepts, and only for those.

    ``target_frame`` past the last content frame would omit, repeat, corrupt or re-bind done,
    or stall after it; ``byte_count`` of the done frame's length or more would end the
    stream at or before a frame boundary (``missing_terminal``, not ``truncated_frame``)."""
    takes = FAULT_PARAMETERS[fault.kind]
    for name, value, (low, high) in (
        ("target_frame", fault.target_frame, ranges.target_frame),
        ("byte_count", fault.byte_count, ranges.byte_count),
        ("stall_ms", fault.stall_ms, (1, MAX_STALL_MS)),
    ):
        if value is None:
            continue
        if name not in takes:
            raise RequestRefused(
                Reason.FAULT_PARAMETER_OUT_OF_RANGE, f"{fault.kind.value} takes no {name}"
            )
        if not low <= value <= high:
            raise RequestRefused(
                Reason.FAULT_PARAMETER_OUT_OF_RANGE,
                f"{fault.kind.value}: {name} {value} outside {low}..{high} for this reply",
            )
    # The defaults must fit too (they do for any reply with content: see the tests).
    if "target_frame" in takes and ranges.content_frames == 0:
        raise RequestRefused(Reason.FAULT_PARAMETER_OUT_OF_RANGE, "the reply has no content frame")
    default_cut = "byte_count" in takes and fault.byte_count is None
    if default_cut and ranges.byte_count[1] < DEFAULT_TRUNCATE_BYTES:
        raise RequestRefused(Reason.FAULT_PARAMETER_OUT_OF_RANGE, "done is too short")


def target_index(frames: Sequence[Frame], fault: Fault) -> int:
    """0-based index of frame K, or by default of frame 3 (the last content frame when there
    are fewer). An explicit K past the last content frame is refused, never moved."""
    content = sum(1 for frame in frames if frame.kind in CONTENT_KINDS)
    if content == 0:
        raise RequestRefused(Reason.FAULT_PARAMETER_OUT_OF_RANGE, "the fault needs a content frame")
    if fault.target_frame is None:
        return min(DEFAULT_TARGET_FRAME, content) - 1
    if fault.target_frame > content:
        raise RequestRefused(
            Reason.FAULT_PARAMETER_OUT_OF_RANGE, f"frame {fault.target_frame} of {content}"
        )
    return fault.target_frame - 1


def _frame_fault(frames: list[Frame], fault: Fault, foreign_binding_sha256: str) -> list[Frame]:
    if fault.kind is FaultKind.EOF_BEFORE_TERMINAL:
        return frames[:-1]
    if fault.kind not in (FaultKind.OMIT, FaultKind.REPEAT, FaultKind.FOREIGN_BINDING):
        return frames
    index = target_index(frames, fault)
    target = frames[index]
    if fault.kind is FaultKind.OMIT:
        return frames[:index] + frames[index + 1 :]
    if fault.kind is FaultKind.REPEAT:
        return [*frames[: index + 1], target, *frames[index + 1 :]]
    foreign = Frame(
        sequence=target.sequence,
        kind=target.kind,
        binding_sha256=foreign_binding_sha256,
        text=target.text,
        part=target.part,
    )
    return [*frames[:index], foreign, *frames[index + 1 :]]


def truncate_tail(encoded: list[bytes], count: int) -> list[bytes]:
    """Drop the final ``count`` bytes of the wire, keeping the frame split of the rest."""
    kept: list[bytes] = []
    remaining = max(0, sum(len(part) for part in encoded) - count)
    for part in encoded:
        if remaining <= 0:
            break
        kept.append(part[:remaining])
        remaining -= len(kept[-1])
    return kept


def _stall(frames: list[Frame], encoded: list[bytes], chunks: list[bytes], fault: Fault) -> Stall:
    """Pause after the chunk that completes content frame K (default 3, or the last)."""
    frame_end = sum(len(part) for part in encoded[: target_index(frames, fault) + 1])
    sent = 0
    for index, chunk in enumerate(chunks):
        sent += len(chunk)
        if sent >= frame_end:
            return Stall(index + 1, fault.stall_ms or DEFAULT_STALL_MS)
    return Stall(len(chunks), fault.stall_ms or DEFAULT_STALL_MS)


def _chat_frames(case: BoundCase, terminal: FrameKind) -> list[Frame]:
    """A chat case's frames: every content frame then done, or a cancel or error terminal
    after the first half of them (at least one: docs/protocol.md#faults)."""
    items = case.chat_items or ()
    if terminal is FrameKind.DONE:
        return chat_frames(case.binding_sha256, items)
    reason = (
        Reason.CONTROLLED_LOCAL_CANCEL
        if terminal is FrameKind.CANCEL
        else Reason.CONTROLLED_LOCAL_ERROR
    )
    half = items[: max(1, len(items) // 2)]
    return chat_frames(case.binding_sha256, half, terminal, reason.value)


def faulted_frames(
    case: BoundCase, codec: WireCodec, fault: Fault | None, foreign_binding_sha256: str | None
) -> list[Frame]:
    """The case's frames, ended by the fault's terminal, with any frame-level fault applied
    once its parameters are checked against the fault-free reply."""
    terminal = FrameKind.DONE
    if fault is not None and fault.kind is FaultKind.CANCEL:
        terminal = FrameKind.CANCEL
    elif fault is not None and fault.kind is FaultKind.ERROR:
        terminal = FrameKind.ERROR
    if case.chat_items is not None:
        frames = _chat_frames(case, terminal)
    elif case.provider_events is not None and terminal is FrameKind.DONE:
        # A converted live capture: one delta per provider text event, as it streamed.
        frames = frames_from_deltas(case.binding_sha256, list(case.provider_events))
    else:
        frames = derive_frames(case.binding_sha256, case.content, terminal)
    if fault is not None:
        check_fault_parameters(fault, parameter_ranges(frames, codec))
        if fault.kind is FaultKind.FOREIGN_BINDING and not foreign_binding_sha256:
            raise RequestRefused(Reason.INVALID_REQUEST, "foreign-binding needs another binding")
        frames = _frame_fault(frames, fault, foreign_binding_sha256 or "")
    return frames


def _encode(codec: WireCodec, frames: list[Frame], fault: Fault | None) -> list[bytes]:
    """Each frame on the wire, with any byte-level fault (corrupt, truncate-tail) applied."""
    encoded = [codec.encode_frame(frame) for frame in frames]
    if fault is not None and fault.kind is FaultKind.CORRUPT:
        index = target_index(frames, fault)
        encoded[index] = codec.corrupt_frame(encoded[index])
    if fault is not None and fault.kind is FaultKind.TRUNCATE_TAIL:
        encoded = truncate_tail(encoded, fault.byte_count or DEFAULT_TRUNCATE_BYTES)
    return encoded


def transmit(
    case: BoundCase,
    *,
    wire: WireFormat,
    plan: ChunkPlan,
    fault: Fault | None = None,
    foreign_binding_sha256: str | None = None,
) -> Transmission:
    codec: WireCodec = codec_for(wire)
    frames = faulted_frames(case, codec, fault, foreign_binding_sha256)
    encoded = _encode(codec, frames, fault)
    if fault is not None and fault.kind is FaultKind.TRANSPORT_ABORT:
        # The lab's controlled producer I/O error: frames 1-2 arrive as one read, then OSError.
        return Transmission(
            tuple(frames), (b"".join(encoded[:2]),), Ending.TRANSPORT_ERROR, None, tuple(encoded)
        )
    chunks = cut(encoded, plan)
    if fault is not None and fault.kind is FaultKind.ABORT_AFTER_DONE:
        return Transmission(
            tuple(frames), tuple(chunks), Ending.TRANSPORT_ERROR, None, tuple(encoded)
        )
    stall = (
        _stall(frames, encoded, chunks, fault) if fault and fault.kind is FaultKind.STALL else None
    )
    return Transmission(tuple(frames), tuple(chunks), Ending.CLEAN, stall, tuple(encoded))
