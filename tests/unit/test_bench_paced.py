"""The paced benchmark's pure parts: the longer reply it serves, and its bounded search.

The paced run itself is a system test (tests/system/test_bench.py, at the tiny size)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.paced import CASE_ID, Search, paced_recording, search
from replywire.runtime.recording_file import load_recording
from replywire.shared.faults import transmit
from replywire.shared.recording import RECORDING_SHA256
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan


@pytest.mark.parametrize("frames", [60, 80, 300])
def test_the_paced_reply_has_the_frames_asked_for_and_the_same_binding(
    tmp_path: Path, frames: int
) -> None:
    path, sha256 = paced_recording(tmp_path, frames)
    assert sha256 != RECORDING_SHA256
    paced, recorded = load_recording(path, expected_sha256=sha256), load_recording()
    case = paced.case(CASE_ID)
    assert case.binding == recorded.case(CASE_ID).binding
    chunks = transmit(case, wire=WireFormat.LENGTH_PREFIXED, plan=ChunkPlan.parse("frame")).chunks
    assert len(chunks) == frames + 1  # one content frame a chunk, then done
    # The reply is still the recorded one's shape, its answer longer.
    assert case.content.startswith('{"status": "not_in_docs", "answer": "The provided')


def row(held: bool) -> dict[str, Any]:
    return {"held": held, "added_ms_p99": 5.0 if held else 50.0}


def test_the_search_bisects_between_held_and_not_within_its_steps() -> None:
    table = {100: row(True), 1_000: row(False), 3_000: row(False)}
    holds_up_to = 640
    asked: list[int] = []

    def probe(n: int) -> dict[str, Any]:
        asked.append(n)
        return row(n <= holds_up_to)

    found = Search(table, steps=4, grain=10)
    while (n := found.next_n()) is not None:
        found.record(n, probe(n))
    assert asked == [550, 770, 660, 600]
    result = found.result()
    assert (result["largest_held"], result["smallest_not_held"]) == (600, 660)
    assert result["bounded_by_the_table"] is False
    assert [p["held"] for p in result["probes"]] == [True, False, False, True]


def test_the_search_is_bounded_by_the_table_and_by_its_grain() -> None:
    assert Search({3: row(True), 4: row(True)}, steps=4, grain=1).next_n() is None
    bounded = Search({100: row(True)}, steps=4, grain=10).result()
    assert (bounded["largest_held"], bounded["bounded_by_the_table"]) == (100, True)
    # Nothing held: from 0; neighbours at the grain: no probe left between them.
    assert Search({100: row(False)}, steps=4, grain=10).next_n() == 50
    assert Search({100: row(True), 110: row(False)}, steps=4, grain=10).next_n() is None


def test_two_sides_searches_alternate() -> None:
    tables = {
        "replywire": {100: row(True), 1_000: row(False)},
        "bare pair": {100: row(True), 1_000: row(False)},
        "records only": {4: row(True)},
    }
    order: list[tuple[str, int]] = []

    def probe(side: str, n: int) -> dict[str, Any]:
        order.append((side, n))
        return row(True)

    found = search(tables, 2, 10, probe)
    # One probe of each side a turn, the order rotated each turn.
    assert order == [("replywire", 550), ("bare pair", 550), ("bare pair", 770), ("replywire", 770)]
    assert found["replywire"]["largest_held"] == found["bare pair"]["largest_held"] == 770
    assert found["records only"]["bounded_by_the_table"] is True
