"""Nothing a peer or a model sends reaches a terminal as a control sequence.

The rule (``shared/terminal_text.py``) for any text; then every place that draws text
from elsewhere: the console log lines, ``trace``'s table, the demo table, the view's
pieces; then the real thing: ``python -m consumer`` on a pseudo-terminal against a
hostile producer process (``tests/hostile_producer.py``) and fed a hostile trace file.
On the terminal no refused character arrives raw, their visible forms do, and the JSON
(``--result``, the document on stdout, ``join-traces``) holds the exact text.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text

from consumer.view import Above
from harness.children import read_listening_port, stop_process
from harness.demo import render as render_demo
from runtime.console_logs import OWN_STYLES, ConsoleLines
from runtime.logs import configure_logging
from shared.errors import scrubbed_detail
from shared.questions import build_question_binding
from shared.terminal_text import CUT_MARK, REFUSED_IN_TEXT, shown_json, shown_line, shown_text
from tests import hostile_producer as hostile
from tests.processes import ROOT
from traces.page import render_html
from traces.result_events import render_result_events, result_events
from traces.table import render_summaries, render_table, table_rows, terminal_summary_line
from traces.timeline import build_timeline, stream_summaries

pytestmark = pytest.mark.timeout(120)


def refused(char: str, *, multiline: bool = False) -> bool:
    """The refused ranges, written out again here (not the module's patterns)."""
    if multiline and char in "\n\t":
        return False
    code = ord(char)
    return (
        code < 0x20
        or 0x7F <= code <= 0x9F
        or 0x2028 <= code <= 0x202E
        or 0x2066 <= code <= 0x2069
        or 0xD800 <= code <= 0xDFFF
    )


#: One of each kind, raw: every C0 control, DEL, every C1 control, the bidi
#: embeddings, overrides and isolates, the line separators, a few surrogates.
REFUSED = [
    *map(chr, range(0x20)),
    *map(chr, range(0x7F, 0xA0)),
    *map(chr, range(0x2028, 0x202F)),
    *map(chr, range(0x2066, 0x206A)),
    "\ud800",
    "\udfff",
    "\udc80",
]
#: Any text, with the refused characters (and markup brackets) far more often than chance.
TEXT = st.text(
    alphabet=st.one_of(
        st.characters(exclude_categories=()),  # surrogates included
        st.sampled_from(REFUSED),
        st.sampled_from(["[", "]", "/", "\\", "b", "\u200d", "é", "☃"]),
    ),
    max_size=400,
)


def assert_no_refused_bytes(shown: str, *, multiline: bool = False) -> None:
    """Writable as UTF-8 (no lone surrogate) and no byte or character in the refused
    ranges (newline and tab allowed in multi-line text)."""
    data = shown.encode("utf-8")  # raises on a surrogate
    allowed = b"\n\t" if multiline else b""
    assert not [byte for byte in data if (byte < 0x20 or byte == 0x7F) and byte not in allowed]
    assert not [char for char in shown if refused(char, multiline=multiline)]


# --- the rule ---------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(text=TEXT, limit=st.one_of(st.none(), st.integers(1, 300)))
def test_a_shown_line_holds_no_refused_character_and_is_bounded(
    text: str, limit: int | None
) -> None:
    shown = shown_line(text, limit)
    assert_no_refused_bytes(shown)
    assert limit is None or len(shown) <= limit
    assert shown_line(shown, limit) == shown  # shown text is shown as it is
    if not any(map(refused, text)) and (limit is None or len(text) <= limit):
        assert shown == text  # nothing to do: nothing done
    if limit is None and "\\" not in text:
        # Not cut: every character is there, itself or escaped, in order.
        assert shown.encode("latin-1", "backslashreplace").decode("unicode_escape") == text


@settings(max_examples=400, deadline=None)
@given(text=TEXT, line_limit=st.integers(2, 120))
def test_shown_text_keeps_its_lines_and_holds_no_other_refused_character(
    text: str, line_limit: int
) -> None:
    shown = shown_text(text, line_limit)
    assert_no_refused_bytes(shown, multiline=True)
    assert shown.count("\n") == text.count("\n")  # newlines obeyed, nothing else breaks a line
    assert all(len(line) <= line_limit for line in shown.split("\n"))
    assert shown_text(shown, line_limit) == shown


@settings(max_examples=200, deadline=None)
@given(text=TEXT)
def test_drawn_by_rich_the_shown_form_is_text_never_markup_nor_a_sequence(text: str) -> None:
    """Through rich (as the view draws): the only escape sequences are rich's own colours,
    and brackets are text."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system="truecolor", width=100)
    shown = shown_text(text)
    console.print(Text(shown, style="italic yellow"), Text(shown_line(text), style="bold"))
    drawn = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())
    assert_no_refused_bytes(drawn, multiline=True)
    if "[" in text:
        assert "[" in drawn


@settings(max_examples=300, deadline=None)
@given(value=st.recursive(TEXT, lambda inner: st.lists(inner) | st.dictionaries(TEXT, inner)))
def test_json_for_a_terminal_is_the_same_json(value: Any) -> None:
    text = json.dumps(value, ensure_ascii=False, indent=2)
    shown = shown_json(text)
    assert_no_refused_bytes(shown, multiline=True)
    assert json.loads(shown) == value


def test_the_visible_forms_are_python_escapes_and_a_cut_never_splits_one() -> None:
    assert shown_line("\x1b]0;T\x07x") == "\\x1b]0;T\\x07x"
    assert shown_line("a\nb\tc\r") == "a\\nb\\tc\\r"
    assert shown_line("\x9b\u202e\u2066\ud800\x7f") == "\\x9b\\u202e\\u2066\\ud800\\x7f"
    assert shown_text("line 1\n\tline 2\x1b[2J") == "line 1\n\tline 2\\x1b[2J"
    assert shown_line("ab\x1bcd", 6) == "ab" + CUT_MARK  # not "ab\\x1" + mark
    assert shown_line("abcdefgh", 5) == "abcd" + CUT_MARK
    assert shown_text("x" * 10 + "\nshort", 5) == "xxxx" + CUT_MARK + "\nshort"
    assert shown_line("plain text ☃", 20) == "plain text ☃"  # printable: itself
    assert shown_line("zero\u200dwidth joiner") == "zero\u200dwidth joiner"  # not refused
    # A scrubbed detail (the data rule) is drawn as it is.
    detail = scrubbed_detail("boom \x1b]0;T\x07\u202e\nnext")
    assert shown_line(detail) == detail


# --- each place, in-process ---------------------------------------------------------------

#: A value for every slot of a record, each with raw sequences a terminal would obey.
H = "\x1b]0;PWNED\x07\x1b[2J\x9b2J\u202e"
H_SHOWN = "\\x1b]0;PWNED\\x07\\x1b[2J\\x9b2J\\u202e"


def assert_only_own_styles(line: str) -> str:
    """The console line's own colours are its only sequences; the line without them."""
    plain = OWN_STYLES.sub("", line)
    assert "\x1b" not in plain, line
    assert_no_refused_bytes(plain, multiline=True)
    return plain


def test_a_console_log_line_shows_every_field_from_elsewhere() -> None:
    renderer = ConsoleLines(colors=True, summarise_pauses=False)
    event = {
        "timestamp": "2026-11-30T09:18:55.001000Z",
        "level": "warning" + H,
        "event": "event" + H,
        "component": "core" + H,
        "from_state": "a" + H,
        "to_state": "b" + H,
        "stream_id": H + "stream",
        "case_id": "case" + H,
        "spaced": "with space " + H + "\nnext",
        "unspaced": "x" + H,
        "listed": ["item" + H + "\x85"],
        "key" + H: 1,
        "exception": "Traceback\n  raise " + H + "\n",
        "long": "y" * 2000,
    }
    lines = renderer(None, "warning", dict(event)).split("\n")
    plain = [assert_only_own_styles(line) for line in lines]
    first = plain[0]
    for shown in (
        "WARNING" + H_SHOWN.upper(),
        "event" + H_SHOWN,
        f"core{H_SHOWN}: a{H_SHOWN} -> b{H_SHOWN}",
        "case_id=case" + H_SHOWN,
        "unspaced=x" + H_SHOWN,
        f"key{H_SHOWN}=1",
        "· " + shown_line(H[:8]),
    ):
        assert shown in first, shown
    assert "spaced='with space \\x1b]0;PWNED\\x07\\x1b[2J\\x9b2J\\u202e\\nnext'" in first
    assert 'listed=["item\\u001b]0;PWNED\\u0007\\u001b[2J\\x9b2J\\u202e\\x85"]' in first
    assert re.search(r"long=y{511}…", first), "a long value is cut, marked"
    assert plain[1:] == ["Traceback", "  raise " + H_SHOWN, ""]


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@settings(max_examples=100, deadline=None)
@given(value=TEXT, key=TEXT, event=TEXT)
def test_any_record_renders_as_lines_that_obey_nothing(value: str, key: str, event: str) -> None:
    """configure_logging on a terminal, a record with any text in any slot."""
    out = FakeTTY()
    configure_logging("consumer", log_format="auto", level="debug", stream=out)
    try:
        structlog.get_logger().info(
            event, stream_id=value, component=value, to_state=value, **{"k" + key: value}
        )
    finally:
        configure_logging("consumer", log_format="json", stream=io.StringIO())
    for line in out.getvalue().split("\n"):
        assert_only_own_styles(line)


@settings(max_examples=100, deadline=None)
@given(value=TEXT)
def test_json_lines_on_a_terminal_obey_nothing_and_parse_to_the_same_record(value: str) -> None:
    """``--log-format json`` on a terminal: orjson leaves DEL, C1 and bidi characters as
    they are; each is written as a JSON escape instead. A file gets the same line as
    orjson writes it."""
    records = []
    for out in (FakeTTY(), io.StringIO()):
        configure_logging("consumer", log_format="json", stream=out)
        try:
            structlog.get_logger().info("note", stream_id=value, detail=value)
        finally:
            configure_logging("consumer", log_format="json", stream=io.StringIO())
        (line,) = out.getvalue().rstrip("\n").split("\n")
        records.append(json.loads(line))
        if isinstance(out, FakeTTY):
            assert REFUSED_IN_TEXT.search(line) is None
    on_terminal, in_file = records
    assert on_terminal["stream_id"] == in_file["stream_id"] == value
    assert on_terminal["detail"] == value


def hostile_records(stream_id: str) -> list[dict[str, Any]]:
    """Both sides' records of one stream, every text field hostile (as a trace file a
    person is handed may hold)."""
    at = "2026-11-30T09:18:55.{:03d}000Z".format
    side = {"stream_id": stream_id, "level": "info"}
    return [
        {**side, "side": "producer", "timestamp": at(1), "event": "state_changed",
         "from_state": None, "to_state": "verified" + H, "input": "open" + H,
         "case_id": "case" + H},
        {**side, "side": "consumer", "timestamp": at(2), "event": "chunk_received",
         "component": "core", "size": 10, "index": "i" + H},
        {**side, "side": "consumer", "timestamp": at(3), "event": "frame_applied",
         "component": "core", "sequence": 1, "kind": "content_delta"},
        {**side, "side": "consumer", "timestamp": at(4), "event": "note" + H,
         "component": "reader" + H, "detail": "text " + H + "\nmore"},
        {**side, "side": "consumer", "timestamp": at(5), "event": "state_changed",
         "component": "core", "from_state": "streaming", "to_state": "error",
         "input": "transport_error", "reason": "r" + H},
        {**side, "side": "consumer", "timestamp": at(6), "event": "stream_finished",
         "status": "error" + H, "reason": "transport_io_error" + H},
    ]  # fmt: skip


TRACE_STREAM = "<svg/onload=alert(1)>" + H


def test_the_trace_tables_show_every_field_from_a_trace_file() -> None:
    records = hostile_records(TRACE_STREAM)
    timeline = build_timeline(records, TRACE_STREAM)
    drawn = "".join(
        [
            terminal_summary_line(timeline) + "\n",
            render_table(table_rows(timeline, every=True)),
            render_table(table_rows(timeline)),
            render_result_events(result_events(timeline)),
            render_summaries(stream_summaries(records)),
        ]
    )
    assert_no_refused_bytes(drawn, multiline=True)
    for shown in ("note" + H_SHOWN, "consumer/reader" + H_SHOWN, "verified" + H_SHOWN,
                  "error" + H_SHOWN, "<svg/onload=alert(1)>" + H_SHOWN):  # fmt: skip
        assert shown in drawn, shown
    # The HTML page escapes the same text as HTML, as it always did: shown as text.
    page = render_html(timeline)
    assert "<svg/onload" not in page and "&lt;svg/onload=alert(1)&gt;" in page


def test_the_demo_table_shows_a_reason_from_elsewhere() -> None:
    table = render_demo([("run", "demo-01", "lp", "error", "boom" + H, "1", "2", "no")])
    assert_no_refused_bytes(table, multiline=True)
    assert "boom" + H_SHOWN in table


def test_lines_above_the_live_view_keep_only_the_log_lines_colours() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system="standard", width=200)
    above = Above(console, sys.stderr)
    above.write("\x1b[36mkey\x1b[0m=" + H + "\x1b[38;5;201mpink\n")
    plain = assert_only_own_styles(re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue()))
    assert plain == "key=" + H_SHOWN + "\\x1b[38;5;201mpink\n"
    assert "\x1b[36m" in out.getvalue(), "the log line's colour is kept"


