"""Nothing a peer or a model sends reaches a terminal as a control sequence.

The rule (``shared/terminal_text.py``) for any text; then every place that draws text
from elsewhere: the console log lines, ``trace``'s table, the demo table, the view's
pieces; then the real thing: ``python -m consumer`` on a pseudo-terminal against a
hostile producer process (``tests/hostile_producer.py``), and ``python -m replywire``'s
``trace`` and ``join-traces`` fed a hostile trace file.
On the terminal no refused character arrives raw, their visible forms do, and the JSON
(``--result``, the document on stdout, ``join-traces``) holds the exact text.
"""

from __future__ import annotations

import io
import json
import re
import sys
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text

from replywire.consumer.view import Above
from replywire.demo import render as render_demo
from replywire.runtime.console_logs import OWN_STYLES, ConsoleLines
from replywire.runtime.logs import configure_logging
from replywire.shared.errors import scrubbed_detail
from replywire.shared.terminal_text import (
    CUT_MARK,
    REFUSED_IN_TEXT,
    shown_json,
    shown_line,
    shown_text,
)
from replywire.traces.page import render_html
from replywire.traces.result_events import render_result_events, result_events
from replywire.traces.streams import stream_summaries
from replywire.traces.table import render_summaries, render_table, table_rows, terminal_summary_line
from replywire.traces.timeline import build_timeline
from tests.hostile_input import H_SHOWN, TRACE_STREAM, H, hostile_records, refused

pytestmark = pytest.mark.timeout(120)


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


@pytest.mark.slow  # 300 recursive examples: make test runs it, make check does not
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
                  "error" + H_SHOWN, "<svg/onload=alert(1)>" + H_SHOWN,
                  f"(call #0 read{H_SHOWN}, id c{H_SHOWN})",
                  "part_received #2 tool_call"):  # fmt: skip
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
