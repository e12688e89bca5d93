"""The consumer's limits (``Limits``): every bound the consumer core enforces, checked when
made. ``shared.consumer_core`` holds the core and imports these; they live apart because
the core is compiled by mypyc (``native``) and this module is not: a compiled dataclass
would refuse a field of the wrong type with its own ``TypeError``, before ``__post_init__``
says which limit is wrong."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: The lab's limits.
MAX_TOTAL_BYTES: Final = 65536
MAX_FRAME_BYTES: Final = 8192
MAX_CONTENT_CHARS: Final = 16384
MAX_FRAMES: Final = 1000
#: The longest reason a cancel or error terminal may carry: the one definition, which
#: whoever writes a terminal's reason (the Gemini source) imports.
MAX_REASON_CHARS: Final = 256
#: The most tool calls one chat turn may begin (docs/protocol.md#limits).
MAX_TOOL_CALLS: Final = 128


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Every bound the consumer enforces; the defaults are the lab's."""

    max_stream_bytes: int = MAX_TOTAL_BYTES
    max_frame_bytes: int = MAX_FRAME_BYTES
    max_content_chars: int = MAX_CONTENT_CHARS
    max_frames: int = MAX_FRAMES
    max_reason_chars: int = MAX_REASON_CHARS
    max_tool_calls: int = MAX_TOOL_CALLS

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