# --- on a real terminal, against a hostile producer ---------------------------------------

COLUMNS = 160
#: A sequence rich and the log lines write themselves: colours, cursor moves, line erase,
#: cursor shown/hidden. Never a screen clear (J), never OSC, DCS or a one-byte C1 control.
OWN_SEQUENCE = re.compile(r"\x1b\[[0-9;?]*[mABCDGKhl]")


@pytest.fixture(scope="module")
def hostile_target() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.hostile_producer", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    try:
        port = read_listening_port(process, 20.0)
        assert port is not None, "the hostile producer did not start"
        yield f"127.0.0.1:{port}"
    finally:
        stop_process(process)
        assert process.stdout is not None
        process.stdout.close()


def on_a_pty(argv: list[str], timeout: float = 60.0) -> tuple[int, bytes]:
    """``python -m consumer ARGV`` with stdin, stdout and stderr one pseudo-terminal
    (COLUMNS x 40): its exit code and every byte it wrote to the terminal."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, COLUMNS, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(COLUMNS), "LINES": "40"}
    process = subprocess.Popen(
        [sys.executable, "-m", "consumer", *argv],
        cwd=ROOT,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    written = bytearray()
    ends_at = time.monotonic() + timeout
    try:
        while (left := ends_at - time.monotonic()) > 0:
            ready, _, _ = select.select([leader], [], [], min(left, 0.5))
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: every writer closed its side
                break
            if not chunk:
                break
            written += chunk
        code = process.wait(timeout=max(ends_at - time.monotonic(), 1))
    finally:
        if process.poll() is None:
            stop_process(process)
        os.close(leader)
    return code, bytes(written)


def obeys_nothing(written: bytes) -> str:
    """The bytes a terminal received hold no refused character raw and no sequence but
    the consumer's own; what a person reads (own sequences and CRs removed)."""
    text = written.decode("utf-8")  # strict: no lone surrogate, no stray byte
    for raw in ("\x1b]", "\x1b\\", "\x1bP", "\x07", "\x9b", "\x1b[2J", "\x1b[31mRED"):
        assert raw not in text, repr(raw)
    plain = OWN_SEQUENCE.sub("", text)
    assert "\x1b" not in plain, repr(plain[plain.index("\x1b") - 40 :][:80])
    # CR is the terminal's own (the pty's CR LF, rich's redraws); no other refused one.
    assert not [char for char in plain if refused(char, multiline=True) and char != "\r"]
    return plain.replace("\r", "")


