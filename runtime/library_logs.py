"""Library records: what a library's standard ``logging`` call becomes in the trace, bounded.

A library's text can be a peer's bytes: gRPC logs a request header whose value is not
UTF-8 with the whole value, twice, before any token is checked. So every record routed
here (``route_stdlib_logging``: gRPC's, OpenTelemetry's, the HTTP client's, Redis')
follows the rule of every text from elsewhere in a record:

* **Cut.** Its ``message``, and its ``exception`` (the exception's own line and where it
  was raised; the traceback above that is not kept), are made printable and cut at
  ``LibraryLogBounds.chars`` characters by ``shared.errors.scrubbed_detail`` (``…`` where
  cut); a cut text's whole length is beside it (``message_chars``, ``exception_chars``).
  The logger's name is cut at ``LOGGER_CHARS``.
* **Rate-limited per kind** (a logger's name and its message's template, before the
  arguments are put in): at most ``burst`` records of a kind every ``interval_s``; the
  rest are counted, not written (nor formatted). The next record of that kind that is
  written carries ``suppressed``: how many of its kind were not written since its last
  one. ``flush_suppressed`` (at stop) writes one ``library_log_suppressed`` record per
  kind with some left to tell, so the ``suppressed`` of all records add up to the
  process's count (``counts()``, in ``producer_stopped``).
* **Kinds are bounded** (``MAX_KINDS``): a kind past it whose window ended and that has
  nothing left to tell is forgotten; if none is, the new kind shares one with every
  other (``logger: "*"``).

So one library record is at most ``max_record_chars`` characters of text, whatever a
peer sent, and a peer that repeats itself gets ``burst`` of them per kind and interval.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import structlog

from replywire.shared.errors import MAX_DETAIL_CHARS, scrubbed_detail

#: The one event name of every record a library's standard ``logging`` call becomes.
FOREIGN_LOG_EVENT: Final = "library_log"
#: The record that tells, at stop, how many records of a kind were not written.
SUPPRESSED_EVENT: Final = "library_log_suppressed"
#: The longest logger name and message template a record shows.
LOGGER_CHARS: Final = 128
TEMPLATE_CHARS: Final = 128
#: Kinds remembered at once; past it, one kind stands for every new one.
MAX_KINDS: Final = 256
#: The kind every new one shares once ``MAX_KINDS`` are remembered.
OTHER_KIND: Final = ("*", "*")

#: A library record's bytes besides its texts (its time, level, event, side, stream id,
#: field names, the lengths of cut texts, ``suppressed``), outside a stream's context.
RECORD_FRAME_BYTES: Final = 512
#: The most bytes a printable character takes in a JSON line: UTF-8 (``"`` and ``\\``,
#: escaped, take two).
BYTES_PER_CHAR: Final = 4

DEFAULT_CHARS: Final = MAX_DETAIL_CHARS
DEFAULT_BURST: Final = 10
DEFAULT_INTERVAL_S: Final = 60.0


@dataclass(frozen=True, slots=True)
class LibraryLogBounds:
    """How much of a library's logging reaches the trace (``--library-log-*``)."""

    #: The longest ``message`` or ``exception`` of a library record, in characters.
    chars: int = DEFAULT_CHARS
    #: Records of one kind written per ``interval_s``.
    burst: int = DEFAULT_BURST
    interval_s: float = DEFAULT_INTERVAL_S

    def __post_init__(self) -> None:
        if self.chars < 1 or self.burst < 1 or not self.interval_s > 0:
            raise ValueError("chars and burst must be at least 1, interval_s more than 0")

    @property
    def max_record_chars(self) -> int:
        """The most text a library record holds: its message and exception at ``chars``
        each, its logger's name and (at stop) its template; every value printable."""
        return 2 * self.chars + LOGGER_CHARS + TEMPLATE_CHARS

    @property
    def max_record_bytes(self) -> int:
        """The longest line a library record is in a JSON trace, outside a stream."""
        return BYTES_PER_CHAR * self.max_record_chars + RECORD_FRAME_BYTES


@dataclass(slots=True)
class _Kind:
    window_start: float
    written: int = 0  # in this window
    untold: int = 0  # not written since the last record of this kind that was


