"""The strict SSE parser of the provider's stream: exact results, fed whole, bytewise, in chunks.

Every exact test runs once per way of cutting the bytes (the ``split``
fixture): the parser must give the same events, and fail with the same
reason after the same events, however the stream is cut.

One file past 500 lines: one parser, every test under the same ``split`` fixture.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any, Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replywire.producer.sources.gemini.sse import SseError, SseEvent, SseParser
from replywire.shared.errors import ReplywireError
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import Reason
from replywire.shared.status import Status
from replywire.shared.wire.base import NEED_DATA

Split = Callable[[bytes], list[bytes]]
#: Events until the stream ended or failed, and the failure's reason (None if it did not fail).
Outcome = tuple[list[SseEvent], Reason | None]

SSE_REASONS: Final = (
    Reason.SSE_INVALID_UTF8,
    Reason.SSE_MALFORMED_LINE,
    Reason.SSE_UNKNOWN_FIELD,
    Reason.SSE_EVENT_WITHOUT_DATA,
    Reason.SSE_EVENT_TOO_LARGE,
)


# --- feeding --------------------------------------------------------------------------------


def whole(data: bytes) -> list[bytes]:
    return [data]


def bytewise(data: bytes) -> list[bytes]:
    return [data[index : index + 1] for index in range(len(data))]


def random_chunks(data: bytes) -> list[bytes]:
    """Chunks of 1 to 9 bytes (some empty), the same for the same input."""
    rng = random.Random(data)
    chunks: list[bytes] = []
    start = 0
    while start < len(data):
        size = rng.choice((0, 1, 2, 3, 5, 9))
        chunks.append(data[start : start + size])
        start += size
    return chunks


SPLITS: Final[dict[str, Split]] = {
    "whole": whole,
    "bytewise": bytewise,
    "random": random_chunks,
}


@pytest.fixture(params=list(SPLITS))
def split(request: pytest.FixtureRequest) -> Split:
    return SPLITS[request.param]


def drain(parser: SseParser, events: list[SseEvent]) -> None:
    """Append every complete event to ``events`` (kept if ``next_event`` then fails)."""
    while (event := parser.next_event()) is not NEED_DATA:
        assert isinstance(event, SseEvent)
        events.append(event)


def run(
    chunks: Sequence[bytes], max_event_bytes: int = 1 << 20
) -> tuple[list[SseEvent], SseError | None]:
    """Feed the chunks as a driver would: drain after each, then end the input."""
    parser = SseParser(max_event_bytes=max_event_bytes)
    events: list[SseEvent] = []
    try:
        for chunk in chunks:
            parser.receive_data(chunk)
            drain(parser, events)
        last = parser.end_of_input()
    except SseError as error:
        return events, error
    if last is not None:
        events.append(last)
    return events, None


def outcome(chunks: Sequence[bytes], max_event_bytes: int = 1 << 20) -> Outcome:
    events, error = run(chunks, max_event_bytes)
    return events, error.reason if error else None


def ev(data: str, event: str | None = None, *, terminated: bool = True) -> SseEvent:
    return SseEvent(data=data, event=event, terminated=terminated)


# --- the reason codes -----------------------------------------------------------------------


def test_reason_codes() -> None:
    assert [reason.value for reason in SSE_REASONS] == [
        "sse_invalid_utf8",
        "sse_malformed_line",
        "sse_unknown_field",
        "sse_event_without_data",
        "sse_event_too_large",
    ]
    for reason in SSE_REASONS:
        assert (REASONS[reason].status, REASONS[reason].grpc_code) == (Status.ERROR, "UNAVAILABLE")
        assert REASONS[reason].meaning
    error = SseError(Reason.SSE_MALFORMED_LINE, "line 1")
    assert isinstance(error, ReplywireError)
    assert (error.code, str(error)) == ("sse_malformed_line", "sse_malformed_line: line 1")


# --- the chapter's examples -----------------------------------------------------------------

CHAPTER: Final = (
    b': keepalive\nevent: delta\ndata: {"content":"Hel"}\ndata: {"content":"lo"}\n\ndata: [DONE]'
)


def test_chapter_example(split: Split) -> None:
    assert outcome(split(CHAPTER)) == (
        [
            ev('{"content":"Hel"}\n{"content":"lo"}', "delta"),
            ev("[DONE]", terminated=False),
        ],
        None,
    )


def test_chapter_example_step_by_step() -> None:
    parser = SseParser()
    parser.receive_data(CHAPTER)
    assert parser.next_event() == ev('{"content":"Hel"}\n{"content":"lo"}', "delta")
    assert parser.next_event() is NEED_DATA
    assert parser.buffered == len(b"data: [DONE]")
    assert parser.end_of_input() == ev("[DONE]", terminated=False)
    assert parser.buffered == 0


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'data {"content":"missing colon"}\n\n', Reason.SSE_MALFORMED_LINE),
        (b"event: delta\n\n", Reason.SSE_EVENT_WITHOUT_DATA),
        (b"retry: 1000\n\n", Reason.SSE_UNKNOWN_FIELD),
    ],
)
def test_chapter_malformed_examples(split: Split, data: bytes, reason: Reason) -> None:
    assert outcome(split(data)) == ([], reason)


def test_error_details_name_the_line() -> None:
    def detail(data: bytes) -> str:
        error = run([data])[1]
        assert error is not None
        return str(error)

    assert detail(b"data: a\n\nid: 7\n") == "sse_unknown_field: line 3: field 'id'"
    assert detail(b": c\nno colon here\n") == "sse_malformed_line: line 2: no colon in 13 bytes"
    assert detail(b'data {"a":1}\n') == (
        "sse_malformed_line: line 1: no field name before the colon"
    )
    assert detail(b"event: x\n\n") == "sse_event_without_data: line 2: an event with no data field"
    assert detail(b"data: ok\xff\n") == "sse_invalid_utf8: at byte 8: invalid start byte"
    assert detail(b"data: \xe2\x82") == (
        "sse_invalid_utf8: at byte 6: unexpected end of data (the body ended)"
    )


# --- line endings ---------------------------------------------------------------------------

BODY_LINES: Final = [b": hi", b"event: a", b"data: 1", b"data: 2", b"", b"data: 3", b"", b""]
BODY_EVENTS: Final = [ev("1\n2", "a"), ev("3")]


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_line_endings(split: Split, ending: bytes) -> None:
    assert outcome(split(ending.join(BODY_LINES))) == (BODY_EVENTS, None)


def test_mixed_line_endings(split: Split) -> None:
    data = b": hi\revent: a\r\ndata: 1\ndata: 2\r\r\ndata: 3\n\r"
    assert outcome(split(data)) == (BODY_EVENTS, None)


def test_lf_cr_is_two_line_endings(split: Split) -> None:
    # "\n\r" is not a line ending of its own: LF ends "data: a", CR is the blank line.
    assert outcome(split(b"data: a\n\rdata: b\n\n")) == ([ev("a"), ev("b")], None)


def test_crlf_split_across_two_chunks() -> None:
    parser = SseParser()
    parser.receive_data(b"data: a\r")
    assert parser.next_event() is NEED_DATA  # a CR at the end may be half a CRLF
    parser.receive_data(b"\n")
    assert parser.next_event() is NEED_DATA  # "data: a" ended; no blank line yet
    parser.receive_data(b"data: b\r")
    assert parser.next_event() is NEED_DATA
    parser.receive_data(b"\n\r")
    assert parser.next_event() is NEED_DATA  # the blank line may still be a CRLF
    parser.receive_data(b"\n")
    # One event: had either CRLF been read as CR + LF, "a" would have been an event of its own.
    assert parser.next_event() == ev("a\nb")
    assert parser.next_event() is NEED_DATA
    assert parser.end_of_input() is None


def test_cr_followed_by_another_byte_ends_the_line_at_once() -> None:
    parser = SseParser()
    parser.receive_data(b"data: a\r")
    assert parser.next_event() is NEED_DATA
    parser.receive_data(b"\r")
    assert parser.next_event() is NEED_DATA  # "data: a" ended; the second CR waits
    parser.receive_data(b"d")
    assert parser.next_event() == ev("a")
    assert parser.buffered == 1


@pytest.mark.parametrize(
    ("data", "events"),
    [
        (b"data: a\r", [ev("a", terminated=False)]),
        (b"data: a\r\r", [ev("a")]),
        (b"data: a\n\r", [ev("a")]),
        (b"data: a\r\n\r", [ev("a")]),
        (b"\r", []),
        (b": just a comment\r", []),
    ],
)
def test_trailing_cr_is_a_line_end_at_end_of_input(
    split: Split, data: bytes, events: list[SseEvent]
) -> None:
    assert outcome(split(data)) == (events, None)


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c"])
def test_only_cr_and_lf_end_lines(split: Split, separator: str) -> None:
    # str.splitlines() would split at each of these; they are data here.
    data = f"data: a{separator}b\n\n".encode()
    assert outcome(split(data)) == ([ev(f"a{separator}b")], None)


# --- fields ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "events"),
    [
        (b"data:x\n\n", [ev("x")]),
        (b"data: x\n\n", [ev("x")]),
        (b"data:  x \n\n", [ev(" x ")]),
        (b"data:\n\n", [ev("")]),
        (b"data: \n\n", [ev("")]),
        (b"data: a:b: c\n\n", [ev("a:b: c")]),
        (b"data: a\ndata:\ndata: b\n\n", [ev("a\n\nb")]),
        (b"event: a\nevent: b\ndata: x\n\n", [ev("x", "b")]),
        (b"data: x\nevent:\n\n", [ev("x", "")]),
        (b"data: 1\n: comment inside an event\ndata: 2\n\n", [ev("1\n2")]),
        (b"\n\n\ndata: 1\n\n\n\n:\n\ndata: 2\n\n\n", [ev("1"), ev("2")]),
        (b"event: a\ndata: 1\n\ndata: 2\n\n", [ev("1", "a"), ev("2")]),
        (b":\n:no space\n:: double\n", []),
        (b"", []),
    ],
)
def test_field_rules(split: Split, data: bytes, events: list[SseEvent]) -> None:
    assert outcome(split(data)) == (events, None)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"id: 1\n\n", Reason.SSE_UNKNOWN_FIELD),
        (b"id:\n\n", Reason.SSE_UNKNOWN_FIELD),
        (b"retry: 1000\ndata: x\n\n", Reason.SSE_UNKNOWN_FIELD),
        (b"Data: x\n\n", Reason.SSE_UNKNOWN_FIELD),
        (b"x-trace_id: 1\ndata: x\n\n", Reason.SSE_UNKNOWN_FIELD),
        # A line whose "name" is no name is not a field line at all.
        (b'data {"content":"missing colon"}\n\n', Reason.SSE_MALFORMED_LINE),
        (b'{"error": {"code": 503}}\n', Reason.SSE_MALFORMED_LINE),
        (b"data : x\n\n", Reason.SSE_MALFORMED_LINE),
        (b" data: x\n\n", Reason.SSE_MALFORMED_LINE),
        (b"\tdata: x\n\n", Reason.SSE_MALFORMED_LINE),
        (b"\xef\xbb\xbfdata: x\n\n", Reason.SSE_MALFORMED_LINE),  # a BOM is not skipped
        (b"data\n\n", Reason.SSE_MALFORMED_LINE),
        (b"event\ndata: x\n\n", Reason.SSE_MALFORMED_LINE),
        (b" \n\n", Reason.SSE_MALFORMED_LINE),
        (b"<html>\n", Reason.SSE_MALFORMED_LINE),
        (b"event: delta\n: comment\n\n", Reason.SSE_EVENT_WITHOUT_DATA),
    ],
)
def test_field_errors(split: Split, data: bytes, reason: Reason) -> None:
    assert outcome(split(data)) == ([], reason)


# --- a realistic Gemini body ----------------------------------------------------------------

GEMINI_CHUNKS: Final[list[dict[str, Any]]] = [
    {
        "candidates": [{"content": {"parts": [{"text": "Hel"}], "role": "model"}}],
        "usageMetadata": {"promptTokenCount": 12, "totalTokenCount": 12},
        "modelVersion": "gemini-2.0-flash",
    },
    {
        "candidates": [{"content": {"parts": [{"text": "lo, wörld ☃ 𝄞\n"}], "role": "model"}}],
        "usageMetadata": {"promptTokenCount": 12, "totalTokenCount": 12},
        "modelVersion": "gemini-2.0-flash",
    },
    {
        "candidates": [
            {
                "content": {"parts": [{"text": "bye\u2028"}], "role": "model"},
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 12,
            "candidatesTokenCount": 9,
            "totalTokenCount": 21,
        },
        "modelVersion": "gemini-2.0-flash",
    },
]
GEMINI_DATA: Final = [json.dumps(chunk, ensure_ascii=False) for chunk in GEMINI_CHUNKS]
GEMINI_BODY: Final = b"".join(f"data: {data}\r\n\r\n".encode() for data in GEMINI_DATA)


def test_gemini_body(split: Split) -> None:
    events, reason = outcome(split(GEMINI_BODY))
    assert (events, reason) == ([ev(data) for data in GEMINI_DATA], None)
    assert [json.loads(event.data) for event in events] == GEMINI_CHUNKS


def test_gemini_body_cut_inside_the_last_event(split: Split) -> None:
    """The body ends mid-JSON: the partial event is surfaced as unterminated, not dropped."""
    cut = GEMINI_BODY[: GEMINI_BODY.rindex(b"finishReason")]
    last = cut[cut.rindex(b"data: ") + len(b"data: ") :].decode()
    assert outcome(split(cut)) == (
        [ev(GEMINI_DATA[0]), ev(GEMINI_DATA[1]), ev(last, terminated=False)],
        None,
    )


def test_gemini_body_cut_between_crlfs(split: Split) -> None:
    cut = GEMINI_BODY[:-2]  # the last event's line ended, its blank line never came
    expected = [ev(data) for data in GEMINI_DATA[:2]] + [ev(GEMINI_DATA[2], terminated=False)]
    assert outcome(split(cut)) == (expected, None)
    # Cut in the middle of the final CRLF: the CR is a line end, still no blank line.
    assert outcome(split(GEMINI_BODY[:-3])) == (expected, None)
    # Cut after the blank line's CR: the CR is the blank line.
    assert outcome(split(GEMINI_BODY[:-1])) == ([ev(data) for data in GEMINI_DATA], None)


# --- trailing garbage -----------------------------------------------------------------------

GOOD: Final = b"data: 1\r\n\r\n"


@pytest.mark.parametrize(
    ("tail", "events", "reason"),
    [
        (b"garbage", [], Reason.SSE_MALFORMED_LINE),
        (b"garbage\n", [], Reason.SSE_MALFORMED_LINE),
        (b"\r\n\r\n<html><body>502 Bad Gateway</body></html>", [], Reason.SSE_MALFORMED_LINE),
        (b"id: 7", [], Reason.SSE_UNKNOWN_FIELD),
        (b"event: more", [], Reason.SSE_EVENT_WITHOUT_DATA),
        (b"event: more\r\n", [], Reason.SSE_EVENT_WITHOUT_DATA),
        (b"data: 2\r\nretry: 5", [], Reason.SSE_UNKNOWN_FIELD),
        (b"data: [DONE]", [ev("[DONE]", terminated=False)], None),
        (b": trailing comment", [], None),
        (b"\r\n\r\n\r\n", [], None),
    ],
)
def test_trailing_garbage(
    split: Split, tail: bytes, events: list[SseEvent], reason: Reason | None
) -> None:
    assert outcome(split(GOOD + tail)) == ([ev("1"), *events], reason)


# --- UTF-8 ----------------------------------------------------------------------------------

TEXT: Final = "é☃𝄞\u2028"


def test_utf8_split_at_every_byte() -> None:
    data = f"data: {TEXT}\n\n".encode()
    for cut in range(len(data) + 1):
        assert outcome([data[:cut], data[cut:]]) == ([ev(TEXT)], None), cut


def test_utf8_in_every_field(split: Split) -> None:
    data = f": {TEXT}\nevent: {TEXT}\ndata: {TEXT}\n\n".encode()
    assert outcome(split(data)) == ([ev(TEXT, TEXT)], None)


@pytest.mark.parametrize(
    "bad",
    [
        b"\xff",  # never a UTF-8 byte
        b"\x80",  # a continuation byte with no lead
        b"\xc0\xaf",  # overlong
        b"\xed\xa0\x80",  # a surrogate
        b"\xf4\x90\x80\x80",  # beyond U+10FFFF
        b"\xe2\x82(",  # a character cut short by another
        b"\xe2\x82\n",  # ... by a line end
    ],
)
def test_invalid_utf8(split: Split, bad: bytes) -> None:
    assert outcome(split(b"data: " + bad + b"\n\n")) == ([], Reason.SSE_INVALID_UTF8)
    # The events before the bad byte come out first, in every cut.
    data = b"data: 1\n\ndata: 2\n" + bad + b"\n\ndata: 3\n\n"
    assert outcome(split(data)) == ([ev("1")], Reason.SSE_INVALID_UTF8)


@pytest.mark.parametrize("cut", [b"\xc3", b"\xe2\x82", b"\xf0\x9d\x84"])
def test_body_ending_inside_a_character(split: Split, cut: bytes) -> None:
    assert outcome(split(b"data: 1\n\ndata: " + cut)) == ([ev("1")], Reason.SSE_INVALID_UTF8)


def test_errors_come_in_stream_order(split: Split) -> None:
    # A bad line before a bad byte in the same chunk is reported as the bad line.
    assert outcome(split(b"retry: 1\n\xff")) == ([], Reason.SSE_UNKNOWN_FIELD)
    # A bad byte after a CR: the CR still ended the line (an invalid byte is no LF).
    assert outcome(split(b"retry: 1\r\xff")) == ([], Reason.SSE_UNKNOWN_FIELD)
    assert outcome(split(b"data: 1\n\r\xff")) == ([ev("1")], Reason.SSE_INVALID_UTF8)
    # A bad byte inside a line: the line is never interpreted.
    assert outcome(split(b"retry: \xff\n")) == ([], Reason.SSE_INVALID_UTF8)


def test_invalid_utf8_is_found_on_arrival_and_reported_in_order() -> None:
    parser = SseParser()
    parser.receive_data(b"data: 1\n\ndata: \xffjunk\n\n")  # receive_data only buffers
    assert parser.buffered == len(b"data: 1\n\ndata: ")  # nothing after the bad byte is kept
    parser.receive_data(b"data: 2\n\n")  # ignored: the stream already broke
    assert parser.next_event() == ev("1")
    with pytest.raises(SseError) as raised:
        parser.next_event()
    assert raised.value.reason is Reason.SSE_INVALID_UTF8


# --- the size bound -------------------------------------------------------------------------

LIMIT: Final = 64
PREFIX: Final = len(b"data: ")


@pytest.mark.parametrize(
    ("data", "events", "reason"),
    [
        # One data line of exactly LIMIT bytes; one more byte is refused.
        (b"data: " + b"x" * (LIMIT - PREFIX) + b"\n\n", [ev("x" * (LIMIT - PREFIX))], None),
        (b"data: " + b"x" * (LIMIT - PREFIX + 1) + b"\n\n", [], Reason.SSE_EVENT_TOO_LARGE),
        # ... also as the final, unterminated event, and ended by a CR.
        (b"data: " + b"x" * (LIMIT - PREFIX), [ev("x" * (LIMIT - PREFIX), terminated=False)], None),
        (b"data: " + b"x" * (LIMIT - PREFIX + 1), [], Reason.SSE_EVENT_TOO_LARGE),
        (b"data: " + b"x" * (LIMIT - PREFIX) + b"\r", [ev("x" * 58, terminated=False)], None),
        (b"data: " + b"x" * (LIMIT - PREFIX + 1) + b"\r", [], Reason.SSE_EVENT_TOO_LARGE),
        # The event's field lines add up (line endings excluded): 4 x 16 bytes.
        (
            b"event: 123456789\n" + b"data: 1234567890\n" * 3 + b"\n",
            [ev("1234567890\n" * 2 + "1234567890", "123456789")],
            None,
        ),
        (
            b"event: 1234567890\n" + b"data: 1234567890\n" * 3 + b"\n",
            [],
            Reason.SSE_EVENT_TOO_LARGE,
        ),
        # Each event starts from zero.
        ((b"data: " + b"x" * (LIMIT - PREFIX) + b"\r\n\r\n") * 3, [ev("x" * 58)] * 3, None),
        # A comment counts while it is read, but is not kept.
        (
            b": " + b"c" * (LIMIT - 2) + b"\ndata: " + b"x" * (LIMIT - PREFIX) + b"\n\n",
            [ev("x" * 58)],
            None,
        ),
        (b": " + b"c" * (LIMIT - 1) + b"\n", [], Reason.SSE_EVENT_TOO_LARGE),
        (b": keepalive\n" * 100 + b"data: x\n\n", [ev("x")], None),
        # Multi-byte characters count as their bytes.
        (b"data: " + "é".encode() * 29 + b"\n\n", [ev("é" * 29)], None),
        (b"data: " + "é".encode() * 29 + b"x\n\n", [], Reason.SSE_EVENT_TOO_LARGE),
    ],
)
def test_size_bound(
    split: Split, data: bytes, events: list[SseEvent], reason: Reason | None
) -> None:
    assert outcome(split(data), max_event_bytes=LIMIT) == (events, reason)


def test_size_bound_is_checked_as_bytes_arrive() -> None:
    parser = SseParser(max_event_bytes=LIMIT)
    parser.receive_data(b"data: 1234567890\n")  # 16 bytes of the event
    line = b"data: " + b"x" * (LIMIT - 16 - PREFIX)  # exactly the rest, no line end yet
    for byte in bytewise(line):
        parser.receive_data(byte)
        assert parser.next_event() is NEED_DATA
    parser.receive_data(b"x")  # one byte over, long before any line end
    with pytest.raises(SseError) as raised:
        parser.next_event()
    assert raised.value.reason is Reason.SSE_EVENT_TOO_LARGE
    assert str(raised.value) == "sse_event_too_large: line 2: the event exceeds 64 bytes"


def test_size_bound_of_a_huge_unterminated_line() -> None:
    parser = SseParser(max_event_bytes=LIMIT)
    parser.receive_data(b"data: " + b"x" * 10_000)
    with pytest.raises(SseError) as raised:
        parser.next_event()
    assert raised.value.reason is Reason.SSE_EVENT_TOO_LARGE


def test_default_size_bound() -> None:
    data = b"x" * ((1 << 20) - PREFIX)
    assert outcome([b"data: " + data + b"\n\n"]) == ([ev(data.decode())], None)
    assert outcome([b"data: " + data + b"x\n\n"]) == ([], Reason.SSE_EVENT_TOO_LARGE)


def test_size_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        SseParser(max_event_bytes=0)


# --- the parser's life ----------------------------------------------------------------------


def test_errors_are_sticky() -> None:
    parser = SseParser()
    parser.receive_data(b"retry: 1\n\ndata: 1\n\n")
    for call in (
        parser.next_event,
        lambda: parser.receive_data(b"data: 2\n\n"),
        parser.end_of_input,
    ):
        with pytest.raises(SseError) as raised:
            call()
        assert str(raised.value) == "sse_unknown_field: line 1: field 'retry'"


def test_error_at_end_of_input_is_sticky() -> None:
    parser = SseParser()
    parser.receive_data(b"event: x")
    assert parser.next_event() is NEED_DATA
    with pytest.raises(SseError):
        parser.end_of_input()
    with pytest.raises(SseError) as raised:
        parser.next_event()
    assert raised.value.reason is Reason.SSE_EVENT_WITHOUT_DATA


def test_end_of_input_before_draining_is_a_usage_error() -> None:
    parser = SseParser()
    parser.receive_data(b"data: 1\n\n")
    with pytest.raises(RuntimeError, match="NEED_DATA"):
        parser.end_of_input()


def test_nothing_after_end_of_input() -> None:
    parser = SseParser()
    assert parser.end_of_input() is None
    with pytest.raises(RuntimeError, match="ended"):
        parser.receive_data(b"data: 1\n\n")
    with pytest.raises(RuntimeError, match="ended"):
        parser.next_event()
    with pytest.raises(RuntimeError, match="ended"):
        parser.end_of_input()


def test_buffered() -> None:
    parser = SseParser()
    assert parser.buffered == 0
    parser.receive_data(b"data: 1\n\ndata: 2")
    assert parser.buffered == 16
    assert parser.next_event() == ev("1")
    assert parser.buffered == 7
    assert parser.next_event() is NEED_DATA
    parser.receive_data(b"\r")
    assert parser.next_event() is NEED_DATA
    assert parser.buffered == 8
    parser.receive_data(b"\n\n")
    assert parser.next_event() == ev("2")
    assert parser.buffered == 0


# --- any re-chunking gives the same result --------------------------------------------------

#: Pieces of SSE, right and wrong, that the property test strings together.
PIECES: Final = [
    b"data: ",
    b"data:",
    b"data",
    b"event: delta\n",
    b"id: 1\n",
    b": keepalive\n",
    b":",
    b" ",
    b"x",
    b'{"a": 1}',
    "é☃𝄞".encode(),
    b"\xe2\x82",
    b"\xff",
    b"\r",
    b"\n",
    b"\r\n",
    b"\r\n\r\n",
    b"\n\n",
]

sse_bytes: Final = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=40).map(b"".join),
    st.binary(max_size=80),
)


def split_at(data: bytes, offsets: Sequence[int]) -> list[bytes]:
    points = [0, *sorted(offsets), len(data)]
    return [data[start:end] for start, end in pairwise(points)]


def full(chunks: Sequence[bytes], max_event_bytes: int) -> tuple[list[SseEvent], str | None]:
    """Events and the error's whole text (its detail is the same in every cut, too)."""
    events, error = run(chunks, max_event_bytes)
    return events, str(error) if error else None


