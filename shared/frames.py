"""The application frame model and the lab's frame derivation.

A frame is one application event: a ``content_delta`` carrying text, or the
single terminal (``done``, ``error`` or ``cancel``) that closes the stream.
Frames are numbered from 1 and every frame carries the SHA-256 of the request
binding it answers.

Decoded frames keep their fields as the wire gave them (``object``): the
consumer checks types in the lab's order (sequence, then binding, then
content), so a wrongly typed field produces the same reason code in both wires.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, TypeAlias

from replywire.shared.chat_parts import ChatPart
from replywire.shared.errors import ProtocolFailure, RequestRefused
from replywire.shared.reasons import Reason

#: The lab derives 13-character content deltas from a saved reply.
DELTA_CHARS = 13


class FrameKind(StrEnum):
    CONTENT_DELTA = "content_delta"
    DONE = "done"
    ERROR = "error"
    CANCEL = "cancel"
    # A chat reply's parts (docs/protocol.md#chat-frames; ``Frame.part``).
    TOOL_CALL = "tool_call"
    THOUGHT = "thought"
    SIGNATURE = "signature"
    USAGE = "usage"
    FINISH = "finish"


#: The chat frames: content frames of a chat reply only.
CHAT_KINDS = frozenset(
    {FrameKind.TOOL_CALL, FrameKind.THOUGHT, FrameKind.SIGNATURE, FrameKind.USAGE, FrameKind.FINISH}
)
#: Frames ``done`` counts (``content_frames``) and a fault's "content frame K" may be.
CONTENT_KINDS = CHAT_KINDS | {FrameKind.CONTENT_DELTA}
TERMINAL_KINDS = frozenset({FrameKind.DONE, FrameKind.ERROR, FrameKind.CANCEL})
#: The reason of the lab's controlled cancel and error terminals (``controlled_local_<kind>``).
_CONTROLLED: Final = {
    FrameKind.CANCEL: Reason.CONTROLLED_LOCAL_CANCEL,
    FrameKind.ERROR: Reason.CONTROLLED_LOCAL_ERROR,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class DoneDigest:
    """Our end-of-stream integrity claim (every wire but ``ndjson-lab``, where it is required)."""

    content_sha256: str
    content_frames: int


#: done's ``content_sha256``: exactly 64 lowercase hexadecimal characters.
_CONTENT_SHA256: Final = re.compile(r"[0-9a-f]{64}")


def checked_done_digest(content_sha256: object, content_frames: object) -> DoneDigest:
    """done's claim as a wire gave it, or ``invalid_frame_schema``: ``content_sha256`` is
    exactly 64 lowercase hex characters (an empty or absent one is refused here, not
    compared), ``content_frames`` a non-negative integer. Part of the frame's shape, as
    its keys are: checked when the frame is parsed, before its sequence and binding."""
    if type(content_sha256) is not str or not _CONTENT_SHA256.fullmatch(content_sha256):
        raise ProtocolFailure(Reason.INVALID_FRAME_SCHEMA, "done's content_sha256 is not hex")
    if type(content_frames) is not int or content_frames < 0:
        raise ProtocolFailure(Reason.INVALID_FRAME_SCHEMA, "done's content_frames")
    return DoneDigest(content_sha256=content_sha256, content_frames=content_frames)


#: A field as the wire gave it, checked by the consumer's core, not here. (An alias, not
#: ``object`` itself: mypyc's compiled dataclass looks its fields' types up in the module.)
AsSent: TypeAlias = object


@dataclass(frozen=True, slots=True, kw_only=True)
class Frame:
    sequence: AsSent
    kind: FrameKind
    binding_sha256: AsSent
    #: content_delta only.
    text: AsSent = None
    #: error / cancel only.
    reason: AsSent = None
    #: done only, and only where the wire carries it (lp and ndjson; ndjson-lab has none).
    done_digest: DoneDigest | None = None
    #: A chat frame's fields (``CHAT_KINDS`` only): ``shared.chat_parts``.
    part: ChatPart | None = None


# The fields' own setters: a frozen dataclass's __init__ goes through object.__setattr__
# per field, which costs more than the rest of decoding a small frame. The same in both
# builds (native/): slots' member descriptors in the pure one, the native class's getset
# descriptors in the compiled one, whose instances only Frame.__new__ may make.
_NEW_FRAME: Final = Frame.__new__
_SET_FIELDS: Final = tuple(
    vars(Frame)[name].__set__
    for name in ("sequence", "kind", "binding_sha256", "text", "reason", "done_digest", "part")
)


def decoded_frame(  # noqa: PLR0913, PLR0917 (one argument per frame field)
    sequence: object,
    kind: FrameKind,
    binding_sha256: object,
    text: object = None,
    reason: object = None,
    done_digest: DoneDigest | None = None,
    part: ChatPart | None = None,
) -> Frame:
    """``Frame(...)`` for the decoders' per-frame path: an equal frame, in a third of the time."""
    frame: Frame = _NEW_FRAME(Frame)
    set_sequence, set_kind, set_binding, set_text, set_reason, set_digest, set_part = _SET_FIELDS
    set_sequence(frame, sequence)
    set_kind(frame, kind)
    set_binding(frame, binding_sha256)
    set_text(frame, text)
    set_reason(frame, reason)
    set_digest(frame, done_digest)
    set_part(frame, part)
    return frame


