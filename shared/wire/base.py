"""What the wire formats share: the format names, the NEED_DATA sentinel, the codec shape."""

from __future__ import annotations

from enum import Enum, StrEnum
from typing import Final, Protocol

from replywire.shared.frames import Frame


class Integrity(StrEnum):
    """What a wire's ``done`` proves about the content it closes."""

    #: done carries the SHA-256 of the content and the number of content frames; both required.
    SHA256 = "sha256"
    #: done carries nothing about the content (the lab's NDJSON).
    NONE = "none"


class WireFormat(StrEnum):
    LENGTH_PREFIXED = "lp"
    NDJSON = "ndjson"
    #: The lab's NDJSON byte for byte, to reproduce its published results: no done digest.
    NDJSON_LAB = "ndjson-lab"

    @property
    def integrity(self) -> Integrity:
        return Integrity.NONE if self is WireFormat.NDJSON_LAB else Integrity.SHA256


#: The wires to use: their done carries the content digest, and the consumer requires it.
DEFAULT_WIRES: Final = (WireFormat.LENGTH_PREFIXED, WireFormat.NDJSON)


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

    @property
    def pending(self) -> int:
        """The bytes of the frame begun but not complete (its header included)."""
        ...


class WireCodec(Protocol):
    wire: WireFormat

    def encode_frame(self, frame: Frame) -> bytes: ...

    def decoder(self, max_frame_bytes: int) -> FrameDecoder: ...

    def parse_frame(self, payload: bytes) -> Frame:
        """A frame of a grounded or text reply."""
        ...

    def parse_chat_frame(self, payload: bytes) -> Frame:
        """A frame of a chat reply: the five chat frames too (docs/protocol.md#chat-frames)."""
        ...

    def corrupt_frame(self, encoded: bytes) -> bytes:
        """A complete frame of the same length whose payload no longer parses."""
        ...
