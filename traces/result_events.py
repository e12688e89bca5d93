"""The result document's events on the timeline, each at the time of the record that made it.

The result document's ``events`` carry no times (they are the lab's keys, equal
to its published documents); their records do: ``provisional_content`` is a
``frame_applied``, ``local_terminal`` the terminal, ``validated_answer`` the
core's ``validating -> complete``, ``transport_error`` and ``consumer_abort``
the core's final state with its reason. A content frame the core applied and then
refused made no event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from shared.consumer_core import Input
from shared.reasons import Reason
from shared.result import (
    AnswerValidated,
    ConsumerAborted,
    ContentReceived,
    DuplicateDropped,
    TerminalReceived,
    TransportFailed,
)
from shared.terminal_text import shown_line
from traces.table import MAX_LINE_CHARS
from traces.timeline import CONSUMER, Entry, MarkKind, Timeline

#: The core's inputs that make a result event, and the event's kind.
RESULT_EVENT_OF_INPUT: Final[dict[str, str]] = {
    Input.REPLY_ACCEPTED: AnswerValidated.KIND,
    Input.TRANSPORT_ERROR: TransportFailed.KIND,
    Input.LOCAL_ABORT: ConsumerAborted.KIND,
}
#: A content frame applied and then refused by these checks made no result event.
CONTENT_REFUSALS: Final[frozenset[str]] = frozenset(
    {Reason.INVALID_CONTENT_DELTA, Reason.CONTENT_LIMIT}
)


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


def _result_event(entry: Entry, refused: set[Any]) -> ResultEvent | None:
    sequence = entry.fields.get("sequence")
    if entry.kind is MarkKind.APPLIED and entry.fields.get("kind") == "content_delta":
        if sequence in refused:
            return None
        return ResultEvent(ContentReceived.KIND, entry.at_ms, f"#{sequence}")
    if entry.kind is MarkKind.TERMINAL:
        return ResultEvent(TerminalReceived.KIND, entry.at_ms, entry.label)
    if entry.side == CONSUMER and entry.event == "duplicate_dropped":
        return ResultEvent(DuplicateDropped.KIND, entry.at_ms, f"#{sequence}")
    kind = RESULT_EVENT_OF_INPUT.get(str(entry.fields.get("input")))
    if entry.component == "core" and kind is not None:
        return ResultEvent(kind, entry.at_ms, str(entry.fields.get("reason") or ""))
    return None


def result_events(timeline: Timeline) -> list[ResultEvent]:
    """The result document's events, each at its trace record's offset, in its order.
    ``provisional_content`` needs the debug records (``frame_applied``)."""
    refused = _refused_content(timeline)
    found = (_result_event(entry, refused) for entry in timeline.entries)
    return [event for event in found if event is not None]


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
        else:
            parts.append(
                f"{first.kind} ×{len(run)} {first.detail}..{last.detail} "
                f"+{first.at_ms:.3f}..+{last.at_ms:.3f}"
            )
    line = "result events (ms, from their trace records): " + "; ".join(parts)
    return shown_line(line, MAX_LINE_CHARS) + "\n"
