"""The trace on a terminal: one short line per record, for a person.

A line is ``TIME [LEVEL] EVENT [COMPONENT: FROM -> TO] FIELDS · STREAM``: the time of
day (the date and zone are the JSON trace's), the level only when it is not info, the
event and its state change first, then the fields that matter, in the order the code
gave them (``input``, ``status`` and ``reason`` first). Left out: ``None`` values,
``reconnects``, ``discarded_bytes`` and ``resume_after`` when 0, the
process's own side, and context a person already knows: ``case_id``, ``peer``,
``caller``, ``source``, ``target``, ``wire``, ``chunks`` and (with tracing on) the
OpenTelemetry ``trace_id`` are shown on a stream's first record and again only when they
change; its ``span_id`` is the JSON trace's alone. The stream id is shortened to its first
8 characters; SHA-256 values to 12.

Every piece of a line that came from a record (keys, values, the event, states, the
stream id, an exception's text) is shown by ``shared.terminal_text``: a control
character or bidi override a peer put into a value is written as its escape, never
obeyed; a value is one line (a newline in it is shown as ``\n``), at most
``MAX_VALUE_CHARS`` characters. The line's own colours are the only escape sequences it
writes (``OWN_STYLES``).

A slow reader pauses and resumes hundreds of times per reply; each pause is four
records in the JSON trace (``reads_paused``, the reader's two state changes,
``reads_resumed``), all kept there. Here, above debug, they are summarised: one record
per pause episode (pauses closer than ``PAUSE_EPISODE_GAP_S`` apart), with how many
pauses, how long reads were paused and over how long, printed when the episode ends
(the stream's next other record). At debug every record is printed as it comes.
"""

from __future__ import annotations

import io
import json
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TextIO

import structlog

from replywire.shared.terminal_text import shown_line, shown_text

ExceptionFormatter = Callable[[TextIO, structlog.typing.ExcInfo], None]

#: Pauses closer together than this are one episode.
PAUSE_EPISODE_GAP_S: Final = 1.0
#: Streams whose context and open pause episode are remembered (oldest forgotten first).
REMEMBERED_STREAMS: Final = 256
#: Context shown on a stream's first record and again only when it changes.
CONTEXT_KEYS: Final = (
    "case_id", "peer", "caller", "source", "target", "wire", "chunks", "trace_id"
)  # fmt: skip
#: Never shown: what the process knows of itself, and what the line shows in its own way.
HIDDEN_KEYS: Final = frozenset(
    {"side", "timestamp", "level", "event", "stream_id", "component", "from_state", "to_state",
     "span_id"}
)  # fmt: skip
FIRST_KEYS: Final = ("input", "status", "reason")
#: Counters that say nothing when they are 0 (nothing resumed, nothing dropped).
QUIET_WHEN_ZERO: Final = frozenset({"reconnects", "discarded_bytes", "resume_after"})
SHORT_STREAM_ID: Final = 8
#: The longest value shown (a value from elsewhere may be long: its end is cut, marked).
MAX_VALUE_CHARS: Final = 512
SHORT_DIGEST: Final = 12
PAUSE_EVENTS: Final = frozenset({"reads_paused", "reads_resumed"})

_RESET, _DIM, _BOLD = "\x1b[0m", "\x1b[2m", "\x1b[1m"
_CYAN, _MAGENTA, _YELLOW, _RED = "\x1b[36m", "\x1b[35m", "\x1b[33m", "\x1b[31m"
_LEVEL_STYLE: Final = {"debug": _DIM, "warning": _YELLOW + _BOLD}
#: Every escape sequence a line writes itself: its colours (SGR), nothing else.
OWN_STYLES: Final = re.compile(r"\x1b\[(?:0|1|2|31|33|35|36)m")


@dataclass(slots=True)
class _Episode:
    """Pauses of one stream's reader, close together."""

    started: str
    first_s: float
    last_s: float
    pauses: int = 0
    paused_ms: float = 0.0


