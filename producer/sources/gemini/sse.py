"""A strict, sans-IO parser of the provider's Server-Sent Events stream.

The provider (Gemini's ``streamGenerateContent?alt=sse``) sends each event as
``data: <JSON>`` followed by a blank line; lines end in ``\\r\\n``, ``\\n`` or
``\\r``; the stream ends when the body ends (there is no ``[DONE]``).

Why we parse SSE ourselves instead of using a lenient parser (the WHATWG
algorithm, as browsers and most client libraries implement it): a lenient
parser silently drops a final event that the body ended before its blank
line, ignores fields it does not know, and ignores malformed lines (or reads
them as fields with an empty value). Any of those could turn a broken
provider stream -- a body cut mid-event, a proxy's error page, a changed
protocol -- into a plausible partial answer. Strictness turns each of them
into a named error (``SseError`` with an ``sse_*`` reason code), and a final
event without its blank line is surfaced with ``terminated=False`` for the
caller to judge, never dropped. The rules:

* a line starting with ``:`` is a comment (ignored); an empty line ends the
  event; a blank line with no fields pending emits nothing;
* any other line is ``name:value``: the name is everything before the first
  ``:``, and one leading space is removed from the value; a line without
  ``:``, or whose name is not a name (ASCII letters, digits, ``_``, ``-``;
  so not ``data {"a":1}``), is ``sse_malformed_line``;
* only ``data`` and ``event`` are known (``id``, ``retry`` and anything else
  are ``sse_unknown_field``); repeated ``data`` lines are joined with ``\\n``;
  an event with fields but no ``data`` is ``sse_event_without_data``;
* CR, LF and CRLF each end a line (a CR at the end of the buffer waits for the
  next byte, which may be its LF; at the end of the body it is a line end);
* the bytes are UTF-8 (``sse_invalid_utf8``, also for a body that ends inside
  a character);
* an event's size is the bytes of its field lines plus the line being read
  (line endings excluded; a comment counts only while it is being read); over
  ``max_event_bytes`` is ``sse_event_too_large``, checked as the bytes arrive.

Errors surface in stream order, so every re-chunking of the same bytes gives
the same events followed by the same error (or none): an invalid byte is found
by the incremental decoder as it arrives in ``receive_data``, but it is
reported by ``next_event`` once every line before it has been interpreted.
After an error every call raises it again.

Like the NDJSON decoder, the parser keeps its bytes in a ``ReceiveBuffer``
(``shared.wire.buffer``, universal line endings), which remembers how far it
has searched for a line ending, so no byte is scanned twice however the stream
is cut.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from typing import Final

from replywire.shared.errors import ReplywireError
from replywire.shared.reasons import Reason
from replywire.shared.wire.base import NEED_DATA, NeedData
from replywire.shared.wire.buffer import Line, Newlines, ReceiveBuffer

#: What can stand before the colon of a field line (``data {"a":1}`` is no field line).
_FIELD_NAME: Final = re.compile(rb"[A-Za-z0-9_-]+")
_COLON: Final = 0x3A


@dataclass(frozen=True, slots=True, kw_only=True)
class SseEvent:
    """One event: its ``data`` lines joined with ``\\n`` and its last ``event`` field."""

    data: str
    event: str | None = None
    #: False only for a final event whose body ended without its blank line.
    terminated: bool = True


class SseError(ReplywireError):
    """The provider's SSE stream broke a rule; the reason is one of the ``sse_*`` codes."""


