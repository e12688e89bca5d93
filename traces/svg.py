"""A timeline as one SVG: a producer and a consumer lane on one time axis.

Theory of operation
-------------------
:func:`render_svg` lays out a :class:`traces.timeline.Timeline` and returns the
picture as text (``traces/page.py`` puts it in a page). Two lanes share one time axis:

* producer: each delivery (one ``Open``) as a thin bar, stalls as spans, each
  chunk sent as a tick, faults as triangles, a resume (``attach``) as a dashed
  line, the delivery's end as a bar; a producer that vanished (its trace holds no final
  state: killed) as a cross where its trace ends, its open bars ending there too;
* consumer: each chunk received and each frame applied as ticks (two rows),
  reads paused as spans, resumes as dashed lines with their attempt, the
  terminal as a bar, and the verdict as a line and a box at the right.

Every mark is one element with ``class="mark KIND"`` (``traces.timeline.MarkKind``)
or ``class="span KIND"`` (``SpanKind``), a ``data-t`` offset in ms and a
``<title>`` (shown on hover), inside ``<g id="lane-producer">`` or
``<g id="lane-consumer">``: the tests count them against the trace records.

The axis is not linear: half the width is spread by the order of the distinct
times, half by time itself, so that a burst of chunks within a millisecond and a
500 ms stall are both readable; the ticks carry real offsets. A row with more than
``max_marks`` marks (a slow reader's thousands of one-byte chunks) is drawn in bins,
one per pixel column, each with its count (``data-n``), so a page stays small. Labels go in the
first of three rows where they do not overlap; a label that fits nowhere is left
to its mark's title.

Pure: returns text.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from html import escape
from typing import Final

from replywire.traces.table import format_fields
from replywire.traces.timeline import (
    CONSUMER,
    PRODUCER,
    SIDES,
    Entry,
    MarkKind,
    Span,
    SpanKind,
    Timeline,
)

WIDTH: Final = 1200
PLOT_LEFT: Final = 120
PLOT_RIGHT: Final = 980
#: Approximate width of one character of the labels (11 px sans-serif).
CHAR_PX: Final = 6.2
MIN_TICK_GAP_PX: Final = 70
MAX_TITLE_CHARS: Final = 300
#: Marks one row draws one by one (chunks sent, received, frames applied, pauses); past it,
#: the row's marks are drawn as bins, one per pixel column, each with its count (data-n).
DEFAULT_MAX_MARKS: Final = 2000
TICK_KINDS: Final = (MarkKind.SENT, MarkKind.RECEIVED, MarkKind.APPLIED)


@dataclass(frozen=True, slots=True)
class LaneLayout:
    """Vertical positions (px) of one lane's rows."""

    top: float
    bottom: float
    labels: tuple[float, float, float]
    states: float
    rows: dict[StrEnum, tuple[float, float]]


LANES: Final = {
    PRODUCER: LaneLayout(
        top=30,
        bottom=170,
        labels=(46, 60, 74),
        states=88,
        rows={
            SpanKind.DELIVERY: (98, 104),
            SpanKind.STALLED: (108, 124),
            MarkKind.SENT: (130, 162),
        },
    ),
    CONSUMER: LaneLayout(
        top=185,
        bottom=345,
        labels=(306, 320, 334),
        states=292,
        rows={
            MarkKind.RECEIVED: (206, 232),
            MarkKind.APPLIED: (238, 264),
            SpanKind.PAUSED: (268, 282),
        },
    ),
}
ROW_NAMES: Final[dict[StrEnum, str]] = {
    SpanKind.DELIVERY: "deliveries",
    SpanKind.STALLED: "stalls",
    MarkKind.SENT: "chunks sent",
    MarkKind.RECEIVED: "chunks received",
    MarkKind.APPLIED: "frames applied",
    SpanKind.PAUSED: "reads paused",
}
AXIS_Y: Final = 362
HEIGHT: Final = 392


