"""Cutting a frame byte stream into transport chunks.

Chunk boundaries are arbitrary by design: one frame per chunk, a fixed size,
a cycled size pattern (the lab's ``byte_fragments`` uses 1, 2, 7, 3, 11) or the
whole body at once. The consumer must reach the same verdict for all of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import cycle

from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason

#: The lab's fragment pattern.
LAB_PATTERN = (1, 2, 7, 3, 11)
#: No chunk is larger than this (it must fit in one gRPC message with room to spare).
MAX_CHUNK_BYTES = 1 << 20
MAX_PATTERN_LENGTH = 64


class ChunkMode(StrEnum):
    FRAME = "frame"
    WHOLE = "whole"
    SIZES = "sizes"


@dataclass(frozen=True, slots=True)
class ChunkPlan:
    mode: ChunkMode
    sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.mode is ChunkMode.SIZES:
            if not self.sizes or len(self.sizes) > MAX_PATTERN_LENGTH:
                raise RequestRefused(Reason.INVALID_REQUEST, "chunk sizes: 1 to 64 values")
            if any(size < 1 or size > MAX_CHUNK_BYTES for size in self.sizes):
                raise RequestRefused(
                    Reason.INVALID_REQUEST, f"chunk sizes must be 1..{MAX_CHUNK_BYTES}"
                )
        elif self.sizes:
            raise RequestRefused(Reason.INVALID_REQUEST, f"{self.mode} takes no sizes")

    @classmethod
    def parse(cls, text: str) -> ChunkPlan:
        """``frame`` | ``whole`` | ``N`` | ``a,b,c`` (cycled)."""
        text = text.strip()
        if text in (ChunkMode.FRAME, ChunkMode.WHOLE):
            return cls(ChunkMode(text))
        parts = text.split(",")
        if not all(part.isascii() and part.isdigit() for part in parts):
            raise RequestRefused(Reason.INVALID_REQUEST, f"chunks: {text!r}")
        return cls(ChunkMode.SIZES, tuple(int(part) for part in parts))

    def describe(self) -> str:
        if self.mode is ChunkMode.SIZES:
            return ",".join(str(size) for size in self.sizes)
        return self.mode.value


def cut_sizes(wire: bytes, sizes: Sequence[int]) -> Iterator[bytes]:
    """The lab's ``byte_fragments`` with any size pattern."""
    view = memoryview(wire)
    offset = 0
    for size in cycle(sizes):
        if offset >= len(wire):
            return
        yield bytes(view[offset : offset + size])
        offset += size


def cut(encoded_frames: Sequence[bytes], plan: ChunkPlan) -> list[bytes]:
    if plan.mode is ChunkMode.FRAME:
        return [frame for frame in encoded_frames if frame]
    wire = b"".join(encoded_frames)
    if plan.mode is ChunkMode.WHOLE:
        return [wire] if wire else []
    return list(cut_sizes(wire, plan.sizes))


class Chunker:
    """The same cuts as ``cut()``, for frames that arrive over time (a live provider stream).

    ``frame`` emits each frame as it comes; sizes emit every complete chunk as
    soon as its bytes exist and hold the remainder; ``whole`` holds everything
    until ``flush()``. Concatenating all outputs gives exactly what ``cut()``
    gives for the same frames.
    """

    def __init__(self, plan: ChunkPlan) -> None:
        self.plan = plan
        self._pending = bytearray()
        self._sizes = cycle(plan.sizes) if plan.mode is ChunkMode.SIZES else None
        self._next = next(self._sizes) if self._sizes else 0

    def feed(self, encoded_frame: bytes) -> list[bytes]:
        if self.plan.mode is ChunkMode.FRAME:
            return [encoded_frame] if encoded_frame else []
        self._pending += encoded_frame
        if self._sizes is None:
            return []
        chunks = []
        while len(self._pending) >= self._next:
            chunks.append(bytes(self._pending[: self._next]))
            del self._pending[: self._next]
            self._next = next(self._sizes)
        return chunks

    def flush(self) -> list[bytes]:
        rest = bytes(self._pending)
        self._pending.clear()
        return [rest] if rest else []