#: What a person reads for each hostile piece of the producer (its escapes, as text).
VISIBLE = (
    "\\x1b[2J",
    "\\x1b[31mRED",
    "\\x1b]0;PWNED\\x07",
    "\\x1b]52;c;cHduZWQ=\\x1b\\",
    "\\x9b2J",
    "\\u202eevil\\u202c \\u2066iso\\u2069",
    "del\\x7f cr\\r nel\\x85 nul\\x00",
    "[bold]not bold[/bold]",
)
PASSAGE = {
    "id": "doc\x1b]0;ID\x07\u202e",
    "text": "An existing file is overwritten.",
    "url": "https://example.com/\x1b[2J\u2066x\x9b",
}


def stream_id(scenario: str) -> str:
    """A stream id (the request's: a person typed it) with what a terminal obeys first."""
    return f"\x9b2J\u202e{scenario}-\x1b]0;T\x07"


def context_file(tmp_path: Path) -> Path:
    path = tmp_path / "context.json"
    path.write_text(json.dumps([PASSAGE]), encoding="utf-8")
    return path


def streamed(
    target: str, tmp_path: Path, scenario: str, *flags: str
) -> tuple[int, str, dict[str, Any]]:
    """``consumer stream --view`` of one scenario, its context hostile too: the exit code,
    what a person reads, the result document."""
    document = tmp_path / f"{scenario}.json"
    code, written = on_a_pty(
        ["stream", "--view", "--target", target, "--question", "Is the file overwritten?",
         "--context", str(context_file(tmp_path)), "--stream-id", stream_id(scenario),
         "--result", str(document), "--resume-attempts", "0", *flags]
    )  # fmt: skip
    return code, obeys_nothing(written), json.loads(document.read_text(encoding="utf-8"))


