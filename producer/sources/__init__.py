"""Where replies come from. A source checks a request and plans its stream.

``Source.prepare()`` runs before anything is sent: it verifies the binding and
raises a ``ReplywireError`` to refuse. The ``StreamPlan`` it returns yields the
chunks (bytes) and, when it is done, says whether the RPC must end with a
transport error instead of OK.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, Protocol

from replywire.producer.replylog.interface import Entry
from replywire.shared.errors import RequestRefused
from replywire.shared.frames import Frame
from replywire.shared.kinds import ReplyKind
from replywire.shared.reasons import Reason
from replywire.shared.requests import CheckedRequest


@dataclass(frozen=True, slots=True)
class Stall:
    """Yielded between chunks: the servicer stalls the stream this long (the stall fault)."""

    milliseconds: int


class StreamPlan(Protocol):
    #: Fields for the ``verified`` trace record.
    description: dict[str, Any]
    #: Set when the RPC must end UNAVAILABLE with this detail after the chunks.
    abort_details: Reason | None
    #: The reply's frames without any transport fault, for the reply log (None: this
    #: plan's reply is not logged, so it cannot be resumed).
    reply_frames: tuple[Frame, ...] | None
    #: Whether ``close`` has anything to release (a recording's plan holds nothing: the
    #: end of its stream skips the close, and the task that shields it from cancellation).
    needs_close: bool
    #: The reply's log entries made in advance (a recording's fault-free reply: made once
    #: per transmission), or None (the log encodes ``reply_frames`` itself).
    reply_entries: tuple[Entry, ...] | None
    #: The chunks, when they are all known and nothing comes between them (no stall, no
    #: abort after them): written one after another with no generator (None: ``chunks``).
    fixed_chunks: tuple[bytes, ...] | None

    def chunks(self) -> AsyncGenerator[bytes | Stall, None]: ...

    def live_frames(self) -> AsyncGenerator[Frame, None] | None:
        """A live reply's frames as they are made, for the reply log (None: not live). A
        live reply is generated into the log and every delivery, the first too, reads it;
        the plan then belongs to its generation, which closes it. Raises
        ``producer.replylog.interface.LogEnded`` after the last frame when the reply must end in
        error instead of cleanly."""
        ...

    async def close(self, outcome: str) -> None:
        """Release what the stream holds (an upstream response, a reservation)."""
        ...


class Source(Protocol):
    name: str
    #: Whether the source can make the same reply again for a resume it has no log of
    #: (the recording can: it is deterministic; a live model cannot, and its replies are
    #: paid for: the servicer claims a live reply in the log before it is prepared).
    regenerates: bool

    def verify(self, checked: CheckedRequest) -> None:
        """The checks ``prepare`` makes that cost nothing (the binding, what the source
        serves): raises the ``ReplywireError`` it would, before anything is claimed."""
        ...

    async def prepare(self, checked: CheckedRequest, *, identity: str) -> StreamPlan:
        """``identity``: the authenticated caller, charged for what the source spends."""
        ...

    async def aclose(self) -> None: ...


def check_kind(checked: CheckedRequest, served: frozenset[ReplyKind]) -> None:
    """A request for a kind of reply the source does not serve is refused before its case
    is looked at: ``kind_unsupported``."""
    if checked.kind not in served:
        raise RequestRefused(Reason.KIND_UNSUPPORTED, checked.kind.value)
