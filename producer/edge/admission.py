"""Stream slots: how many streams the producer serves at once, in all and per caller.

``--max-streams`` bounds the streams of every caller together (one more is refused
``RESOURCE_EXHAUSTED`` / ``stream_limit``); ``--max-streams-per-identity`` bounds each
caller's own (``RESOURCE_EXHAUSTED`` / ``identity_stream_limit``), so one token holder
that opens slow streams cannot shut the others out. Without tokens every caller is the
one identity ``anonymous`` and only ``--max-streams`` applies. A slot is taken before
any check or upstream call, and given back once the stream has ended.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from typing import Final

from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason

#: The share of ``--max-streams`` one identity may hold by default (with tokens).
DEFAULT_IDENTITY_SHARE: Final = 4


def default_per_identity(max_streams: int) -> int:
    """A quarter of ``--max-streams`` (at least one)."""
    return max(1, max_streams // DEFAULT_IDENTITY_SHARE)


class Admission:
    """The streams admitted, by the task that serves each, and each one's identity."""

    def __init__(self, max_streams: int, max_per_identity: int | None = None) -> None:
        if max_streams < 1 or (max_per_identity is not None and max_per_identity < 1):
            raise ValueError("stream limits are at least 1")
        self.max_streams = max_streams
        #: None: not applied (one identity only, or not asked for).
        self.max_per_identity = max_per_identity
        self._holders: dict[Hashable, str] = {}
        self._per_identity: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._holders)

    def held_by(self, identity: str) -> int:
        return self._per_identity[identity]

    def admit(self, holder: Hashable, identity: str) -> None:
        """Take a slot for ``holder`` (a stream's task), or refuse with nothing taken."""
        own = self._per_identity[identity]
        if self.max_per_identity is not None and own >= self.max_per_identity:
            raise RequestRefused(
                Reason.IDENTITY_STREAM_LIMIT, f"{own} of {self.max_per_identity} for the caller"
            )
        if len(self._holders) >= self.max_streams:
            raise RequestRefused(
                Reason.STREAM_LIMIT, f"{len(self._holders)} of {self.max_streams} open"
            )
        self._holders[holder] = identity
        self._per_identity[identity] += 1

    def release(self, holder: Hashable) -> None:
        """Give back ``holder``'s slot (nothing if it held none)."""
        identity = self._holders.pop(holder, None)
        if identity is None:
            return
        self._per_identity[identity] -= 1
        if not self._per_identity[identity]:
            del self._per_identity[identity]
