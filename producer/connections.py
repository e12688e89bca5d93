"""The age of each connection, to tell a stream ``--max-connection-age-s`` cut from one its
consumer cancelled (grpc.aio says neither)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

from shared.errors import scrubbed_detail


def peer_of(context: Any) -> str:
    """A call's peer address as records show it: gRPC's own text (``ipv4:HOST:PORT``),
    bounded and printable like any text from elsewhere (``scrubbed_detail``)."""
    return scrubbed_detail(context.peer() or "")


#: gRPC draws each connection's max age from ``age * (1 +/- 0.1)`` (chttp2's
#: ``kMaxConnectionAgeJitter``); the grace that follows is not jittered.
AGE_JITTER: Final = 0.1


class ConnectionAges:
    """When each connection was first seen (by ``context.peer()``), to tell a stream
    that ``--max-connection-age-s`` cut from one its consumer cancelled.

    grpc.aio gives the handler the same ``asyncio.CancelledError`` in both cases and no
    other signal: no hook on accept or close, no cancel reason (``context`` only says
    ``cancelled()``). gRPC closes a connection at the earliest ``(1 - 0.1) * age +
    grace`` after it was made. A connection is first seen at its first stream, which is
    no earlier than it was made, so a stream cut when its connection has been seen for
    at least ``(1 - 0.1) * (age + grace)`` is taken as aged out: never earlier than gRPC
    can close it, and with a margin of ``0.1 * grace`` for the time between the
    connection and its first stream. The one-sided risks: a consumer that cancels in
    that last margin of a connection's life is logged aged out; a channel that
    connected long (more than ``0.1 * grace``) before its first stream is logged
    cancelled when aged out. The peer address names a TCP connection (its client port)
    for as long as it is open; entries are forgotten once gRPC has certainly closed the
    connection (``1.1 * age + grace``, plus a second), so the table holds only
    connections of the last such span.
    """

    def __init__(
        self,
        max_age_s: float,
        grace_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cut_after_s = (1 - AGE_JITTER) * (max_age_s + grace_s)
        self.forget_after_s = (1 + AGE_JITTER) * max_age_s + grace_s + 1.0
        self._clock = clock
        self._first_seen: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._first_seen)

    def seen(self, peer: str) -> float:
        """Note a stream on ``peer``'s connection; returns when the connection was first seen."""
        now = self._clock()
        # Insertion order is first-seen order: forget from the front.
        while self._first_seen:
            oldest, since = next(iter(self._first_seen.items()))
            if now - since < self.forget_after_s:
                break
            del self._first_seen[oldest]
        return self._first_seen.setdefault(peer, now)

    def aged_out(self, first_seen: float) -> bool:
        """Whether a connection first seen at ``first_seen`` is past its max age and grace."""
        return self._clock() - first_seen >= self.cut_after_s
