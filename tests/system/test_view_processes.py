"""The live view: what it draws for a complete, a truncated, a refused and a disconnected
stream, into a recorded console (in-process, real producer processes) and on a real
pseudo-terminal (the command line, as a person runs it); every reason code in words."""

from __future__ import annotations

import asyncio
import difflib
import io
import json
import os
import re
import signal
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from replywire.consumer.client import stream_reply
from replywire.consumer.explain import Facts
from replywire.consumer.options import StreamOptions
from replywire.consumer.view import LiveView
from replywire.runtime.recording_file import load_chat_recording_or_explain, load_recording
from replywire.shared.faults import Fault, FaultKind
from replywire.shared.requests import ReplyRequest
from replywire.shared.result import StreamResult
from replywire.shared.status import Status
from replywire.shared.wire.chunking import ChunkPlan
from tests.processes import ROOT, consumer_on_a_pty, producer
from tests.redis_server import free_port
from tests.runs import once_per_run
from tests.timeline_reading import masked, rejected_rows, timeline_shape
from tools import view_samples

pytestmark = pytest.mark.timeout(120)


ACCEPTED = [
    "╭─ accepted ───────────────────────────────────────────────────────────────────╮",
    "│ Yes, an existing file is overwritten.                                        │",
    "│                                                                              │",
    "│ [1] path-write · path-write:b71a2d18a53d86bf                                 │",
    "│   https://docs.python.org/3.12/library/pathlib.html#pathlib.Path.write_text  │",
    "╰──────────────────────────────────────────────────────────────────────────────╯",
]


def recorded_console() -> Console:
    """A terminal (the live part draws) whose every draw is kept for export_text()."""
    return Console(
        record=True, file=io.StringIO(), force_terminal=True, width=80, color_system=None
    )


def viewed(
    request: ReplyRequest,
    options: StreamOptions,
    facts: Facts,
    meanwhile: Callable[[LiveView], Coroutine[Any, Any, None]] | None = None,
) -> tuple[StreamResult, str]:
    """One stream through a real gRPC connection with the view drawing; what it drew."""
    view = LiveView(recorded_console(), facts)

    async def run() -> StreamResult:
        async with view.showing():
            side = asyncio.create_task(meanwhile(view)) if meanwhile else None
            result = await stream_reply(request, options, observer=view.attach)
            if side is not None:
                await side
        return result

    result = asyncio.run(run())
    view.show_verdict(result, None)
    return result, view.console.export_text()


def request_for(stream_id: str, **fields: Any) -> ReplyRequest:
    return ReplyRequest.for_case(load_recording(), "replace-file", stream_id=stream_id, **fields)


def test_a_complete_stream_is_drawn_provisional_then_accepted(tmp_path: Path) -> None:
    request = request_for("view-complete", plan=ChunkPlan.parse("20"), chunk_interval_ms=15)
    with producer(tmp_path) as served:
        options = StreamOptions(target=served.target)
        result, drawn = viewed(request, options, Facts(target=served.target))
    assert result.status is Status.COMPLETE
    lines = drawn.splitlines()
    assert "╭─ provisional: not validated yet ─" in drawn
    assert any(re.match(r"● streaming  frames \d+  \d+ B  queue \d/8  reads ", ln) for ln in lines)
    # Text arrived while the stream was still open (a draw between the first and last frame).
    assert any('"status": "answered",' in ln for ln in lines[: lines.index(ACCEPTED[0])])
    final = lines[lines.index(ACCEPTED[0]) - 1]
    assert re.fullmatch(
        r"complete  frames 10  943 B  paused \d+×  reconnects 0  \d+\.\d s  stream view-complete",
        final,
    )
    end = lines.index(ACCEPTED[0])
    assert lines[end : end + len(ACCEPTED)] == ACCEPTED
    assert lines[-1] == "the full result document: add --result FILE"