class TimeScale:
    """Time (ms) to x (px): half by rank among the distinct times, half linear."""

    def __init__(self, times: Iterable[float], left: float, right: float) -> None:
        self.times = sorted(set(times))
        self.left, self.right = left, right

    def rank(self, t: float) -> float:
        times = self.times
        if len(times) < 2:
            return 0.5
        index = bisect_left(times, t)
        if index <= 0:
            return 0.0
        if index >= len(times):
            return 1.0
        before, after = times[index - 1], times[index]
        if after == t:
            return index / (len(times) - 1)
        return (index - 1 + (t - before) / (after - before)) / (len(times) - 1)

    def x(self, t: float) -> float:
        times = self.times
        span = times[-1] - times[0] if len(times) > 1 else 0.0
        linear = (t - times[0]) / span if span > 0 else 0.5
        linear = min(max(linear, 0.0), 1.0)
        return self.left + (self.right - self.left) * (0.5 * self.rank(t) + 0.5 * linear)

    def ticks(self, count: int = 8) -> list[float]:
        """Up to ``count`` of the times, spread evenly in x and at least a label apart."""
        if not self.times:
            return []
        wanted = [
            self.times[round(i * (len(self.times) - 1) / max(count - 1, 1))] for i in range(count)
        ]
        chosen: list[float] = []
        for t in sorted(set(wanted)):
            if not chosen or self.x(t) - self.x(chosen[-1]) >= MIN_TICK_GAP_PX:
                chosen.append(t)
        return chosen


def offset_text(ms: float) -> str:
    return f"+{ms / 1000:.3f} s" if ms >= 1000 else f"+{ms:.3f} ms"


def _title(entry: Entry) -> str:
    parts = [offset_text(entry.at_ms), entry.where, entry.event, entry.change]
    text = " ".join(part for part in parts if part) + " " + format_fields(entry.fields)
    return escape(text.strip()[:MAX_TITLE_CHARS])


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


class _Labels:
    """Greedy label placement in a lane's three rows."""

    def __init__(self, rows: Sequence[float]) -> None:
        self.ends = {y: float("-inf") for y in rows}

    def place(self, x: float, text: str) -> tuple[float, float] | None:
        """Where the label starts and its row: after ``x``, or ending at it near the edge."""
        width = len(text) * CHAR_PX
        start = x if x + width <= WIDTH - 4 else max(x - width - 8, 4)
        for y, end in self.ends.items():
            if start >= end + 4:
                self.ends[y] = start + width
                return start, y
        return None


