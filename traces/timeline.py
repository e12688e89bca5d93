"""One stream's two traces as one timeline: the model and its terminal table.

Theory of operation
-------------------
Both processes write one JSON record per event, each with ``timestamp`` (ISO
8601, UTC), ``side`` and ``stream_id`` (``runtime/logs.py``). Given the records
of both sides, :func:`build_timeline` keeps one stream's, orders them by time
(ties keep their input order) and turns each into an :class:`Entry`: its offset
from the stream's first record, the side (and the consumer's component: ``core``
or ``reader``), the event, the state change ``from -> to``, what kind of mark it
is on its lane (:class:`MarkKind`) and the fields worth showing. Spans are read
from pairs of entries: the consumer's reads paused (the reader machine's
``streaming -> paused`` until ``paused -> streaming``), the producer's stall
fault, and each producer delivery (a machine of its own per ``Open``: from its
first state to its last). The verdict is the consumer's ``stream_finished``.

Which record is which mark:

* producer: ``chunk_sent`` (debug) is a chunk **sent**; a ``verified`` state
  carrying a ``fault`` and the ``stalled`` state are **faults**; ``attach`` is a
  **resume** (with the delivery's ``attempt``); a delivery's last state is its **end**;
* consumer: ``chunk_received`` (debug) is a chunk **received** (taken from the
  bounded queue by the core), ``frame_applied`` (debug) a frame **applied**;
  the reader's ``paused`` state opens a **pause** span; ``stream_resuming`` is a
  **resume** (attempt, ``resume_after``); the core's ``terminal_frame`` is the
  **terminal**; ``stream_finished`` is the **verdict**.

Per-chunk records are ``debug``: at ``info`` the timeline has every state
change, pause, fault, resume, terminal and verdict, and no chunk marks.

The result document's ``events`` carry no times (they are the lab's keys, equal
to its published documents); their records do: ``provisional_content`` is a
``frame_applied``, ``local_terminal`` the terminal, ``validated_answer`` the
core's ``validating -> complete``, ``transport_error`` and ``consumer_abort``
the core's final state with its reason.

The clocks are the two processes' own: on one machine they agree; across
machines the offset between them shifts one lane against the other.

Pure: no files, no clock (timestamps are parsed here, by hand, to integer
microseconds). ``traces/timeline_svg.py`` draws the picture; ``traces/commands.py``
reads the files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from consumer.reader_states import ReaderState
from producer.states import StreamInput, StreamState
from shared.consumer_core import Input
from shared.errors import Reason
from shared.result import (
    AnswerValidated,
    ConsumerAborted,
    ContentReceived,
    DuplicateDropped,
    TerminalReceived,
    TransportFailed,
)
from shared.terminal_text import shown_line

PRODUCER: Final = "producer"
CONSUMER: Final = "consumer"
SIDES: Final = (PRODUCER, CONSUMER)

#: The core's inputs after a terminal that name its kind (when frame_applied is not traced).
TERMINAL_KIND_OF_INPUT: Final[dict[str, str]] = {
    Input.END_AFTER_DONE: "done",
    Input.END_AFTER_CANCEL: "cancel",
    Input.END_AFTER_ERROR: "error",
}

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

#: Keys every record has or that the table shows in other columns.
CONTEXT_KEYS: Final = frozenset(
    {
        "timestamp", "side", "event", "stream_id", "level", "case_id", "peer", "caller",
        "from_state", "to_state", "component",
    }
)  # fmt: skip
#: Longest value shown in a table cell.
MAX_VALUE_CHARS: Final = 48
#: Longest cell of the table's middle columns (side, event, state change), once shown.
MAX_CELL_CHARS: Final = 64
#: Longest line of the terminal output before it is fitted to a terminal's width.
MAX_LINE_CHARS: Final = 4000


class MarkKind(StrEnum):
    SENT = "sent"
    RECEIVED = "received"
    APPLIED = "applied"
    PAUSED = "paused"
    RESUMED = "resumed"
    FAULT = "fault"
    RESUME = "resume"
    TERMINAL = "terminal"
    END = "end"
    VERDICT = "verdict"
    STATE = "state"
    NOTE = "note"


class SpanKind(StrEnum):
    PAUSED = "paused"
    STALLED = "stalled"
    DELIVERY = "delivery"


#: Marks one per chunk, frame or pause: the table sums runs of them into one row.
BULK_KINDS: Final = frozenset(
    {MarkKind.SENT, MarkKind.RECEIVED, MarkKind.APPLIED, MarkKind.PAUSED, MarkKind.RESUMED}
)
#: Records that repeat another record of the same chunk or pause: bulk notes.
BULK_NOTES: Final = frozenset({"chunk_applied", "reads_paused", "reads_resumed"})


# --- time -------------------------------------------------------------------------------

_TIMESTAMP: Final = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:?\d\d)?$"
)


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def microseconds(timestamp: object) -> int | None:
    """An ISO 8601 timestamp as integer microseconds since the epoch (None: not one)."""
    if not isinstance(timestamp, str):
        return None
    match = _TIMESTAMP.match(timestamp)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    fraction, zone = match.group(7) or "", match.group(8) or "Z"
    micros = int((fraction + "000000")[:6])
    offset = 0
    if zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        offset = sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    seconds = _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second
    return (seconds - offset) * 1_000_000 + micros


# --- the model --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """One trace record on the timeline."""

    at_ms: float
    side: str
    component: str
    event: str
    change: str
    kind: MarkKind
    label: str
    fields: Mapping[str, Any] = field(default_factory=dict)

    @property
    def bulk(self) -> bool:
        return self.kind in BULK_KINDS or (self.kind is MarkKind.NOTE and self.event in BULK_NOTES)

    @property
    def where(self) -> str:
        return f"{self.side}/{self.component}" if self.component else self.side


@dataclass(frozen=True, slots=True)
class Span:
    """Something that lasted: a pause of the consumer's reads, a stall, a delivery."""

    side: str
    kind: SpanKind
    start_ms: float
    #: None: still open at the stream's last record.
    end_ms: float | None
    label: str


