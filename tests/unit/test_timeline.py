"""The trace timeline's pure parts: timestamps read to the microsecond, a trace's records as
rows (every record in exactly one, in time order; runs of chunk records one row each), the
axis. (tests/system/test_timeline_processes.py draws real traces, mark for mark.)"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from datetime import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replywire.traces.page import render_html
from replywire.traces.result_events import render_result_events, result_events
from replywire.traces.svg import TimeScale
from replywire.traces.table import render_table, table_rows
from replywire.traces.timeline import MarkKind, SpanKind, build_timeline
from replywire.traces.timestamps import microseconds
from tests.timeline_reading import SVG, counted, svg_of

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-30T16:47:58.760570Z",
        "2026-11-30T16:47:58Z",
        "1999-12-31T23:59:59.999999+00:00",
        "2024-02-29T12:00:00.5+02:00",
        "2024-03-01T00:00:00.123456789-05:30",
    ],
)
def test_timestamps_are_read_to_the_microsecond(text: str) -> None:
    fraction = re.search(r"\.(\d+)", text)
    trimmed = (
        text.replace(fraction.group(0), "." + fraction.group(1)[:6].ljust(6, "0"))
        if fraction
        else text
    )
    expected = datetime.fromisoformat(trimmed.replace("Z", "+00:00"))
    assert microseconds(text) == round(expected.timestamp() * 1_000_000)


@pytest.mark.parametrize("text", ["", "yesterday", "2026-11-30", None, 12])
def test_what_is_not_a_timestamp_is_none(text: object) -> None:
    assert microseconds(text) is None


def record(ms: int, side: str, event: str, **fields: Any) -> dict[str, Any]:
    stamp = f"2026-01-01T00:00:{ms // 1000:02d}.{ms % 1000:03d}000Z"
    return {"timestamp": stamp, "side": side, "event": event, "stream_id": "s", **fields}


def change(
    ms: int, side: str, from_state: str | None, to_state: str, **fields: Any
) -> dict[str, Any]:
    return record(ms, side, "state_changed", from_state=from_state, to_state=to_state, **fields)


def test_an_info_trace_has_every_state_and_no_chunk_marks() -> None:
    """At info: no per-chunk records; the terminal's kind comes from the core's next input,
    a pause still open when the reader ends closes with it, and the page says why no chunks."""
    records = [
        record(0, "consumer", "stream_opening"),
        change(1, "producer", None, "received"),
        change(2, "producer", "received", "verified", input="verify", fault="cancel"),
        change(3, "producer", "verified", "streaming", input="start"),
        change(4, "consumer", "connecting", "streaming", component="reader"),
        change(5, "consumer", "streaming", "paused", component="reader"),
        change(6, "producer", "streaming", "completed", input="complete"),
        change(
            7,
            "consumer",
            "streaming",
            "terminal_received",
            component="core",
            input="terminal_frame",
            sequence=6,
        ),
        change(8, "consumer", "paused", "ended", component="reader", why="eof"),
        change(
            9,
            "consumer",
            "terminal_received",
            "cancelled",
            component="core",
            input="end_after_cancel",
            sequence=6,
            reason="controlled_local_cancel",
        ),
        record(
            10, "consumer", "stream_finished", status="cancelled", reason="controlled_local_cancel"
        ),
        record(11, "consumer", "stream_finished", stream_id="other", status="complete"),
    ]
    timeline = build_timeline(reversed(records), "s")
    assert not timeline.has_chunks
    assert [e.label for e in timeline.entries if e.kind is MarkKind.TERMINAL] == ["cancel #6"]
    assert [(s.kind, s.start_ms, s.end_ms) for s in timeline.spans] == [
        (SpanKind.DELIVERY, 1.0, 6.0),
        (SpanKind.PAUSED, 5.0, 8.0),
    ]
    assert timeline.verdict is not None
    assert timeline.verdict.text == "cancelled / controlled_local_cancel"
    assert "No per-chunk records" in render_html(timeline)
    assert len(table_rows(timeline)) == len(records) - 1


def test_runs_of_chunk_records_are_one_row_each_between_other_records() -> None:
    records = [
        *(record(i, "producer", "chunk_sent", index=i, size=10) for i in range(5)),
        change(5, "producer", "streaming", "completed"),
        *(record(6 + i, "consumer", "chunk_received", size=10, component="core") for i in range(5)),
        record(6, "consumer", "reads_paused"),
        record(7, "consumer", "reads_resumed", paused_ms=1.25),
        record(8, "consumer", "reads_paused"),
        record(9, "consumer", "reads_resumed", paused_ms=0.5),
    ]
    timeline = build_timeline(records, "s")
    # Without the reader's machine in the trace, its records are the pauses.
    assert [(s.start_ms, s.end_ms) for s in timeline.spans_of(SpanKind.PAUSED)] == [
        (6.0, 7.0),
        (8.0, 9.0),
    ]
    rows = table_rows(timeline)
    assert [(r.where, r.event, r.count) for r in rows] == [
        ("producer", "chunk_sent ×5", 5),
        ("producer", "state_changed", 1),
        ("consumer/core", "chunk_received ×5", 5),
        ("consumer", "reads_paused ×2", 2),
        ("consumer", "reads_resumed ×2", 2),
    ]
    assert rows[0].fields == "index=0..4 size=50 until=+4.000"
    assert rows[4].fields == "paused_ms=1.75 until=+9.000"
    table = render_table(rows)
    assert table.splitlines()[0].split() == ["+ms", "side", "event", "from", "->", "to", "fields"]


def test_the_axis_keeps_time_order_and_spreads_bursts() -> None:
    times = [0.0, 0.001, 0.002, 0.003, 500.0, 500.001]
    scale = TimeScale(times, 100, 900)
    xs = [scale.x(t) for t in times]
    assert xs == sorted(xs)
    assert (xs[0], xs[-1]) == (100, 900)
    # A burst within microseconds still gets a rank's share of the width.
    assert xs[3] - xs[0] > 200
    assert scale.x(250.0) > scale.x(0.003)
    assert TimeScale([5.0], 0, 100).x(5.0) == 50
    ticks = scale.ticks()
    assert ticks[0] == 0.0 and all(b > a for a, b in itertools.pairwise(ticks))


def test_a_stream_without_records_has_an_empty_timeline() -> None:
    timeline = build_timeline([record(0, "consumer", "stream_opening")], "other")
    assert timeline.entries == () and timeline.verdict is None
    assert json.dumps(timeline.duration_ms) == "0.0"


#: Records a trace holds, by side: (event, component, state change or None).
SOME_RECORDS = [
    ("producer", "chunk_sent", "", None),
    ("producer", "state_changed", "", ("streaming", "stalled")),
    ("producer", "state_changed", "", ("stalled", "streaming")),
    ("producer", "state_changed", "", (None, "received")),
    ("consumer", "chunk_received", "core", None),
    ("consumer", "frame_applied", "core", None),
    ("consumer", "chunk_applied", "", None),
    ("consumer", "state_changed", "reader", ("streaming", "paused")),
    ("consumer", "state_changed", "reader", ("paused", "streaming")),
    ("consumer", "reads_paused", "reader", None),
    ("consumer", "state_changed", "core", ("streaming", "terminal_received")),
    ("consumer", "stream_resuming", "", None),
    ("consumer", "stream_finished", "", None),
]


@settings(deadline=None)  # a page per example; a loaded machine must not fail it
@given(
    st.lists(
        st.tuples(st.sampled_from(SOME_RECORDS), st.integers(min_value=0, max_value=50)),
        max_size=60,
    )
)
def test_every_record_is_in_exactly_one_row_in_time_order(
    drawn: list[tuple[tuple[str, str, str, tuple[str | None, str] | None], int]],
) -> None:
    records = []
    for (side, event, component, states), ms in drawn:
        fields: dict[str, Any] = {"component": component} if component else {}
        if states is not None:
            fields |= {"from_state": states[0], "to_state": states[1], "input": "x"}
        records.append(record(ms, side, event, **fields))
    timeline = build_timeline(records, "s")
    rows = table_rows(timeline)
    assert sum(row.count for row in rows) == len(records) == len(table_rows(timeline, every=True))
    assert [row.at_ms for row in rows] == sorted(row.at_ms for row in rows)
    shown: Counter[tuple[str, str]] = Counter()
    for row in rows:
        shown[(row.where.split("/")[0], counted(row.event)[0])] += row.count
    assert shown == Counter((r["side"], r["event"]) for r in records)
    # Spans close in order: none ends before it starts.
    assert all(s.end_ms is None or s.end_ms >= s.start_ms for s in timeline.spans)
    svg = svg_of(render_html(timeline, max_marks=5))
    assert {g.get("id") for g in svg.iter(f"{SVG}g")} >= {"lane-producer", "lane-consumer"}


def applied(ms: int, sequence: int, kind: str) -> dict[str, Any]:
    return record(ms, "consumer", "frame_applied", component="core", sequence=sequence, kind=kind)


def core(ms: int, from_state: str, to_state: str, the_input: str, **fields: Any) -> dict[str, Any]:
    return change(ms, "consumer", from_state, to_state, component="core", input=the_input, **fields)


@pytest.mark.parametrize(
    ("kind", "validated"),
    [(None, "validated_answer"), ("text", "validated_text"), ("chat", "validated_turn")],
)
def test_the_accepted_replys_event_is_its_kinds(kind: str | None, validated: str) -> None:
    """``stream_finished`` names a reply's kind (none: grounded); the event of the core's
    ``validating -> complete`` is that kind's, as the result document's is."""
    finished = {"kind": kind} if kind else {}
    records = [
        applied(1, 1, "content_delta"),
        applied(2, 2, "done"),
        core(3, "streaming", "terminal_received", "terminal_frame", sequence=2),
        core(4, "validating", "complete", "reply_accepted", sequence=2),
        record(5, "consumer", "stream_finished", status="complete", **finished),
    ]
    events = result_events(build_timeline(records, "s"))
    assert [(e.kind, e.detail) for e in events] == [
        ("provisional_content", "#1"),
        ("local_terminal", "done #2"),
        (validated, ""),
    ]


def test_a_chat_frame_the_chat_rules_refused_made_no_event() -> None:
    """Each chat frame applied is ``part_received`` (its sequence, its part), but one the
    core applied and then refused by a chat rule (here a second finish); the verdict names
    a refused call where ``stream_finished`` has one."""
    records = [
        applied(1, 1, "tool_call"),
        applied(2, 2, "thought"),
        applied(3, 3, "finish"),
        applied(4, 4, "finish"),
        core(5, "streaming", "invalid", "protocol_failure", sequence=4,
             reason="frame_after_finish"),
        record(6, "consumer", "stream_finished", status="invalid", reason="frame_after_finish",
               kind="chat"),
    ]  # fmt: skip
    timeline = build_timeline(records, "s")
    events = result_events(timeline)
    assert [(e.kind, e.detail) for e in events] == [
        ("part_received", "#1 tool_call"),
        ("part_received", "#2 thought"),
        ("part_received", "#3 finish"),
    ]
    assert "part_received ×3 #1..#3 (tool_call, thought, finish) +0.000..+2.000" in (
        render_result_events(events)
    )
    refused_at_a_call = [
        *records[:3],
        record(7, "consumer", "stream_finished", status="invalid", reason="tool_call_undeclared",
               kind="chat", call_index=1, call_id="c2", call_name="shell"),
    ]  # fmt: skip
    verdict = build_timeline(refused_at_a_call, "s").verdict
    assert verdict is not None and verdict.kind == "chat"
    assert verdict.text == "invalid / tool_call_undeclared (call #1 shell, id c2)"
    assert "call_name" not in verdict.stats
