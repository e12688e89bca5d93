"""One stream's two traces as one timeline: the model (entries, spans, verdict).

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
first state to its final one). The verdict is the consumer's ``stream_finished``.

A producer whose trace stops with a delivery in no final state **vanished** (killed,
say, by SIGKILL: nothing was logged after): its open delivery and stall end where its
trace ends (``Timeline.vanished_ms``), never at the consumer's last record.

Which record is which mark:

* producer: ``chunk_sent`` (debug) is a chunk **sent**; a ``verified`` state
  carrying a ``fault`` and the ``stalled`` state are **faults**; ``attach`` is a
  **resume** (with the delivery's ``attempt``); a delivery's final state is its **end**;
* consumer: ``chunk_received`` (debug) is a chunk **received** (taken from the
  bounded queue by the core), ``frame_applied`` (debug) a frame **applied**;
  the reader's ``paused`` state opens a **pause** span; ``stream_resuming`` is a
  **resume** (attempt, ``resume_after``); the core's ``terminal_frame`` is the
  **terminal**; ``stream_finished`` is the **verdict** (with a reply's ``kind`` when it is
  not grounded, and the call a chat reply's tool call reason refused).

Per-chunk records are ``debug``: at ``info`` the timeline has every state
change, pause, fault, resume, terminal and verdict, and no chunk marks.

The clocks are the two processes' own: on one machine they agree; across
machines the offset between them shifts one lane against the other.

Pure: no files, no clock (``traces/timestamps.py`` parses the timestamps, by hand, to
integer microseconds). ``traces/table.py`` writes it as a terminal table,
``traces/svg.py`` draws the picture, ``traces/page.py`` makes the HTML page,
``traces/result_events.py`` times the result document's events; ``traces/streams.py``
lists the streams a set of traces holds; ``traces/commands.py`` reads the files.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from replywire.consumer.reader_states import ReaderState
from replywire.producer.states import FINAL_STATES, StreamInput, StreamState
from replywire.shared.consumer_core import Input
from replywire.traces.timestamps import microseconds

PRODUCER: Final = "producer"
CONSUMER: Final = "consumer"
SIDES: Final = (PRODUCER, CONSUMER)

#: The core's inputs after a terminal that name its kind (when frame_applied is not traced).
TERMINAL_KIND_OF_INPUT: Final[dict[str, str]] = {
    Input.END_AFTER_DONE: "done",
    Input.END_AFTER_CANCEL: "cancel",
    Input.END_AFTER_ERROR: "error",
}

#: Keys every record has or that the table shows in other columns.
CONTEXT_KEYS: Final = frozenset(
    {
        "timestamp", "side", "event", "stream_id", "level", "case_id", "peer", "caller",
        "from_state", "to_state", "component",
    }
)  # fmt: skip


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


#: ``stream_finished``'s fields that say what the reply was, not what arrived.
VERDICT_KEYS: Final = ("status", "reason", "kind", "call_index", "call_id", "call_name")


@dataclass(frozen=True, slots=True)
class Verdict:
    at_ms: float
    status: str
    reason: str | None
    stats: Mapping[str, Any]
    #: The reply's kind when it is not grounded (``text``, ``chat``).
    kind: str | None = None
    #: A chat reply's call a tool call reason refused: ``#index name, id ID``.
    call: str | None = None

    @property
    def accepted(self) -> bool:
        return self.status == "complete"

    @property
    def text(self) -> str:
        said = self.status if self.reason is None else f"{self.status} / {self.reason}"
        return said if self.call is None else f"{said} (call {self.call})"


@dataclass(frozen=True, slots=True)
class Timeline:
    stream_id: str
    case_id: str | None
    #: The timestamp of the stream's first record (offsets count from it).
    started: str
    entries: tuple[Entry, ...]
    spans: tuple[Span, ...]
    verdict: Verdict | None
    #: The producer's last record of the stream when its last delivery reached no final
    #: state: the process vanished there (killed, or its trace cut short). None otherwise.
    vanished_ms: float | None = None

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


def refused_call(record: Mapping[str, Any]) -> str | None:
    """The call a chat reply's verdict refused, as ``stream_finished`` names it: ``#index
    name, id ID`` (None: no call was refused)."""
    if "call_index" not in record and "call_name" not in record:
        return None
    call = f"#{record.get('call_index')} {record.get('call_name', '')}"
    return call + (f", id {record['call_id']}" if record.get("call_id") else "")


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
            call = refused_call(record)
            label += f" (call {call})" if call is not None else ""
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


def _final(entry: Entry) -> bool:
    """A producer state change to a final state (a delivery's end)."""
    return entry.change.rpartition(" -> ")[2] in FINAL_STATES


def _ending_producer_states(entries: list[Entry]) -> list[Entry]:
    """A producer delivery's last state change is its end if it is to a final state: the
    last before the next delivery's first (``from_state`` none), or the last of all (one
    to an open state: the producer vanished there, and the delivery has no end)."""
    producer = [i for i, e in enumerate(entries) if e.side == PRODUCER and e.change]
    last = set()
    for position, index in enumerate(producer):
        following = producer[position + 1] if position + 1 < len(producer) else None
        if following is None or entries[following].change.startswith("- ->"):
            last.add(index)
    out = list(entries)
    for index in last:
        e = out[index]
        if e.kind is MarkKind.STATE and _final(e) and not e.change.startswith("- ->"):
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

    def read(self, entries: Iterable[Entry], vanished_ms: float | None) -> list[Span]:
        """The spans; a vanished producer's open ones end where its trace ends."""
        for entry in entries:
            (self.producer if entry.side == PRODUCER else self.consumer)(entry)
        sides = {
            SpanKind.PAUSED: CONSUMER, SpanKind.STALLED: PRODUCER, SpanKind.DELIVERY: PRODUCER
        }  # fmt: skip
        vanished = {
            SpanKind.DELIVERY: f"delivery {self.deliveries + 1}: no final state (vanished)",
            SpanKind.STALLED: "stalled until the producer's trace ends",
        }
        for kind, starts in self.opened.items():
            if vanished_ms is not None and kind in vanished:
                self.spans += [
                    Span(PRODUCER, kind, at, max(at, vanished_ms), vanished[kind]) for at in starts
                ]
            else:
                self.spans += [Span(sides[kind], kind, at, None, f"{kind} (open)") for at in starts]
        return sorted(self.spans, key=lambda span: span.start_ms)


def _vanished_at(entries: list[Entry]) -> float | None:
    """The producer's last record, if its last state change is to no final state."""
    producer = [e for e in entries if e.side == PRODUCER]
    changes = [e for e in producer if e.change]
    if not changes or _final(changes[-1]):
        return None
    return producer[-1].at_ms


def _verdict(entries: list[Entry]) -> Verdict | None:
    found = [e for e in entries if e.kind is MarkKind.VERDICT]
    if not found:
        return None
    last = found[-1]
    fields, kind = last.fields, last.fields.get("kind")
    stats = {k: v for k, v in fields.items() if k not in VERDICT_KEYS}
    status, reason, call = str(fields.get("status")), fields.get("reason"), refused_call(fields)
    return Verdict(last.at_ms, status, reason, stats, kind and str(kind), call)


def build_timeline(records: Iterable[Mapping[str, Any]], stream_id: str) -> Timeline:
    """One stream's timeline from the records of both sides (any order, any streams)."""
    timed = _timed(records, stream_id)
    first = timed[0][0] if timed else 0
    entries = [_entry((at - first) / 1000, record) for at, record in timed]
    entries = _ending_producer_states(_terminal_labels(_pauses_by_records(entries)))
    case_ids = [r.get("case_id") for _, r in timed if r.get("case_id")]
    vanished_ms = _vanished_at(entries)
    return Timeline(
        stream_id=stream_id,
        case_id=str(case_ids[0]) if case_ids else None,
        started=str(timed[0][1]["timestamp"]) if timed else "",
        entries=tuple(entries),
        spans=tuple(_SpanReader().read(entries, vanished_ms)),
        verdict=_verdict(entries),
        vanished_ms=vanished_ms,
    )


def entries_of(timeline: Timeline, *kinds: MarkKind) -> Iterator[Entry]:
    return (entry for entry in timeline.entries if entry.kind in kinds)
