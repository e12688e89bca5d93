"""``python -m replywire join-traces`` and ``trace``: both sides' JSON-lines traces as one.

``join-traces`` prints the records, merged in time order, as JSON lines (for
``jq`` and other tools); ``trace`` draws one stream's timeline
(``traces/timeline.py``): a table on stdout (``traces/table.py``) and, with
``--out``, a self-contained HTML page (``traces/page.py``).

Every record of either process carries ``timestamp`` (ISO 8601, UTC, one
format, so the strings sort as the times do), ``side`` and ``stream_id``; the
consumer makes the stream id and the producer binds it to every record of that
stream. Joining is therefore a merge by timestamp, optionally narrowed to one
stream id, one OpenTelemetry trace id (the ``trace_id`` a record carries while a span is
current, with tracing on: docs/traces.md) or one event. Lines that are not JSON
objects (a console-rendered trace, a line still being written) are skipped, and counted
on stderr.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from replywire.shared.terminal_text import shown_json
from replywire.traces.page import render_html, render_index
from replywire.traces.result_events import render_result_events, result_events
from replywire.traces.streams import stream_summaries
from replywire.traces.svg import DEFAULT_MAX_MARKS
from replywire.traces.table import (
    fit,
    render_summaries,
    render_table,
    table_rows,
    terminal_summary_line,
)
from replywire.traces.timeline import Timeline, build_timeline

TRACE_SUFFIX = ".jsonl"
LEADING_KEYS = ("timestamp", "side", "stream_id", "event")


def trace_files(paths: Iterable[Path]) -> list[Path]:
    """The files named, with a directory standing for every ``*.jsonl`` file in it."""
    files: list[Path] = []
    for path in paths:
        files.extend(sorted(path.glob(f"*{TRACE_SUFFIX}")) if path.is_dir() else [path])
    return files


def read_records(path: Path, stream_id: str | None = None) -> tuple[list[dict[str, Any]], int]:
    """The JSON-object lines of one trace file (only those of the streams whose id starts
    with ``stream_id``, if given), and how many lines were skipped. Read line by line: only
    the records kept are held."""
    records, skipped = [], 0
    with path.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if not line.lstrip().startswith("{"):
                skipped += 1  # a console-rendered record, a traceback line, a blank line
                continue
            if stream_id is not None and stream_id not in line:
                continue  # cheap: a record of that stream has its id in its line
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                skipped += 1
                continue
            if not isinstance(record, dict):
                skipped += 1
            elif stream_id is None or str(record.get("stream_id")).startswith(stream_id):
                records.append(record)
    return records, skipped


def join(
    records: Iterable[dict[str, Any]],
    *,
    stream_id: str | None = None,
    event: str | None = None,
    trace_id: str | None = None,
) -> Iterator[dict[str, Any]]:
    """The records of one stream, or of one trace id (or all), in timestamp order; ties
    keep their input order."""
    selected = (
        record
        for record in records
        if (stream_id is None or record.get("stream_id") == stream_id)
        and (trace_id is None or record.get("trace_id") == trace_id)
        and (event is None or record.get("event") == event)
    )
    return iter(sorted(selected, key=lambda record: str(record.get("timestamp", ""))))


def read_traces(
    paths: list[Path], stream_id: str | None = None
) -> tuple[list[dict[str, Any]], int]:
    """The records of every trace file named (directories: their ``*.jsonl``), only one
    stream's if named, and how many lines were skipped."""
    files = trace_files(paths)
    if not files:
        raise FileNotFoundError(f"no trace files in {', '.join(map(str, paths))}")
    records: list[dict[str, Any]] = []
    skipped = 0
    for path in files:
        found, bad = read_records(path, stream_id)
        records += found
        skipped += bad
    return records, skipped


def run_join(
    paths: list[Path],
    stream_id: str | None,
    event: str | None,
    out: TextIO,
    trace_id: str | None = None,
) -> int:
    records, skipped = read_traces(paths, stream_id)
    trace_id = None if trace_id is None else trace_id.lower()
    # On a terminal the refused characters in the records' strings are JSON escapes (the
    # same records, never obeyed: shared.terminal_text); piped, the lines are as written.
    drawn = shown_json if out.isatty() else str
    for record in join(records, stream_id=stream_id, event=event, trace_id=trace_id):
        # The keys a reader scans for first, then the rest as recorded.
        ordered = {key: record[key] for key in LEADING_KEYS if key in record} | record
        out.write(drawn(json.dumps(ordered, ensure_ascii=False)) + "\n")
    return skipped


class UnknownStream(LookupError):
    """No record of the asked stream id in the traces."""


