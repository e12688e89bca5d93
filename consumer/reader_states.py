"""The consumer reader's machine (flow control): its states, inputs and table (``shared.fsm``).

connecting -> streaming        first_message: the call produced its first chunk
streaming -> paused            queue_full: the bounded queue is full; nothing is read
paused -> streaming            queue_drained: the processor took a chunk; reading resumes
any open state -> ended        ended: EOF, a gRPC status, the idle timer, or cancelled

No grpc here, so the documentation can draw it. ``consumer.reader.Reader`` is
the only code that fires, and only when the state must change (no self-loops).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from replywire.shared.fsm import MachineSpec


class ReaderState(StrEnum):
    CONNECTING = "connecting"
    STREAMING = "streaming"
    PAUSED = "paused"
    ENDED = "ended"


class ReaderInput(StrEnum):
    FIRST_MESSAGE = "first_message"
    QUEUE_FULL = "queue_full"
    QUEUE_DRAINED = "queue_drained"
    ENDED = "ended"


R, In = ReaderState, ReaderInput
OPEN_STATES: Final = frozenset({R.CONNECTING, R.STREAMING, R.PAUSED})

TRANSITIONS: Final[dict[tuple[ReaderState, ReaderInput], ReaderState]] = {
    (R.CONNECTING, In.FIRST_MESSAGE): R.STREAMING,
    (R.STREAMING, In.QUEUE_FULL): R.PAUSED,
    (R.PAUSED, In.QUEUE_DRAINED): R.STREAMING,
    **{(state, In.ENDED): R.ENDED for state in (R.CONNECTING, R.STREAMING, R.PAUSED)},
}

SPEC: Final = MachineSpec(
    name="consumer reader",
    states=ReaderState,
    inputs=ReaderInput,
    initial=R.CONNECTING,
    final=frozenset({R.ENDED}),
    table=TRANSITIONS,
)