class LibraryLogLimiter:
    """Which library records are written: ``burst`` per kind and ``interval_s``; counts
    what is not. Thread-safe (gRPC logs from its own threads)."""

    def __init__(
        self, bounds: LibraryLogBounds, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.bounds = bounds
        self._clock = clock
        self._kinds: dict[tuple[str, str], _Kind] = {}
        self._lock = threading.Lock()
        self.written = 0
        self.suppressed = 0

    def admit(self, logger: str, template: str) -> int | None:
        """None: do not write this record (counted). Else how many of its kind were not
        written since the last one that was (to be said in this one)."""
        now = self._clock()
        with self._lock:
            kind = self._kind((logger, template), now)
            if now - kind.window_start >= self.bounds.interval_s:
                kind.window_start, kind.written = now, 0
            if kind.written >= self.bounds.burst:
                kind.untold += 1
                self.suppressed += 1
                return None
            kind.written += 1
            self.written += 1
            untold, kind.untold = kind.untold, 0
            return untold

    def _kind(self, key: tuple[str, str], now: float) -> _Kind:
        kind = self._kinds.get(key)
        if kind is not None:
            return kind
        if len(self._kinds) >= MAX_KINDS:
            interval = self.bounds.interval_s
            for old in [
                name
                for name, seen in self._kinds.items()
                if not seen.untold and now - seen.window_start >= interval
            ]:
                del self._kinds[old]
        if len(self._kinds) >= MAX_KINDS:
            key = OTHER_KIND
            if key in self._kinds:
                return self._kinds[key]
        kind = self._kinds[key] = _Kind(now)
        return kind

    def take_untold(self) -> list[tuple[tuple[str, str], int]]:
        """Every kind with records not written and not yet told, and how many; now told."""
        with self._lock:
            untold = [(key, kind.untold) for key, kind in self._kinds.items() if kind.untold]
            for kind in self._kinds.values():
                kind.untold = 0
            return untold


_limiter = LibraryLogLimiter(LibraryLogBounds())


def set_library_log_bounds(bounds: LibraryLogBounds) -> None:
    """Bound this process's library records by ``bounds`` (at start-up: counts restart)."""
    global _limiter  # noqa: PLW0603 - one trace per process
    _limiter = LibraryLogLimiter(bounds)


def counts() -> dict[str, int]:
    """Library records written and not written so far (``producer_stopped``'s fields)."""
    return {
        "library_logs_written": _limiter.written,
        "library_logs_suppressed": _limiter.suppressed,
    }


def flush_suppressed() -> None:
    """At stop: one ``library_log_suppressed`` record for every kind whose records were not
    all written and not yet told, so every suppressed record is told by some record."""
    log = structlog.get_logger()
    for (logger, template), untold in _limiter.take_untold():
        log.warning(SUPPRESSED_EVENT, logger=logger, template=template, suppressed=untold)


def _cut(fields: dict[str, Any], name: str, text: str, chars: int) -> None:
    shown = scrubbed_detail(text, chars)
    fields[name] = shown
    if shown != text:
        fields[f"{name}_chars"] = len(text)


def _exception_line(exc_info: Any) -> str:
    """The exception's own line and the place it was raised: what a library's traceback
    tells that its message does not."""
    _, error, trace = exc_info
    line = "".join(traceback.format_exception_only(error)).strip()
    frames = traceback.extract_tb(trace)
    if frames:
        last = frames[-1]
        line += f" (at {last.filename}:{last.lineno} in {last.name})"
    return line


class _ToStructlog(logging.Handler):
    """Turns a standard ``logging`` record into a structlog record, bounded (above): the
    library's text is a field, escaped like any value, never a line of its own."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            limiter = _limiter
            logger = scrubbed_detail(record.name, LOGGER_CHARS)
            template = scrubbed_detail(str(record.msg), TEMPLATE_CHARS)
            untold = limiter.admit(logger, template)
            if untold is None:
                return
            chars = limiter.bounds.chars
            fields: dict[str, Any] = {"logger": logger}
            _cut(fields, "message", record.getMessage(), chars)
            if record.exc_info and record.exc_info[1] is not None:
                _cut(fields, "exception", _exception_line(record.exc_info), chars)
            if untold:
                fields["suppressed"] = untold
            structlog.get_logger().log(record.levelno, FOREIGN_LOG_EVENT, **fields)
        except Exception:  # a broken library record must not break the process
            self.handleError(record)


def route_stdlib_logging(*names: str, level: int = logging.WARNING) -> None:
    """Route the standard ``logging`` of the named libraries (and their children) into
    the structlog trace, bounded, and stop them reaching Python's last-resort stderr
    handler. ``""`` names the root logger: every library not named otherwise."""
    for name in names:
        logger = logging.getLogger(name)
        logger.handlers = [_ToStructlog()]
        logger.setLevel(level)
        logger.propagate = False