@settings(max_examples=300, deadline=None)
@given(data=st.data(), stream=sse_bytes, max_event_bytes=st.sampled_from([8, 24, 1 << 20]))
def test_any_rechunking_gives_the_same_result(
    data: st.DataObject, stream: bytes, max_event_bytes: int
) -> None:
    offsets = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))
    expected = full([stream], max_event_bytes)
    assert full(split_at(stream, offsets), max_event_bytes) == expected
    assert full(bytewise(stream), max_event_bytes) == expected
    events, error = expected
    assert error is None or error.split(":", 1)[0] in {reason.value for reason in SSE_REASONS}
    assert all(event.terminated for event in events[:-1])  # only the last may be unterminated


LINE_ENDINGS: Final = [b"\n", b"\r\n", b"\r"]
#: Text without line ends (a data value may hold any other character, even a lone ":").
line_text: Final = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"), max_size=12
)


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(
        st.tuples(st.lists(line_text, min_size=1, max_size=3), st.none() | line_text),
        max_size=6,
    ),
    endings=st.lists(st.sampled_from(LINE_ENDINGS), min_size=1, max_size=8),
    terminate_last=st.booleans(),
    offsets=st.lists(st.integers(0, 2_000), max_size=10),
)
def test_well_formed_streams_round_trip(
    events: list[tuple[list[str], str | None]],
    endings: list[bytes],
    terminate_last: bool,
    offsets: list[int],
) -> None:
    lines: list[str] = []
    expected: list[SseEvent] = []
    for data_lines, name in events:
        lines += [] if name is None else [f"event: {name}"]
        lines += [f"data: {line}" for line in data_lines]
        lines.append("")
        expected.append(ev("\n".join(data_lines), name))
    if expected and not terminate_last:
        lines.pop()
        expected[-1] = ev(expected[-1].data, expected[-1].event, terminated=False)
    stream = b""
    for index, line in enumerate(lines):
        ending = endings[index % len(endings)]
        if not line and stream.endswith(b"\r") and ending.startswith(b"\n"):
            ending = b"\r\n"  # CR then an empty line's LF would be one CRLF
        stream += line.encode() + ending
    cut = split_at(stream, [offset for offset in offsets if offset <= len(stream)])
    assert outcome(cut) == (expected, None)


