"""The one receive buffer: every line ending, cut anywhere, each byte searched once."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replywire.native import is_compiled
from replywire.shared.wire import buffer as buffer_module
from replywire.shared.wire.buffer import Line, Newlines, ReceiveBuffer

LF, UNIVERSAL = Newlines.LF, Newlines.UNIVERSAL


def lines_of(buffer: ReceiveBuffer, *, final: bool = False) -> Iterator[bytes]:
    while (line := buffer.find_line(final=final)) is not None:
        yield bytes(buffer.take_line(line))


def feed(chunks: Sequence[bytes], newlines: Newlines) -> tuple[list[bytes], bytes]:
    """Every line, each taken as soon as it is complete; then the end; then what is left."""
    buffer = ReceiveBuffer(newlines)
    lines: list[bytes] = []
    received = b""
    for chunk in chunks:
        buffer.append(chunk)
        received += chunk
        lines += lines_of(buffer)
        # Exactly the lines whose ending is already known, no later and no earlier.
        assert lines == expected(received, newlines, final=False)[0]
    lines += lines_of(buffer, final=True)
    return lines, bytes(buffer)


def expected(data: bytes, newlines: Newlines, *, final: bool = True) -> tuple[list[bytes], bytes]:
    """The reference: ``split(b"\\n")``, or ``bytes.splitlines`` (CR, LF, CRLF)."""
    if newlines is LF:
        *lines, rest = data.split(b"\n")
        return lines, rest
    pieces = data.splitlines(keepends=True)
    rest = pieces.pop() if pieces and not pieces[-1].endswith((b"\r", b"\n")) else b""
    if not final and pieces and pieces[-1].endswith(b"\r") and not rest:
        rest = pieces.pop()  # a CR at the very end may still become a CRLF
    return [piece.rstrip(b"\n").removesuffix(b"\r") for piece in pieces], rest


def bytewise(data: bytes) -> list[bytes]:
    return [data[index : index + 1] for index in range(len(data))]


# --- every line ending ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("newlines", "data", "lines", "rest"),
    [
        (LF, b"a\nb\r\nc\rd", [b"a", b"b\r"], b"c\rd"),
        (LF, b"\n\n", [b"", b""], b""),
        (UNIVERSAL, b"a\nb\r\nc\rd", [b"a", b"b", b"c"], b"d"),
        (UNIVERSAL, b"\n\r\n\r\r", [b"", b"", b"", b""], b""),
        (UNIVERSAL, b"\n\r\r\n", [b"", b"", b""], b""),
        (UNIVERSAL, b"a\r", [b"a"], b""),  # at the end of the input a CR ends its line
        (UNIVERSAL, b"no ending", [], b"no ending"),
    ],
)
@pytest.mark.parametrize("cut", ["whole", "bytewise"])
def test_every_line_ending(
    newlines: Newlines, data: bytes, lines: list[bytes], rest: bytes, cut: str
) -> None:
    chunks = [data] if cut == "whole" else bytewise(data)
    assert feed(chunks, newlines) == (lines, rest)
    assert expected(data, newlines) == (lines, rest)


@pytest.mark.parametrize(
    ("data", "line"),
    [(b"a\n", Line(1, 2)), (b"a\r\n", Line(1, 3)), (b"a\rb", Line(1, 2)), (b"\r\n", Line(0, 2))],
)
def test_the_line_and_its_ending(data: bytes, line: Line) -> None:
    buffer = ReceiveBuffer(UNIVERSAL)
    buffer.append(data)
    assert buffer.find_line() == line


def test_a_cr_at_the_end_waits_for_the_next_chunk() -> None:
    buffer = ReceiveBuffer(UNIVERSAL)
    buffer.append(b"data: 1\r")
    assert buffer.find_line() is None
    assert buffer.unterminated == 7  # the CR may be the first half of a CRLF
    assert len(buffer) == 8
    buffer.append(b"\n")
    assert buffer.find_line() == Line(7, 9)
    assert buffer.take_line(Line(7, 9)) == b"data: 1"
    assert len(buffer) == 0


def test_a_cr_at_the_end_then_another_byte_is_a_line_of_its_own() -> None:
    buffer = ReceiveBuffer(UNIVERSAL)
    buffer.append(b"a\r")
    assert buffer.find_line() is None
    buffer.append(b"b\r")
    assert list(lines_of(buffer)) == [b"a"]
    assert buffer.unterminated == 1
    assert list(lines_of(buffer, final=True)) == [b"b"]
    assert bytes(buffer) == b""


def test_a_cr_is_an_ordinary_byte_of_an_lf_buffer() -> None:
    buffer = ReceiveBuffer(LF)
    buffer.append(b"a\r")
    assert buffer.find_line(final=True) is None
    assert buffer.unterminated == 2


@given(
    st.lists(st.sampled_from([b"a", b"\r", b"\n", b"\r\n", b"\xc3\xa9", b""]), max_size=30),
    st.lists(st.integers(min_value=0, max_value=40), max_size=8),
    st.sampled_from(list(Newlines)),
)
def test_any_cut_gives_the_reference_lines(
    pieces: list[bytes], cuts: list[int], newlines: Newlines
) -> None:
    data = b"".join(pieces)
    bounds = [0, *sorted(min(cut, len(data)) for cut in cuts), len(data)]
    chunks = [data[start:stop] for start, stop in pairwise(bounds)]
    assert feed(chunks, newlines) == expected(data, newlines)
    assert feed(bytewise(data), newlines) == expected(data, newlines)


# --- take, truncate ---------------------------------------------------------------------------


def test_take_n_bytes() -> None:
    buffer = ReceiveBuffer()
    buffer.append(b"abcdef")
    assert buffer.take(2) == b"ab"
    assert bytes(buffer) == b"cdef"
    assert buffer.take(10) == b"cdef"
    assert len(buffer) == 0
    assert buffer.take(1) == b""


@pytest.mark.parametrize("newlines", list(Newlines))
def test_take_keeps_the_search_position(newlines: Newlines) -> None:
    buffer = ReceiveBuffer(newlines)
    buffer.append(b"abcdef")
    assert buffer.find_line() is None
    assert buffer.take(4) == b"abcd"
    buffer.append(b"g\nh")
    assert list(lines_of(buffer)) == [b"efg"]
    assert bytes(buffer) == b"h"


def test_truncate_drops_the_tail_and_searches_what_is_left() -> None:
    buffer = ReceiveBuffer(UNIVERSAL)
    buffer.append(b"ab\r")
    assert buffer.find_line() is None
    buffer.truncate(2)
    assert bytes(buffer) == b"ab"
    assert buffer.find_line(final=True) is None
    buffer.append(b"\n")
    assert list(lines_of(buffer)) == [b"ab"]


# --- each byte searched once ------------------------------------------------------------------


class CountingBuffer(bytearray):
    """A bytearray that counts how many bytes ``find`` was asked to scan."""

    scanned = 0

    def find(self, sub: Any, start: Any = None, end: Any = None) -> int:
        first = 0 if start is None else start
        stop = len(self) if end is None else end
        self.scanned += max(0, stop - first)
        return super().find(sub, first, stop)


class CountingPattern:
    """The CR-or-LF pattern, counting the bytes each search looked at."""

    def __init__(self) -> None:
        self.scanned = 0

    def search(self, data: bytearray, start: int) -> re.Match[bytes] | None:
        match = re.compile(rb"[\r\n]").search(data, start)
        self.scanned += (match.end() if match else len(data)) - start
        return match


LONG_LINES = b"x" * 5000 + b"\r\n" + b"y" * 3000 + b"\r" + b"z" * 1997


def test_an_lf_buffer_scans_each_byte_once_however_it_is_cut() -> None:
    buffer = ReceiveBuffer(LF)
    counting = CountingBuffer()
    buffer._data = counting
    data = LONG_LINES.replace(b"\r", b"\n")
    lines: list[bytes] = []
    for chunk in bytewise(data):
        buffer.append(chunk)
        lines += lines_of(buffer)
    assert lines == [b"x" * 5000, b"", b"y" * 3000]
    assert counting.scanned == len(data)


@pytest.mark.skipif(
    is_compiled("replywire.shared.wire.buffer"),
    reason="the compiled buffer binds its pattern when compiled: make test-pure runs this test",
)
def test_a_universal_buffer_scans_each_byte_once_however_it_is_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pattern = CountingPattern()
    monkeypatch.setattr(buffer_module, "_CR_OR_LF", pattern)
    buffer = ReceiveBuffer(UNIVERSAL)
    lines: list[bytes] = []
    for chunk in bytewise(LONG_LINES):
        buffer.append(chunk)
        lines += lines_of(buffer)
    assert lines == [b"x" * 5000, b"y" * 3000]
    # Each byte once, except: each CR that ended a chunk is looked at again with the next
    # byte (two here), and the LF of a CRLF is taken with its CR without a search (one).
    assert pattern.scanned == len(LONG_LINES) + 2 - 1
