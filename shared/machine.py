"""The consumer state machine: the one place that decides whether a reply is accepted.

Theory of operation
-------------------
A ``ReplyConsumer`` is sans-IO, in the manner of h11: the I/O edge hands it
transport chunks with ``receive_data()`` and then tells it how the input
ended, with exactly one of ``end_of_stream()`` (the stream closed cleanly),
``transport_error()`` (it broke) or ``abort()`` (we gave up: deadline, idle
timeout, Ctrl-C). Each returns the result document.

Inside, a wire decoder splits the bytes into raw frames, the codec parses
each, and the consumer checks them in the lab's order: nothing after the
terminal, frame shape, the next sequence number, the binding hash, the frame
and content limits, then the content or terminal itself. The first failure
moves the machine to ``INVALID`` and raises ``ProtocolFailure``; nothing after
it is interpreted.

An answer is accepted only on the path
``STREAMING -> TERMINAL_RECEIVED (done) -> VALIDATING -> COMPLETE``: a done
terminal (on the default wires, ``lp`` and ``ndjson``, carrying the SHA-256 and
frame count of exactly the content applied: required, and checked), then a
clean end of input with no partial frame or character left, then the lab's
reply validation against the bound context. Every other path
ends in a named status with a reason code and keeps the partial content as
``provisional_content``.

All states and transitions are in ``SPEC`` (a ``shared.fsm.MachineSpec``); its
``Machine.fire()`` is the only code that changes state, and it logs every change
as ``state_changed`` (with the frame count as ``sequence`` and the ``reason``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

import structlog

from shared.digest import digest
from shared.errors import ProtocolFailure, Reason, Status
from shared.frames import MAX_REASON_CHARS, Frame, FrameKind
from shared.fsm import NULL_LOGGER, Machine, MachineSpec
from shared.reply import validate_reply
from shared.result import (
    AnswerValidated,
    ConsumerAborted,
    ContentReceived,
    DuplicateDropped,
    Event,
    Stats,
    StreamResult,
    TerminalReceived,
    TransportFailed,
)
from shared.wire import NEED_DATA, Integrity, WireFormat, codec_for

#: The lab's limits.
MAX_TOTAL_BYTES: Final = 65536
MAX_FRAME_BYTES: Final = 8192
MAX_CONTENT_CHARS: Final = 16384
MAX_FRAMES: Final = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Every bound the consumer enforces; the defaults are the lab's."""

    max_stream_bytes: int = MAX_TOTAL_BYTES
    max_frame_bytes: int = MAX_FRAME_BYTES
    max_content_chars: int = MAX_CONTENT_CHARS
    max_frames: int = MAX_FRAMES
    max_reason_chars: int = MAX_REASON_CHARS

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")


class ConsumerState(StrEnum):
    STREAMING = "streaming"
    TERMINAL_RECEIVED = "terminal_received"
    VALIDATING = "validating"
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"
    CANCELLED = "cancelled"
    ERROR = "error"
    INVALID = "invalid"


class Input(StrEnum):
    TERMINAL_FRAME = "terminal_frame"
    PROTOCOL_FAILURE = "protocol_failure"
    END_WITHOUT_TERMINAL = "end_without_terminal"
    END_AFTER_DONE = "end_after_done"
    END_AFTER_CANCEL = "end_after_cancel"
    END_AFTER_ERROR = "end_after_error"
    TRANSPORT_ERROR = "transport_error"
    LOCAL_ABORT = "local_abort"
    REPLY_ACCEPTED = "reply_accepted"
    REPLY_REJECTED = "reply_rejected"


S, In = ConsumerState, Input

