"""The result document: one frozen value, one JSON form.

Every consumer command prints exactly one ``StreamResult``. Its keys are the
lab's, in the lab's order (``status`` to ``events``), then ours. Some of ours
are present only where they mean something, and are left out (not ``null``)
elsewhere, exactly as before the result was typed:

* ``integrity`` - when the consumer core judged a stream (a refusal checked nothing);
* ``detail`` - free text behind the reason, where there is some: why a request was not
  streamed (a refusal), or the text of a cancel or error terminal whose reason is not a
  registered code (``unregistered_cancel_terminal`` / ``unregistered_error_terminal``).
  Always scrubbed and bounded (``shared.errors.scrubbed_detail``: control characters
  escaped, at most 256 characters, cut with ``…``);
* ``transport`` - when the call failed or a refusal came from the producer;
* ``stream_id`` and ``flow`` - when the result came over gRPC;
* ``kind`` and ``first_output`` - a reply of a kind other than grounded, judged by a core;
* ``turn`` and ``notes`` - a chat reply judged by a core; ``call`` - the call a tool call
  reason refused.

``reason`` is a registered code (``shared.reason_registry.REASONS``) or, for ``complete``, null.
``tests/unit/test_result.py`` pins the exact JSON text of each path.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from replywire.shared.errors import ReplywireError, scrubbed_detail
from replywire.shared.status import Status

#: The result document's keys: the lab's, then ours.
LAB_RESULT_KEYS: Final = (
    "status",
    "reason",
    "accepted_answer",
    "citations",
    "provisional_content",
    "local_terminal",
    "stats",
    "events",
)

#: The lab's keys of ``stats``; ours (``reconnects``, ``discarded_bytes``) follow them.
LAB_STATS_KEYS: Final = ("bytes_received", "transport_fragments", "application_frames")


def lab_view(document: Mapping[str, Any]) -> dict[str, Any]:
    """A result document's lab keys only (and the lab's keys of its stats): what compares
    with the lab's published documents."""
    view = {key: document[key] for key in LAB_RESULT_KEYS}
    view["stats"] = {key: document["stats"][key] for key in LAB_STATS_KEYS}
    return view


# --- events, in the order they happened ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContentReceived:
    """A content delta was applied (``provisional_content``: partial until validated)."""

    KIND: ClassVar[str] = "provisional_content"
    sequence: int
    characters_received: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.KIND,
            "sequence": self.sequence,
            "characters_received": self.characters_received,
        }


# The slots' own setters: a frozen dataclass's __init__ goes through object.__setattr__ per
# field, which costs more than the rest of recording a content delta (one per frame).
_NEW: Final = object.__new__
_SET_SEQUENCE: Final = ContentReceived.__dict__["sequence"].__set__
_SET_CHARACTERS: Final = ContentReceived.__dict__["characters_received"].__set__


def content_received(sequence: int, characters_received: int) -> ContentReceived:
    """``ContentReceived(sequence, characters_received)`` for the core's per-frame path."""
    event: ContentReceived = _NEW(ContentReceived)
    _SET_SEQUENCE(event, sequence)
    _SET_CHARACTERS(event, characters_received)
    return event


@dataclass(frozen=True, slots=True)
class TerminalReceived:
    """The stream's terminal frame (``done``, ``cancel`` or ``error``) was applied."""

    KIND: ClassVar[str] = "local_terminal"
    status: str
    sequence: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, "status": self.status, "sequence": self.sequence}


@dataclass(frozen=True, slots=True)
class AnswerValidated:
    """The assembled reply passed validation against the bound context."""

    KIND: ClassVar[str] = "validated_answer"
    answer: Mapping[str, Any]
    citations: Sequence[Mapping[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.KIND,
            "status": self.answer["status"],
            "source_ids": self.answer["source_ids"],
            "answer": self.answer,
            "citations": self.citations,
        }


@dataclass(frozen=True, slots=True)
class TextValidated:
    """A text reply was accepted: ``characters`` is its length in code points."""

    KIND: ClassVar[str] = "validated_text"
    characters: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, "characters": self.characters}


@dataclass(frozen=True, slots=True)
class PartReceived:
    """A chat frame was applied (``part`` its kind: ``tool_call``, ``thought``, ``signature``,
    ``usage``, ``finish``); a chat reply's text has its ``provisional_content`` events."""

    KIND: ClassVar[str] = "part_received"
    sequence: int
    part: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, "sequence": self.sequence, "part": self.part}


@dataclass(frozen=True, slots=True)
class TurnValidated:
    """A chat reply was accepted: its text's length in code points, its calls' count and
    its finish reason."""

    KIND: ClassVar[str] = "validated_turn"
    characters: int
    tool_calls: int
    finish_reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.KIND,
            "characters": self.characters,
            "tool_calls": self.tool_calls,
            "finish_reason": self.finish_reason,
        }


@dataclass(frozen=True, slots=True)
class DuplicateDropped:
    """Under the duplicate policy, an exact replay of an applied frame was dropped."""

    KIND: ClassVar[str] = "duplicate_dropped"
    sequence: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, "sequence": self.sequence}


