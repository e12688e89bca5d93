"""``python -m consumer join-traces``: both sides' JSON-lines traces as one, in time order.

Every record of either process carries ``timestamp`` (ISO 8601, UTC, one
format, so the strings sort as the times do), ``side`` and ``stream_id``; the
consumer makes the stream id and the producer binds it to every record of that
stream. Joining is therefore a merge by timestamp, optionally narrowed to one
stream id or one event. Lines that are not JSON objects (a console-rendered
trace, a line still being written) are skipped, and counted on stderr.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

TRACE_SUFFIX = ".jsonl"
LEADING_KEYS = ("timestamp", "side", "stream_id", "event")


def trace_files(paths: Iterable[Path]) -> list[Path]:
    """The files named, with a directory standing for every ``*.jsonl`` file in it."""
    files: list[Path] = []
    for path in paths:
        files.extend(sorted(path.glob(f"*{TRACE_SUFFIX}")) if path.is_dir() else [path])
    return files


def read_records(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The JSON-object lines of one trace file, and how many lines were skipped."""
    records, skipped = [], 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            skipped += 1
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            skipped += 1
    return records, skipped


def join(
    records: Iterable[dict[str, Any]],
    *,
    stream_id: str | None = None,
    event: str | None = None,
) -> Iterator[dict[str, Any]]:
    """The records of one stream (or all), in timestamp order; ties keep their input order."""
    selected = (
        record
        for record in records
        if (stream_id is None or record.get("stream_id") == stream_id)
        and (event is None or record.get("event") == event)
    )
    return iter(sorted(selected, key=lambda record: str(record.get("timestamp", ""))))


def run_join(paths: list[Path], stream_id: str | None, event: str | None, out: TextIO) -> int:
    files = trace_files(paths)
    if not files:
        raise FileNotFoundError(f"no trace files in {', '.join(map(str, paths))}")
    records: list[dict[str, Any]] = []
    skipped = 0
    for path in files:
        found, bad = read_records(path)
        records += found
        skipped += bad
    for record in join(records, stream_id=stream_id, event=event):
        # The keys a reader scans for first, then the rest as recorded.
        ordered = {key: record[key] for key in LEADING_KEYS if key in record} | record
        out.write(json.dumps(ordered, ensure_ascii=False) + "\n")
    return skipped
