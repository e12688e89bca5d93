"""What the consumer core keeps of a stream as it goes: the reply's text as it is assembled
(``Content``: its length, frame count and running SHA-256) and the result document's events
(``EventLog``). A stream may stay open for minutes: both are kept compact, about the text
itself and a few bytes a frame.
"""

from __future__ import annotations

import hashlib
from array import array
from typing import Final

from replywire.shared.frames import DoneDigest
from replywire.shared.result import Event, content_received

#: Content parts joined into one every this many frames (``Content``).
JOIN_EVERY: Final = 16


class Content:
    """The reply as it is assembled: its parts, length, frame count and running digest.

    A stream open for minutes holds what it received: kept as one string per frame it was
    about 70 bytes a frame beyond the text. Every ``JOIN_EVERY`` frames the newest parts
    are joined into one (each character copied once more), so a reply costs about its
    text plus a part per ``JOIN_EVERY`` frames."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        #: Parts at the front already joined (each ``JOIN_EVERY`` frames).
        self._joined = 0
        self.characters = 0
        self.frames = 0
        self._hash = hashlib.sha256()

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def append(self, text: str, encoded: bytes) -> None:
        parts = self._parts
        parts.append(text)
        self.characters += len(text)
        self.frames += 1
        self._hash.update(encoded)
        joined = self._joined
        if len(parts) - joined >= JOIN_EVERY:
            tail = "".join(parts[joined:])
            del parts[joined:]
            parts.append(tail)
            self._joined = joined + 1

    def matches(self, claim: DoneDigest) -> bool:
        """Whether done's claim is exactly the content applied."""
        return claim.content_frames == self.frames and claim.content_sha256 == (
            self._hash.hexdigest()
        )


class _ContentRun:
    """Consecutive content deltas of the event log: the first one's sequence, the one that
    would continue the run, and each one's ``characters_received`` (the reply's length so
    far) in an ``array``."""

    def __init__(self, sequence: int, characters: int) -> None:
        self.first = sequence
        self.next = sequence + 1
        self.characters = array("q", (characters,))

    def events(self) -> list[Event]:
        first = self.first
        return [content_received(first + i, n) for i, n in enumerate(self.characters)]


class EventLog:
    """The result document's events in the order they happened. The lab's result has one
    per content delta; held as an object each they were about 56 bytes a frame for as long
    as the stream lasts: a run of consecutive deltas is kept as 8 bytes a delta instead
    (``_ContentRun``), and ``events()`` makes the same events."""

    def __init__(self) -> None:
        self._items: list[Event | _ContentRun] = []
        #: The run a next delta continues (None after any other event).
        self._run: _ContentRun | None = None

    def content(self, sequence: int, characters: int) -> None:
        run = self._run
        if run is not None and run.next == sequence:
            run.characters.append(characters)
            run.next = sequence + 1
            return
        run = self._run = _ContentRun(sequence, characters)
        self._items.append(run)

    def append(self, event: Event) -> None:
        self._items.append(event)
        self._run = None

    def events(self) -> tuple[Event, ...]:
        out: list[Event] = []
        for item in self._items:
            if isinstance(item, _ContentRun):
                out.extend(item.events())
            else:
                out.append(item)
        return tuple(out)