def test_an_accepted_answer_and_its_citations_are_drawn_never_obeyed(
    hostile_target: str, tmp_path: Path
) -> None:
    code, seen, document = streamed(hostile_target, tmp_path, "answer")
    assert (code, document["status"]) == (0, "complete"), seen
    for shown in VISIBLE:
        assert shown in seen, shown
    assert "doc\\x1b]0;ID\\x07\\u202e" in seen  # the citation's id (and chunk id)
    assert "https://example.com/\\x1b[2J\\u2066x\\x9b" in seen  # its URL
    assert "stream \\x9b2J\\u202eansw" in seen  # the stream id the command line was given
    # The data is exact: the document holds the text as the model wrote it.
    assert document["accepted_answer"]["answer"] == hostile.ANSWER
    assert document["citations"][0]["source_id"] == PASSAGE["id"]
    assert document["citations"][0]["url"] == PASSAGE["url"]
    assert document["stream_id"] == stream_id("answer")


def test_raw_sequences_streaming_in_are_drawn_never_obeyed_and_refused(
    hostile_target: str, tmp_path: Path
) -> None:
    code, seen, document = streamed(hostile_target, tmp_path, "provisional")
    assert (code, document["status"], document["reason"]) == (6, "invalid", "invalid_answer_json")
    assert document["provisional_content"] == "".join(hostile.PROVISIONAL_DELTAS)
    for shown in VISIBLE:
        assert shown in seen, shown
    # While it streamed: the provisional panel drew the delta that ends with a lone ESC.
    assert re.search(r"lone ESC next:\\x1b +│", seen), "the lone ESC, drawn as its escape"
    assert "provisional: not validated yet" in seen