class _Drawing:
    def __init__(self, timeline: Timeline, max_marks: int) -> None:
        if max_marks < 1:
            raise ValueError("max marks must be >= 1")
        self.timeline = timeline
        times = [e.at_ms for e in timeline.entries]
        self.scale = TimeScale(times, PLOT_LEFT, PLOT_RIGHT)
        self.parts: dict[str, list[str]] = {side: [] for side in SIDES}
        self.labels = {side: _Labels(LANES[side].labels) for side in SIDES}
        self.max_marks = max_marks
        counts = Counter(e.kind for e in timeline.entries if e.kind in TICK_KINDS)
        #: The tick rows with more marks than max_marks: their marks wait here to be binned.
        self.binned: dict[MarkKind, list[Entry]] = {
            kind: [] for kind, count in counts.items() if count > max_marks
        }

    def label(self, side: str, x: float, text: str, css: str) -> None:
        place = self.labels[side].place(x, text)
        if place is not None:
            start, y = place
            self.parts[side].append(
                f'<text class="label label-{css}" x="{_num(start)}" y="{_num(y)}">'
                f"{escape(text)}</text>"
            )

    def tick(self, entry: Entry, width: float = 1.2) -> None:
        if entry.kind in self.binned:
            self.binned[entry.kind].append(entry)
            return
        top, bottom = LANES[entry.side].rows[entry.kind]
        x = self.scale.x(entry.at_ms)
        # Short titles: a slow stream has thousands of these.
        size = f", {entry.fields['size']} B" if "size" in entry.fields else ""
        self.parts[entry.side].append(
            f'<rect class="mark {entry.kind}" data-t="{entry.at_ms:.3f}" x="{_num(x - width / 2)}" '
            f'y="{_num(top)}" width="{_num(width)}" height="{_num(bottom - top)}">'
            f"<title>{escape(offset_text(entry.at_ms))} {escape(entry.label)}{size}</title></rect>"
        )

    def dot(self, entry: Entry) -> None:
        x, y = self.scale.x(entry.at_ms), LANES[entry.side].states
        self.parts[entry.side].append(
            f'<circle class="mark {entry.kind}" data-t="{entry.at_ms:.3f}" cx="{_num(x)}" '
            f'cy="{_num(y)}" r="3"><title>{_title(entry)}</title></circle>'
        )

    def bar(self, entry: Entry) -> None:
        """A terminal or a delivery's end: a bar across the lane, labelled."""
        lane = LANES[entry.side]
        x = self.scale.x(entry.at_ms)
        top = lane.top + 4 if entry.side == CONSUMER else lane.states - 6
        bottom = lane.states + 6 if entry.side == CONSUMER else lane.bottom - 4
        self.parts[entry.side].append(
            f'<rect class="mark {entry.kind}" data-t="{entry.at_ms:.3f}" x="{_num(x - 1.5)}" '
            f'y="{_num(top)}" width="3" height="{_num(bottom - top)}">'
            f"<title>{_title(entry)}</title></rect>"
        )
        self.label(entry.side, x + 3, entry.label, str(entry.kind))

    def fault(self, entry: Entry) -> None:
        x, y = self.scale.x(entry.at_ms), LANES[entry.side].states
        left, right, top, bottom = _num(x - 6), _num(x + 6), _num(y - 7), _num(y + 5)
        self.parts[entry.side].append(
            f'<path class="mark fault" data-t="{entry.at_ms:.3f}" '
            f'd="M{_num(x)} {top}L{right} {bottom}L{left} {bottom}Z">'
            f"<title>{_title(entry)}</title></path>"
        )
        self.label(entry.side, x + 6, entry.label, "fault")

    def resume(self, entry: Entry) -> None:
        lane = LANES[entry.side]
        x = _num(self.scale.x(entry.at_ms))
        self.parts[entry.side].append(
            f'<line class="mark resume" data-t="{entry.at_ms:.3f}" x1="{x}" x2="{x}" '
            f'y1="{_num(lane.top + 2)}" y2="{_num(lane.bottom - 2)}">'
            f"<title>{_title(entry)}</title></line>"
        )
        self.label(entry.side, self.scale.x(entry.at_ms) + 3, entry.label, "resume")

    def vanished(self, at_ms: float) -> None:
        """Where a vanished producer's trace ends: a cross across its lane, labelled. Not a
        ``mark`` (no record is behind it): ``class="vanished"``."""
        lane, x = LANES[PRODUCER], self.scale.x(at_ms)
        top, bottom = lane.states - 8, lane.bottom - 4
        title = f"{offset_text(at_ms)} the producer's trace ends here with no final state"
        self.parts[PRODUCER].append(
            f'<g class="vanished" data-t="{at_ms:.3f}"><title>{escape(title)}</title>'
            f'<line x1="{_num(x)}" x2="{_num(x)}" y1="{_num(top)}" y2="{_num(bottom)}"/>'
            f'<path d="M{_num(x - 5)} {_num(top - 5)}L{_num(x + 5)} {_num(top + 5)}'
            f'M{_num(x + 5)} {_num(top - 5)}L{_num(x - 5)} {_num(top + 5)}"/></g>'
        )
        self.label(PRODUCER, x + 6, "vanished: no final state", "vanished")

    def verdict(self, entry: Entry) -> None:
        lane = LANES[CONSUMER]
        x = _num(self.scale.x(entry.at_ms))
        css = "accepted" if self.timeline.verdict and self.timeline.verdict.accepted else "rejected"
        self.parts[CONSUMER].append(
            f'<line class="mark verdict {css}" data-t="{entry.at_ms:.3f}" x1="{x}" x2="{x}" '
            f'y1="{_num(lane.top + 2)}" y2="{_num(lane.bottom - 2)}">'
            f"<title>{_title(entry)}</title></line>"
        )

    def bins(self) -> None:
        """Each binned row: one rect per pixel column, with how many marks it stands for."""
        for kind, entries in self.binned.items():
            columns: dict[int, list[Entry]] = {}
            for entry in entries:
                columns.setdefault(int(self.scale.x(entry.at_ms)), []).append(entry)
            for column, group in columns.items():
                side = group[0].side
                top, bottom = LANES[side].rows[kind]
                first, last = group[0].at_ms, group[-1].at_ms
                title = (
                    f"{offset_text(first)} to {offset_text(last)}: {len(group)} {ROW_NAMES[kind]}"
                )
                self.parts[side].append(
                    f'<rect class="mark {kind} bin" data-t="{first:.3f}" data-end="{last:.3f}" '
                    f'data-n="{len(group)}" x="{column}" y="{_num(top)}" width="1" '
                    f'height="{_num(bottom - top)}"><title>{escape(title)}</title></rect>'
                )

    def span(self, spans: Sequence[Span]) -> None:
        """One span, or (past max_marks) several whose pixels touch, drawn as one."""
        first = spans[0]
        top, bottom = LANES[first.side].rows[first.kind]
        ends = [s.end_ms if s.end_ms is not None else self.timeline.duration_ms for s in spans]
        x1, x2 = self.scale.x(first.start_ms), self.scale.x(max(ends))
        open_end = spans[-1].end_ms is None
        until = "the end" if open_end else offset_text(max(ends))
        if len(spans) == 1:
            title = f"{first.label}: {offset_text(first.start_ms)} to {until}"
        else:
            total = sum(end - s.start_ms for s, end in zip(spans, ends, strict=True))
            title = (
                f"{len(spans)} × {first.kind}, {offset_text(first.start_ms)} to {until}, "
                f"{total:.3f} ms in all"
            )
        count = f' data-n="{len(spans)}"' if len(spans) > 1 else ""
        self.parts[first.side].append(
            f'<rect class="span {first.kind}" data-t="{first.start_ms:.3f}" '
            f'data-end="{"" if open_end else f"{max(ends):.3f}"}"{count} '
            f'x="{_num(x1)}" y="{_num(top)}" width="{_num(max(x2 - x1, 1.0))}" '
            f'height="{_num(bottom - top)}"><title>{escape(title)}</title></rect>'
        )

    def spans(self) -> None:
        for kind in SpanKind:
            spans = self.timeline.spans_of(kind)
            if len(spans) <= self.max_marks:
                for span in spans:
                    self.span([span])
                continue
            group: list[Span] = []
            reach = float("-inf")
            for span in spans:
                end = span.end_ms if span.end_ms is not None else self.timeline.duration_ms
                if group and self.scale.x(span.start_ms) > reach + 1:
                    self.span(group)
                    group, reach = [], float("-inf")
                group.append(span)
                reach = max(reach, self.scale.x(end))
            self.span(group)

    def entry(self, entry: Entry) -> None:
        kind = entry.kind
        if kind in (MarkKind.SENT, MarkKind.RECEIVED, MarkKind.APPLIED):
            self.tick(entry)
        elif kind in (MarkKind.TERMINAL, MarkKind.END):
            self.bar(entry)
        elif kind is MarkKind.FAULT:
            self.fault(entry)
        elif kind is MarkKind.RESUME:
            self.resume(entry)
        elif kind is MarkKind.VERDICT:
            self.verdict(entry)
        elif kind in (MarkKind.STATE, MarkKind.NOTE) and not entry.bulk:
            self.dot(entry)
        # PAUSED / RESUMED entries are drawn as their spans.

    def draw(self) -> None:
        self.spans()
        if self.timeline.vanished_ms is not None:  # first: its label gets a row
            self.vanished(self.timeline.vanished_ms)
        # The notable marks first, so that they get the label rows before the others.
        order = {MarkKind.FAULT: 0, MarkKind.RESUME: 1, MarkKind.TERMINAL: 2, MarkKind.END: 3}
        for entry in sorted(self.timeline.entries, key=lambda e: order.get(e.kind, 9)):
            self.entry(entry)
        self.bins()


