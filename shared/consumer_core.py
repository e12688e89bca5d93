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

A result's ``reason`` is always a registered code (``shared.reason_registry.REASONS``). A cancel
or error terminal says why in free text: a registered code there is the result's reason
as it is (the lab's ``controlled_local_cancel``); any other text still ends the stream
cancelled or error, with ``unregistered_cancel_terminal`` / ``unregistered_error_terminal``
as the reason and the text, scrubbed and bounded, as the result's ``detail``.

All states and transitions are in ``SPEC`` (a ``shared.fsm.MachineSpec``,
``shared.consumer_machine``); its ``Machine.fire()`` is the only code that changes state,
and it logs every change as ``state_changed`` (with the frame count as ``sequence`` and the
``reason``).

The checks a frame passes before it is applied (the next sequence number, the binding hash,
the frame count) and a terminal's reason are ``shared.frame_checks``'s; what the core keeps
of the stream, the content and the events, is ``shared.consumer_content``'s. This module runs
them in the lab's order (``ReplyConsumer._apply``) and holds the machine that decides.

A chat binding asks for a chat reply (docs/protocol.md#chat-rules): its frames include the
five chat frames, whose checks and assembly are ``shared.chat_turn``'s (the turn, the calls
by index, the chat content digest ``done`` is compared with), and once it is done and the
input ended cleanly ``shared.chat_reply`` validates the turn instead of a grounded reply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from replywire.shared.chat_reply import CallRefused, notes, validate_turn
from replywire.shared.chat_turn import ChatTurn
from replywire.shared.consumer_content import Content, EventLog

# Limits lives in a module mypyc leaves pure: a compiled dataclass would refuse a field of
# the wrong type with its own TypeError before __post_init__ says which limit is wrong.
from replywire.shared.consumer_limits import Limits
from replywire.shared.consumer_machine import (
    FINAL_STATES,
    SPEC,
    STATUS_OF,
    TRANSITIONS,
    ConsumerState,
    Input,
    Verdict,
)
from replywire.shared.digest import digest
from replywire.shared.errors import ProtocolFailure, scrubbed_detail
from replywire.shared.frame_checks import FrameChecks, check_terminal_reason
from replywire.shared.frames import TERMINAL_KINDS, Frame, FrameKind
from replywire.shared.kinds import ReplyKind, kind_of
from replywire.shared.reasons import Reason, registered
from replywire.shared.reply import validate_reply
from replywire.shared.result import (
    AnswerValidated,
    ConsumerAborted,
    DuplicateDropped,
    PartReceived,
    Stats,
    StreamResult,
    TerminalReceived,
    TextValidated,
    TransportFailed,
    TurnValidated,
)
from replywire.shared.trace_logger import DEBUG, NULL_LOGGER, TraceLogger
from replywire.shared.wire import NEED_DATA, Integrity, WireFormat, codec_for

#: The machine's names are the core's too (``shared.consumer_core.SPEC``, ``Input``, ...).
__all__ = [
    "FINAL_STATES",
    "SPEC",
    "STATUS_OF",
    "TRANSITIONS",
    "ConsumerState",
    "Input",
    "ReplyConsumer",
    "Verdict",
]
In = Input
_CONTENT_DELTA: Final = FrameKind.CONTENT_DELTA
_END_AFTER: Final = {
    FrameKind.DONE: In.END_AFTER_DONE,
    FrameKind.CANCEL: In.END_AFTER_CANCEL,
    FrameKind.ERROR: In.END_AFTER_ERROR,
}
#: The reason of a cancel or error terminal whose own reason is not a registered code.
_UNREGISTERED: Final = {
    FrameKind.CANCEL: Reason.UNREGISTERED_CANCEL_TERMINAL,
    FrameKind.ERROR: Reason.UNREGISTERED_ERROR_TERMINAL,
}


class ReplyConsumer:
    """The sans-IO core: bytes in, one ``StreamResult`` out (see the module's docstring)."""

    def __init__(
        self,
        binding: Mapping[str, Any],
        *,
        wire: WireFormat = WireFormat.LENGTH_PREFIXED,
        limits: Limits | None = None,
        ignore_duplicates: bool = False,
        logger: TraceLogger | None = None,
        binding_sha256: str | None = None,
    ) -> None:
        """``binding_sha256``: ``digest(binding)`` when the caller has it already (the
        SHA-256 of the canonical JSON it sent, ``shared.digest.canonical_digest``)."""
        self.binding = binding
        #: What the reply must be (``shared.kinds``): from the binding, which names it.
        self.kind = kind_of(binding)
        self.binding_sha256 = binding_sha256 or digest(binding)
        self.wire = wire
        self.limits = limits or Limits()
        self._log: TraceLogger = logger or NULL_LOGGER
        #: The per-chunk and per-frame debug records are built only when they are written.
        self._debug = self._log.is_enabled_for(DEBUG)
        self._codec = codec_for(wire)
        #: A chat reply's frames include the five chat frames (lp's fields 7-11).
        chat = self._chat = self.kind is ReplyKind.CHAT
        self._decoder = self._codec.decoder(self.limits.max_frame_bytes)
        self.verdict = Verdict(self._log)
        self.checks = FrameChecks(
            self.binding_sha256, self.limits, ignore_duplicates=ignore_duplicates
        )
        self.content = Content()
        #: A chat reply's turn as applied (``shared.chat_turn``); None for another kind.
        self.turn: ChatTurn | None = ChatTurn(self.limits.max_tool_calls) if chat else None
        #: The call a tool call reason refused (a chat reply's validation).
        self._call: dict[str, Any] | None = None
        # Looked up once, used per frame.
        self._admit = self.checks.admit
        self._max_content_chars = self.limits.max_content_chars
        #: Set by the first of end_of_stream / transport_error / abort: no input after it.
        self._input_ended = False
        self._bytes = 0
        self._fragments = 0
        self._reconnects = 0
        self._discarded = 0
        self._terminal: FrameKind | None = None
        self._terminal_reason: str | None = None
        self._accepted: dict[str, Any] | None = None
        self._citations: list[dict[str, Any]] = []
        self._events = EventLog()
        self.transport: dict[str, Any] | None = None

    # --- state ------------------------------------------------------------------

    @property
    def state(self) -> ConsumerState:
        return self.verdict.state

    @property
    def finished(self) -> bool:
        """True once the machine has reached a final state."""
        return self.verdict.finished

    @property
    def ignore_duplicates(self) -> bool:
        return self.checks.ignore_duplicates

    @property
    def provisional_content(self) -> str:
        return self.content.text

    def _transition(
        self, event: Input, reason: str | None = None, detail: str | None = None
    ) -> None:
        self.verdict.fire(event, sequence=self.checks.frames, reason=reason, detail=detail)

    def _fail(self, reason: Reason, detail: str = "") -> ProtocolFailure:
        """Record the first failure, move to INVALID, and return the exception to raise."""
        self.verdict.fire(
            In.PROTOCOL_FAILURE,
            sequence=self.checks.frames,
            reason=reason.value,
            why=scrubbed_detail(detail) if detail else None,
        )
        return ProtocolFailure(reason, detail)

    # --- input --------------------------------------------------------------------

    def receive_data(self, data: object) -> None:
        """Take one transport chunk. Raises ``ProtocolFailure`` on the first bad byte or frame.

        ``data`` is typed ``object``, not ``bytes``: compiled by mypyc, a ``bytes`` parameter
        would refuse anything else with a TypeError at the call, before the core's own check
        (``transport_requires_bytes``)."""
        if self._input_ended:
            raise ProtocolFailure(Reason.CONSUMER_ALREADY_FINISHED)
        if self.verdict.finished:  # before the input ended, only a failure is final
            raise ProtocolFailure(Reason(self.verdict.reason or ""))
        if not isinstance(data, bytes):
            raise self._fail(Reason.TRANSPORT_REQUIRES_BYTES, type(data).__name__)
        self._bytes += len(data)
        self._fragments += 1
        if self._debug:
            self._log.debug("chunk_received", size=len(data), bytes_received=self._bytes)
        if self._bytes > self.limits.max_stream_bytes:
            raise self._fail(Reason.STREAM_BYTE_LIMIT, f"{self._bytes} bytes")
        decoder, apply = self._decoder, self._apply
        try:
            decoder.receive_data(data)
            while (payload := decoder.next_event()) is not NEED_DATA:
                apply(payload)
        except ProtocolFailure as failure:
            if self.verdict.finished:  # already recorded
                raise
            raise self._fail(failure.reason, failure.detail) from failure

    def _apply(self, payload: bytes) -> None:
        """One frame, in the lab's order of checks. A content delta, nearly every frame, is
        applied here (its checks, the content, its event) without a further call but the
        parse and the frame checks."""
        if self._terminal is not None:
            raise ProtocolFailure(Reason.FRAME_AFTER_TERMINAL)
        codec = self._codec
        frame = codec.parse_chat_frame(payload) if self._chat else codec.parse_frame(payload)
        if not self._admit(frame, payload):
            self._dropped(frame)
            return
        sequence = frame.sequence
        assert isinstance(sequence, int)  # admitted: the next sequence number
        if self._debug:
            self._log.debug("frame_applied", sequence=sequence, kind=frame.kind.value)
        if frame.kind is not _CONTENT_DELTA:
            if frame.kind in TERMINAL_KINDS:
                self._apply_terminal(frame, sequence)
            else:
                self._apply_part(frame, sequence)
            return
        # A chat reply: after its finish no delta (frame_after_finish), before the text.
        turn = self.turn
        if turn is not None:
            turn.check_open()
        text = frame.text
        if not isinstance(text, str) or not text:
            raise ProtocolFailure(Reason.INVALID_CONTENT_DELTA, "empty or not text")
        try:
            encoded = text.encode("utf-8")
        except UnicodeError as error:
            raise ProtocolFailure(Reason.INVALID_CONTENT_DELTA, "not UTF-8") from error
        content = self.content
        content.append(text, encoded)
        characters = content.characters
        counted = characters if turn is None else characters + turn.add_text(text)
        if counted > self._max_content_chars:
            raise ProtocolFailure(Reason.CONTENT_LIMIT, f"{counted} characters")
        self._events.content(sequence, characters)

    def _apply_part(self, frame: Frame, sequence: int) -> None:
        """A chat frame: ``part_outside_chat`` in a reply of another kind; else the turn's
        checks (docs/protocol.md#chat-rules), then the content limit over the text and
        every other part's code points."""
        turn = self.turn
        if turn is None:
            raise ProtocolFailure(Reason.PART_OUTSIDE_CHAT, frame.kind.value)
        text_chars = self.content.characters
        turn.apply(frame.kind.value, frame.part, text_chars)
        counted = text_chars + turn.characters
        if counted > self._max_content_chars:
            raise ProtocolFailure(Reason.CONTENT_LIMIT, f"{counted} characters")
        self._events.append(PartReceived(sequence, frame.kind.value))

    def _dropped(self, frame: Frame) -> None:
        """Under the duplicate policy, an exact replay of an applied frame."""
        assert isinstance(frame.sequence, int)  # a duplicate has a valid sequence
        self._events.append(DuplicateDropped(frame.sequence))
        self._log.info("duplicate_dropped", sequence=frame.sequence)

    def _apply_terminal(self, frame: Frame, sequence: int) -> None:
        if frame.kind is not FrameKind.DONE:
            check_terminal_reason(frame.reason, self.limits)
        elif self.wire.integrity is Integrity.SHA256:
            # Required, not merely checked when present: a codec that lost the claim
            # must not turn the wire into one without integrity.
            claimed = frame.done_digest
            if claimed is None:
                missing = "done without its content digest"
                raise ProtocolFailure(Reason.INVALID_FRAME_SCHEMA, missing)
            applied = self.content if self.turn is None else self.turn
            if not applied.matches(claimed):
                raise ProtocolFailure(
                    Reason.CONTENT_DIGEST_MISMATCH,
                    f"done claims {claimed.content_frames} frames, {applied.frames} applied",
                )
        self._terminal = frame.kind
        self._terminal_reason = frame.reason if isinstance(frame.reason, str) else None
        self._events.append(TerminalReceived(frame.kind.value, sequence))
        self._transition(In.TERMINAL_FRAME)

    def resume(self, attempt: int = 0) -> int:
        """The transport broke and input will resume at a frame boundary, on a new
        connection: drop the bytes of the frame begun on the broken one (counted in
        ``discarded_bytes``) and return the last sequence applied, from which the producer
        resumes. The sequence check goes on unchanged: the next frame must be the next
        number. Only before the input ended, and while no verdict is in. The state does not
        change (streaming, or terminal_received when the break came after the terminal):
        the resume is logged as ``transport_resumed``, and the connections as the reader's
        own machines."""
        if self._input_ended or self.verdict.finished:
            raise ProtocolFailure(Reason.CONSUMER_ALREADY_FINISHED, "resume after the end")
        discarded = self._decoder.pending
        self._discarded += discarded
        self._reconnects += 1
        self._decoder = self._codec.decoder(self.limits.max_frame_bytes)
        self._log.info(
            "transport_resumed",
            state=self.state.value,
            sequence=self.checks.frames,
            attempt=attempt,
            discarded_bytes=discarded,
        )
        return self.checks.frames

    # --- how the input ended --------------------------------------------------------

    def _begin_finish(self) -> bool:
        """Mark the input as ended; False when the verdict is already in (INVALID)."""
        if self._input_ended:
            raise ProtocolFailure(Reason.CONSUMER_ALREADY_FINISHED)
        self._input_ended = True
        return not self.verdict.finished

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
            self._transition(In.END_WITHOUT_TERMINAL, Reason.MISSING_TERMINAL.value)
        elif self._terminal is not FrameKind.DONE:
            self._end_after_stop(self._terminal)
        else:
            self._transition(In.END_AFTER_DONE)
            self._validate()
        return self.result()

    def _end_after_stop(self, kind: FrameKind) -> None:
        """After a cancel or error terminal: its reason when that is a registered code,
        else the code that says it was not one, with the terminal's text as the detail."""
        text = self._terminal_reason or ""  # checked: non-empty text within the limit
        code = registered(text)
        if code is not None:
            self._transition(_END_AFTER[kind], code.value)
        else:
            self._transition(_END_AFTER[kind], _UNREGISTERED[kind].value, scrubbed_detail(text))

    def _validate(self) -> None:
        if self.turn is not None:
            self._validate_turn(self.turn)
            return
        if self.kind is ReplyKind.TEXT:
            # Each delta was checked as it came (non-empty, no lone surrogate): the text,
            # the empty text included, is the reply.
            text = self.content.text
            self._accepted = {"text": text}
            self._events.append(TextValidated(len(text)))
            self._transition(In.REPLY_ACCEPTED)
            return
        try:
            accepted, citations = validate_reply(self.content.text, self.binding)
        except ProtocolFailure as failure:
            self._transition(In.REPLY_REJECTED, failure.reason.value)
            return
        self._accepted, self._citations = accepted, citations
        self._events.append(AnswerValidated(accepted, citations))
        self._transition(In.REPLY_ACCEPTED)

    def _validate_turn(self, turn: ChatTurn) -> None:
        """A chat reply (docs/protocol.md#chat-reply): its finish, then each call."""
        document = turn.document(self.content.text)
        try:
            accepted = validate_turn(document, self.binding)
        except ProtocolFailure as failure:
            if isinstance(failure, CallRefused):
                self._call = failure.call
            self._transition(In.REPLY_REJECTED, failure.reason.value)
            return
        self._accepted = accepted
        finish_reason = turn.finish_reason or ""  # validated: the finish came
        self._events.append(TurnValidated(self.content.characters, len(turn.calls), finish_reason))
        self._transition(In.REPLY_ACCEPTED)

    def transport_error(
        self,
        detail: Mapping[str, Any] | None = None,
        reason: Reason = Reason.TRANSPORT_IO_ERROR,
    ) -> StreamResult:
        """The transport broke (``reason`` says how when more is known than "it broke").
        ``detail`` (e.g. the gRPC status) is kept in the result."""
        if not self._begin_finish():
            return self.result()
        self.transport = dict(detail) if detail else None
        self._events.append(TransportFailed(reason.value))
        self._transition(In.TRANSPORT_ERROR, reason.value)
        return self.result()

    def abort(self, reason: Reason) -> StreamResult:
        """We stopped reading (deadline, idle timeout, user cancel): incomplete, content kept."""
        if not self._begin_finish():
            return self.result()
        self._events.append(ConsumerAborted(reason.value))
        self._transition(In.LOCAL_ABORT, reason.value)
        return self.result()

    # --- the verdict ------------------------------------------------------------------

    @property
    def stats(self) -> Stats:
        return Stats(
            self._bytes, self._fragments, self.checks.frames, self._reconnects, self._discarded
        )

    def result(self) -> StreamResult:
        return StreamResult(
            status=self.verdict.status,
            reason=self.verdict.reason,
            accepted_answer=self._accepted,
            citations=tuple(self._citations),
            provisional_content=self.content.text,
            local_terminal=self._terminal.value if self._terminal else None,
            stats=self.stats,
            events=self._events.events(),
            case_id=self.binding.get("case_id"),
            request_sha256=self.binding.get("request_sha256"),
            binding_sha256=self.binding_sha256,
            wire_format=self.wire.value,
            integrity=self.wire.integrity.value,
            detail=self.verdict.detail,
            transport=self.transport,
            kind=None if self.kind is ReplyKind.GROUNDED else self.kind.value,
            first_output=None if self.kind is ReplyKind.GROUNDED else self._first_output(),
            turn=self.turn.document(self.content.text) if self.turn is not None else None,
            call=self._call,
            notes=notes(self.turn.usage) if self.turn is not None else None,
        )

    def _first_output(self) -> bool:
        """Whether any content frame was applied: a delta, or a chat reply's any part."""
        return (self.turn.frames if self.turn is not None else self.content.frames) > 0
