"""Library records are bounded: texts cut at the stated size, kinds rate-limited, counts told."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from replywire.runtime.library_logs import (
    FOREIGN_LOG_EVENT,
    LOGGER_CHARS,
    MAX_KINDS,
    OTHER_KIND,
    SUPPRESSED_EVENT,
    LibraryLogBounds,
    LibraryLogLimiter,
    counts,
    flush_suppressed,
    route_stdlib_logging,
    set_library_log_bounds,
)
from replywire.runtime.logs import configure_logging
from replywire.shared.errors import CUT_MARK

LIBRARY = "replywire-test-library"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def trace() -> Iterator[io.StringIO]:
    """A JSON trace in memory, ``LIBRARY``'s logging routed into it, fresh bounds."""
    out = io.StringIO()
    configure_logging("producer", log_format="json", stream=out)
    set_library_log_bounds(LibraryLogBounds())
    route_stdlib_logging(LIBRARY)
    try:
        yield out
    finally:
        logger = logging.getLogger(LIBRARY)
        logger.handlers, logger.propagate = [], True
        logger.setLevel(logging.NOTSET)
        set_library_log_bounds(LibraryLogBounds())
        structlog.reset_defaults()


def lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def records(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines(out)]


def test_a_message_at_the_bound_is_whole_and_one_past_it_is_cut(trace: io.StringIO) -> None:
    chars = LibraryLogBounds().chars
    log = logging.getLogger(LIBRARY)
    log.warning("%s", "a" * chars)
    log.warning("%s", "b" * (chars + 1))
    at, past = records(trace)
    assert at["message"] == "a" * chars and "message_chars" not in at
    assert past["message"] == "b" * (chars - 1) + CUT_MARK
    assert past["message_chars"] == chars + 1


def test_a_peer_s_bytes_are_shown_cut_whatever_their_size(trace: io.StringIO) -> None:
    """What gRPC logs for a header value that is not UTF-8: the value's repr, whole."""
    header = b"\xff" * 262144
    logging.getLogger(f"{LIBRARY}.cygrpc").error("Invalid encoding on %s", header)
    (line,) = lines(trace)
    (record,) = records(trace)
    assert record["event"] == FOREIGN_LOG_EVENT
    assert record["logger"] == f"{LIBRARY}.cygrpc"
    assert record["message"].startswith("Invalid encoding on b'\\xff\\xff")
    assert record["message"].endswith(CUT_MARK)
    assert len(record["message"]) <= LibraryLogBounds().chars
    assert record["message_chars"] == len(f"Invalid encoding on {header!r}")
    assert len(line) <= LibraryLogBounds().max_record_bytes


def test_an_exception_is_its_own_line_and_where_it_was_raised(trace: io.StringIO) -> None:
    try:
        (b"\xff" * 100_000).decode("utf-8")
    except UnicodeDecodeError:
        logging.getLogger(LIBRARY).exception("Invalid encoding")
    (record,) = records(trace)
    assert record["exception"].startswith("UnicodeDecodeError: 'utf-8' codec can't decode")
    assert " (at " in record["exception"] and "Traceback" not in record["exception"]
    assert len(record["exception"]) <= LibraryLogBounds().chars


@settings(max_examples=60, deadline=None)
@given(name=st.text(max_size=300), text=st.text(max_size=2000), error=st.text(max_size=2000))
def test_any_library_record_fits_its_bound(name: str, text: str, error: str) -> None:
    """Whatever characters a library's text holds (any code point, escapes, quotes), its
    line is at most ``max_record_bytes``."""
    out = io.StringIO()
    configure_logging("producer", log_format="json", stream=out)
    bounds = LibraryLogBounds(chars=64)
    set_library_log_bounds(bounds)
    logger_name = f"{LIBRARY}.{name}"
    route_stdlib_logging(logger_name)
    try:
        try:
            raise ValueError(error)
        except ValueError:
            logging.getLogger(logger_name).exception("%s", text)
    finally:
        logger = logging.getLogger(logger_name)
        logger.handlers, logger.propagate = [], True
        set_library_log_bounds(LibraryLogBounds())
        structlog.reset_defaults()
    (line,) = out.getvalue().splitlines()
    record = json.loads(line)
    assert len(line.encode()) <= bounds.max_record_bytes
    assert len(record["logger"]) <= LOGGER_CHARS
    assert len(record["message"]) <= bounds.chars
    assert len(record["exception"]) <= bounds.chars
    assert record["message"].isprintable() and record["exception"].isprintable()


