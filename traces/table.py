"""One stream's timeline as terminal text: the table of its records, and summary lines.

Per-chunk and per-pause records are summed into one row per run (``table_rows``); with
``every``, each record is a row. Every text that comes from the traces is shown by
``shared.terminal_text`` (a control character a trace file holds is written as its
escape, never obeyed), and each line can be cut to a terminal's width (``fit``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from replywire.shared.terminal_text import shown_line
from replywire.traces.streams import StreamSummary
from replywire.traces.timeline import (
    CONSUMER,
    PRODUCER,
    Entry,
    MarkKind,
    SpanKind,
    Timeline,
)

#: Longest value shown in a table cell.
MAX_VALUE_CHARS: Final = 48
#: Longest cell of the table's middle columns (side, event, state change), once shown.
MAX_CELL_CHARS: Final = 64
#: Longest line of the terminal output before it is fitted to a terminal's width.
MAX_LINE_CHARS: Final = 4000


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


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
    """One line: the stream, its verdict and what each lane holds, and where the producer
    vanished if it did (as it is: the HTML page escapes it; ``terminal_summary_line`` is
    its form for a terminal)."""
    t = timeline
    verdict = t.verdict.text if t.verdict else "no verdict in the traces"
    deliveries = len(t.spans_of(SpanKind.DELIVERY))
    vanished = (
        ""
        if t.vanished_ms is None
        else f", vanished at +{t.vanished_ms:.3f} ms (no final state in its trace)"
    )
    return (
        f"stream {t.stream_id} ({t.case_id or 'no case'}): {verdict}; {t.duration_ms:.3f} ms; "
        f"producer: {_counted(t.count(MarkKind.SENT), 'chunk')} sent, "
        f"{_counted(deliveries, 'delivery', 'deliveries')}{vanished}; consumer: "
        f"{_counted(t.count(MarkKind.RECEIVED), 'chunk')} received, "
        f"{_counted(t.count(MarkKind.APPLIED), 'frame')} applied, "
        f"{_counted(len(t.spans_of(SpanKind.PAUSED)), 'pause')}, "
        f"{_counted(t.count(MarkKind.RESUME, CONSUMER), 'resume')}"
    )


def terminal_summary_line(timeline: Timeline) -> str:
    """``summary_line`` for a terminal: the stream id, case and verdict from the traces
    shown, never obeyed (``shared.terminal_text``)."""
    return shown_line(summary_line(timeline), MAX_LINE_CHARS)
