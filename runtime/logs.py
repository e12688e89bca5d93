"""One logging setup for both processes: structlog, JSON lines off a TTY.

Every record carries ``timestamp`` (ISO 8601, UTC), ``level``, ``event``,
``side`` (producer / consumer) and ``stream_id`` (bound per stream with
``structlog.contextvars``; ``null`` outside a stream). Values under
secret-looking keys, and any occurrence of a registered secret value, are
replaced before rendering, so no API key or token reaches a trace.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import datetime
import io
import json
import logging
import math
import sys
import threading
import time
from collections.abc import Callable, MutableMapping
from typing import Any, Final, Literal, TextIO

import orjson
import structlog

from replywire.runtime.console_logs import ConsoleLines
from replywire.shared.terminal_text import shown_json

LogFormat = Literal["auto", "json", "console"]
LEVELS = ("debug", "info", "warning", "error", "critical")
REDACTED = "[redacted]"
SECRET_KEYS = frozenset(
    {"api_key", "apikey", "authorization", "x-goog-api-key", "token", "password", "secret"}
)
_secret_values: set[str] = set()


def register_secret(value: str | None) -> None:
    """Never let ``value`` appear in a log record (e.g. the Gemini API key)."""
    if value and len(value) >= 4:
        _secret_values.add(value)


def scrub_bytes(data: bytes, *, cut: bool = False) -> bytes:
    """Raw bytes with every registered secret replaced byte-wise (a capture's body, before
    it is written). ``cut``: the bytes were cut off at a bound, so a secret's beginning (4
    bytes or more) at the very end is replaced too."""
    secrets = sorted((value.encode("utf-8") for value in _secret_values), key=len, reverse=True)
    for secret in secrets:
        data = data.replace(secret, REDACTED.encode())
    if cut:
        for secret in secrets:
            for length in range(len(secret) - 1, 3, -1):
                if data.endswith(secret[:length]):
                    data = data[:-length] + REDACTED.encode()
                    break
    return data


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        for secret in _secret_values:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {
            key: REDACTED if str(key).lower() in SECRET_KEYS else _scrub(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_scrub(item) for item in value]
    return value


def redact_secrets(
    logger: Any, method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    # A record per transition: numbers and None are left alone, strings are looked at only
    # when a secret is registered (what _scrub would do, without a call per value), and a
    # key is lower-cased once per process, not once per record.
    secret_key = _SECRET_KEY_SEEN
    for key, value in event_dict.items():  # values replaced in place, no key added
        is_secret = secret_key.get(key)
        if is_secret is None:
            is_secret = _remember_key(key)
        if is_secret:
            event_dict[key] = REDACTED
        elif type(value) is str:
            if _secret_values:
                event_dict[key] = _scrub(value)
        elif not isinstance(value, _PLAIN):
            event_dict[key] = _scrub(value)
    return event_dict


#: Whether a key (as a record spells it) is a secret-looking one; bounded: keys are the
#: code's field names, and past the bound a key is judged afresh every time.
_SECRET_KEY_SEEN: dict[Any, bool] = {}
_MAX_KEYS_SEEN = 4096


def _remember_key(key: Any) -> bool:
    is_secret = str(key).lower() in SECRET_KEYS
    if len(_SECRET_KEY_SEEN) < _MAX_KEYS_SEEN:
        _SECRET_KEY_SEEN[key] = is_secret
    return is_secret


#: Values nothing is ever scrubbed from.
_PLAIN = (int, float, type(None))


def _add_side(side: str) -> structlog.typing.Processor:
    def add_side(
        logger: Any, method: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        event_dict.setdefault("side", side)
        event_dict.setdefault("stream_id", None)
        return event_dict

    return add_side


def json_dumps(value: Any, default: Callable[[Any], Any] | None = None, **_: Any) -> str:
    """A record as one JSON line, rendered by orjson (several times the standard library's
    speed: the trace has a record per transition). What orjson refuses (an integer beyond
    64 bits) is rendered by the standard library instead."""
    try:
        return orjson.dumps(value, default=default, option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, default=default)


class JsonLine:
    """A JSON trace's processors after the stream context, fused into one call (a record
    per transition: each processor call costs as much as its work): the level, the UTC
    ISO timestamp, the side, the traceback as a field, secrets redacted, one line by
    orjson. The same record as structlog's ``add_log_level``, ``TimeStamper(fmt="iso",
    utc=True)``, ``format_exc_info``, ``redact_secrets`` and ``JSONRenderer`` in turn.

    ``emit`` is the same record by the trace logger's shorter way (``_trace_logger_class``):
    into a batched trace its line is rendered when the batch is written (``render``), with
    the time it was made."""

    def __init__(self, side: str) -> None:
        self._add_side = _add_side(side)

    def __call__(self, logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> str:
        event_dict["level"] = _LEVEL_OF_METHOD.get(method, method)
        event_dict["timestamp"] = time.time()
        if "exc_info" in event_dict:
            event_dict = structlog.processors.format_exc_info(logger, method, event_dict)
        return self.render(event_dict)

    def emit(self, logger: Any, method: str, event_dict: dict[str, Any]) -> None:
        """Hand the record to ``logger``: a batched trace keeps it as it is, to be rendered
        with the batch, when every value is one nothing can change meanwhile (and it has
        no traceback, which is rendered now, while the exception is current)."""
        if type(logger) is TraceWriter and "exc_info" not in event_dict:
            for value in event_dict.values():
                if not isinstance(value, _FIXED):
                    break
            else:
                event_dict["level"] = _LEVEL_OF_METHOD.get(method, method)
                event_dict["timestamp"] = time.time()
                logger.keep(self, event_dict)
                return
        logger.msg(self(logger, method, event_dict))

    def render(self, event_dict: MutableMapping[str, Any]) -> str:
        """The line of a record whose ``timestamp`` is still the seconds it was made at."""
        event_dict["timestamp"] = _iso_utc(event_dict["timestamp"])
        self._add_side(None, "", event_dict)
        return json_dumps(redact_secrets(None, "", event_dict))


def _iso_utc(seconds: float) -> str:
    """``datetime.fromtimestamp(seconds, UTC).isoformat()`` with ``Z`` for ``+00:00``,
    rounded as it rounds (half to even, to the microsecond), the date and time of day made
    once per second (a trace has many records a second; making them was a record's
    costliest step)."""
    fraction, whole = math.modf(seconds)
    micro = round(fraction * 1e6)
    if micro >= 1_000_000:
        whole, micro = whole + 1, micro - 1_000_000
    elif micro < 0:  # before 1970: not a clock this trace has
        return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).isoformat()[:-6] + "Z"
    second = int(whole)
    cached = _second_text
    if cached[0] != second:
        cached = (second, datetime.datetime.fromtimestamp(second, tz=datetime.UTC).isoformat()[:-6])
        _set_second_text(cached)
    return f"{cached[1]}.{micro:06d}Z" if micro else f"{cached[1]}Z"


#: The last second ``_iso_utc`` made the text of (one tuple: replaced whole, thread-safe).
_second_text: tuple[int, str] = (-1, "")


def _set_second_text(value: tuple[int, str]) -> None:
    global _second_text  # noqa: PLW0603 - a one-entry cache
    _second_text = value


#: Values a record may hold until its batch is written: none of them changes.
_FIXED = (str, int, float, type(None))


#: structlog's level names of its method names (``add_log_level``).
_LEVEL_OF_METHOD: Final = {"warn": "warning", "exception": "error"}


#: How long a batched trace may hold a record before it is written (``TraceWriter``).
DEFAULT_FLUSH_DELAY_S: Final = 0.005
#: How many records a batched trace holds at most: the one that fills it writes them all.
DEFAULT_MAX_BATCH: Final = 512
#: The longest a process may be asked to hold its trace's records (``--trace-flush-ms``).
MAX_FLUSH_DELAY_MS: Final = 1000
TRACE_FLUSH_HELP: Final = (
    "hold trace records at most this long, to write them together (0: at the end of each "
    f"event-loop pass; at most {MAX_FLUSH_DELAY_MS})"
)


def flush_delay_ms(text: str) -> int:
    """``--trace-flush-ms``: whole milliseconds from 0 to ``MAX_FLUSH_DELAY_MS``."""
    try:
        value = int(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a whole number of ms: {text!r}") from error
    if not 0 <= value <= MAX_FLUSH_DELAY_MS:
        raise argparse.ArgumentTypeError(f"must be 0 to {MAX_FLUSH_DELAY_MS}: {text}")
    return value


class TraceWriter:
    """structlog's output for a process's trace: records are kept and written together,
    each one line, ``flush_delay_s`` after the first of a batch was kept (0: at the end of
    the event loop's current pass), or at once when the batch is full, when a record
    comes from outside a running loop (another thread, start-up, exit), and at exit.

    A write and a flush per record cost a system call each, and each gives gRPC's poller
    thread the GIL; a record kept as its fields (``keep``) is rendered with its batch,
    which costs a third of rendering it in the middle of a stream's work. A record is
    late by ``flush_delay_s`` at most; a SIGKILL loses what is held."""

    def __init__(
        self,
        file: TextIO,
        *,
        flush_delay_s: float = DEFAULT_FLUSH_DELAY_S,
        max_batch: int = DEFAULT_MAX_BATCH,
    ) -> None:
        if flush_delay_s < 0 or max_batch < 1:
            raise ValueError("flush_delay_s must be >= 0 and max_batch >= 1")
        self._file = file
        self._delay_s = flush_delay_s
        self._max_batch = max_batch
        #: Rendered lines, and records kept as (renderer, fields) to be rendered.
        self._lines: list[str | tuple[JsonLine, MutableMapping[str, Any]]] = []
        self._lock = threading.Lock()
        #: The loop a flush is scheduled on (None: none is): a loop that closed before it
        #: ran the flush leaves its lines to the next loop's flush, or to the exit.
        self._flush_on: asyncio.AbstractEventLoop | None = None
        atexit.register(self.flush)

    def msg(self, message: str) -> None:
        self._add(message)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg

    def keep(self, renderer: JsonLine, event_dict: MutableMapping[str, Any]) -> None:
        """A record rendered when its batch is written (its values do not change)."""
        self._add((renderer, event_dict))

    def _add(self, item: str | tuple[JsonLine, MutableMapping[str, Any]]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            self._lines.append(item)
            if loop is None or len(self._lines) >= self._max_batch:
                self._write_locked()  # at once, after what is held
            elif self._flush_on is not loop:
                self._flush_on = loop
                if self._delay_s:
                    loop.call_later(self._delay_s, self.flush)
                else:
                    loop.call_soon(self.flush)

    def flush(self) -> None:
        with self._lock:
            self._write_locked()

    def _write_locked(self) -> None:
        self._flush_on = None
        if not self._lines:
            return
        text = "\n".join(
            [item if isinstance(item, str) else _rendered(*item) for item in self._lines]
        )
        self._lines.clear()
        try:
            self._file.write(text + "\n")
            self._file.flush()
        except ValueError:  # the file was closed (a test's stream, at exit): nothing to do
            return


def _rendered(renderer: JsonLine, event_dict: MutableMapping[str, Any]) -> str:
    """A held record's line; one that cannot be rendered (nothing known does that) is
    named, not lost with its batch or left to fail every later write."""
    try:
        return renderer.render(event_dict)
    except Exception as error:
        return json_dumps(
            {
                "event": "trace_record_unrendered",
                "record_event": str(event_dict.get("event")),
                "error": type(error).__name__,
                "level": "error",
            }
        )


def _trace_logger_class(level: int) -> type[Any]:
    """structlog's filtering bound logger at ``level``, whose ``info`` and ``debug`` (a
    record per transition, per chunk) take a shorter way into a JSON trace: the bound
    context, the call's fields, the event and the stream context (``merge_contextvars``)
    in one dict, then any processors configured between ``merge_contextvars`` and
    ``JsonLine`` (run as structlog runs them, ``DropEvent`` included), handed to
    ``JsonLine.emit``; the same record as structlog's chain makes. Any other chain (the
    console, a test's capture) is run by structlog as configured."""
    base: type[Any] = structlog.make_filtering_bound_logger(level)

    def shorter(method: str) -> Callable[..., Any]:
        proxied = getattr(base, method)

        def record(self: Any, event: str, *args: Any, **kw: Any) -> Any:
            processors = self._processors
            if (
                args
                or len(processors) < 2
                or processors[0] is not _merge_contextvars
                or type(processors[-1]) is not JsonLine
            ):
                return proxied(self, event, *args, **kw)
            event_dict = self._context.copy()
            event_dict.update(kw)
            if event is not None:
                event_dict["event"] = event
            event_dict = _merge_contextvars(None, method, event_dict)
            if (
                len(processors) > 2
            ):  # e.g. the benchmark's first-chunk clock: run as structlog would
                try:
                    for processor in processors[1:-1]:
                        event_dict = processor(self._logger, method, event_dict)
                except structlog.DropEvent:
                    return None
            processors[-1].emit(self._logger, method, event_dict)
            return None

        return record

    methods = {method: shorter(method) for method in ("debug", "info") if level <= _LEVEL[method]}
    return type(f"Trace{base.__name__}", (base,), methods)