def test_a_truncated_stream_is_invalid_with_its_partial_text_and_why(tmp_path: Path) -> None:
    request = request_for("view-truncated", fault=Fault(kind=FaultKind.TRUNCATE_TAIL))
    with producer(tmp_path, "--allow-faults") as served:
        result, drawn = viewed(
            request,
            StreamOptions(target=served.target),
            Facts(target=served.target, fault="truncate-tail"),
        )
    assert (result.status, result.reason) == (Status.INVALID, "truncated_frame")
    assert rejected_rows(drawn, "not accepted: invalid") == [
        "status  invalid · truncated_frame",
        "why     The stream stopped in the middle of a frame: its last bytes never",
        "        arrived.",
        "text    partial (107 chars kept, not validated)",
        "        {",
        '        "status": "answered",',
        '        "answer": "Yes, an existing file is overwritten.",',
        '        "source_ids": [',
        '        "path-write"',
        "        ]",
        "        }",
        "hint    --fault truncate-tail asked the producer for this: the consumer",
        "        caught it",
    ]


def test_a_refused_request_says_how_to_start_a_producer_that_serves_it(tmp_path: Path) -> None:
    request = request_for("view-refused", fault=Fault(kind=FaultKind.TRUNCATE_TAIL))
    with producer(tmp_path) as served:  # faults not allowed
        result, drawn = viewed(
            request, StreamOptions(target=served.target), Facts(target=served.target)
        )
    assert (result.status, result.reason) == (Status.REFUSED, "faults_not_allowed")
    rows = rejected_rows(drawn, "not accepted: refused")
    assert rows[:2] == [
        "status  refused · faults_not_allowed",
        "why     A fault was asked of a producer that was not started to allow",
    ]
    assert "text    (nothing arrived)" in rows
    port = served.target.rsplit(":", 1)[1]
    hint_text = " ".join(
        " ".join(rows[rows.index(next(r for r in rows if r.startswith("hint"))) :]).split()
    )
    assert hint_text == (
        f"hint the producer refuses faults: start it with `make run-producer PORT={port} "
        f'ARGS="--allow-faults"`'
    )


def test_a_chat_turn_is_drawn_call_by_call_then_accepted(tmp_path: Path) -> None:
    """The recording's two parallel calls, 20-byte chunks 25 ms apart: each call is
    drawn under the text while it streams, provisional; then the accepted turn."""
    case = "chat-parallel-calls"
    request = ReplyRequest(
        case_id=case,
        binding=load_chat_recording_or_explain().case(case).binding,
        plan=ChunkPlan.parse("20"),
        chunk_interval_ms=25,
        stream_id="view-chat",
    )
    with producer(tmp_path) as served:
        result, drawn = viewed(request, StreamOptions(target=served.target), Facts())
    assert result.status is Status.COMPLETE
    lines = drawn.splitlines()
    end = lines.index(next(ln for ln in lines if ln.startswith("╭─ accepted ")))
    live = "\n".join(lines[:end])
    # While it streamed: each call drawn with its arguments before the verdict, provisional.
    assert "╭─ provisional: not validated yet ─" in live
    assert re.search(r"^│ call +#0 get_weather · c1 ", live, re.MULTILINE)
    assert re.search(r'^│ +\{"city":"Oslo"\} ', live, re.MULTILINE)
    assert re.search(r"^│ call +#1 get_weather · c2 ", live, re.MULTILINE), live
    assert re.fullmatch(
        r"complete  frames 8  \d+ B  paused \d+×  reconnects 0  \d+\.\d s  stream view-chat",
        lines[end - 1],
    )
    assert [ln[2:-1].rstrip() for ln in lines[end + 1 : end + 9]] == [
        "text    Checking both.",
        "call    #0 get_weather · c1",
        '        {"city": "Oslo"}',
        "call    #1 get_weather · c2",
        '        {"city": "Lima"}',
        "usage   prompt 31 · cached 0 · completion 18 · thoughts 0 · tool-use 0 ·",
        "        total 49",
        "finish  STOP",
    ]


def test_no_producer_is_an_error_with_the_command_that_starts_one() -> None:
    target = f"127.0.0.1:{free_port()}"
    result, drawn = viewed(
        request_for("view-nobody"), StreamOptions(target=target), Facts(target=target)
    )
    assert (result.status, result.reason) == (Status.ERROR, "transport_io_error")
    rows = rejected_rows(drawn, "not accepted: error")
    assert rows[:2] == [
        "status  error · transport_io_error",
        "why     The connection to the producer failed.",
    ]
    assert any(row.startswith("detail  UNAVAILABLE: ") for row in rows)
    said = " ".join(" ".join(rows).split())
    port = target.rsplit(":", 1)[1]
    assert f"hint no producer at {target}: start one with `make run-producer PORT={port}`" in said


