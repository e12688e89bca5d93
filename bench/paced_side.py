"""What a client side of a paced round is: the ``Stream`` it reads each stream into (the
arrival of every chunk, the stream's code) and the ``PacedSide`` protocol it keeps
(``bench.paced_client``'s gRPC kinds, ``bench.sse_client``'s SSE one)."""

from __future__ import annotations

import dataclasses
from typing import Protocol

from replywire.shared.requests import ReplyRequest


@dataclasses.dataclass
class Stream:
    arrivals: list[float] = dataclasses.field(default_factory=list)
    code: str = "ok"


class PacedSide(Protocol):
    """A client kind's streams: each read into its ``Stream``, then the side closed."""

    async def read(self, request: ReplyRequest, stream: Stream, after_s: float = 0.0) -> None: ...

    async def close(self) -> None: ...
