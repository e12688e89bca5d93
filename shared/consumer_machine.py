"""The consumer core's machine (``SPEC``: its states, inputs and every legal transition)
and its ``Verdict``: the state and the reason, changed together by one call. The core
(``shared.consumer_core``) decides which input to fire; ``shared.fsm.Machine`` is the only
code that changes the state, and logs each change as ``state_changed``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from replywire.shared.fsm import Machine, MachineSpec
from replywire.shared.status import Status
from replywire.shared.trace_logger import TraceLogger


class ConsumerState(StrEnum):
    STREAMING = "streaming"
    TERMINAL_RECEIVED = "terminal_received"
    VALIDATING = "validating"
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"
    CANCELLED = "cancelled"
    ERROR = "error"
    INVALID = "invalid"


class Input(StrEnum):
    TERMINAL_FRAME = "terminal_frame"
    PROTOCOL_FAILURE = "protocol_failure"
    END_WITHOUT_TERMINAL = "end_without_terminal"
    END_AFTER_DONE = "end_after_done"
    END_AFTER_CANCEL = "end_after_cancel"
    END_AFTER_ERROR = "end_after_error"
    TRANSPORT_ERROR = "transport_error"
    LOCAL_ABORT = "local_abort"
    REPLY_ACCEPTED = "reply_accepted"
    REPLY_REJECTED = "reply_rejected"


S, In = ConsumerState, Input

#: Every legal (state, input) pair. A pair that is missing is a bug, not a verdict.
TRANSITIONS: Final[dict[tuple[ConsumerState, Input], ConsumerState]] = {
    (S.STREAMING, In.TERMINAL_FRAME): S.TERMINAL_RECEIVED,
    (S.STREAMING, In.PROTOCOL_FAILURE): S.INVALID,
    (S.STREAMING, In.END_WITHOUT_TERMINAL): S.INCOMPLETE,
    (S.STREAMING, In.TRANSPORT_ERROR): S.ERROR,
    (S.STREAMING, In.LOCAL_ABORT): S.INCOMPLETE,
    (S.TERMINAL_RECEIVED, In.PROTOCOL_FAILURE): S.INVALID,
    (S.TERMINAL_RECEIVED, In.END_AFTER_DONE): S.VALIDATING,
    (S.TERMINAL_RECEIVED, In.END_AFTER_CANCEL): S.CANCELLED,
    (S.TERMINAL_RECEIVED, In.END_AFTER_ERROR): S.ERROR,
    (S.TERMINAL_RECEIVED, In.TRANSPORT_ERROR): S.ERROR,
    (S.TERMINAL_RECEIVED, In.LOCAL_ABORT): S.INCOMPLETE,
    (S.VALIDATING, In.REPLY_ACCEPTED): S.COMPLETE,
    (S.VALIDATING, In.REPLY_REJECTED): S.INVALID,
}

FINAL_STATES: Final = frozenset({S.COMPLETE, S.INCOMPLETE, S.CANCELLED, S.ERROR, S.INVALID})

SPEC: Final = MachineSpec(
    name="consumer core",
    states=ConsumerState,
    inputs=Input,
    initial=S.STREAMING,
    final=FINAL_STATES,
    table=TRANSITIONS,
)
STATUS_OF: Final = {
    S.COMPLETE: Status.COMPLETE,
    S.INCOMPLETE: Status.INCOMPLETE,
    S.CANCELLED: Status.CANCELLED,
    S.ERROR: Status.ERROR,
    S.INVALID: Status.INVALID,
}


class Verdict:
    """The core's machine and its reason, changed together by one call: the one source of
    truth for the state, the status, the reason (a registered code, or None on the way to
    complete) and its detail (a failure is the INVALID state)."""

    def __init__(self, logger: TraceLogger) -> None:
        self._machine = Machine(SPEC, logger)
        self.reason: str | None = None
        #: Free text from the peer behind the reason (scrubbed and bounded), or None.
        self.detail: str | None = None

    @property
    def state(self) -> ConsumerState:
        return self._machine.state

    @property
    def finished(self) -> bool:
        return self._machine.finished

    @property
    def status(self) -> Status:
        if not self.finished:
            raise RuntimeError(f"no verdict yet in state {self.state}")
        return STATUS_OF[self.state]

    def fire(
        self,
        event: Input,
        *,
        sequence: int,
        reason: str | None = None,
        detail: str | None = None,
        why: str | None = None,
    ) -> None:
        """Move on ``event`` with ``reason`` (None on the way to complete) and its
        ``detail``, if any; log it once. ``why`` is for the trace alone: what the core
        found (a refusal's result carries no detail: its reason says it)."""
        self.reason, self.detail = reason, detail
        if detail is not None:
            self._machine.fire(event, sequence=sequence, reason=reason, detail=detail)
        elif why:
            self._machine.fire(event, sequence=sequence, reason=reason, why=why)
        else:
            self._machine.fire(event, sequence=sequence, reason=reason)
