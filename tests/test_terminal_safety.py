"""Nothing a peer or a model sends reaches a terminal as a control sequence.

The rule (``shared/terminal_text.py``), for any text: no refused character survives it,
newlines are obeyed only in multi-line text, lines are bounded, the shown form is
idempotent, survives rich as text (never markup), and JSON for a terminal is the same JSON.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text

from shared.errors import scrubbed_detail
from shared.terminal_text import CUT_MARK, shown_json, shown_line, shown_text

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