def _clock(timestamp: object) -> tuple[str, float]:
    """``HH:MM:SS.mmm`` and seconds since the epoch of an ISO timestamp (or now)."""
    try:
        moment = datetime.fromisoformat(str(timestamp))
    except ValueError:
        moment = datetime.now()
    return moment.strftime("%H:%M:%S.%f")[:-3], moment.timestamp()


def _value(key: str, value: object) -> str:
    """A value as one line: quoted when empty or spaced (``repr`` escapes what is not
    printable), JSON for a container; shown and bounded by ``shared.terminal_text``."""
    if isinstance(value, str):
        if key.endswith("sha256") and len(value) > SHORT_DIGEST:
            value = value[:SHORT_DIGEST] + "…"
        text = repr(value) if not value or any(c.isspace() for c in value) else value
    elif isinstance(value, dict | list | tuple):
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    else:
        text = str(value)
    return shown_line(text, MAX_VALUE_CHARS)


def _short_stream(stream: str) -> str:
    return shown_line(stream[:SHORT_STREAM_ID])


def _is_pause(event_dict: MutableMapping[str, Any]) -> bool:
    event = event_dict.get("event")
    if event in PAUSE_EVENTS:
        return True
    states = {event_dict.get("from_state"), event_dict.get("to_state")}
    return (
        event == "state_changed"
        and event_dict.get("component") == "reader"
        and states == {"streaming", "paused"}
    )


def _exc_info(value: object) -> structlog.typing.ExcInfo | None:
    if isinstance(value, BaseException):
        return (type(value), value, value.__traceback__)
    if isinstance(value, tuple) and len(value) == 3 and value[0] is not None:
        return value
    if value is True:
        current = sys.exc_info()
        return current if current[0] is not None else None
    return None