_merge_contextvars: Final = structlog.contextvars.merge_contextvars
_LEVEL: Final = {"debug": logging.DEBUG, "info": logging.INFO}


def _scrubbed_traceback(out: TextIO, exc_info: structlog.typing.ExcInfo) -> None:
    text = io.StringIO()
    structlog.dev.plain_traceback(text, exc_info)
    out.write(_scrub(text.getvalue()))


def configure_logging(
    side: str,
    *,
    log_format: LogFormat = "auto",
    level: str = "info",
    stream: TextIO | None = None,
    batched: bool = False,
    flush_delay_s: float = DEFAULT_FLUSH_DELAY_S,
) -> None:
    """Configure structlog for one process. Call once, at start-up. ``batched``: a
    process's JSON trace, written in batches, each at most ``flush_delay_s`` after its
    first record (see ``TraceWriter``)."""
    global _trace_writer  # noqa: PLW0603 - one trace per process, flushed by flush_trace
    flush_trace()  # a batched trace configured before this one keeps nothing back
    out = stream or sys.stderr
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}")
    use_console = log_format == "console" or (log_format == "auto" and out.isatty())
    # JSON: the traceback becomes a string field, scrubbed like every other value. The
    # console renders tracebacks itself (structlog warns if format_exc_info comes first):
    # its formatter scrubs them too.
    processors: list[structlog.typing.Processor] = (
        [
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
            _add_side(side),
            redact_secrets,
            ConsoleLines(
                colors=out.isatty(),
                summarise_pauses=level != "debug",
                exception_formatter=_scrubbed_traceback,
            ),
        ]
        if use_console
        else [_merge_contextvars, JsonLine(side)]
    )
    if not use_console and out.isatty():
        out = TerminalJson(out)  # JSON lines drawn on a terminal: no control sequence
    _trace_writer = (
        TraceWriter(out, flush_delay_s=flush_delay_s) if batched and not use_console else None
    )
    structlog.configure(
        processors=processors,
        wrapper_class=_trace_logger_class(getattr(logging, level.upper())),
        logger_factory=(
            structlog.WriteLoggerFactory(out) if _trace_writer is None else _the(_trace_writer)
        ),
        cache_logger_on_first_use=False,
    )


class TerminalJson:
    """A terminal as the stream of JSON lines: what would reach it as a control
    sequence (DEL, C1 controls, bidi overrides, which JSON leaves as they are) is
    written as a JSON escape instead, so each line still parses to the same record
    (``shared.terminal_text``). A file or a pipe gets the lines as they are."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def write(self, text: str) -> int:
        return self._out.write(shown_json(text))

    def flush(self) -> None:
        self._out.flush()

    def isatty(self) -> bool:
        return True


def _the(writer: TraceWriter) -> Callable[..., TraceWriter]:
    """A logger factory that gives every logger the one writer."""
    return lambda *args: writer


_trace_writer: TraceWriter | None = None


def flush_trace() -> None:
    """Write what a batched trace holds now: before the process tells anyone outside it
    something the trace should already show (``listening on``)."""
    if _trace_writer is not None:
        _trace_writer.flush()
