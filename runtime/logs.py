"""One logging setup for both processes: structlog, JSON lines off a TTY.

Every record carries ``timestamp`` (ISO 8601, UTC), ``level``, ``event``,
``side`` (producer / consumer) and ``stream_id`` (bound per stream with
``structlog.contextvars``; ``null`` outside a stream). Values under
secret-looking keys, and any occurrence of a registered secret value, are
replaced before rendering, so no API key or token reaches a trace.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Callable, MutableMapping
from typing import Any, Literal, TextIO

import orjson
import structlog

from runtime.console_logs import ConsoleLines

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
    # when a secret is registered (what _scrub would do, without a call per value).
    for key, value in event_dict.items():  # values replaced in place, no key added
        if key.lower() in SECRET_KEYS:
            event_dict[key] = REDACTED
        elif type(value) is str:
            if _secret_values:
                event_dict[key] = _scrub(value)
        elif not isinstance(value, _PLAIN):
            event_dict[key] = _scrub(value)
    return event_dict


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


#: The one event name of every record a library's standard ``logging`` call becomes.
FOREIGN_LOG_EVENT = "library_log"


class _ToStructlog(logging.Handler):
    """Turns a standard ``logging`` record into a structlog record: the library's text is
    a field (``message``), escaped by the renderer like any value, never a line of its own."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            structlog.get_logger().log(
                record.levelno,
                FOREIGN_LOG_EVENT,
                logger=record.name,
                message=record.getMessage(),
                exc_info=record.exc_info or False,
            )
        except Exception:  # a broken library record must not break the process
            self.handleError(record)


def route_stdlib_logging(*names: str, level: int = logging.WARNING) -> None:
    """Route the standard ``logging`` of the named libraries (and their children) into
    the structlog trace, and stop them reaching Python's last-resort stderr handler."""
    for name in names:
        logger = logging.getLogger(name)
        logger.handlers = [_ToStructlog()]
        logger.setLevel(level)
        logger.propagate = False


def json_dumps(value: Any, default: Callable[[Any], Any] | None = None, **_: Any) -> str:
    """A record as one JSON line, rendered by orjson (several times the standard library's
    speed: the trace has a record per transition). What orjson refuses (an integer beyond
    64 bits) is rendered by the standard library instead."""
    try:
        return orjson.dumps(value, default=default, option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, default=default)


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
) -> None:
    """Configure structlog for one process. Call once, at start-up."""
    out = stream or sys.stderr
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}")
    use_console = log_format == "console" or (log_format == "auto" and out.isatty())
    # JSON: the traceback becomes a string field, scrubbed like every other value. The
    # console renders tracebacks itself (structlog warns if format_exc_info comes first):
    # its formatter scrubs them too.
    tail: list[structlog.typing.Processor] = (
        [
            redact_secrets,
            ConsoleLines(
                colors=out.isatty(),
                summarise_pauses=level != "debug",
                exception_formatter=_scrubbed_traceback,
            ),
        ]
        if use_console
        else [
            structlog.processors.format_exc_info,
            redact_secrets,
            structlog.processors.JSONRenderer(serializer=json_dumps),
        ]
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
            _add_side(side),
            *tail,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.WriteLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
