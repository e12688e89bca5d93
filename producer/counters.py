"""What the producer has done, counted: every opened stream once more when it ends, in the
counter of its final state, so ``streams_opened`` adds up to the final counts."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Final

from replywire.producer.states import StreamState

#: The counter each final state adds to.
_COUNTER_OF: Final = {
    StreamState.COMPLETED: "streams_completed",
    StreamState.REFUSED: "streams_refused",
    StreamState.ABORTED: "streams_aborted",
    StreamState.CANCELLED_BY_CONSUMER: "streams_cancelled",
    StreamState.FAILED: "streams_failed",
    StreamState.SHUTDOWN: "streams_shutdown",
    StreamState.CONNECTION_AGED_OUT: "streams_aged_out",
}


@dataclass
class ProducerCounters:
    """What the producer has done. Every opened stream is counted once more when it ends,
    so ``streams_opened`` equals the sum of the seven final counts once no stream is open."""

    streams_opened: int = 0
    streams_completed: int = 0
    streams_refused: int = 0
    streams_aborted: int = 0
    streams_cancelled: int = 0
    streams_failed: int = 0
    streams_shutdown: int = 0
    streams_aged_out: int = 0
    chunks_written: int = 0
    bytes_written: int = 0
    #: Requests refused for a missing or wrong token: not streams (no stream id is trusted).
    requests_unauthenticated: int = 0
    #: Requests refused before any of them is logged: not an OpenRequest, or unplain ids.
    requests_malformed: int = 0
    #: Requests refused for metadata past --max-metadata-bytes, before any of it is read.
    requests_metadata_too_large: int = 0

    def stream_ended(self, state: StreamState) -> None:
        name = _COUNTER_OF[state]
        setattr(self, name, getattr(self, name) + 1)

    @property
    def streams_ended(self) -> int:
        return sum(getattr(self, name) for name in _COUNTER_OF.values())

    def fields(self) -> dict[str, int]:
        return asdict(self)