def test_a_burst_of_one_kind_is_cut_and_the_rest_is_told(trace: io.StringIO) -> None:
    set_library_log_bounds(LibraryLogBounds(burst=3, interval_s=3600))
    log = logging.getLogger(LIBRARY)
    for n in range(300):
        log.error("Invalid encoding on %s", bytes([n % 256]) * 1000)
    log.error("another kind")
    flush_suppressed()
    got = records(trace)
    assert [r["event"] for r in got] == [FOREIGN_LOG_EVENT] * 4 + [SUPPRESSED_EVENT]
    assert got[3]["message"] == "another kind"
    told = got[-1]
    assert (told["logger"], told["template"], told["suppressed"]) == (
        LIBRARY,
        "Invalid encoding on %s",
        297,
    )
    assert counts() == {"library_logs_written": 4, "library_logs_suppressed": 297}
    flush_suppressed()  # told once: nothing more to tell
    assert len(records(trace)) == 5


def test_a_window_s_end_lets_a_kind_through_with_what_was_suppressed() -> None:
    clock = Clock()
    limiter = LibraryLogLimiter(LibraryLogBounds(burst=2, interval_s=10.0), clock)
    kind = ("grpc", "Invalid encoding on %s")
    assert [limiter.admit(*kind) for _ in range(5)] == [0, 0, None, None, None]
    clock.now += 9.999  # still the same window
    assert limiter.admit(*kind) is None
    clock.now += 0.001  # the window's end, exactly
    assert limiter.admit(*kind) == 4  # the four not written, told by this one
    assert limiter.admit(*kind) == 0
    assert limiter.admit(*kind) is None
    assert (limiter.written, limiter.suppressed) == (4, 5)
    assert limiter.take_untold() == [(kind, 1)]
    assert limiter.take_untold() == []


def test_kinds_are_bounded_and_one_kind_stands_for_the_rest() -> None:
    clock = Clock()
    limiter = LibraryLogLimiter(LibraryLogBounds(burst=1, interval_s=10.0), clock)
    for n in range(MAX_KINDS):
        assert limiter.admit("lib", f"template {n}") == 0
    # A new kind past the bound, every window still open: the shared kind.
    assert limiter.admit("lib", "template new") == 0
    assert limiter.admit("lib", "template newer") is None  # the shared kind's burst is spent
    assert limiter.take_untold() == [(OTHER_KIND, 1)]
    assert limiter.admit("lib", "template 0") is None  # a kind remembered keeps its own
    clock.now += 10.0  # every window ended: the kinds with nothing to tell are forgotten
    assert limiter.admit("lib", "template newest") == 0
    assert limiter.take_untold() == [(("lib", "template 0"), 1)]


@pytest.mark.parametrize(
    "bounds", [{"chars": 0}, {"burst": 0}, {"interval_s": 0.0}, {"interval_s": float("nan")}]
)
def test_bounds_below_their_least_are_refused(bounds: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        LibraryLogBounds(**bounds)


def test_the_root_logger_routed_bounds_every_other_library() -> None:
    """The producer routes the root logger too: asyncio's records (or any library's not
    named) are bounded library records, never bare lines on stderr."""
    out = io.StringIO()
    configure_logging("producer", log_format="json", stream=out)
    set_library_log_bounds(LibraryLogBounds())
    root = logging.getLogger()
    saved = root.handlers, root.level, root.propagate
    route_stdlib_logging("")
    try:
        logging.getLogger("asyncio").error("Task exception was never retrieved: %s", "x" * 100_000)
    finally:
        root.handlers, root.propagate = saved[0], saved[2]
        root.setLevel(saved[1])
        structlog.reset_defaults()
    (record,) = records(out)
    assert (record["event"], record["logger"]) == (FOREIGN_LOG_EVENT, "asyncio")
    assert record["message"].endswith(CUT_MARK)
    assert len(out.getvalue()) <= LibraryLogBounds().max_record_bytes