#: Every legal (state, input) pair. A pair that is missing is a bug, not a verdict.
TRANSITIONS: Final[dict[tuple[ConsumerState, Input], ConsumerState]] = {
    (S.STREAMING, In.TERMINAL_FRAME): S.TERMINAL_RECEIVED,
    (S.STREAMING, In.PROTOCOL_FAILURE): S.INVALID,
    (S.STREAMING, In.END_WITHOUT_TERMINAL): S.INCOMPLETE,
    (S.STREAMING, In.TRANSPORT_ERROR): S.ERROR,
    (S.STREAMING, In.LOCAL_ABORT): S.INCOMPLETE,
    (S.TERMINAL_RECEIVED, In.PROTOCOL_FAILURE): S.INVALID,
    (S.TERMINAL_RECEIVED, In.END_AFTER_DONE): S.VALIDATING,
    (S.TERMINAL_RECEIVED, In.END_AFTER_CANCEL): S.CANCELLED,
    (S.TERMINAL_RECEIVED, In.END_AFTER_ERROR): S.ERROR,
    (S.TERMINAL_RECEIVED, In.TRANSPORT_ERROR): S.ERROR,
    (S.TERMINAL_RECEIVED, In.LOCAL_ABORT): S.INCOMPLETE,
    (S.VALIDATING, In.REPLY_ACCEPTED): S.COMPLETE,
    (S.VALIDATING, In.REPLY_REJECTED): S.INVALID,
}

FINAL_STATES: Final = frozenset({S.COMPLETE, S.INCOMPLETE, S.CANCELLED, S.ERROR, S.INVALID})

SPEC: Final = MachineSpec(
    name="consumer core",
    states=ConsumerState,
    inputs=Input,
    initial=S.STREAMING,
    final=FINAL_STATES,
    table=TRANSITIONS,
)
STATUS_OF: Final = {
    S.COMPLETE: Status.COMPLETE,
    S.INCOMPLETE: Status.INCOMPLETE,
    S.CANCELLED: Status.CANCELLED,
    S.ERROR: Status.ERROR,
    S.INVALID: Status.INVALID,
}
_END_AFTER: Final = {
    FrameKind.DONE: In.END_AFTER_DONE,
    FrameKind.CANCEL: In.END_AFTER_CANCEL,
    FrameKind.ERROR: In.END_AFTER_ERROR,
}