@dataclass(frozen=True, slots=True)
class TransportFailed:
    """The transport broke."""

    KIND: ClassVar[str] = "transport_error"
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class ConsumerAborted:
    """We stopped reading (deadline, idle timeout, user cancel)."""

    KIND: ClassVar[str] = "consumer_abort"
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, "reason": self.reason}


Event = (
    ContentReceived
    | TerminalReceived
    | AnswerValidated
    | TextValidated
    | PartReceived
    | TurnValidated
    | DuplicateDropped
    | TransportFailed
    | ConsumerAborted
)


# --- the document ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stats:
    """What arrived, as the lab counts it (its three keys first), then how often the
    transport was resumed and the bytes of unfinished frames dropped at each resume."""

    bytes_received: int = 0
    transport_fragments: int = 0
    application_frames: int = 0
    reconnects: int = 0
    discarded_bytes: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "bytes_received": self.bytes_received,
            "transport_fragments": self.transport_fragments,
            "application_frames": self.application_frames,
            "reconnects": self.reconnects,
            "discarded_bytes": self.discarded_bytes,
        }


@dataclass(frozen=True, slots=True)
class Flow:
    """How a gRPC stream was read: the queue, the window and the pauses."""

    mode: str
    queue_size: int
    window_bytes: int
    reads_paused: int
    paused_ms: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "queue_size": self.queue_size,
            "window_bytes": self.window_bytes,
            "reads_paused": self.reads_paused,
            "paused_ms": self.paused_ms,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamResult:
    # The lab's keys, in the lab's order.
    status: Status
    reason: str | None
    accepted_answer: Mapping[str, Any] | None = None
    citations: Sequence[Mapping[str, Any]] = ()
    provisional_content: str = ""
    local_terminal: str | None = None
    stats: Stats = Stats()
    events: tuple[Event, ...] = ()
    # Ours.
    case_id: str | None
    request_sha256: str | None = None
    binding_sha256: str | None = None
    wire_format: str
    #: Whether done's content digest was required and checked (none: ndjson-lab).
    integrity: str | None = None
    detail: str | None = None
    transport: Mapping[str, Any] | None = None
    stream_id: str | None = None
    flow: Flow | None = None
    #: A reply of a kind other than grounded: the kind, and whether any content came.
    kind: str | None = None
    first_output: bool | None = None
    #: A chat reply judged by a core: the turn as assembled (raw arguments), whatever the
    #: status; the call a tool call reason names; the notes on the turn (``[]`` for none).
    turn: Mapping[str, Any] | None = None
    call: Mapping[str, Any] | None = None
    notes: Sequence[str] | None = None

    def __post_init__(self) -> None:
        # Whoever made it, the detail is fit to show (idempotent: scrubbed text stays).
        if self.detail is not None:
            object.__setattr__(self, "detail", scrubbed_detail(self.detail))

    @classmethod
    def refused(
        cls, error: ReplywireError, *, case_id: str | None, wire_format: str
    ) -> StreamResult:
        """A request that was never streamed."""
        return cls(
            status=Status.REFUSED,
            reason=error.code,
            case_id=case_id,
            wire_format=wire_format,
            detail=error.detail,
        )

    @property
    def accepted(self) -> bool:
        return self.accepted_answer is not None

    def with_stream(self, stream_id: str, flow: Flow) -> StreamResult:
        """This result as it came over one gRPC stream (``replace()``, by the slots: once
        per stream, where ``replace`` re-checks every field)."""
        result: StreamResult = _NEW(StreamResult)
        for get, set_ in _RESULT_SLOTS:
            set_(result, get(self))
        _SET_STREAM_ID(result, stream_id)
        _SET_FLOW(result, flow)
        return result

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "status": self.status.value,
            "reason": self.reason,
            "accepted_answer": self.accepted_answer,
            "citations": list(self.citations),
            "provisional_content": self.provisional_content,
            "local_terminal": self.local_terminal,
            "stats": self.stats.to_dict(),
            "events": [event.to_dict() for event in self.events],
            "case_id": self.case_id,
            "request_sha256": self.request_sha256,
            "binding_sha256": self.binding_sha256,
            "wire_format": self.wire_format,
        }
        optional: dict[str, Any] = {
            "integrity": self.integrity,
            "detail": self.detail,
            "transport": self.transport,
            "stream_id": self.stream_id,
            "flow": self.flow.to_dict() if self.flow is not None else None,
            "kind": self.kind,
            "first_output": self.first_output,
            "turn": self.turn,
            "call": self.call,
            "notes": list(self.notes) if self.notes is not None else None,
        }
        document.update((key, value) for key, value in optional.items() if value is not None)
        return document

    def to_json(self) -> str:
        """The document as every consumer command prints it."""
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"


_RESULT_SLOTS: Final = tuple(
    (StreamResult.__dict__[name].__get__, StreamResult.__dict__[name].__set__)
    for name in StreamResult.__slots__
)
_SET_STREAM_ID: Final = StreamResult.__dict__["stream_id"].__set__
_SET_FLOW: Final = StreamResult.__dict__["flow"].__set__
