"""The paced benchmark's pure parts: the longer reply it serves, its bounded search, and the
SSE side's sequence checks and events (in process, no socket).

The paced run itself is a system test (tests/system/test_bench.py, at the tiny size)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.paced import CASE_ID, Search, paced_recording, search
from bench.paced_side import Stream
from bench.sse_client import SseSide
from bench.sse_server import app as sse_app
from bench.sse_server import deltas_by_case
from replywire.runtime.recording_file import load_recording
from replywire.shared.faults import transmit
from replywire.shared.recording import RECORDING_SHA256
from replywire.shared.requests import ReplyRequest
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


def sse_stream(body: str) -> str:
    """The code ``bench.sse_client`` gives a stream whose response is ``body``."""

    def reply(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/reply"
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=body)

    stream = Stream()
    side = SseSide("sse.test", transport=httpx.MockTransport(reply))

    async def read() -> None:
        try:
            await side.read(ReplyRequest.for_case(load_recording(), CASE_ID), stream)
        finally:
            await side.close()

    asyncio.run(read())
    return stream.code


def events(*ids: int, done: int | None = None) -> str:
    body = "".join(f'id: {i}\ndata: "{i:013}"\n\n' for i in ids)
    if done is not None:
        body += f'id: {done}\nevent: done\ndata: {{"content_frames": {done - 1}}}\n\n'
    return body


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (events(1, 2, 3, done=4), "ok"),
        (events(1, 3, done=4), "sequence:gap"),
        (events(1, 2, 2, done=4), "sequence:repeat"),
        # A keep-alive comment between events is no event (httpx-sse hands its blank line
        # over as an empty message with the last id; the SSE spec dispatches nothing).
        (events(1, 2) + ": ping - 2026-12-06 22:00:00\n\n" + events(3, done=4), "ok"),
        (events(1, 2, 3), "incomplete:no_done"),
        (events(1, 2, done=3) + events(4), "sequence:after_done"),
        (events(1, 2, 3).replace('"0', "{0", 1) + events(done=4), "invalid:event"),
        (
            events(1, 2) + 'id: 3\nevent: done\ndata: {"content_frames": 1}\n\n',
            "incomplete:done_count",
        ),
    ],
)
def test_the_sse_client_fails_a_stream_whose_events_are_not_in_order(body: str, code: str) -> None:
    assert sse_stream(body) == code


def test_the_sse_server_sends_the_paced_reply_s_deltas_in_order(tmp_path: Path) -> None:
    """The SSE side's server, in process: one event per content frame the producer sends,
    then done; the client reads every one of them in order."""
    path, sha256 = paced_recording(tmp_path, 30)
    recording = load_recording(path, expected_sha256=sha256)
    stream = Stream()
    side = SseSide("sse.test", transport=httpx.ASGITransport(sse_app(recording)))

    async def read() -> None:
        try:
            await side.read(ReplyRequest.for_case(recording, CASE_ID), stream)
        finally:
            await side.close()

    asyncio.run(read())
    assert (stream.code, len(stream.arrivals)) == ("ok", 30 + 1)
    assert "".join(deltas_by_case(recording)[CASE_ID]) == recording.case(CASE_ID).content
