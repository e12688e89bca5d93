"""The least a trace record costs in CPython: the yardstick of ``bench.record_floor``.

A record here is one dict (the stream's bound fields, the call's fields, the event, the
level, the time), kept in a list and written in batches as orjson lines, as the producer's
trace writes them: no structlog, no processors, no stream context, no redaction, no lock.
Not a trace anyone should run (it redacts nothing); what it measures is how much of a
record's cost is the trace's machinery and how much is a JSON line's own.

``LeastLogger`` takes the place of a bound structlog logger where the benchmark's streams
log (``producer.states.ProducerStream``): ``bind``, ``info``, ``debug``, ``warning``,
``is_enabled_for``.
"""

from __future__ import annotations

import asyncio
import atexit
import time
from typing import IO, Any, Final

import orjson

from replywire.runtime.logs import DEFAULT_FLUSH_DELAY_S, _iso_utc

#: The level number ``is_enabled_for`` compares with: info (``logging.INFO``).
INFO: Final = 20


class LeastWriter:
    """Records kept as dicts, written ``DEFAULT_FLUSH_DELAY_S`` after the first of a batch
    (the trace's default), each rendered by orjson when written, and at exit."""

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file
        self._records: list[dict[str, Any]] = []
        self._scheduled = False
        atexit.register(self.flush)  # what is held when the process stops, as the trace's

    def keep(self, record: dict[str, Any]) -> None:
        self._records.append(record)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_later(DEFAULT_FLUSH_DELAY_S, self.flush)

    def flush(self) -> None:
        self._scheduled = False
        if not self._records:
            return
        lines = []
        for record in self._records:  # the time as the trace spells it: ISO 8601, UTC
            record["timestamp"] = _iso_utc(record["timestamp"])
            lines.append(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
        self._records.clear()
        self._file.write(b"".join(lines))
        self._file.flush()


class LeastLogger:
    """A bound logger of ``LeastWriter`` records at info."""

    __slots__ = ("_context", "_writer")

    def __init__(self, writer: LeastWriter, context: dict[str, Any]) -> None:
        self._writer = writer
        self._context = context

    def bind(self, **fields: Any) -> LeastLogger:
        return LeastLogger(self._writer, {**self._context, **fields})

    def is_enabled_for(self, level: int) -> bool:
        return level >= INFO

    def info(self, event: str, **fields: Any) -> None:
        record = self._context.copy()
        record.update(fields)
        record["event"] = event
        record["level"] = "info"
        record["timestamp"] = time.time()
        self._writer.keep(record)

    warning = info

    def debug(self, event: str, **fields: Any) -> None:
        return None
