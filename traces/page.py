"""A timeline as one self-contained HTML page, and an index page linking several.

:func:`render_html` returns the page as text: a heading and a summary line, the
picture (``traces/svg.py``), a legend, the table of records (``traces/table.py``) and
the result events with their times (``traces/result_events.py``). No script, no
external style, font or image: it opens offline in any browser. Every text from the
traces is HTML-escaped.

Pure: returns text; ``traces/commands.py`` writes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Final

from replywire.traces.result_events import result_events
from replywire.traces.streams import StreamSummary
from replywire.traces.svg import DEFAULT_MAX_MARKS, render_svg
from replywire.traces.table import Row, summary_line, table_rows
from replywire.traces.timeline import CONSUMER, PRODUCER, Timeline

STYLE: Final = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1b1f24; }
h1 { font-size: 1.3em; margin: 0 0 .3em; } h2 { font-size: 1.1em; margin: 1.2em 0 .3em; }
.summary { margin: 0 0 1em; }
svg { border: 1px solid #d0d7de; background: #fff; max-width: 100%; height: auto; }
svg text { font: 11px sans-serif; fill: #1b1f24; }
svg .lane-bg { fill: #f6f8fa; }
svg .lane-name { font-weight: bold; font-size: 13px; }
svg .row-name { fill: #57606a; }
svg .sent { fill: #0969da; } svg .received { fill: #1a7f37; } svg .applied { fill: #8250df; }
svg .span.delivery { fill: #afb8c1; } svg .span.stalled { fill: #fb8f44; opacity: .6; }
svg .span.paused { fill: #d4a72c; opacity: .7; }
svg .state, svg .note { fill: #6e7781; }
svg .fault { fill: #cf222e; }
svg .label-fault { fill: #cf222e; } svg .label-resume { fill: #8250df; }
svg .resume { stroke: #8250df; stroke-width: 2; stroke-dasharray: 5 3; }
svg .terminal, svg .end { fill: #1b1f24; }
svg .vanished { stroke: #cf222e; stroke-width: 2; } svg .label-vanished { fill: #cf222e; }
svg .verdict { stroke-width: 2; }
svg .accepted { stroke: #1a7f37; fill: #dafbe1; } svg .rejected { stroke: #cf222e; fill: #ffebe9; }
svg .axis { stroke: #8c959f; }
table { border-collapse: collapse; font: 12px ui-monospace, monospace; margin-top: 1em; }
th, td { text-align: left; padding: 1px 8px; border-bottom: 1px solid #eaeef2; }
td { vertical-align: top; white-space: nowrap; } td:last-child { white-space: normal; }
td.t { text-align: right; }
.legend span { display: inline-block; margin-right: 1.2em; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
"""

LEGEND: Final = (
    ("#0969da", "chunk sent"),
    ("#1a7f37", "chunk received"),
    ("#8250df", "frame applied / resume"),
    ("#d4a72c", "reads paused"),
    ("#fb8f44", "stall"),
    ("#1b1f24", "terminal / end"),
    ("#cf222e", "fault / producer vanished (×)"),
    ("#6e7781", "other state change"),
)


def _table(rows: Sequence[Row]) -> str:
    head = "".join(f"<th>{name}</th>" for name in ("+ms", "side", "event", "from -> to", "fields"))
    body = "".join(
        f'<tr><td class="t">{row.at_ms:.3f}</td><td>{escape(row.where)}</td>'
        f"<td>{escape(row.event)}</td><td>{escape(row.change)}</td>"
        f"<td>{escape(row.fields)}</td></tr>"
        for row in rows
    )
    return f'<table id="records"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _result_events(timeline: Timeline) -> str:
    events = result_events(timeline)
    if not events:
        return ""
    rows = "".join(
        f'<tr><td class="t">{event.at_ms:.3f}</td><td>{escape(event.kind)}</td>'
        f"<td>{escape(event.detail)}</td></tr>"
        for event in events
    )
    return (
        "<h2>Result events</h2><p>The result document's <code>events</code> carry no times; "
        "these are the times of the trace records that made them.</p>"
        '<table id="result-events"><thead><tr><th>+ms</th><th>kind</th><th>detail</th></tr>'
        f"</thead><tbody>{rows}</tbody></table>"
    )


def _legend() -> str:
    return (
        '<p class="legend">'
        + "".join(
            f'<span><i style="background:{color}"></i>{name}</span>' for color, name in LEGEND
        )
        + "</p>"
    )


def render_html(timeline: Timeline, max_marks: int = DEFAULT_MAX_MARKS, caption: str = "") -> str:
    """The whole page: heading (with ``caption``, say what the stream was), summary, the
    picture, a legend, the table."""
    started = escape(timeline.started)
    notes = [
        f"Offsets count from the stream's first record ({started}). The axis is not linear: "
        "half the width follows the order of the records, half their time; the ticks give "
        "real offsets. Hover over a mark for its record."
    ]
    if not timeline.has_chunks:
        notes.append(
            "No per-chunk records: no chunk was sent, or the traces are at info (chunk_sent, "
            "chunk_received and frame_applied are written at debug: run both processes with "
            "--log-level debug to see every chunk)."
        )
    paragraphs = "".join(f'<p class="note">{note}</p>' for note in notes)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>replywire timeline: {escape(timeline.stream_id)}</title>"
        f"<style>{STYLE}</style></head><body>"
        f"<h1>Stream {escape(timeline.stream_id)}{escape(f': {caption}' if caption else '')}</h1>"
        f'<p class="summary">{escape(summary_line(timeline))}</p>'
        f"{render_svg(timeline, max_marks)}{_legend()}{paragraphs}"
        f"<h2>Records</h2>{_table(table_rows(timeline))}{_result_events(timeline)}"
        "</body></html>\n"
    )


def render_index(
    summaries: Sequence[StreamSummary], pages: Sequence[str], captions: Sequence[str]
) -> str:
    """A page linking each stream's timeline page (relative links, same directory)."""
    rows = "".join(
        f'<tr><td><a href="{escape(page)}">{escape(s.stream_id)}</a></td>'
        f"<td>{escape(caption or s.case_id or '-')}</td><td>{escape(s.verdict)}</td>"
        f"<td>{s.records[PRODUCER]}</td><td>{s.records[CONSUMER]}</td></tr>"
        for s, page, caption in zip(summaries, pages, captions, strict=True)
    )
    head = "".join(
        f"<th>{name}</th>" for name in ("stream", "run", "verdict", "producer", "consumer")
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>replywire timelines</title><style>{STYLE}</style></head><body>"
        "<h1>Timelines</h1><p>Records per side, and each stream's verdict.</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></body></html>\n"
    )