class ReplyConsumer:
    def __init__(
        self,
        binding: Mapping[str, Any],
        *,
        wire: WireFormat = WireFormat.LENGTH_PREFIXED,
        limits: Limits | None = None,
        ignore_duplicates: bool = False,
        logger: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.binding = binding
        self.binding_sha256 = digest(binding)
        self.wire = wire
        self.limits = limits or Limits()
        self.ignore_duplicates = ignore_duplicates
        self._log: structlog.typing.FilteringBoundLogger = logger or NULL_LOGGER
        self._codec = codec_for(wire)
        self._decoder = self._codec.decoder(self.limits.max_frame_bytes)
        self._machine = Machine(SPEC, self._log)
        self._finished = False
        self._reason: str | None = None
        self._failure: Reason | None = None
        # Stats, as the lab counts them.
        self._bytes = 0
        self._fragments = 0
        self._frames = 0
        # Content as it arrives: parts (joined once), its length and running digest.
        self._parts: list[str] = []
        self._chars = 0
        self._content_frames = 0
        self._content_hash = hashlib.sha256()
        self._terminal: FrameKind | None = None
        self._terminal_reason: str | None = None
        self._accepted: dict[str, Any] | None = None
        self._citations: list[dict[str, Any]] = []
        self._events: list[Event] = []
        # Duplicate policy: SHA-256 of each applied frame's bytes, by sequence - 1.
        self._applied: list[bytes] = []
        self.transport: dict[str, Any] | None = None

    # --- state ------------------------------------------------------------------

    @property
    def state(self) -> ConsumerState:
        return self._machine.state

    @property
    def finished(self) -> bool:
        """True once the machine has reached a final state."""
        return self._machine.finished

    @property
    def provisional_content(self) -> str:
        return "".join(self._parts)

    def _transition(self, event: Input) -> None:
        self._machine.fire(event, sequence=self._frames, reason=self._reason)

    def _fail(self, reason: Reason, detail: str = "") -> ProtocolFailure:
        """Record the first failure, move to INVALID, and return the exception to raise."""
        self._failure = reason
        self._reason = reason.value
        self._transition(In.PROTOCOL_FAILURE)
        return ProtocolFailure(reason, detail)

    # --- input --------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Take one transport chunk. Raises ``ProtocolFailure`` on the first bad byte or frame."""
        if self._finished:
            raise ProtocolFailure(Reason.CONSUMER_ALREADY_FINISHED)
        if self._failure is not None:
            raise ProtocolFailure(self._failure)
        if not isinstance(data, bytes):
            raise self._fail(Reason.TRANSPORT_REQUIRES_BYTES, type(data).__name__)
        self._bytes += len(data)
        self._fragments += 1
        self._log.debug("chunk_received", size=len(data), bytes_received=self._bytes)
        if self._bytes > self.limits.max_stream_bytes:
            raise self._fail(Reason.STREAM_BYTE_LIMIT, f"{self._bytes} bytes")
        try:
            self._decoder.receive_data(data)
            while (payload := self._decoder.next_event()) is not NEED_DATA:
                assert isinstance(payload, bytes)
                self._apply(payload)
        except ProtocolFailure as failure:
            if self._failure is not None:  # already recorded by _apply
                raise
            raise self._fail(failure.reason, failure.detail) from failure

    def _apply(self, payload: bytes) -> None:
        if self._terminal is not None:
            raise self._fail(Reason.FRAME_AFTER_TERMINAL)
        try:
            frame = self._codec.parse_frame(payload)
        except ProtocolFailure as failure:
            raise self._fail(failure.reason, failure.detail) from failure
        sequence = frame.sequence
        if type(sequence) is not int or sequence != self._frames + 1:
            if self._is_duplicate(sequence, payload):
                return
            raise self._fail(Reason.INVALID_SEQUENCE, f"expected {self._frames + 1}")
        if frame.binding_sha256 != self.binding_sha256:
            raise self._fail(Reason.FRAME_REQUEST_MISMATCH, f"sequence {sequence}")
        self._frames += 1
        if self._frames > self.limits.max_frames:
            raise self._fail(Reason.FRAME_COUNT_LIMIT, f"{self._frames} frames")
        if self.ignore_duplicates:
            self._applied.append(hashlib.sha256(payload).digest())
        self._log.debug("frame_applied", sequence=sequence, kind=frame.kind.value)
        if frame.kind is FrameKind.CONTENT_DELTA:
            self._apply_content(frame)
        else:
            self._apply_terminal(frame)

    def _is_duplicate(self, sequence: object, payload: bytes) -> bool:
        """Under the duplicate policy, drop an exact replay of an applied frame."""
        if not self.ignore_duplicates or type(sequence) is not int:
            return False
        if not 1 <= sequence <= self._frames:
            return False
        if self._applied[sequence - 1] != hashlib.sha256(payload).digest():
            raise self._fail(Reason.CONFLICTING_DUPLICATE, f"sequence {sequence}")
        self._events.append(DuplicateDropped(sequence))
        self._log.info("duplicate_dropped", sequence=sequence)
        return True

    def _apply_content(self, frame: Frame) -> None:
        text = frame.text
        if not isinstance(text, str) or not text:
            raise self._fail(Reason.INVALID_CONTENT_DELTA, "empty or not text")
        try:
            encoded = text.encode("utf-8")
        except UnicodeError as error:
            raise self._fail(Reason.INVALID_CONTENT_DELTA, "not UTF-8") from error
        self._parts.append(text)
        self._chars += len(text)
        self._content_frames += 1
        self._content_hash.update(encoded)
        if self._chars > self.limits.max_content_chars:
            raise self._fail(Reason.CONTENT_LIMIT, f"{self._chars} characters")
        assert isinstance(frame.sequence, int)  # checked by _apply
        self._events.append(ContentReceived(frame.sequence, self._chars))

    def _apply_terminal(self, frame: Frame) -> None:
        reason = frame.reason
        if frame.kind is not FrameKind.DONE:
            if (
                not isinstance(reason, str)
                or not reason
                or len(reason) > self.limits.max_reason_chars
            ):
                raise self._fail(Reason.INVALID_TERMINAL_REASON)
            try:
                reason.encode("utf-8")
            except UnicodeError as error:
                raise self._fail(Reason.INVALID_TERMINAL_REASON, "not UTF-8") from error
        elif self.wire.integrity is Integrity.SHA256:
            # Required, not merely checked when present: a codec that lost the claim
            # must not turn the wire into one without integrity.
            claimed = frame.done_digest
            if claimed is None:
                raise self._fail(Reason.INVALID_FRAME_SCHEMA, "done without its content digest")
            if (
                claimed.content_frames != self._content_frames
                or claimed.content_sha256 != self._content_hash.hexdigest()
            ):
                raise self._fail(
                    Reason.CONTENT_DIGEST_MISMATCH,
                    f"done claims {claimed.content_frames} frames, {self._content_frames} applied",
                )
        self._terminal = frame.kind
        self._terminal_reason = reason if isinstance(reason, str) else None
        assert isinstance(frame.sequence, int)  # checked by _apply
        self._events.append(TerminalReceived(frame.kind.value, frame.sequence))
        self._transition(In.TERMINAL_FRAME)

    # --- how the input ended --------------------------------------------------------

    def _begin_finish(self) -> bool:
        """Mark the input as ended; False when the verdict is already in (INVALID)."""
        if self._finished:
            raise ProtocolFailure(Reason.CONSUMER_ALREADY_FINISHED)
        self._finished = True
        return self._failure is None

    def end_of_stream(self) -> StreamResult:
        """The input ended cleanly. Returns the result document."""
        if not self._begin_finish():
            return self.result()
        try:
            self._decoder.end_of_input()
        except ProtocolFailure as failure:
            self._fail(failure.reason, failure.detail)
            return self.result()
        if self._terminal is None:
            self._reason = Reason.MISSING_TERMINAL.value
            self._transition(In.END_WITHOUT_TERMINAL)
            return self.result()
        if self._terminal is not FrameKind.DONE:
            self._reason = self._terminal_reason
            self._transition(_END_AFTER[self._terminal])
            return self.result()
        self._transition(In.END_AFTER_DONE)
        try:
            accepted, citations = validate_reply(self.provisional_content, self.binding)
        except ProtocolFailure as failure:
            self._reason = failure.reason.value
            self._transition(In.REPLY_REJECTED)
            return self.result()
        self._accepted, self._citations = accepted, citations
        self._events.append(AnswerValidated(accepted, citations))
        self._transition(In.REPLY_ACCEPTED)
        return self.result()

    def transport_error(self, detail: Mapping[str, Any] | None = None) -> StreamResult:
        """The transport broke. ``detail`` (e.g. the gRPC status) is kept in the result."""
        if not self._begin_finish():
            return self.result()
        self.transport = dict(detail) if detail else None
        self._reason = Reason.TRANSPORT_IO_ERROR.value
        self._events.append(TransportFailed(Reason.TRANSPORT_IO_ERROR.value))
        self._transition(In.TRANSPORT_ERROR)
        return self.result()

    def abort(self, reason: Reason) -> StreamResult:
        """We stopped reading (deadline, idle timeout, user cancel): incomplete, content kept."""
        if not self._begin_finish():
            return self.result()
        self._reason = reason.value
        self._events.append(ConsumerAborted(reason.value))
        self._transition(In.LOCAL_ABORT)
        return self.result()

    # --- the verdict ------------------------------------------------------------------

    @property
    def stats(self) -> Stats:
        return Stats(self._bytes, self._fragments, self._frames)

    def result(self) -> StreamResult:
        if not self.finished:
            raise RuntimeError(f"no verdict yet in state {self.state}")
        return StreamResult(
            status=STATUS_OF[self.state],
            reason=self._reason,
            accepted_answer=self._accepted,
            citations=tuple(self._citations),
            provisional_content=self.provisional_content,
            local_terminal=self._terminal.value if self._terminal else None,
            stats=self.stats,
            events=tuple(self._events),
            case_id=self.binding.get("case_id"),
            request_sha256=self.binding.get("request_sha256"),
            binding_sha256=self.binding_sha256,
            wire_format=self.wire.value,
            integrity=self.wire.integrity.value,
            transport=self.transport,
        )
