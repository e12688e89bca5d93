"""The result document's events on the timeline, each at the time of the record that made it.

The result document's ``events`` carry no times (they are the lab's keys, equal
to its published documents); their records do: ``provisional_content`` is a
``frame_applied`` of a ``content_delta``, ``part_received`` a ``frame_applied`` of a chat
frame (``tool_call``, ``thought``, ``signature``, ``usage``, ``finish``: its sequence and
part), ``local_terminal`` the terminal, the validation event the core's ``validating ->
complete`` (``validated_answer``, ``validated_text`` or ``validated_turn``, by the reply's
kind that ``stream_finished`` names), ``transport_error`` and ``consumer_abort`` the
core's final state with its reason. A content frame the core applied and then refused
made no event. Every event docs/protocol.md's §14 lists has its record here
(``RESULT_EVENT_KINDS``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from replywire.shared.consumer_core import Input
from replywire.shared.frames import CHAT_KINDS
from replywire.shared.reasons import Reason
from replywire.shared.result import (
    AnswerValidated,
    ConsumerAborted,
    ContentReceived,
    DuplicateDropped,
    PartReceived,
    TerminalReceived,
    TextValidated,
    TransportFailed,
    TurnValidated,
)
from replywire.shared.terminal_text import shown_line
from replywire.traces.table import MAX_LINE_CHARS
from replywire.traces.timeline import CONSUMER, Entry, MarkKind, Timeline

#: The core's inputs that make a result event, and the event's kind.
RESULT_EVENT_OF_INPUT: Final[dict[str, str]] = {
    Input.REPLY_ACCEPTED: AnswerValidated.KIND,
    Input.TRANSPORT_ERROR: TransportFailed.KIND,
    Input.LOCAL_ABORT: ConsumerAborted.KIND,
}
#: An accepted reply's event by its kind (``stream_finished``'s ``kind``; none: grounded).
VALIDATED_OF_KIND: Final[dict[str | None, str]] = {
    None: AnswerValidated.KIND,
    "grounded": AnswerValidated.KIND,
    "text": TextValidated.KIND,
    "chat": TurnValidated.KIND,
}
#: Every kind of event the result document can hold: each is drawn from its record.
RESULT_EVENT_KINDS: Final = frozenset(
    {
        ContentReceived.KIND, PartReceived.KIND, TerminalReceived.KIND, AnswerValidated.KIND,
        TextValidated.KIND, TurnValidated.KIND, DuplicateDropped.KIND, TransportFailed.KIND,
        ConsumerAborted.KIND,
    }
)  # fmt: skip
#: The chat frames' kinds as ``frame_applied`` names them.
PART_KINDS: Final = frozenset(kind.value for kind in CHAT_KINDS)
#: A content frame applied and then refused by these checks made no result event: a delta's
#: own checks, the content limit, and every chat rule a chat frame is judged by once applied
#: (docs/protocol.md#chat-rules).
CONTENT_REFUSALS: Final[frozenset[str]] = frozenset(
    {
        Reason.INVALID_CONTENT_DELTA, Reason.CONTENT_LIMIT, Reason.PART_OUTSIDE_CHAT,
        Reason.FRAME_AFTER_FINISH, Reason.INVALID_TOOL_CALL, Reason.TOOL_CALL_LIMIT,
        Reason.INVALID_THOUGHT, Reason.INVALID_SIGNATURE, Reason.INVALID_USAGE,
        Reason.INVALID_FINISH,
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ResultEvent:
    """One event of the result document's ``events``, with the time of its trace record."""

    kind: str
    at_ms: float
    detail: str


def _refused_content(timeline: Timeline) -> set[Any]:
    return {
        e.fields.get("sequence")
        for e in timeline.entries
        if e.component == "core"
        and e.fields.get("input") == Input.PROTOCOL_FAILURE
        and e.fields.get("reason") in CONTENT_REFUSALS
    }


def _result_event(entry: Entry, refused: set[Any], validated: str) -> ResultEvent | None:
    sequence = entry.fields.get("sequence")
    if entry.kind is MarkKind.APPLIED:
        frame = entry.fields.get("kind")
        if sequence in refused or (frame != "content_delta" and frame not in PART_KINDS):
            return None
        if frame == "content_delta":
            return ResultEvent(ContentReceived.KIND, entry.at_ms, f"#{sequence}")
        return ResultEvent(PartReceived.KIND, entry.at_ms, f"#{sequence} {frame}")
    if entry.kind is MarkKind.TERMINAL:
        return ResultEvent(TerminalReceived.KIND, entry.at_ms, entry.label)
    if entry.side == CONSUMER and entry.event == "duplicate_dropped":
        return ResultEvent(DuplicateDropped.KIND, entry.at_ms, f"#{sequence}")
    the_input = str(entry.fields.get("input"))
    kind = RESULT_EVENT_OF_INPUT.get(the_input)
    if entry.component == "core" and kind is not None:
        if the_input == Input.REPLY_ACCEPTED:
            return ResultEvent(validated, entry.at_ms, "")
        return ResultEvent(kind, entry.at_ms, str(entry.fields.get("reason") or ""))
    return None


def result_events(timeline: Timeline) -> list[ResultEvent]:
    """The result document's events, each at its trace record's offset, in its order.
    ``provisional_content`` and ``part_received`` need the debug records
    (``frame_applied``)."""
    refused = _refused_content(timeline)
    kind = timeline.verdict.kind if timeline.verdict is not None else None
    validated = VALIDATED_OF_KIND.get(kind, AnswerValidated.KIND)
    found = (_result_event(entry, refused, validated) for entry in timeline.entries)
    return [event for event in found if event is not None]


def _counted_parts(run: Sequence[ResultEvent]) -> str:
    """A run's parts, each counted, in the order each first came."""
    counts: dict[str, int] = {}
    for event in run:
        part = event.detail.partition(" ")[2]
        counts[part] = counts.get(part, 0) + 1
    return ", ".join(part if n == 1 else f"{part} ×{n}" for part, n in counts.items())


def render_result_events(events: Sequence[ResultEvent]) -> str:
    """One line: the result events, runs of one kind summed (shown: their details come
    from the traces)."""
    parts: list[str] = []
    runs: list[list[ResultEvent]] = []
    for event in events:
        if runs and runs[-1][0].kind == event.kind:
            runs[-1].append(event)
        else:
            runs.append([event])
    for run in runs:
        first, last = run[0], run[-1]
        if len(run) == 1:
            detail = f" {first.detail}" if first.detail else ""
            parts.append(f"{first.kind}{detail} +{first.at_ms:.3f}")
        elif first.kind == PartReceived.KIND:  # the parts of the run, each kind counted
            sequences = f"{first.detail.split(' ')[0]}..{last.detail.split(' ')[0]}"
            parts.append(
                f"{first.kind} ×{len(run)} {sequences} ({_counted_parts(run)}) "
                f"+{first.at_ms:.3f}..+{last.at_ms:.3f}"
            )
        else:
            parts.append(
                f"{first.kind} ×{len(run)} {first.detail}..{last.detail} "
                f"+{first.at_ms:.3f}..+{last.at_ms:.3f}"
            )
    line = "result events (ms, from their trace records): " + "; ".join(parts)
    return shown_line(line, MAX_LINE_CHARS) + "\n"