@dataclass(frozen=True, slots=True)
class Verdict:
    at_ms: float
    status: str
    reason: str | None
    stats: Mapping[str, Any]

    @property
    def accepted(self) -> bool:
        return self.status == "complete"

    @property
    def text(self) -> str:
        return self.status if self.reason is None else f"{self.status} / {self.reason}"


@dataclass(frozen=True, slots=True)
class Timeline:
    stream_id: str
    case_id: str | None
    #: The timestamp of the stream's first record (offsets count from it).
    started: str
    entries: tuple[Entry, ...]
    spans: tuple[Span, ...]
    verdict: Verdict | None

    @property
    def duration_ms(self) -> float:
        return self.entries[-1].at_ms if self.entries else 0.0

    def count(self, kind: MarkKind, side: str | None = None) -> int:
        return sum(1 for e in self.entries if e.kind is kind and side in (None, e.side))

    def spans_of(self, kind: SpanKind) -> list[Span]:
        return [span for span in self.spans if span.kind is kind]

    @property
    def has_chunks(self) -> bool:
        return any(e.kind in (MarkKind.SENT, MarkKind.RECEIVED) for e in self.entries)


# --- records to entries -----------------------------------------------------------------


def _change(record: Mapping[str, Any]) -> str:
    if record.get("event") != "state_changed":
        return ""
    return f"{record.get('from_state') or '-'} -> {record.get('to_state') or '-'}"


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def shown_fields(record: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a reader needs beyond the time, side, event and state change."""
    return {
        key: value
        for key, value in record.items()
        if key not in CONTEXT_KEYS and value is not None and value != ""
    }


def _producer_state(record: Mapping[str, Any]) -> tuple[MarkKind, str]:
    to_state, the_input = record.get("to_state"), record.get("input")
    if the_input == StreamInput.ATTACH:
        return MarkKind.RESUME, (
            f"attach after #{record.get('resume_after')} (delivery {record.get('attempt')})"
        )
    if record.get("fault"):
        return MarkKind.FAULT, f"fault {record['fault']}"
    if to_state == StreamState.STALLED:
        return MarkKind.FAULT, f"stall {record.get('milliseconds')} ms"
    return MarkKind.STATE, str(to_state)


def _consumer_state(record: Mapping[str, Any]) -> tuple[MarkKind, str]:
    to_state, from_state = record.get("to_state"), record.get("from_state")
    if record.get("component") == "reader":
        if to_state == ReaderState.PAUSED:
            return MarkKind.PAUSED, "reads paused"
        if from_state == ReaderState.PAUSED and to_state != ReaderState.ENDED:
            return MarkKind.RESUMED, "reads resumed"
    if record.get("input") == Input.TERMINAL_FRAME:
        return MarkKind.TERMINAL, f"terminal #{record.get('sequence')}"
    return MarkKind.STATE, str(to_state)


_CONSUMER_EVENTS: Final = {
    "chunk_received": (MarkKind.RECEIVED, "chunk received"),
    "frame_applied": (MarkKind.APPLIED, "frame applied"),
    "stream_resuming": (MarkKind.RESUME, "resume"),
    "stream_finished": (MarkKind.VERDICT, "verdict"),
}


def classify(record: Mapping[str, Any]) -> tuple[MarkKind, str]:
    """What mark a record is on its side's lane, and its short label."""
    event = record.get("event")
    if event == "state_changed":
        state = _producer_state if record.get("side") == PRODUCER else _consumer_state
        return state(record)
    if event == "chunk_sent":
        return MarkKind.SENT, f"chunk #{record.get('index')}"
    if record.get("side") == CONSUMER and event in _CONSUMER_EVENTS:
        kind, label = _CONSUMER_EVENTS[str(event)]
        if kind is MarkKind.APPLIED:
            label = f"frame #{record.get('sequence')} {record.get('kind')}"
        elif kind is MarkKind.RESUME:
            label = f"resume #{record.get('attempt')} after #{record.get('resume_after')}"
        elif kind is MarkKind.VERDICT:
            reason = record.get("reason")
            label = str(record.get("status")) + (f" / {reason}" if reason else "")
        return kind, label
    return MarkKind.NOTE, str(event)


def _timed(records: Iterable[Mapping[str, Any]], stream_id: str) -> list[tuple[int, Any]]:
    """One stream's records with a timestamp, in time order (stable)."""
    timed = []
    for record in records:
        if record.get("stream_id") != stream_id or record.get("side") not in SIDES:
            continue
        at = microseconds(record.get("timestamp"))
        if at is not None:
            timed.append((at, record))
    timed.sort(key=lambda pair: pair[0])
    return timed


def _pauses_by_records(entries: list[Entry]) -> list[Entry]:
    """Where the reader's machine is not traced, its ``reads_paused`` / ``reads_resumed``
    records are the pauses."""
    if any(e.kind is MarkKind.PAUSED for e in entries):
        return entries
    swap = {"reads_paused": (MarkKind.PAUSED, "reads paused")}
    swap["reads_resumed"] = (MarkKind.RESUMED, "reads resumed")
    return [
        _relabelled(e, *swap[e.event]) if e.side == CONSUMER and e.event in swap else e
        for e in entries
    ]


def _entry(at_ms: float, record: Mapping[str, Any]) -> Entry:
    kind, label = classify(record)
    return Entry(
        at_ms=at_ms,
        side=str(record["side"]),
        component=str(record.get("component") or ""),
        event=str(record.get("event")),
        change=_change(record),
        kind=kind,
        label=label,
        fields=shown_fields(record),
    )


def _terminal_labels(entries: list[Entry]) -> list[Entry]:
    """Name each terminal's kind: from the frame applied at its sequence (debug), or from
    the core's next input (end_after_done, ...)."""
    kinds = {
        e.fields.get("sequence"): e.fields.get("kind")
        for e in entries
        if e.kind is MarkKind.APPLIED
    }
    labelled = []
    for index, entry in enumerate(entries):
        if entry.kind is MarkKind.TERMINAL:
            sequence = entry.fields.get("sequence")
            after = (str(e.fields.get("input")) for e in entries[index:])
            ended = next(
                (TERMINAL_KIND_OF_INPUT[i] for i in after if i in TERMINAL_KIND_OF_INPUT), None
            )
            kind = kinds.get(sequence) or ended or "terminal"
            labelled.append(_relabelled(entry, entry.kind, f"{kind} #{sequence}"))
        else:
            labelled.append(entry)
    return labelled


def _relabelled(entry: Entry, kind: MarkKind, label: str) -> Entry:
    return Entry(
        entry.at_ms, entry.side, entry.component, entry.event, entry.change, kind, label,
        entry.fields,
    )  # fmt: skip


def _ending_producer_states(entries: list[Entry]) -> list[Entry]:
    """A producer delivery's last state change is its end: the last before the next
    delivery's first (``from_state`` none), or the last of all."""
    producer = [i for i, e in enumerate(entries) if e.side == PRODUCER and e.change]
    last = set()
    for position, index in enumerate(producer):
        following = producer[position + 1] if position + 1 < len(producer) else None
        if following is None or entries[following].change.startswith("- ->"):
            last.add(index)
    out = list(entries)
    for index in last:
        e = out[index]
        if e.kind is MarkKind.STATE and not e.change.startswith("- ->"):
            reason = e.fields.get("reason")
            label = e.label + (f" ({reason})" if reason else "")
            out[index] = _relabelled(e, MarkKind.END, label)
    return out


class _SpanReader:
    """Pairs the entries that open and close spans, in time order."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.opened: dict[SpanKind, list[float]] = {kind: [] for kind in SpanKind}
        self.deliveries = 0

    def close(self, kind: SpanKind, side: str, at_ms: float, label: str) -> None:
        if self.opened[kind]:
            self.spans.append(Span(side, kind, self.opened[kind].pop(0), at_ms, label))

    def consumer(self, e: Entry) -> None:
        if e.kind is MarkKind.PAUSED:
            self.opened[SpanKind.PAUSED].append(e.at_ms)
        elif e.kind is MarkKind.RESUMED:
            self.close(SpanKind.PAUSED, CONSUMER, e.at_ms, "reads paused")
        elif e.component == "reader" and e.change.startswith(f"{ReaderState.PAUSED} ->"):
            # The reader ended while paused: the pause ends with it.
            self.close(SpanKind.PAUSED, CONSUMER, e.at_ms, "reads paused until the end")

    def producer(self, e: Entry) -> None:
        if e.change.endswith(f"-> {StreamState.STALLED}"):
            self.opened[SpanKind.STALLED].append(e.at_ms)
        elif e.change.startswith(f"{StreamState.STALLED} ->"):
            self.close(SpanKind.STALLED, PRODUCER, e.at_ms, "stalled")
        if e.change.startswith("- ->"):
            self.opened[SpanKind.DELIVERY].append(e.at_ms)
        elif e.kind is MarkKind.END:
            self.deliveries += 1
            label = f"delivery {self.deliveries}: {e.label}"
            self.close(SpanKind.DELIVERY, PRODUCER, e.at_ms, label)

    def read(self, entries: Iterable[Entry]) -> list[Span]:
        for entry in entries:
            (self.producer if entry.side == PRODUCER else self.consumer)(entry)
        sides = {
            SpanKind.PAUSED: CONSUMER, SpanKind.STALLED: PRODUCER, SpanKind.DELIVERY: PRODUCER
        }  # fmt: skip
        for kind, starts in self.opened.items():
            self.spans += [Span(sides[kind], kind, at, None, f"{kind} (open)") for at in starts]
        return sorted(self.spans, key=lambda span: span.start_ms)


def _verdict(entries: list[Entry]) -> Verdict | None:
    found = [e for e in entries if e.kind is MarkKind.VERDICT]
    if not found:
        return None
    last = found[-1]
    stats = {k: v for k, v in last.fields.items() if k not in ("status", "reason")}
    reason = last.fields.get("reason")
    return Verdict(last.at_ms, str(last.fields.get("status")), reason, stats)


def build_timeline(records: Iterable[Mapping[str, Any]], stream_id: str) -> Timeline:
    """One stream's timeline from the records of both sides (any order, any streams)."""
    timed = _timed(records, stream_id)
    first = timed[0][0] if timed else 0
    entries = [_entry((at - first) / 1000, record) for at, record in timed]
    entries = _ending_producer_states(_terminal_labels(_pauses_by_records(entries)))
    case_ids = [r.get("case_id") for _, r in timed if r.get("case_id")]
    return Timeline(
        stream_id=stream_id,
        case_id=str(case_ids[0]) if case_ids else None,
        started=str(timed[0][1]["timestamp"]) if timed else "",
        entries=tuple(entries),
        spans=tuple(_SpanReader().read(entries)),
        verdict=_verdict(entries),
    )


# --- several streams --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamSummary:
    stream_id: str
    case_id: str | None
    started: str
    records: Mapping[str, int]
    verdict: str


def stream_summaries(records: Iterable[Mapping[str, Any]]) -> list[StreamSummary]:
    """Every stream id in the records, in the order their first records were written."""
    found: dict[str, dict[str, Any]] = {}
    for record in records:
        stream_id, side = record.get("stream_id"), record.get("side")
        if not isinstance(stream_id, str) or side not in SIDES:
            continue
        at = microseconds(record.get("timestamp"))
        seen = found.setdefault(
            stream_id,
            {"first": at, "started": "", "case_id": None, "verdict": "-", PRODUCER: 0},
        )
        seen[CONSUMER] = seen.get(CONSUMER, 0)
        seen[str(side)] += 1
        if at is not None and (seen["first"] is None or at <= seen["first"]):
            seen["first"], seen["started"] = at, str(record.get("timestamp"))
        seen["case_id"] = seen["case_id"] or record.get("case_id")
        if side == CONSUMER and record.get("event") == "stream_finished":
            seen["verdict"] = classify(record)[1]
    ordered = sorted(found.items(), key=lambda item: item[1]["first"] or 0)
    return [
        StreamSummary(
            stream_id=stream_id,
            case_id=seen["case_id"],
            started=seen["started"],
            records={side: seen[side] for side in SIDES},
            verdict=seen["verdict"],
        )
        for stream_id, seen in ordered
    ]


# --- the terminal table -----------------------------------------------------------------

TABLE_COLUMNS: Final = ("+ms", "side", "event", "from -> to", "fields")
#: In a summed row: the fields whose first..last range is shown, and those summed.
RANGE_FIELDS: Final = ("index", "sequence")
SUM_FIELDS: Final = ("size", "paused_ms")


@dataclass(frozen=True, slots=True)
class Row:
    at_ms: float
    where: str
    event: str
    change: str
    fields: str
    #: How many records the row stands for (a run of per-chunk records is one row).
    count: int = 1


def format_fields(fields: Mapping[str, Any]) -> str:
    return " ".join(f"{key}={_shown(value)}" for key, value in fields.items())


def _number(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


def _summed(run: Sequence[Entry]) -> Row:
    first, last = run[0], run[-1]
    parts = []
    for key in RANGE_FIELDS:
        values = [e.fields[key] for e in run if key in e.fields]
        if values:
            parts.append(f"{key}={values[0]}..{values[-1]}")
    for key in SUM_FIELDS:
        values = [e.fields[key] for e in run if isinstance(e.fields.get(key), int | float)]
        if values:
            parts.append(f"{key}={_number(sum(values))}")
    kinds = sorted({str(e.fields["kind"]) for e in run if "kind" in e.fields})
    if kinds:
        parts.append("kind=" + ",".join(kinds))
    parts.append(f"until=+{last.at_ms:.3f}")
    event = f"{first.event} ×{len(run)}"
    return Row(first.at_ms, first.where, event, first.change, " ".join(parts), len(run))


def _row(entry: Entry) -> Row:
    return Row(entry.at_ms, entry.where, entry.event, entry.change, format_fields(entry.fields))


def table_rows(timeline: Timeline, *, every: bool = False) -> list[Row]:
    """The table's rows: every record one row (``every``), or each run of per-chunk and
    per-pause records between two other records of the same component (the producer, the
    consumer's core, reader or session) summed into one row: a component's records keep
    their order, so its rows do not depend on how the other components' interleave."""
    if every:
        return [_row(entry) for entry in timeline.entries]
    rows: list[Row] = []
    runs: dict[str, dict[tuple[str, str], list[Entry]]] = {}

    def flush(where: str) -> None:
        found = runs.pop(where, {})
        rows.extend(_summed(run) if len(run) > 1 else _row(run[0]) for run in found.values())

    for entry in timeline.entries:
        if entry.bulk:
            runs.setdefault(entry.where, {}).setdefault((entry.event, entry.change), []).append(
                entry
            )
            continue
        flush(entry.where)
        rows.append(_row(entry))
    for where in list(runs):
        flush(where)
    return sorted(rows, key=lambda row: row.at_ms)


def _cells(row: Row) -> tuple[str, ...]:
    """A row's cells as drawn: every text from the traces shown by ``shared.terminal_text``
    (a control character a trace file holds is written as its escape, never obeyed)."""
    middle = (shown_line(cell, MAX_CELL_CHARS) for cell in (row.where, row.event, row.change))
    return (f"{row.at_ms:.3f}", *middle, shown_line(row.fields, MAX_LINE_CHARS))


def fit(line: str, width: int | None) -> str:
    """A line cut to ``width`` characters, its end marked ``…`` (None: the whole line)."""
    if width is None or len(line) <= width:
        return line
    return line[: max(width - 1, 0)] + "…"


def render_table(rows: Sequence[Row], width: int | None = None) -> str:
    """The rows as aligned text columns, a rule under the header; each line cut to
    ``width`` if given (a terminal's: a row on one line, never wrapped). Text from the
    traces is shown, never obeyed (``_cells``)."""
    lines = [TABLE_COLUMNS, *(_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(TABLE_COLUMNS) - 1)]
    out = []
    for number, line in enumerate(lines):
        time = line[0].rjust(widths[0])
        middle = [cell.ljust(width) for cell, width in zip(line[1:-1], widths[1:], strict=True)]
        out.append("  ".join([time, *middle, line[-1]]).rstrip())
        if number == 0:
            out.append("  ".join("-" * size for size in [*widths, len(TABLE_COLUMNS[-1])]))
    return "\n".join(fit(line, width) for line in out) + "\n"


def render_summaries(summaries: Sequence[StreamSummary]) -> str:
    """The streams found, one line each; their ids, cases, times and verdicts (text from
    the traces) shown, never obeyed (``shared.terminal_text``)."""
    header = ("stream id", "case", "started", "producer", "consumer", "verdict")
    lines = [header] + [
        (
            shown_line(s.stream_id, MAX_CELL_CHARS),
            shown_line(str(s.case_id or "-"), MAX_CELL_CHARS),
            shown_line(s.started, MAX_CELL_CHARS),
            str(s.records[PRODUCER]),
            str(s.records[CONSUMER]),
            shown_line(s.verdict, MAX_CELL_CHARS),
        )
        for s in summaries
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]
    text.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(text) + "\n"


def _counted(count: int, noun: str, plural: str = "") -> str:
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def summary_line(timeline: Timeline) -> str:
    """One line: the stream, its verdict and what each lane holds (as it is: the HTML
    page escapes it; ``terminal_summary_line`` is its form for a terminal)."""
    t = timeline
    verdict = t.verdict.text if t.verdict else "no verdict in the traces"
    deliveries = len(t.spans_of(SpanKind.DELIVERY))
    return (
        f"stream {t.stream_id} ({t.case_id or 'no case'}): {verdict}; {t.duration_ms:.3f} ms; "
        f"producer: {_counted(t.count(MarkKind.SENT), 'chunk')} sent, "
        f"{_counted(deliveries, 'delivery', 'deliveries')}; consumer: "
        f"{_counted(t.count(MarkKind.RECEIVED), 'chunk')} received, "
        f"{_counted(t.count(MarkKind.APPLIED), 'frame')} applied, "
        f"{_counted(len(t.spans_of(SpanKind.PAUSED)), 'pause')}, "
        f"{_counted(t.count(MarkKind.RESUME, CONSUMER), 'resume')}"
    )


def terminal_summary_line(timeline: Timeline) -> str:
    """``summary_line`` for a terminal: the stream id, case and verdict from the traces
    shown, never obeyed (``shared.terminal_text``)."""
    return shown_line(summary_line(timeline), MAX_LINE_CHARS)


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


def entries_of(timeline: Timeline, *kinds: MarkKind) -> Iterator[Entry]:
    return (entry for entry in timeline.entries if entry.kind in kinds)
