"""What both wire formats share: the format names, the NEED_DATA sentinel, the codec shape."""

from __future__ import annotations

from enum import Enum, StrEnum
from typing import Final, Protocol

from shared.frames import Frame


class WireFormat(StrEnum):
    LENGTH_PREFIXED = "lp"
    NDJSON = "ndjson"


class _NeedData(Enum):
    NEED_DATA = "NEED_DATA"


#: Returned by ``next_event()`` when the buffer holds no complete frame (as in h11).
NEED_DATA: Final = _NeedData.NEED_DATA
NeedData = _NeedData


class FrameDecoder(Protocol):
    """A sans-IO splitter of a byte stream into raw frame payloads.

    ``receive_data`` only buffers (and validates what must be validated on
    arrival); ``next_event`` returns one complete frame payload or
    ``NEED_DATA``; ``end_of_input`` says whether the input ended on a frame
    boundary. All three raise ``ProtocolFailure`` with a reason code.
    """

    def receive_data(self, data: bytes) -> None: ...

    def next_event(self) -> bytes | NeedData: ...

    def end_of_input(self) -> None: ...

    @property
    def buffered(self) -> int: ...


class WireCodec(Protocol):
    wire: WireFormat

    def encode_frame(self, frame: Frame) -> bytes: ...

    def decoder(self, max_frame_bytes: int) -> FrameDecoder: ...

    def parse_frame(self, payload: bytes) -> Frame: ...

    def corrupt_frame(self, encoded: bytes) -> bytes:
        """A complete frame of the same length whose payload no longer parses."""
        ...