def test_an_error_terminal_and_a_status_from_the_peer_are_drawn_never_obeyed(
    hostile_target: str, tmp_path: Path
) -> None:
    code, seen, document = streamed(hostile_target, tmp_path, "error")
    assert (code, document["reason"]) == (5, "unregistered_error_terminal")
    assert document["detail"] == scrubbed_detail(hostile.ERROR_REASON)
    said = " ".join(seen.replace("│", " ").split())
    assert "boom \\x1b]0;PWNED\\x07\\x1b[2J\\x9b2J\\u202eevil\\u202c" in said
    assert "\\u2066iso\\u2069\\nsecond line" in said
    code, seen, document = streamed(hostile_target, tmp_path, "abort")
    assert (code, document["reason"]) == (5, "transport_io_error")
    said = " ".join(seen.replace("│", " ").split())
    assert "INTERNAL: aborted \\x1b]52;c;cHduZWQ=\\x1b\\\\x1b[31mRED\\x9b2J\\u202eevil" in said


def test_console_log_lines_and_the_document_on_a_terminal_obey_nothing(
    hostile_target: str, tmp_path: Path
) -> None:
    """No view: the trace's console lines (debug) and the JSON document, both on the
    terminal; the request's case id and stream id hostile too."""
    binding = tmp_path / "binding.json"
    passages = [{"id": PASSAGE["id"], "text": PASSAGE["text"], "url": PASSAGE["url"]}]
    binding.write_text(json.dumps(build_question_binding("Q?", passages)), encoding="utf-8")
    case = "case\x1b]0;CASE\x07\u202e"
    code, written = on_a_pty(
        ["stream", "--no-view", "--log-format", "console", "--log-level", "debug",
         "--target", hostile_target, "--case", case, "--binding", str(binding),
         "--stream-id", stream_id("provisional")]
    )  # fmt: skip
    seen = obeys_nothing(written)
    assert code == 6, seen
    lines = seen.splitlines()
    opening = next(line for line in lines if " stream_opening " in line)
    assert "case_id=case\\x1b]0;CASE\\x07\\u202e " in opening
    assert opening.endswith("· \\x9b2J\\u202eprov")
    # The document on the terminal: the refused characters as JSON escapes, the same JSON.
    start = lines.index("{")
    document = json.loads("\n".join(lines[start : lines.index("}", start) + 1]))
    assert document["provisional_content"] == "".join(hostile.PROVISIONAL_DELTAS)
    assert document["stream_id"] == stream_id("provisional")


