"""The producer's per-stream states: one table, one ``transition()`` that logs.

received -> refused                    (the request failed a check; the RPC is aborted)
received -> verified -> streaming      (the binding equals the recording's)
streaming <-> stalled                  (the stall fault)
streaming -> completed                 (every chunk written, RPC ended OK)
streaming -> aborted                   (a transport fault ended the RPC with UNAVAILABLE)
any open state -> cancelled_by_consumer (the consumer cancelled, refused the stream or vanished)
any open state -> failed               (a bug or an unexpected error; logged with its traceback)
any open state -> shutdown             (the producer stopped before the stream ended: UNAVAILABLE)

Every stream reaches exactly one final state, logged once; the servicer's
counters are kept by the same call, so opened = the sum of the final counts.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Final

import structlog


class StreamState(StrEnum):
    RECEIVED = "received"
    REFUSED = "refused"
    VERIFIED = "verified"
    STREAMING = "streaming"
    STALLED = "stalled"
    COMPLETED = "completed"
    ABORTED = "aborted"
    CANCELLED_BY_CONSUMER = "cancelled_by_consumer"
    FAILED = "failed"
    SHUTDOWN = "shutdown"


P = StreamState
OPEN_STATES: Final = frozenset({P.RECEIVED, P.VERIFIED, P.STREAMING, P.STALLED})
FINAL_STATES: Final = frozenset(set(P) - OPEN_STATES)

TRANSITIONS: Final[frozenset[tuple[StreamState, StreamState]]] = frozenset(
    {
        (P.RECEIVED, P.REFUSED),
        (P.RECEIVED, P.VERIFIED),
        (P.VERIFIED, P.STREAMING),
        (P.STREAMING, P.STALLED),
        (P.STALLED, P.STREAMING),
        (P.STREAMING, P.COMPLETED),
        (P.STREAMING, P.ABORTED),
    }
    | {(state, P.CANCELLED_BY_CONSUMER) for state in OPEN_STATES}
    | {(state, P.FAILED) for state in OPEN_STATES}
    | {(state, P.SHUTDOWN) for state in OPEN_STATES}
)


class ProducerStream:
    """The state of one Open() call, as a logged state machine."""

    def __init__(
        self,
        logger: structlog.typing.FilteringBoundLogger,
        on_final: Callable[[StreamState], None] | None = None,
    ) -> None:
        self.state = P.RECEIVED
        self.bytes_sent = 0
        self.chunks_sent = 0
        self._log = logger
        self._on_final = on_final
        self._log.info("state_changed", from_state=None, to_state=P.RECEIVED.value)

    def transition(self, target: StreamState, **fields: object) -> None:
        if (self.state, target) not in TRANSITIONS:
            raise RuntimeError(f"no transition from {self.state} to {target}")
        self._log.info(
            "state_changed", from_state=self.state.value, to_state=target.value, **fields
        )
        self.state = target
        if target in FINAL_STATES and self._on_final is not None:
            self._on_final(target)

    @property
    def sent(self) -> dict[str, int]:
        return {"bytes_sent": self.bytes_sent, "chunks_sent": self.chunks_sent}

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES
