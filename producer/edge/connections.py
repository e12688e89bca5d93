"""The age of each connection, to tell a stream ``--max-connection-age-s`` cut from one its
consumer cancelled (grpc.aio says neither)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from replywire.producer.states import StreamInput
from replywire.shared.errors import scrubbed_detail
from replywire.shared.reasons import Reason

#: gRPC draws each connection's max age from ``age * (1 +/- 0.1)`` (chttp2's
#: ``kMaxConnectionAgeJitter``); the grace that follows is not jittered.
AGE_JITTER: Final = 0.1
#: What a connection's idle close may lag the end of its last stream as the servicer saw
#: it (the end of the handler, a moment after the transport's).
IDLE_MARGIN_S: Final = 1.0


#: The caller's deadline starts when it sends the call, the producer's (``grpc-timeout``)
#: when it receives it: the caller's cancel at its deadline can reach the handler while
#: the producer's own deadline is still this far off (a busy machine was seen to take
#: tens of milliseconds). A cut that close to the deadline is the deadline.
DEADLINE_SLACK_S: Final = 0.25


@dataclass(slots=True)
class _Connection:
    first_seen: float
    open_streams: int = 0
    last_ended: float = 0.0


class ConnectionAges:
    """When each connection was first seen, to tell a stream that
    ``--max-connection-age-s`` cut from one its consumer cancelled.

    grpc.aio gives the handler the same ``asyncio.CancelledError`` in both cases and no
    other signal: no hook on accept or close, no cancel reason (``context`` only says
    ``cancelled()``), and nothing that names a connection but its peer address
    (``context.peer()``: ``ipv4:HOST:PORT``; ``auth_context()`` says only the security
    type). gRPC closes a connection at the earliest ``(1 - 0.1) * age + grace`` after it
    was made. A connection is first seen at its first stream, which is no earlier than it
    was made, so a stream cut when its connection has been seen for at least
    ``(1 - 0.1) * (age + grace)`` is taken as aged out: never earlier than gRPC can close
    it, and with a margin of ``0.1 * grace`` for the time between the connection and its
    first stream.

    **Which connection.** A peer address names one TCP connection only while it is open:
    once it closes, a new connection may come from the same client port. So a peer's
    entry is renewed (the new stream's connection first seen now) when none of its
    streams is open and none has been for longer than ``idle_s`` (plus ``IDLE_MARGIN_S``):
    the server closes a connection without a stream for ``--max-connection-idle-s``
    (``grpc.max_connection_idle_ms``: GOAWAY, no new stream on it), so a later stream
    from that address is on a new connection, certainly. Within that span the address is
    taken as the same connection (a channel's streams one after another).

    The one-sided risks, each said where it is: a consumer that cancels in the last
    ``0.1 * grace`` of a connection's life is logged aged out; a client port reused by a
    new connection within ``idle_s`` of the old one's last stream makes its streams as
    old as the old connection's (before: within the whole ``1.1 * age + grace``); a
    channel that connected long (more than ``0.1 * grace``) before its first stream, or
    whose connection was kept from idling by health or ``Cancel`` calls only (not counted
    here), is logged cancelled when aged out. Entries are forgotten once gRPC has
    certainly closed the connection (``1.1 * age + grace``, plus a second), so the table
    holds only connections of the last such span.
    """

    def __init__(
        self,
        max_age_s: float,
        grace_s: float,
        idle_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cut_after_s = (1 - AGE_JITTER) * (max_age_s + grace_s)
        self.forget_after_s = (1 + AGE_JITTER) * max_age_s + grace_s + 1.0
        self.renew_after_s = idle_s + IDLE_MARGIN_S
        self._clock = clock
        self._seen: OrderedDict[str, _Connection] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def opened(self, peer: str) -> float:
        """A stream opened on ``peer``'s connection; returns when that connection was first
        seen. Every ``opened`` is followed by one ``ended`` of the same peer."""
        now = self._clock()
        # Insertion order is first-seen order: forget from the front.
        while self._seen:
            oldest, earliest = next(iter(self._seen.items()))
            if now - earliest.first_seen < self.forget_after_s:
                break
            del self._seen[oldest]
        connection: _Connection | None = self._seen.get(peer)
        if (
            connection is not None
            and connection.open_streams == 0
            and now - connection.last_ended > self.renew_after_s
        ):
            del self._seen[peer]  # that connection was closed idle: this one is new
            connection = None
        if connection is None:
            connection = self._seen[peer] = _Connection(now)
        connection.open_streams += 1
        return connection.first_seen

    def ended(self, peer: str) -> None:
        """A stream of ``peer`` ended (its entry may be forgotten meanwhile)."""
        connection = self._seen.get(peer)
        if connection is not None:
            connection.open_streams = max(0, connection.open_streams - 1)
            connection.last_ended = self._clock()

    def cut(self, first_seen: float, time_remaining: float | None) -> tuple[StreamInput, Reason]:
        """Why a stream on a connection first seen at ``first_seen`` is gone from under its
        handler: the caller's gRPC deadline passed (``time_remaining()`` is within
        ``DEADLINE_SLACK_S`` of 0; None: the call has none), whatever the connection's age;
        else its connection aged out; else its consumer cancelled, refused the stream or
        vanished."""
        if time_remaining is not None and time_remaining <= DEADLINE_SLACK_S:
            return StreamInput.CONSUMER_CANCELLED, Reason.DEADLINE_EXCEEDED
        if self.aged_out(first_seen):
            return StreamInput.CONNECTION_AGED, Reason.CONNECTION_AGED_OUT
        return StreamInput.CONSUMER_CANCELLED, Reason.CONSUMER_CANCELLED

    def aged_out(self, first_seen: float) -> bool:
        """Whether a connection first seen at ``first_seen`` is past its max age and grace."""
        return self._clock() - first_seen >= self.cut_after_s


def peer_of(context: Any) -> str:
    """A call's peer address as records show it: gRPC's own text (``ipv4:HOST:PORT``),
    bounded and printable like any text from elsewhere (``scrubbed_detail``)."""
    return scrubbed_detail(context.peer() or "")