class SseParser:
    """``receive_data`` buffers; ``next_event`` gives events; ``end_of_input`` ends the body."""

    def __init__(self, *, max_event_bytes: int = 1 << 20) -> None:
        if max_event_bytes < 1:
            raise ValueError("max_event_bytes must be positive")
        self._max_event_bytes = max_event_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")("strict")
        self._buffer = ReceiveBuffer(Newlines.UNIVERSAL)
        # Stream offset of the buffer's first byte; lines taken so far.
        self._offset = 0
        self._lines = 0
        # Invalid UTF-8 right after the buffer's last byte (nothing after it is kept).
        self._invalid: SseError | None = None
        self._failed: SseError | None = None
        self._ended = False
        # The event being read.
        self._fields = False
        self._data: list[str] = []
        self._event: str | None = None
        self._event_bytes = 0

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def receive_data(self, data: bytes) -> None:
        """Buffer ``data`` after checking it is UTF-8 so far; interpret nothing."""
        self._check_usable()
        if self._invalid is not None:
            return  # the stream broke at an earlier byte; next_event reports it
        pending = len(self._utf8.getstate()[0])
        try:
            self._utf8.decode(data, final=False)
        except UnicodeDecodeError as error:
            # error.object is the decoder's pending bytes (the buffer's tail) + data.
            valid = len(self._buffer) - pending + error.start
            if valid < len(self._buffer):
                self._buffer.truncate(valid)
            else:
                self._buffer.append(data[: valid - len(self._buffer)])
            self._invalid = SseError(
                Reason.SSE_INVALID_UTF8, f"at byte {self._offset + valid}: {error.reason}"
            )
            return
        self._buffer.append(data)

    def next_event(self) -> SseEvent | NeedData:
        """The next complete event, or ``NEED_DATA``."""
        self._check_usable()
        try:
            return self._next_event()
        except SseError as error:
            self._failed = error
            raise

    def end_of_input(self) -> SseEvent | None:
        """End of the body: the pending event (``terminated=False`` without its blank line).

        Call it once ``next_event`` has returned ``NEED_DATA``. The pending
        partial line is interpreted as a line first, as ``str.splitlines()``
        would, and so is a line ended by a trailing CR (which may then be the
        blank line that ends a ``terminated`` event). ``None`` if nothing is
        pending.
        """
        self._check_usable()
        try:
            return self._end_of_input()
        except SseError as error:
            self._failed = error
            raise
        finally:
            self._ended = True

    # --- internals ------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise SseError(self._failed.reason, self._failed.detail)
        if self._ended:
            raise RuntimeError("the SSE parser's input has already ended")

    def _next_event(self) -> SseEvent | NeedData:
        while True:
            # A CR at the very end waits for the next byte, which may be its LF; after an
            # invalid byte nothing follows, so that CR ends its line (an invalid byte is no LF).
            line = self._buffer.find_line(final=self._invalid is not None)
            if line is None:
                # A partial character at the tail is not counted yet: whether it is too
                # large or invalid UTF-8 must not depend on where the chunks were cut.
                partial = 0 if self._invalid is not None else len(self._utf8.getstate()[0])
                self._check_size(self._buffer.unterminated - partial)
                if self._invalid is not None:
                    raise self._invalid
                return NEED_DATA
            event = self._take_line(line)
            if event is not None:
                return event

    def _end_of_input(self) -> SseEvent | None:
        if self._next_event() is not NEED_DATA:
            raise RuntimeError("end_of_input() before next_event() returned NEED_DATA")
        pending = len(self._utf8.getstate()[0])
        try:
            self._utf8.decode(b"", final=True)
        except UnicodeDecodeError as error:
            offset = self._offset + len(self._buffer) - pending
            raise SseError(
                Reason.SSE_INVALID_UTF8, f"at byte {offset}: {error.reason} (the body ended)"
            ) from error
        if self._buffer:
            # What is left is one line: ended by a trailing CR, or unfinished.
            size = len(self._buffer)
            event = self._take_line(self._buffer.find_line(final=True) or Line(size, size))
            if event is not None:
                return event
        return self._dispatch(terminated=False)

    def _check_size(self, line_bytes: int) -> None:
        if self._event_bytes + line_bytes > self._max_event_bytes:
            raise SseError(
                Reason.SSE_EVENT_TOO_LARGE,
                f"line {self._lines + 1}: the event exceeds {self._max_event_bytes} bytes",
            )

    def _take_line(self, found: Line) -> SseEvent | None:
        """Interpret the line ``found``; drop it and its line ending."""
        end = found.end
        self._check_size(end)
        line = self._buffer.take_line(found)
        self._offset += found.size
        self._lines += 1
        if not line:
            return self._dispatch(terminated=True)
        if line[0] == _COLON:
            return None
        colon = line.find(b":")
        if colon < 0:
            raise SseError(
                Reason.SSE_MALFORMED_LINE, f"line {self._lines}: no colon in {len(line)} bytes"
            )
        name = line[:colon]
        if not _FIELD_NAME.fullmatch(name):
            raise SseError(
                Reason.SSE_MALFORMED_LINE, f"line {self._lines}: no field name before the colon"
            )
        value = line[colon + 1 :]
        if value[:1] == b" ":
            del value[:1]
        if name == b"data":
            self._data.append(value.decode("utf-8"))
        elif name == b"event":
            self._event = value.decode("utf-8")
        else:
            shown = name[:40].decode("utf-8", "replace")
            raise SseError(Reason.SSE_UNKNOWN_FIELD, f"line {self._lines}: field {shown!r}")
        self._fields = True
        self._event_bytes += end
        return None

    def _dispatch(self, *, terminated: bool) -> SseEvent | None:
        """The event read so far, if it has fields; the next one starts empty."""
        if not self._fields:
            return None
        if not self._data:
            raise SseError(
                Reason.SSE_EVENT_WITHOUT_DATA, f"line {self._lines}: an event with no data field"
            )
        event = SseEvent(data="\n".join(self._data), event=self._event, terminated=terminated)
        self._fields = False
        self._data = []
        self._event = None
        self._event_bytes = 0
        return event
