"""The streams a set of traces holds, one summary each (``python -m replywire trace`` with
no stream named): its id, case, first record, records per side and verdict."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from replywire.traces.timeline import CONSUMER, PRODUCER, SIDES, classify
from replywire.traces.timestamps import microseconds


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