def timeline_page_name(stream_id: str) -> str:
    """A file name for a stream's page (stream ids are free text)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in stream_id)
    return f"timeline-{safe}.html"


def write_timeline(
    timeline: Timeline, path: Path, max_marks: int = DEFAULT_MAX_MARKS, caption: str = ""
) -> int:
    """Write the HTML page; its size in bytes."""
    data = render_html(timeline, max_marks, caption).encode("utf-8")
    path.write_bytes(data)
    return len(data)


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """What ``python -m replywire trace`` was asked for."""

    paths: list[Path]
    stream_id: str | None = None
    html: Path | None = None
    every: bool = False
    max_marks: int = DEFAULT_MAX_MARKS
    #: The stream whose records carry this OpenTelemetry trace id (instead of its id).
    trace_id: str | None = None


def run_trace(request: TraceRequest, out: TextIO) -> int:
    """``python -m replywire trace``: the streams found, or one stream's table (and page)."""
    paths, stream_id, html = request.paths, request.stream_id, request.html
    if request.trace_id is not None and stream_id is None:
        stream_id = stream_of_trace(paths, request.trace_id.lower())
    records, skipped = read_traces(paths, stream_id)
    if stream_id is None:
        summaries = stream_summaries(records)
        out.write(render_summaries(summaries))
        if html is None:
            out.write(
                "\none stream's timeline: add --stream ID (and --out FILE.html for its picture);"
                " every stream's pictures: --out DIR\n"
            )
            return skipped
        captions = {summary.stream_id: "" for summary in summaries}
        index = write_pages(records, html, captions, request.max_marks)
        out.write(f"\ntimelines: {len(summaries)} pages in {html}, linked from {index}\n")
        return skipped
    timeline = build_timeline(records, _one_stream(paths, records, stream_id))
    # On a terminal each row stays on one line (cut at its width); piped, rows are whole.
    width = shutil.get_terminal_size().columns if out.isatty() else None
    out.write(fit(terminal_summary_line(timeline), width) + "\n\n")
    out.write(render_table(table_rows(timeline, every=request.every), width))
    events = result_events(timeline)
    if events:
        out.write("\n" + fit(render_result_events(events).rstrip("\n"), width) + "\n")
    if html is not None:
        size = write_timeline(timeline, html, request.max_marks)
        out.write(f"\ntimeline: {html} ({size} bytes, HTML with one SVG; opens offline)\n")
    return skipped


def stream_of_trace(paths: list[Path], trace_id: str) -> str:
    """The one stream whose records carry ``trace_id``."""
    records, _ = read_traces(paths)
    found = sorted(
        {str(r.get("stream_id")) for r in records if r.get("trace_id") == trace_id} - {"None"}
    )
    if len(found) == 1:
        return found[0]
    if found:
        raise UnknownStream(f"trace {trace_id!r} holds several streams: {', '.join(found)}")
    raise UnknownStream(f"no records of trace {trace_id!r} in the traces")


def _one_stream(paths: list[Path], records: list[dict[str, Any]], asked: str) -> str:
    """The stream id asked for, or the one stream whose id starts with it (a short id)."""
    found = {str(record.get("stream_id")) for record in records}
    if asked in found:
        return asked
    if len(found) == 1:
        return found.pop()
    if found:
        raise UnknownStream(f"{asked!r} starts several stream ids: {', '.join(sorted(found))}")
    everything, _ = read_traces(paths)
    known = ", ".join(s.stream_id for s in stream_summaries(everything)) or "none"
    raise UnknownStream(f"no records of stream {asked!r} in the traces; streams: {known}")


def write_timelines(directory: Path, captions: Mapping[str, str]) -> Path:
    """The page of every stream named (stream id -> what it was) from the traces in
    ``directory``, into it, and an index page linking them (``timelines.html``, returned)."""
    records, _ = read_traces([directory])
    return write_pages(records, directory, captions)


def write_pages(
    records: list[dict[str, Any]],
    directory: Path,
    captions: Mapping[str, str],
    max_marks: int = DEFAULT_MAX_MARKS,
) -> Path:
    """The page of every stream named (stream id -> what it was, or "") into ``directory``
    (made if missing), and ``timelines.html`` linking them (returned)."""
    directory.mkdir(parents=True, exist_ok=True)
    summaries = [s for s in stream_summaries(records) if s.stream_id in captions]
    pages = []
    for summary in summaries:
        page = timeline_page_name(summary.stream_id)
        timeline = build_timeline(records, summary.stream_id)
        caption = captions[summary.stream_id]
        write_timeline(timeline, directory / page, max_marks, caption)
        pages.append(page)
    index = directory / "timelines.html"
    listed = [captions[s.stream_id] for s in summaries]
    index.write_text(render_index(summaries, pages, listed), encoding="utf-8")
    return index