class ConsoleLines:
    """A structlog renderer: the record as one short line (see the module)."""

    def __init__(
        self,
        *,
        colors: bool,
        summarise_pauses: bool = True,
        exception_formatter: ExceptionFormatter | None = None,
    ) -> None:
        self.colors = colors
        self.summarise_pauses = summarise_pauses
        self._format_exception = exception_formatter or structlog.dev.plain_traceback
        self._context: OrderedDict[str, dict[str, object]] = OrderedDict()
        self._episodes: OrderedDict[str, _Episode] = OrderedDict()
        self._lock = threading.Lock()  # a library thread may log too

    def _style(self, text: str, style: str) -> str:
        return f"{style}{text}{_RESET}" if self.colors and style else text

    def __call__(self, logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> str:
        with self._lock:
            return self._lines(event_dict)

    def _lines(self, event_dict: MutableMapping[str, Any]) -> str:
        stream = event_dict.get("stream_id")
        lines: list[str] = []
        if self.summarise_pauses and isinstance(stream, str):
            if _is_pause(event_dict):
                ended = self._pause(stream, event_dict)
                if ended is None:
                    raise structlog.DropEvent
                return ended
            if (episode := self._episodes.pop(stream, None)) is not None:
                lines.append(self._summary(stream, episode))
        lines.append(self._line(event_dict))
        return "\n".join(lines)

    def _pause(self, stream: str, event_dict: MutableMapping[str, Any]) -> str | None:
        """Count a pause record; the summary of the episode it closes, if it closes one."""
        started, now = _clock(event_dict.get("timestamp"))
        episode = self._episodes.get(stream)
        closed: list[str] = []
        if event_dict.get("event") == "reads_paused":
            if episode is not None and now - episode.last_s > PAUSE_EPISODE_GAP_S:
                closed.append(self._summary(stream, self._episodes.pop(stream)))
                episode = None
            if episode is None:
                episode = self._episodes[stream] = _Episode(started, now, now)
                closed += self._forget_beyond(self._episodes)
            episode.pauses += 1
        if episode is not None:
            episode.last_s = now
            paused = event_dict.get("paused_ms")
            if isinstance(paused, int | float):
                episode.paused_ms += paused
        return "\n".join(closed) or None

    def _forget_beyond(self, episodes: OrderedDict[str, _Episode]) -> list[str]:
        closed = []
        while len(episodes) > REMEMBERED_STREAMS:
            stream, episode = episodes.popitem(last=False)
            closed.append(self._summary(stream, episode))
        return closed

    def _summary(self, stream: str, episode: _Episode) -> str:
        span_ms = (episode.last_s - episode.first_s) * 1000
        fields: dict[str, object] = {
            "pauses": episode.pauses,
            "paused_ms": round(episode.paused_ms, 1),
            "over_ms": round(span_ms, 1),
        }
        return self._render(
            episode.started, "", self._style("reads_paused_episode", _BOLD), fields, stream
        )

    def _changed_context(self, stream: object, event_dict: MutableMapping[str, Any]) -> set[str]:
        """The context keys of this record a person has not seen yet for its stream."""
        present = {key: event_dict[key] for key in CONTEXT_KEYS if key in event_dict}
        if not isinstance(stream, str):
            return set(present)
        known = self._context.setdefault(stream, {})
        self._context.move_to_end(stream)
        while len(self._context) > REMEMBERED_STREAMS:
            self._context.popitem(last=False)
        fresh = {key for key, value in present.items() if known.get(key, object()) != value}
        known.update(present)
        return fresh

    def _line(self, event_dict: MutableMapping[str, Any]) -> str:
        exc_info = _exc_info(event_dict.pop("exc_info", None))
        exception = event_dict.pop("exception", None)
        stream = event_dict.get("stream_id")
        fresh = self._changed_context(stream, event_dict)
        change = ""
        if "to_state" in event_dict:
            component = event_dict.get("component")
            origin = event_dict.get("from_state")
            to_state = shown_line(str(event_dict["to_state"]))
            states = f"{shown_line(str(origin))} -> {to_state}" if origin else f"-> {to_state}"
            change = f"{shown_line(str(component))}: {states}" if component else states
        elif (component := event_dict.get("component")) is not None:
            change = f"{shown_line(str(component))}:"
        ordered = [key for key in FIRST_KEYS if key in event_dict]
        ordered += [key for key in event_dict if key not in FIRST_KEYS]
        fields = {
            key: event_dict[key]
            for key in ordered
            if key not in HIDDEN_KEYS
            and event_dict[key] is not None
            and not (key in QUIET_WHEN_ZERO and event_dict[key] == 0)
            and (key not in CONTEXT_KEYS or key in fresh)
        }
        clock, _ = _clock(event_dict.get("timestamp"))
        level = shown_line(str(event_dict.get("level", "info")))
        event = shown_line(str(event_dict.get("event", "")))
        title = self._style(event, _BOLD) + (" " + self._style(change, _MAGENTA) if change else "")
        line = self._render(clock, level, title, fields, stream)
        if exception:
            line += "\n" + shown_text(str(exception))
        if exc_info is not None:
            text = io.StringIO()
            self._format_exception(text, exc_info)
            line += "\n" + shown_text(text.getvalue().strip("\n"))
        return line

    def _render(
        self,
        clock: str,
        level: str,
        title: str,
        fields: dict[str, object],
        stream: object,
    ) -> str:
        parts = [self._style(clock, _DIM)]
        if level and level != "info":
            parts.append(self._style(level.upper(), _LEVEL_STYLE.get(level, _RED + _BOLD)))
        parts.append(title)
        parts += [
            f"{self._style(shown_line(str(key)), _CYAN)}={_value(key, value)}"
            for key, value in fields.items()
        ]
        if isinstance(stream, str):
            parts.append(self._style(f"· {_short_stream(stream)}", _DIM))
        return " ".join(parts)
