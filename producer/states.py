"""The producer's per-stream machine: its states, inputs and table (``shared.fsm``).

received -> refused                    refuse: the request failed a check; the RPC is aborted
received -> verified -> streaming      verify, start: the binding equals the source's
received -> verified                   attach: a resume; the binding equals the logged reply's
streaming <-> stalled                  stall, resume: the stall fault
streaming -> completed                 complete: every chunk written, RPC ended OK
streaming -> aborted                   abort: a transport fault ended the RPC with UNAVAILABLE
any open state -> cancelled_by_consumer consumer_cancelled: cancelled, refused the stream, vanished
any open state -> failed               fail: an unexpected error; the trace has the traceback
any open state -> shutdown             shutdown: the producer stopped first (UNAVAILABLE)
any open state -> connection_aged_out  connection_aged: --max-connection-age-s closed the
                                       stream's connection after its grace

Every stream reaches exactly one final state, logged once by ``Machine.fire``;
the servicer's counters are kept by the same call, so opened = the sum of the
final counts. The servicer (``producer.edge.servicer``) is the only code that fires.

A ``reason`` fired with is a registered code (``shared.reason_registry.REASONS``) in the trace and
in the metrics: one that is not (a bug in the caller) is recorded as ``internal_error``,
with a ``reason_unregistered`` warning that shows the text (scrubbed, bounded).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Final

import structlog

from replywire.shared.errors import scrubbed_detail
from replywire.shared.fsm import Machine, MachineSpec
from replywire.shared.reasons import CODES, Reason


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
    CONNECTION_AGED_OUT = "connection_aged_out"


class StreamInput(StrEnum):
    REFUSE = "refuse"
    VERIFY = "verify"
    ATTACH = "attach"
    START = "start"
    STALL = "stall"
    RESUME = "resume"
    COMPLETE = "complete"
    ABORT = "abort"
    CONSUMER_CANCELLED = "consumer_cancelled"
    FAIL = "fail"
    SHUTDOWN = "shutdown"
    CONNECTION_AGED = "connection_aged"


P, In = StreamState, StreamInput
OPEN_STATES: Final = frozenset({P.RECEIVED, P.VERIFIED, P.STREAMING, P.STALLED})
FINAL_STATES: Final = frozenset(set(P) - OPEN_STATES)
#: Inputs that end a stream from any open state.
_ANY_OPEN: Final = {
    In.CONSUMER_CANCELLED: P.CANCELLED_BY_CONSUMER,
    In.FAIL: P.FAILED,
    In.SHUTDOWN: P.SHUTDOWN,
    In.CONNECTION_AGED: P.CONNECTION_AGED_OUT,
}

TRANSITIONS: Final[dict[tuple[StreamState, StreamInput], StreamState]] = {
    (P.RECEIVED, In.REFUSE): P.REFUSED,
    (P.RECEIVED, In.VERIFY): P.VERIFIED,
    (P.RECEIVED, In.ATTACH): P.VERIFIED,
    (P.VERIFIED, In.START): P.STREAMING,
    (P.STREAMING, In.STALL): P.STALLED,
    (P.STALLED, In.RESUME): P.STREAMING,
    (P.STREAMING, In.COMPLETE): P.COMPLETED,
    (P.STREAMING, In.ABORT): P.ABORTED,
    **{(state, event): target for state in OPEN_STATES for event, target in _ANY_OPEN.items()},
}

SPEC: Final = MachineSpec(
    name="producer stream",
    states=StreamState,
    inputs=StreamInput,
    initial=P.RECEIVED,
    final=FINAL_STATES,
    table=TRANSITIONS,
)


class ProducerStream:
    """One Open() call: its machine and what it has sent."""

    def __init__(
        self,
        logger: structlog.typing.FilteringBoundLogger,
        caller: str,
        on_final: Callable[[StreamState, str], None] | None = None,
    ) -> None:
        self._on_final = on_final
        #: The stream's own logger (bound: a lazy proxy would bind again per record).
        self.log = logger
        #: Whether a record per chunk is written (the level is looked at once a stream).
        self.debug = logger.is_enabled_for(logging.DEBUG)
        self.machine = Machine(SPEC, logger, on_final=self._ended, log_initial=True)
        #: Who asked (the token's name, or "anonymous"): charged in the ledger.
        self.caller = caller
        self.bytes_sent = 0
        self.chunks_sent = 0
        #: The reason code of the last input fired with one ("" for none: completed).
        self.reason = ""
        #: The delivery's span when tracing is on (``producer/spans.py``): each transition
        #: is an event of it.
        self.span: Any = None

    def _ended(self, state: StreamState) -> None:
        if self._on_final is not None:
            self._on_final(state, self.reason)

    @property
    def state(self) -> StreamState:
        return self.machine.state

    def fire(self, event: StreamInput, **fields: object) -> StreamState:
        """Fire ``event``; a ``reason`` field (a registered code: any other is logged and
        recorded as ``internal_error``) is kept for the final-state callback."""
        if "reason" in fields:
            reason = fields["reason"]
            if not isinstance(reason, str) or reason not in CODES:
                reason = fields["reason"] = self._unregistered(reason)
            self.reason = str(reason)
        state = self.machine.fire(event, **fields)
        if self.span is not None:
            self.span.add_event(
                state.value, {"replywire.input": event.value, "replywire.reason": self.reason}
            )
        return state

    def _unregistered(self, reason: object) -> str:
        shown = reason if isinstance(reason, str) else repr(reason)
        code = Reason.INTERNAL_ERROR.value
        self.log.warning("reason_unregistered", value=scrubbed_detail(shown), reason=code)
        return code

    @property
    def sent(self) -> dict[str, int]:
        return {"bytes_sent": self.bytes_sent, "chunks_sent": self.chunks_sent}

    @property
    def open(self) -> bool:
        return not self.machine.finished
