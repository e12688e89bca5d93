"""One receive buffer for the sans-IO readers: bytes in, lines or sized pieces out.

Every reader of a byte stream here (the NDJSON decoder, the provider's SSE
parser) needs the same three things, as h11 has one ``_receivebuffer.py`` for
all its readers:

* append what arrived;
* find the next line ending, resuming where the last search stopped, so no byte
  is scanned twice however the stream is cut (re-searching an unfinished line
  from its start on every chunk would be quadratic);
* consume from the front: a ``bytearray`` with ``del buf[:n]``, which CPython
  does in amortised constant time.

A buffer knows one kind of line ending, fixed when it is made: ``LF``
(``\\n`` only, as NDJSON) or ``UNIVERSAL`` (``\\r\\n``, ``\\n`` and ``\\r``, as
SSE and ``str.splitlines()``). A universal buffer ending in ``\\r`` has no
complete line yet, since the next chunk may start with the ``\\n`` of a
``\\r\\n``; the search resumes at that ``\\r``. Only at the end of the input
(``final=True``) is that ``\\r`` a line ending by itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Final

_CR: Final = 0x0D
_LF: Final = 0x0A
_CR_OR_LF: Final = re.compile(rb"[\r\n]")


class Newlines(Enum):
    #: ``\n`` alone ends a line (NDJSON); a ``\r`` is an ordinary byte.
    LF = "lf"
    #: ``\r\n``, ``\n`` and ``\r`` each end a line (SSE).
    UNIVERSAL = "universal"


@dataclass(frozen=True, slots=True)
class Line:
    """A complete line at the front of the buffer: ``buf[:end]``, then its ending up to ``size``."""

    end: int
    size: int


class ReceiveBuffer:
    """Append bytes, find lines without scanning a byte twice, take from the front."""

    def __init__(self, newlines: Newlines = Newlines.LF) -> None:
        self.newlines: Final = newlines
        self._data = bytearray()
        # Bytes at the front already known to hold no line ending (or, in a universal
        # buffer, the index of a CR at the very end, waiting for a possible LF).
        self._searched = 0

    def __len__(self) -> int:
        return len(self._data)

    def __bytes__(self) -> bytes:
        """The pending bytes, not yet taken."""
        return bytes(self._data)

    def append(self, data: bytes) -> None:
        self._data += data

    def truncate(self, size: int) -> None:
        """Keep only the first ``size`` bytes (what followed them is refused)."""
        del self._data[size:]
        self._searched = min(self._searched, size)

    def find_line(self, *, final: bool = False) -> Line | None:
        """The first complete line, or ``None`` (and the search resumes here next time).

        With ``final`` the input has ended: a ``\\r`` at the very end of a
        universal buffer ends a line by itself.
        """
        data = self._data
        if self.newlines is Newlines.LF:
            end = data.find(b"\n", self._searched)
            if end < 0:
                self._searched = len(data)
                return None
            return Line(end, end + 1)
        match = _CR_OR_LF.search(data, self._searched)
        if match is None:
            self._searched = len(data)
            return None
        end = match.start()
        if data[end] == _LF:
            return Line(end, end + 1)
        if end + 1 < len(data):
            return Line(end, end + 2 if data[end + 1] == _LF else end + 1)
        if final:
            return Line(end, end + 1)
        # The next byte decides between CR and CRLF.
        self._searched = end
        return None

    @property
    def unterminated(self) -> int:
        """Once ``find_line`` found none: the unfinished line's bytes (less a CR awaiting LF)."""
        size = len(self._data)
        if self.newlines is Newlines.UNIVERSAL and size and self._data[-1] == _CR:
            return size - 1
        return size

    def pop_line(self) -> bytes | None:
        """``find_line`` then ``take_line`` in one step, for an ``LF`` buffer: the first
        complete line without its ``\\n``, or ``None`` (the search resumes here next time).

        The NDJSON decoder's per-frame path: no ``Line`` object, one search.
        """
        data = self._data
        end = data.find(b"\n", self._searched)
        if end < 0:
            self._searched = len(data)
            return None
        line = bytes(data[:end])
        del data[: end + 1]
        self._searched = 0
        return line

    def take_line(self, line: Line) -> bytearray:
        """Remove ``line`` and its ending from the front; the line without its ending."""
        taken = self._data[: line.end]
        self._consume(line.size)
        return taken

    def take(self, size: int) -> bytearray:
        """Remove and return the first ``size`` bytes (fewer if fewer are buffered)."""
        taken = self._data[:size]
        self._consume(len(taken))
        return taken

    def _consume(self, size: int) -> None:
        del self._data[:size]
        self._searched = max(0, self._searched - size)