def test_a_killed_producer_leaves_an_error_with_the_partial_text(tmp_path: Path) -> None:
    request = request_for("view-killed", plan=ChunkPlan.parse("20"), chunk_interval_ms=40)
    options = StreamOptions(target="", resume_attempts=1, resume_backoff_s=0.05)
    with producer(tmp_path) as served:
        target = served.target

        async def kill_after_two_frames(view: LiveView) -> None:
            deadline = time.monotonic() + 30
            while view.progress().frames < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            os.kill(served.process.pid, signal.SIGKILL)

        options = StreamOptions(target=target, resume_attempts=1, resume_backoff_s=0.05)
        result, drawn = viewed(request, options, Facts(target=target), kill_after_two_frames)
    assert (result.status, result.reason) == (Status.ERROR, "transport_io_error")
    assert result.provisional_content
    rows = rejected_rows(drawn, "not accepted: error")
    assert rows[1] == "why     The connection to the producer failed."
    assert any(
        row.startswith(f"text    partial ({len(result.provisional_content)} chars kept")
        for row in rows
    )
    said = " ".join(" ".join(rows).split())
    assert f"hint the connection to {target} broke mid-stream and a resume did not mend it" in said


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def on_a_terminal(argv: list[str], timeout: float = 60.0) -> tuple[int, str]:
    """``python -m consumer ARGV`` with stdout and stderr on one 80x24 pseudo-terminal:
    its exit code and everything it drew (escape codes removed)."""
    code, drawn = consumer_on_a_pty(argv, rows=24, columns=80, timeout=timeout)
    # A live redraw erases its lines (ESC [2K): each erase starts a new line here.
    text = drawn.decode("utf-8", "replace").replace("\x1b[2K", "\n")
    return code, ANSI.sub("", text)


def test_on_a_terminal_the_stream_is_drawn_and_the_document_goes_to_result(
    tmp_path: Path,
) -> None:
    document = tmp_path / "result.json"
    with producer(tmp_path) as served:
        code, drawn = on_a_terminal(
            ["stream", "--case", "replace-file", "--target", served.target, "--chunks", "20",
             "--chunk-interval-ms", "15", "--stream-id", "pty-complete", "--result", str(document)]
        )  # fmt: skip
    assert code == 0, drawn
    assert "provisional: not validated yet" in drawn
    assert re.search(r"● streaming  frames \d+  \d+ B  queue \d/8  reads (flowing|paused)", drawn)
    lines = drawn.splitlines()
    end = lines.index(ACCEPTED[0])
    assert lines[end : end + len(ACCEPTED)] == ACCEPTED
    assert lines[end + len(ACCEPTED)] == f"result document: {document}"
    assert '"accepted_answer"' not in drawn, "no JSON on the terminal"
    assert json.loads(document.read_text())["status"] == "complete"
    # The trace is on the same terminal, one short line per record, above the view.
    assert re.search(
        r"^\d\d:\d\d:\d\d\.\d{3} state_changed reader: connecting -> streaming "
        r"input=first_message · pty-comp$",
        drawn,
        re.MULTILINE,
    )


def test_on_a_terminal_without_a_producer_the_hint_names_the_command() -> None:
    target = f"127.0.0.1:{free_port()}"
    code, drawn = on_a_terminal(
        ["stream", "--case", "replace-file", "--target", target, "--resume-attempts", "0"]
    )
    assert code == 5
    said = " ".join(drawn.replace("│", " ").split())
    assert "not accepted: error" in said
    assert f"no producer at {target}: start one with `make run-producer PORT=" in said