# --- linear in events and chunks ------------------------------------------------------------


def test_linear_many_events_in_one_chunk() -> None:
    count = 20_000
    stream = b"".join(b'data: {"n":%d}\r\n\r\n' % index for index in range(count))
    events, reason = outcome([stream])
    assert reason is None
    assert len(events) == count
    assert events[-1] == ev('{"n":19999}')
    assert all(event.data == f'{{"n":{index}}}' for index, event in enumerate(events))


def test_linear_many_events_in_one_byte_chunks() -> None:
    count = 2_000
    stream = b"".join(b": k\ndata: %d\ndata: x\r\n\r\n" % index for index in range(count))
    events, reason = outcome(bytewise(stream))
    assert reason is None
    assert events == [ev(f"{index}\nx") for index in range(count)]


def test_linear_one_long_line_in_small_chunks() -> None:
    # Re-searching the unfinished line from its start on every chunk would be quadratic here.
    data = b"x" * ((1 << 20) - PREFIX)
    stream = b"data: " + data + b"\r\n\r\n"
    chunks = [stream[start : start + 16] for start in range(0, len(stream), 16)]
    assert outcome(chunks) == ([ev(data.decode())], None)


def test_a_partial_character_is_not_counted_against_the_size_bound() -> None:
    # Found by the property above: a multi-byte character split at the end of a chunk
    # was counted before it was known to be valid, so the verdict depended on the cut.
    stream = b'data: {"a": 1}\xc3\xa9\xe2\x98\x83\xf0\x9d\x84\x9e\xe2\x82data: '
    verdicts = {
        full(chunks, 24)[1]
        for chunks in ([stream], bytewise(stream), split_at(stream, [25]), split_at(stream, [24]))
    }
    assert verdicts == {"sse_invalid_utf8: at byte 23: invalid continuation byte"}