def test_trace_and_join_traces_on_a_terminal_obey_nothing(tmp_path: Path) -> None:
    trace = tmp_path / "hostile.jsonl"
    records = [*hostile_records(TRACE_STREAM), *hostile_records("second" + H)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    page = tmp_path / "page.html"
    runs = {
        "table": ["trace", str(trace), "--stream", "<svg/onload", "--out", str(page)],
        "streams": ["trace", str(trace)],
        "unknown": ["trace", str(trace), "--stream", "nothing-like-it"],
        "joined": ["join-traces", str(trace)],
    }
    seen: dict[str, str] = {}
    for name, argv in runs.items():
        code, written = on_a_pty(argv)
        seen[name] = obeys_nothing(written)
        assert code == (2 if name == "unknown" else 0), seen[name]
    assert "note" + H_SHOWN in seen["table"]
    assert "stream <svg/onload=alert(1)>" + H_SHOWN in seen["table"]
    assert "second" + H_SHOWN in seen["streams"]
    assert "streams: <svg/onload=alert(1)>" + H_SHOWN in " ".join(seen["unknown"].split())
    # join-traces: each line is the record exactly (its escapes are JSON's).
    joined = [json.loads(line) for line in seen["joined"].splitlines()]
    assert sorted(map(canonical, joined)) == sorted(map(canonical, records))
    html = page.read_text(encoding="utf-8")
    assert "<svg/onload" not in html and "&lt;svg/onload=alert(1)&gt;" in html


def canonical(record: Mapping[str, Any]) -> str:
    return json.dumps(record, sort_keys=True)