def test_on_a_terminal_a_refused_chat_turn_names_its_call(tmp_path: Path) -> None:
    """`--kind chat --case chat-malformed-arguments` as a person runs it: not accepted,
    the reason in words, the call refused named, and the partial turn kept."""
    with producer(tmp_path) as served:
        code, drawn = on_a_terminal(
            ["stream", "--kind", "chat", "--case", "chat-malformed-arguments",
             "--target", served.target, "--stream-id", "pty-chat"]
        )  # fmt: skip
    assert code == 6, drawn
    rows = rejected_rows(drawn, "not accepted: invalid")
    assert rows[0] == "status  invalid · tool_call_malformed"
    assert rows[2:] == [
        "call    #0 read_file · call-read",
        "text    partial (17 chars kept, not validated)",
        "        Reading notes.py.",
        "turn    partial (kept as it came, not validated)",
        "call    #0 read_file · call-read",
        '        {"path":',
        "usage   prompt 18 · cached 0 · completion 5 · thoughts 0 · tool-use 0 ·",
        "        total 23",
        "finish  tool_calls",
    ]


def test_a_slow_reader_on_a_terminal_prints_a_few_lines(tmp_path: Path) -> None:
    """`--chunks 1 --process-delay-ms 1`: hundreds of pauses, a few summary lines whose
    counts add up to the result's."""
    document = tmp_path / "result.json"
    with producer(tmp_path) as served:
        code, drawn = on_a_terminal(
            ["stream", "--case", "replace-file", "--target", served.target, "--chunks", "1",
             "--process-delay-ms", "1", "--no-view", "--result", str(document)]
        )  # fmt: skip
    assert code == 0, drawn
    result = json.loads(document.read_text())
    paused = result["flow"]["reads_paused"]
    lines = drawn.splitlines()
    episodes = [int(m.group(1)) for ln in lines if (m := re.search(r"episode pauses=(\d+)", ln))]
    assert paused > 100, "the reader was slow"
    assert sum(episodes) == paused
    assert len(lines) == 7 + len(episodes), drawn


#: The tour's samples live in docs/tour.md (the README keeps only the demo's).
README = (ROOT / "docs/tour.md").read_text(encoding="utf-8")


def readme_section(name: str) -> str:
    return README.split(f"<!-- generated:{name} -->\n", 1)[1].split(f"<!-- /generated:{name}", 1)[0]


@pytest.fixture(scope="session")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The tour's samples run again (some 25 s of real runs): once, for the tests below."""
    samples: dict[str, str] = once_per_run(tmp_path_factory, "tour-samples", view_samples.samples)
    return samples


def test_the_readme_view_samples_are_real_runs(fresh: dict[str, str]) -> None:
    """The README's tour samples, run again (a real producer, stopped and restarted, the
    consumer command line, make trace): the same, times, ports, stream ids and what
    depends on timing aside. Regenerate: python -m tools.docs --update docs/tour.md --run."""
    assert set(fresh) == set(view_samples.NAMES)
    for name, sample in fresh.items():
        shown = readme_section(name)
        if name.startswith("trace-"):
            assert timeline_shape(sample) == timeline_shape(shown), name
        else:
            assert masked(sample, name) == masked(shown, name), differences(name, shown, sample)


def differences(name: str, shown: str, fresh: str) -> str:
    """What differs, masked, as a diff from the README's sample to the fresh run's."""
    before, after = ([*trace, *rest] for trace, rest in (masked(shown, name), masked(fresh, name)))
    diff = difflib.unified_diff(before, after, "README", "this run", lineterm="")
    return f"{name}:\n" + "\n".join(diff) + f"\n--- this run, unmasked:\n{fresh}"


def test_the_tour_stops_and_restarts_the_producer_for_real(fresh: dict[str, str]) -> None:
    """What the tour's step 5 says: resumed, the stream is accepted after a new delivery
    from a new producer process; not restarted, it ends in error with its partial text."""
    resumed = timeline_shape(fresh["trace-resumed"])
    assert resumed[1] == "complete"
    assert ("producer", "state_changed", "streaming -> shutdown") in resumed[2]
    assert ("consumer", "stream_resuming", "") in resumed[2]
    assert "2 deliveries" in fresh["trace-resumed"].split("\n")[2]
    killed = timeline_shape(fresh["trace-killed"])
    assert killed[1] == "error / transport_io_error"
    assert "│ text    partial (" in fresh["view-killed"]
    assert re.search(r"reconnects [1-9]", fresh["view-resumed"])
