"""The trace timeline (`python -m replywire trace`): its table and its picture, mark for mark.

One real producer and real consumer processes write both traces at debug for
six streams: a complete one, a slow reader that pauses, a transport abort the
consumer resumes from, a stall that ends in the idle timeout, and two chat turns of the
recording (`--kind chat`): one accepted, its chat frames drawn as part events, and one
whose call is malformed, the verdict naming the call. The table and
the SVG are parsed back and their marks counted against the trace records;
one page is opened in a headless Chromium (skipped with the reason where none
is installed, never in CI).

One file past 500 lines: the six streams are made once (a module fixture) and every test
reads the same traces.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from replywire.cli import main
from replywire.consumer.reader_states import ReaderState
from replywire.producer.states import StreamInput, StreamState
from replywire.shared.consumer_core import Input
from replywire.traces.page import render_html
from replywire.traces.result_events import render_result_events, result_events
from replywire.traces.svg import PLOT_LEFT, PLOT_RIGHT
from replywire.traces.timeline import MarkKind, SpanKind, build_timeline
from replywire.traces.timestamps import microseconds
from tests.processes import producer, read_trace
from tests.timeline_reading import SVG, counted, parse_table, svg_of

pytestmark = pytest.mark.timeout(180)


PLOT_WIDTH = PLOT_RIGHT - PLOT_LEFT


#: stream id -> the consumer's flags (all at debug, one trace file).
STREAMS = {
    "t-complete": ["--case", "replace-file"],
    "t-paused": [
        "--case", "replace-file", "--chunks", "4", "--queue-size", "1",
        "--process-delay-ms", "1", "--window-bytes", "1024",
    ],
    "t-resumed": [
        "--case", "replace-file", "--fault", "transport-abort", "--resume-backoff-s", "0.05",
    ],
    "t-stalled": [
        "--case", "replace-file", "--fault", "stall", "--stall-ms", "3000",
        "--idle-timeout-s", "0.3",
    ],
    "t-chat": ["--kind", "chat", "--case", "chat-parallel-calls"],
    "t-chat-refused": ["--kind", "chat", "--case", "chat-malformed-arguments"],
}  # fmt: skip
CASES = {"t-chat": "chat-parallel-calls", "t-chat-refused": "chat-malformed-arguments"}


VERDICTS = {
    "t-complete": "complete",
    "t-paused": "complete",
    "t-resumed": "complete",
    "t-stalled": "incomplete / idle_timeout",
    "t-chat": "complete",
    "t-chat-refused": "invalid / tool_call_malformed (call #0 read_file, id call-read)",
}


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(producer trace, consumer trace) of the four streams, both at debug."""
    directory = tmp_path_factory.mktemp("timeline")
    consumer_trace = directory / "consumer.jsonl"
    with producer(directory, "--allow-faults", "--log-level", "debug") as served:
        for stream_id, flags in STREAMS.items():
            done = subprocess.run(
                [
                    *(
                        sys.executable,
                        "-m",
                        "replywire.consumer",
                        "stream",
                        "--target",
                        served.target,
                    ),
                    *("--stream-id", stream_id, "--log-level", "debug"),
                    *("--trace-file", str(consumer_trace), *flags),
                    *("--result", str(directory / f"{stream_id}.json")),
                ],
                cwd=Path(__file__).resolve().parents[2],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode in (0, 3, 6), done.stderr
    return served.trace_path, consumer_trace


def records_of(paths: tuple[Path, Path], stream_id: str) -> list[dict[str, Any]]:
    """The stream's records, producer's file first, in time order (ties: file order)."""
    records = [r for path in paths for r in read_trace(path) if r.get("stream_id") == stream_id]
    return sorted(records, key=lambda r: microseconds(r["timestamp"]) or 0)


def trace_command(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["trace", *args], out)
    return code, out.getvalue()


@pytest.mark.parametrize("stream_id", STREAMS)
def test_table_rows_account_for_every_record(traces: tuple[Path, Path], stream_id: str) -> None:
    code, text = trace_command(str(traces[0]), str(traces[1]), "--stream", stream_id)
    assert code == 0
    case = CASES.get(stream_id, "replace-file")
    assert text.startswith(f"stream {stream_id} ({case}): {VERDICTS[stream_id]};")
    rows = parse_table(text)
    records = records_of(traces, stream_id)
    shown: Counter[tuple[str, str, str]] = Counter()
    for row in rows:
        event, count = counted(row["event"])
        shown[(row["side"].split("/")[0], event, row["from -> to"])] += count
    expected: Counter[tuple[str, str, str]] = Counter(
        (
            r["side"],
            r["event"],
            f"{r['from_state'] or '-'} -> {r['to_state']}" if r["event"] == "state_changed" else "",
        )
        for r in records
    )
    assert shown == expected
    times = [float(row["+ms"]) for row in rows]
    assert times == sorted(times)
    assert times[0] == 0.0


@pytest.mark.parametrize("stream_id", STREAMS)
def test_every_row_table_is_the_records_in_time_order(
    traces: tuple[Path, Path], stream_id: str
) -> None:
    code, text = trace_command(str(traces[0]), str(traces[1]), "--stream", stream_id, "--all")
    assert code == 0
    rows = parse_table(text)
    records = records_of(traces, stream_id)
    assert [(row["side"].split("/")[0], row["event"]) for row in rows] == [
        (r["side"], r["event"]) for r in records
    ]
    first = microseconds(records[0]["timestamp"]) or 0
    assert [row["+ms"] for row in rows] == [
        f"{((microseconds(r['timestamp']) or 0) - first) / 1000:.3f}" for r in records
    ]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_each_row_is_cut_to_its_width(
    traces: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal (80 columns here) no row wraps; piped, the same rows are whole."""
    monkeypatch.setenv("COLUMNS", "80")
    out = Terminal()
    assert main(["trace", str(traces[0]), str(traces[1]), "--stream", "t-resumed"], out) == 0
    _, whole = trace_command(str(traces[0]), str(traces[1]), "--stream", "t-resumed")
    cut, full = out.getvalue().splitlines(), whole.splitlines()
    assert len(cut) == len(full)
    assert max(len(line) for line in cut) == 80 < max(len(line) for line in full)
    for short, line in zip(cut, full, strict=True):
        assert short == line or (short.endswith("…") and line.startswith(short[:-1]))


def test_the_streams_are_listed_without_a_stream_id(traces: tuple[Path, Path]) -> None:
    code, text = trace_command(str(traces[0].parent))
    assert code == 0
    rows = parse_table("\n" + text)
    assert {row["stream id"]: row["verdict"] for row in rows} == VERDICTS


def test_every_streams_page_is_written_to_a_directory(
    traces: tuple[Path, Path], tmp_path: Path
) -> None:
    pages = tmp_path / "pages"
    code, text = trace_command(str(traces[0].parent), "--out", str(pages))
    assert code == 0
    assert text.endswith(
        f"timelines: {len(STREAMS)} pages in {pages}, linked from {pages}/timelines.html\n"
    )
    index = (pages / "timelines.html").read_text(encoding="utf-8")
    for stream_id in STREAMS:
        assert f'href="timeline-{stream_id}.html"' in index
        page = (pages / f"timeline-{stream_id}.html").read_text(encoding="utf-8")
        assert f"<h1>Stream {stream_id}</h1>" in page
    assert sorted(path.name for path in pages.iterdir()) == sorted(
        ["timelines.html", *(f"timeline-{stream_id}.html" for stream_id in STREAMS)]
    )
    # --out naming a file where the directory should be: a usage error.
    code, _ = trace_command(str(traces[0].parent), "--out", str(traces[0]))
    assert code == 2


def test_an_unknown_stream_is_a_usage_error(
    traces: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, text = trace_command(str(traces[0]), str(traces[1]), "--stream", "nope")
    assert (code, text) == (2, "")
    assert (
        "no records of stream 'nope' in the traces; streams: t-complete" in capsys.readouterr().err
    )
    code, _ = trace_command(str(traces[0].parent / "missing.jsonl"))
    assert code == 2
    code, _ = trace_command(str(traces[0]), str(traces[1]), "--stream", "t-")
    assert code == 2
    said = "'t-' starts several stream ids: t-chat, t-chat-refused, t-complete, t-paused"
    assert said in capsys.readouterr().err


def test_a_short_stream_id_is_enough_when_only_one_starts_with_it(
    traces: tuple[Path, Path],
) -> None:
    short = trace_command(str(traces[0]), str(traces[1]), "--stream", "t-res")
    assert short == trace_command(str(traces[0]), str(traces[1]), "--stream", "t-resumed")
    assert short[1].startswith("stream t-resumed ")


def test_lines_that_are_not_records_are_skipped_and_counted(
    traces: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace with a console line, a blank line, a JSON array and a line cut off mid-record
    (one of this stream, one of none): the records are read, the four bad lines counted."""
    mixed = tmp_path / "mixed.jsonl"
    lines = traces[1].read_text(encoding="utf-8").splitlines()
    mixed.write_text(
        "\n".join(
            [
                "2026-11-30T09:18:55Z [info     ] state_changed   side=consumer",
                "",
                *lines,
                "[1, 2]",
                lines[-1][:40],
                '{"stream_id": "t-complete", "event": "cut',
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    code, text = trace_command(str(traces[0]), str(mixed), "--stream", "t-complete")
    assert code == 0
    assert text == trace_command(str(traces[0]), str(traces[1]), "--stream", "t-complete")[1]
    assert "skipped 4 lines that are not JSON records" in capsys.readouterr().err


def test_make_trace(traces: tuple[Path, Path], tmp_path: Path) -> None:
    """The README's `make trace P=... C=... STREAM=... OUT=...`: the command's table and page."""
    page = tmp_path / "t-resumed.html"
    made = subprocess.run(
        [
            *("make", "--no-print-directory", "trace", f"P={traces[0]}", f"C={traces[1]}"),
            *("STREAM=t-resumed", f"OUT={page}"),
        ],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    _, direct = trace_command(str(traces[0]), str(traces[1]), "--stream", "t-resumed")
    assert made.stdout.startswith(direct)
    assert made.stdout.endswith(
        f"timeline: {page} ({page.stat().st_size} bytes, HTML with one SVG; opens offline)\n"
    )


def lane_marks(svg: ET.Element, side: str) -> list[ET.Element]:
    (lane,) = [g for g in svg.iter(f"{SVG}g") if g.get("id") == f"lane-{side}"]
    return [e for e in lane.iter() if {"mark", "span"} & set((e.get("class") or "").split())]


def classes(marks: list[ET.Element]) -> Counter[str]:
    """Marks per kind; a bin or a merged span counts what it stands for (data-n)."""
    found: Counter[str] = Counter()
    for e in marks:
        found[e.get("class", "").split(" ", 1)[1].split()[0]] += int(e.get("data-n", "1"))
    return found


def center(element: ET.Element) -> float:
    """Where on the time axis a mark stands (px)."""
    if element.tag == f"{SVG}rect":
        return float(element.get("x", "0")) + float(element.get("width", "0")) / 2
    return float(element.get("x1") or element.get("cx") or "0")


def expected_marks(records: list[dict[str, Any]]) -> dict[str, Counter[str]]:
    def count(side: str, **wanted: Any) -> int:
        return sum(
            1
            for r in records
            if r["side"] == side and all(r.get(key) == value for key, value in wanted.items())
        )

    p, c = "producer", "consumer"
    faults = sum(
        1
        for r in records
        if r["side"] == p and (r.get("fault") or r.get("to_state") == StreamState.STALLED)
    )
    deliveries = count(p, event="state_changed", from_state=None)
    return {
        p: Counter(
            {
                "sent": count(p, event="chunk_sent"),
                "resume": count(p, input=StreamInput.ATTACH.value),
                "fault": faults,
                "end": deliveries,
                "delivery": deliveries,
                "stalled": count(p, to_state=StreamState.STALLED.value),
            }
        ),
        c: Counter(
            {
                "received": count(c, event="chunk_received"),
                "applied": count(c, event="frame_applied"),
                "paused": count(c, component="reader", to_state=ReaderState.PAUSED.value),
                "resume": count(c, event="stream_resuming"),
                "terminal": count(c, input=Input.TERMINAL_FRAME.value),
                "verdict": count(c, event="stream_finished"),
            }
        ),
    }


@pytest.mark.parametrize("stream_id", STREAMS)
def test_picture_marks_equal_the_records(
    traces: tuple[Path, Path], stream_id: str, tmp_path: Path
) -> None:
    page = tmp_path / "timeline.html"
    code, text = trace_command(
        str(traces[0]), str(traces[1]), "--stream", stream_id, "--out", str(page)
    )
    assert code == 0
    assert f"timeline: {page} ({page.stat().st_size} bytes" in text
    html = page.read_text(encoding="utf-8")
    svg = svg_of(html)
    records = records_of(traces, stream_id)
    expected = expected_marks(records)
    for side in ("producer", "consumer"):
        marks = lane_marks(svg, side)
        found = classes(marks)
        assert {k: found[k] for k in expected[side]} == dict(expected[side]), side
        # Order by time: left to right is earlier to later.
        placed = sorted(
            (center(e), float(e.get("data-t", "0")))
            for e in marks
            if e.get("class", "").startswith("mark") and e.tag != f"{SVG}path"
        )
        times = [t for _, t in placed]
        assert times == sorted(times), side
    # The reads paused are spans; a stream without a pause has none.
    if stream_id == "t-paused":
        assert expected["consumer"]["paused"] > 0
    verdict = "".join(next(g for g in svg.iter(f"{SVG}g") if g.get("id") == "verdict").itertext())
    assert verdict.startswith(VERDICTS[stream_id].split(" / ")[0])
    # Self-contained: nothing to fetch, nothing to run.
    assert "<script" not in html
    assert not re.search(r"""(src|href)\s*=|url\(|@import""", html)
    assert html.count("http") == 1  # the SVG namespace, an identifier, never fetched


def test_rows_past_max_marks_are_drawn_in_bins(traces: tuple[Path, Path], tmp_path: Path) -> None:
    """At the bound every chunk and pause is its own mark; one past it, a row is one bin per
    pixel column (and pauses whose pixels touch one span), each with its count."""
    records = records_of(traces, "t-paused")
    expected = expected_marks(records)
    sent, paused = expected["producer"]["sent"], expected["consumer"]["paused"]
    assert sent > 100 and paused > 20
    for max_marks in (sent, sent - 1, paused, paused - 1):
        page = tmp_path / f"{max_marks}.html"
        code, _ = trace_command(
            *(str(traces[0]), str(traces[1]), "--stream", "t-paused"),
            *("--out", str(page), "--max-marks", str(max_marks)),
        )
        assert code == 0
        svg = svg_of(page.read_text(encoding="utf-8"))
        for side in ("producer", "consumer"):
            found = classes(lane_marks(svg, side))
            assert {k: found[k] for k in expected[side]} == dict(expected[side])
        drawn_sent = [e for e in lane_marks(svg, "producer") if "sent" in e.get("class", "")]
        drawn_paused = [e for e in lane_marks(svg, "consumer") if "paused" in e.get("class", "")]
        # At the bound: one mark each. Past it: bins, each counting its marks (summed above),
        # at most one per pixel column; pauses whose pixels touch are merged (two drawn
        # spans start more than a pixel apart).
        assert all(("bin" in e.get("class", "")) == (max_marks < sent) for e in drawn_sent)
        assert len(drawn_sent) == sent if max_marks >= sent else len(drawn_sent) <= 1 + PLOT_WIDTH
        if max_marks >= paused:
            assert len(drawn_paused) == paused
            assert not any(e.get("data-n") for e in drawn_paused)
        else:
            assert len(drawn_paused) <= 1 + PLOT_WIDTH
    with pytest.raises(ValueError, match="max marks"):  # the page's own check
        render_html(build_timeline(records, "t-paused"), 0)
    with pytest.raises(SystemExit) as usage:  # argparse: a usage error, exit 2
        trace_command(str(traces[0]), "--stream", "t-paused", "--max-marks", "0")
    assert usage.value.code == 2


@pytest.mark.parametrize("stream_id", STREAMS)
def test_result_events_get_the_times_of_their_records(
    traces: tuple[Path, Path], stream_id: str, tmp_path: Path
) -> None:
    """The result document's events, one for one, in order, each at its record's offset:
    in the timeline, on its page, and on the line under the table."""
    result = json.loads((traces[0].parent / f"{stream_id}.json").read_text(encoding="utf-8"))
    timeline = build_timeline(records_of(traces, stream_id), stream_id)
    events = result_events(timeline)
    assert [e.kind for e in events] == [e["kind"] for e in result["events"]]
    details = []
    for event in result["events"]:
        if event["kind"] == "provisional_content":
            details.append(f"#{event['sequence']}")
        elif event["kind"] == "part_received":
            details.append(f"#{event['sequence']} {event['part']}")
        elif event["kind"] == "local_terminal":
            details.append(f"{event['status']} #{event['sequence']}")
        elif event["kind"] in ("transport_error", "consumer_abort"):
            details.append(event["reason"])
        else:
            details.append("")
    assert [e.detail for e in events] == details
    times = [e.at_ms for e in events]
    assert times == sorted(times)
    page = tmp_path / "page.html"
    code, text = trace_command(
        str(traces[0]), str(traces[1]), "--stream", stream_id, "--out", str(page)
    )
    assert code == 0
    assert render_result_events(events) in text
    html = page.read_text(encoding="utf-8")
    listed = html.split('<table id="result-events">', 1)[1].split("</table>", 1)[0]
    assert listed.count("<tr>") == 1 + len(result["events"])


def test_a_chat_stream_shows_its_parts_and_a_refused_call_is_named(
    traces: tuple[Path, Path], tmp_path: Path
) -> None:
    """A chat turn across processes: each chat frame applied is a ``part_received`` event
    with its sequence and part, in the order the recording sent them; the accepted turn is
    ``validated_turn``; a turn refused at a call names the call on every verdict shown."""
    code, text = trace_command(str(traces[0]), str(traces[1]), "--stream", "t-chat")
    assert code == 0
    events = result_events(build_timeline(records_of(traces, "t-chat"), "t-chat"))
    assert [(e.kind, e.detail) for e in events] == [
        ("provisional_content", "#1"),
        ("part_received", "#2 usage"),
        ("part_received", "#3 tool_call"),
        ("part_received", "#4 usage"),
        ("part_received", "#5 tool_call"),
        ("part_received", "#6 usage"),
        ("part_received", "#7 finish"),
        ("local_terminal", "done #8"),
        ("validated_turn", ""),
    ]
    line = text.rstrip("\n").splitlines()[-1]
    assert "part_received ×6 #2..#7 (usage ×3, tool_call ×2, finish) +" in line
    assert re.search(r"local_terminal done #8 \+[\d.]+; validated_turn \+[\d.]+$", line)
    page = tmp_path / "refused.html"
    code, text = trace_command(
        str(traces[0]), str(traces[1]), "--stream", "t-chat-refused", "--out", str(page)
    )
    assert code == 0
    named = "invalid / tool_call_malformed (call #0 read_file, id call-read)"
    assert text.startswith(f"stream t-chat-refused (chat-malformed-arguments): {named};")
    assert "validated_turn" not in text
    box = next(g for g in svg_of(page.read_text()).iter(f"{SVG}g") if g.get("id") == "verdict")
    assert "".join(box.itertext()) == "invalidtool_call_malformedcall #0 read_file, id call-…"
    code, listed = trace_command(str(traces[0].parent))
    assert "t-chat-refused  chat-malformed-arguments" in listed and named in listed


def test_resumes_and_faults_are_labelled_with_their_attempts(traces: tuple[Path, Path]) -> None:
    records = [r for path in traces for r in read_trace(path)]
    timeline = build_timeline(records, "t-resumed")
    labels = [(e.side, e.label) for e in timeline.entries if e.kind is MarkKind.RESUME]
    assert labels == [
        ("consumer", "resume #1 after #2"),
        ("producer", "attach after #2 (delivery 2)"),
    ]
    faults = [e.label for e in timeline.entries if e.kind is MarkKind.FAULT]
    assert faults == ["fault transport-abort"]
    ends = [e.label for e in timeline.entries if e.kind is MarkKind.END]
    assert ends == ["aborted (controlled_transport_abort)", "completed"]
    (terminal,) = [e.label for e in timeline.entries if e.kind is MarkKind.TERMINAL]
    assert terminal == "done #10"
    stalled = build_timeline(records, "t-stalled")
    assert [s.kind for s in stalled.spans] == [SpanKind.DELIVERY, SpanKind.STALLED]
    assert stalled.verdict is not None and not stalled.verdict.accepted


def browser() -> str | None:
    return next(
        (path for name in ("chromium", "chromium-browser") if (path := shutil.which(name))),
        None,
    )


def run_browser(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    """Chromium headless, offline, in its own session: what is left of it is killed after."""
    command = [
        browser() or "chromium",
        *("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"),
        *("--disable-component-update", "--disable-sync", "--no-first-run"),
        "--disable-dev-shm-usage",  # containers often have a small /dev/shm
        f"--user-data-dir={profile}",
        *args,
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = process.communicate(timeout=90)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def test_a_browser_renders_the_timeline(traces: tuple[Path, Path], tmp_path: Path) -> None:
    if browser() is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have chromium: .ci/run installs it")
        print("SKIPPED: no chromium here (apt-get install chromium); the render check needs one")
        pytest.skip("no chromium: the render check needs a browser (apt-get install chromium)")
    page = tmp_path / "timeline.html"
    code, _ = trace_command(
        str(traces[0]), str(traces[1]), "--stream", "t-resumed", "--out", str(page)
    )
    assert code == 0
    url = page.resolve().as_uri()
    dom = run_browser(["--dump-dom", url], tmp_path / "profile-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    expected = expected_marks(records_of(traces, "t-resumed"))
    rendered = svg_of(dom.stdout)
    for side in ("producer", "consumer"):
        found = classes(lane_marks(rendered, side))
        assert {k: found[k] for k in expected[side]} == dict(expected[side])
    shot = tmp_path / "timeline.png"
    picture = run_browser(
        ["--window-size=1250,900", f"--screenshot={shot}", url], tmp_path / "profile-shot"
    )
    assert picture.returncode == 0, picture.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # Drawn, not blank: a blank page's pixels are one colour; lanes, marks, text are many.
    assert len(set(png_pixels(data))) > 64


def png_pixels(data: bytes) -> bytes:
    """The decompressed image data of a PNG (its IDAT chunks), enough to see it is drawn."""
    at, idat = 8, []
    while at < len(data):
        length = int.from_bytes(data[at : at + 4], "big")
        kind = data[at + 4 : at + 8]
        if kind == b"IDAT":
            idat.append(data[at + 8 : at + 8 + length])
        at += 12 + length
    return zlib.decompress(b"".join(idat))
