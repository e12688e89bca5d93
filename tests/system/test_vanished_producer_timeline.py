"""The timeline of a producer killed mid-stream (SIGKILL: nothing logged after): its bars
end where its trace ends, not at the consumer's end, and the timeline says it vanished.

A real producer at debug stalls on purpose (``--fault stall``); once its trace holds the
stall, it is killed with SIGKILL; the consumer, its stream cut, tries once to resume
and ends with its verdict. Both traces then go through ``python -m replywire trace``:
the text (its summary line and table) and the page (its SVG), read back.
"""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from replywire.children import stop_process
from replywire.cli import main
from replywire.producer.states import StreamState
from replywire.traces.svg import render_svg
from replywire.traces.timeline import SpanKind, build_timeline
from tests.processes import ROOT, producer, read_trace, wait_for
from tests.timeline_reading import SVG, parse_table, svg_of

pytestmark = pytest.mark.timeout(120)

STREAM = "stall-kill"


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(producer trace, consumer trace) of one stream whose producer was SIGKILLed while
    it stalled."""
    directory = tmp_path_factory.mktemp("vanished")
    consumer_trace = directory / "consumer.jsonl"
    with producer(directory, "--allow-faults", "--log-level", "debug") as served:
        consumer = subprocess.Popen(
            [
                *(sys.executable, "-m", "replywire.consumer", "stream", "--target", served.target),
                *("--stream-id", STREAM, "--case", "replace-file", "--log-level", "debug"),
                *("--fault", "stall", "--stall-ms", "60000", "--idle-timeout-s", "90"),
                *("--resume-attempts", "1", "--resume-backoff-s", "0.05"),
                *("--trace-file", str(consumer_trace), "--result", str(directory / "r.json")),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(lambda: (StreamState.STREAMING, StreamState.STALLED) in served.states(STREAM))
            served.process.send_signal(signal.SIGKILL)
            served.process.wait(timeout=30)
            assert consumer.wait(timeout=60) == 5  # error: the producer is gone
        finally:
            stop_process(consumer)
    return served.trace_path, consumer_trace


def test_the_producers_bars_end_where_its_trace_ends(traces: tuple[Path, Path]) -> None:
    records = [r for path in traces for r in read_trace(path)]
    timeline = build_timeline(records, STREAM)
    producer_last = max(e.at_ms for e in timeline.entries if e.side == "producer")
    consumer_last = max(e.at_ms for e in timeline.entries if e.side == "consumer")
    assert timeline.verdict is not None
    assert timeline.verdict.text == "error / transport_io_error"
    assert timeline.vanished_ms == producer_last < consumer_last == timeline.verdict.at_ms
    (delivery,) = timeline.spans_of(SpanKind.DELIVERY)
    (stall,) = timeline.spans_of(SpanKind.STALLED)
    assert (delivery.end_ms, stall.end_ms) == (producer_last, producer_last)
    assert delivery.label == "delivery 1: no final state (vanished)"
    assert stall.label == "stalled until the producer's trace ends"
    # No end mark: the producer's last state, streaming -> stalled, is no final state.
    assert not [e for e in timeline.entries if e.side == "producer" and e.kind == "end"]


def test_the_text_says_the_producer_vanished(traces: tuple[Path, Path]) -> None:
    out = io.StringIO()
    assert main(["trace", str(traces[0]), str(traces[1]), "--stream", STREAM], out) == 0
    summary, table = out.getvalue().split("\n", 1)
    timeline = build_timeline([r for path in traces for r in read_trace(path)], STREAM)
    assert summary.startswith(f"stream {STREAM} (replace-file): error / transport_io_error; ")
    assert (
        f"1 delivery, vanished at +{timeline.vanished_ms:.3f} ms (no final state in its trace); "
        "consumer: "
    ) in summary
    rows = parse_table(table)
    producer_rows = [row for row in rows if row["side"] == "producer"]
    assert producer_rows[-1]["from -> to"] == "streaming -> stalled"
    assert rows[-1]["side"] == "consumer"  # the consumer went on after the producer's end


def test_the_picture_ends_the_producers_bars_at_its_cross(
    traces: tuple[Path, Path], tmp_path: Path
) -> None:
    page = tmp_path / "stall-kill.html"
    args = ["trace", str(traces[0]), str(traces[1]), "--stream", STREAM, "--out", str(page)]
    assert main(args, io.StringIO()) == 0
    svg = svg_of(page.read_text(encoding="utf-8"))
    timeline = build_timeline([r for path in traces for r in read_trace(path)], STREAM)
    assert timeline.vanished_ms is not None
    (lane,) = [g for g in svg.iter(f"{SVG}g") if g.get("id") == "lane-producer"]
    (cross,) = [g for g in lane.iter(f"{SVG}g") if g.get("class") == "vanished"]
    assert float(cross.get("data-t", "")) == pytest.approx(timeline.vanished_ms, abs=0.001)
    cross_x = float(next(cross.iter(f"{SVG}line")).get("x1", ""))
    bars = [
        e
        for e in lane.iter(f"{SVG}rect")
        if (e.get("class") or "") in ("span delivery", "span stalled")
    ]
    assert len(bars) == 2
    for bar in bars:
        assert float(bar.get("data-end", "")) == pytest.approx(timeline.vanished_ms, abs=0.001)
        end_x = float(bar.get("x", "")) + float(bar.get("width", ""))
        assert end_x <= cross_x + 1.0  # not on to the consumer's end
    assert not [e for e in lane.iter() if "mark end" in (e.get("class") or "")]
    assert "vanished: no final state" in "".join(lane.itertext())
    # The consumer's verdict is to the right of the cross.
    (verdict_lane,) = [g for g in svg.iter(f"{SVG}g") if g.get("id") == "lane-consumer"]
    (verdict,) = [e for e in verdict_lane.iter() if "mark verdict" in (e.get("class") or "")]
    assert float(verdict.get("x1", "")) > cross_x


def test_a_producer_that_ended_its_stream_did_not_vanish(traces: tuple[Path, Path]) -> None:
    """The same records with the stream's final state added: no cross, no vanishing."""
    records = [r for path in traces for r in read_trace(path)]
    last = max(
        (r for r in records if r.get("side") == "producer" and r.get("stream_id") == STREAM),
        key=lambda r: r["timestamp"],
    )
    ended = {
        **last,
        "event": "state_changed",
        "from_state": "stalled",
        "to_state": "shutdown",
        "input": "shutdown",
    }
    timeline = build_timeline([*records, ended], STREAM)
    assert timeline.vanished_ms is None
    (delivery,) = timeline.spans_of(SpanKind.DELIVERY)
    assert delivery.label.startswith("delivery 1: shutdown")
    assert 'class="vanished"' not in render_svg(timeline)
    assert ET.fromstring(render_svg(timeline)) is not None