def _lane(side: str, parts: list[str]) -> str:
    lane = LANES[side]
    rows = "".join(
        f'<text class="row-name" x="8" y="{_num((top + bottom) / 2 + 4)}">{ROW_NAMES[row]}</text>'
        for row, (top, bottom) in lane.rows.items()
    )
    return (
        f'<g id="lane-{side}" class="lane">'
        f'<rect class="lane-bg" x="2" y="{_num(lane.top)}" width="{WIDTH - 4}" '
        f'height="{_num(lane.bottom - lane.top)}"/>'
        f'<text class="lane-name" x="8" y="{_num(lane.top + 16)}">{side}</text>{rows}'
        + "".join(parts)
        + "</g>"
    )


def _axis(scale: TimeScale) -> str:
    parts = [f'<line class="axis" x1="{PLOT_LEFT}" x2="{PLOT_RIGHT}" y1="{AXIS_Y}" y2="{AXIS_Y}"/>']
    for t in scale.ticks():
        x = _num(scale.x(t))
        parts.append(
            f'<line class="axis" x1="{x}" x2="{x}" y1="{AXIS_Y - 4}" y2="{AXIS_Y + 4}"/>'
            f'<text class="tick" x="{x}" y="{AXIS_Y + 18}" text-anchor="middle">'
            f"{offset_text(t)}</text>"
        )
    return f'<g id="axis">{"".join(parts)}</g>'


