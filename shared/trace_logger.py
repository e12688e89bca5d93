"""The logger the pure core writes its records to: a protocol of its own, and one that drops all.

The core (``shared/``, the pure provider modules) logs every state change once, but it
must not import a logging library: structlog, and rich through it, cost every process
about 87 ms at start (the conformance testee's included) and would tie the pure code to
one library. It names the few methods it calls; the processes hand it their structlog
bound logger, which has them (h2 takes its logger the same way and defaults to a
``DummyLogger``).
"""

from __future__ import annotations

from typing import Any, Protocol

#: ``logging.DEBUG`` (no ``logging`` here: the core is pure).
DEBUG = 10


class TraceLogger(Protocol):
    """What the core calls on a logger: structlog's bound loggers have all of it."""

    def debug(self, event: str, *args: Any, **kw: Any) -> Any: ...

    def info(self, event: str, *args: Any, **kw: Any) -> Any: ...

    def warning(self, event: str, *args: Any, **kw: Any) -> Any: ...

    def error(self, event: str, *args: Any, **kw: Any) -> Any: ...

    def is_enabled_for(self, level: int) -> bool: ...


class NullLogger:
    """A logger that does nothing: the default of every machine and core."""

    def debug(self, event: str, *args: Any, **kw: Any) -> None:
        return None

    def info(self, event: str, *args: Any, **kw: Any) -> None:
        return None

    def warning(self, event: str, *args: Any, **kw: Any) -> None:
        return None

    def error(self, event: str, *args: Any, **kw: Any) -> None:
        return None

    def is_enabled_for(self, level: int) -> bool:
        return False


NULL_LOGGER: TraceLogger = NullLogger()