def content_sha256(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def split_content(content: str, delta_chars: int = DELTA_CHARS) -> Iterator[str]:
    for offset in range(0, len(content), delta_chars):
        yield content[offset : offset + delta_chars]


def content_frames(binding_sha256: str, deltas: list[str]) -> list[Frame]:
    return [
        Frame(
            sequence=index,
            kind=FrameKind.CONTENT_DELTA,
            binding_sha256=binding_sha256,
            text=text,
        )
        for index, text in enumerate(deltas, start=1)
    ]


def terminal_frame(
    binding_sha256: str, sequence: int, kind: FrameKind, sent: list[str], reason: str | None = None
) -> Frame:
    """The terminal after ``sent`` content deltas; ``done`` carries their digest and count."""
    if kind is FrameKind.DONE:
        return Frame(
            sequence=sequence,
            kind=kind,
            binding_sha256=binding_sha256,
            done_digest=DoneDigest(
                content_sha256=content_sha256("".join(sent)), content_frames=len(sent)
            ),
        )
    if kind not in TERMINAL_KINDS or not reason:
        raise RequestRefused(Reason.INVALID_LOCAL_TERMINAL, str(kind))
    return Frame(sequence=sequence, kind=kind, binding_sha256=binding_sha256, reason=reason)


def frames_from_deltas(
    binding_sha256: str,
    deltas: list[str],
    terminal: FrameKind = FrameKind.DONE,
    reason: str | None = None,
) -> list[Frame]:
    """One content_delta per text, then the terminal (``done`` with their digest and count)."""
    frames = content_frames(binding_sha256, deltas)
    frames.append(terminal_frame(binding_sha256, len(frames) + 1, terminal, deltas, reason))
    return frames


def derive_frames(
    binding_sha256: str, content: str, terminal: FrameKind = FrameKind.DONE
) -> list[Frame]:
    """The lab's ``replay_frames``: 13-character deltas, then the terminal.

    A cancel or error terminal follows only the first half of the content
    (at least one character) and carries ``controlled_local_<kind>``.
    """
    if terminal not in TERMINAL_KINDS:
        raise RequestRefused(Reason.INVALID_LOCAL_TERMINAL, str(terminal))
    reason = None
    if terminal is not FrameKind.DONE:
        content = content[: max(1, len(content) // 2)]
        reason = _CONTROLLED[terminal].value
    return frames_from_deltas(binding_sha256, list(split_content(content)), terminal, reason)