#: The longest refused call the verdict box shows.
VERDICT_CALL_CHARS: Final = 28


def _verdict_box(timeline: Timeline) -> str:
    verdict = timeline.verdict
    call = None
    if verdict is None:
        status, reason, css = "no verdict", "in the traces", "rejected"
    else:
        status, reason, call = verdict.status, verdict.reason or "accepted", verdict.call
        css = "accepted" if verdict.accepted else "rejected"
    x, y = PLOT_RIGHT + 30, LANES[CONSUMER].top + 20
    # A chat verdict's refused call, on a third line (cut with …: the box is 180 wide).
    said = "" if call is None else f"call {call}"
    said = said if len(said) <= VERDICT_CALL_CHARS else said[: VERDICT_CALL_CHARS - 1] + "…"
    called = said and f'<text class="call" x="{x + 10}" y="{y + 58}">{escape(said)}</text>'

    return (
        f'<g id="verdict"><rect class="{css}" x="{x}" y="{y}" width="180" '
        f'height="{54 if call is None else 72}" rx="4"/><text x="{x + 10}" y="{y + 22}" '
        f'style="font-weight:bold;font-size:14px">{escape(status)}</text>'
        f'<text x="{x + 10}" y="{y + 40}">{escape(reason)}</text>{called}</g>'
    )


def render_svg(timeline: Timeline, max_marks: int = DEFAULT_MAX_MARKS) -> str:
    drawing = _Drawing(timeline, max_marks)
    drawing.draw()
    lanes = "".join(_lane(side, drawing.parts[side]) for side in SIDES)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" id="timeline" width="{WIDTH}" '
        f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="timeline of stream {escape(timeline.stream_id)}">'
        f"{lanes}{_axis(drawing.scale)}{_verdict_box(timeline)}</svg>"
    )
