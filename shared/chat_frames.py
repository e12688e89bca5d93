"""A chat reply's frames (docs/protocol.md#chat-frames), as a producer sends them.

A turn is a sequence of ``ChatItem``: ``(FrameKind.CONTENT_DELTA, text)`` for its
visible text, ``(kind, part)`` for each of its parts (``shared.chat_parts``), in the order
they are sent. ``chat_frames`` numbers them from 1 and ends them with the terminal:
``done`` carries the chat content digest and count of every content frame
(``ChatDigest``), ``error`` and ``cancel`` their reason. ``chat_item_of`` and
``chat_item_json`` read and write an item as the NDJSON wire writes its frame's fields
(the chat recording's form).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeAlias

from replywire.shared.chat_parts import (
    INTEGER_FIELDS,
    PART_CLASSES,
    PART_FIELDS,
    ChatDigest,
    ChatPart,
    part_values,
)
from replywire.shared.errors import RequestRefused
from replywire.shared.frames import TERMINAL_KINDS, DoneDigest, Frame, FrameKind
from replywire.shared.reasons import Reason

#: One content frame of a turn: a text, or a part of one of the five chat kinds.
ChatItem: TypeAlias = tuple[FrameKind, str | ChatPart]

_CONTENT: Final = FrameKind.CONTENT_DELTA.value


def chat_frames(
    binding_sha256: str,
    items: Iterable[ChatItem],
    terminal: FrameKind = FrameKind.DONE,
    reason: str | None = None,
) -> list[Frame]:
    """One content frame per item, numbered from 1, then the terminal: ``done`` with the
    digest and count of them all, or ``error`` / ``cancel`` with ``reason``."""
    if terminal not in TERMINAL_KINDS or (terminal is not FrameKind.DONE and not reason):
        raise RequestRefused(Reason.INVALID_LOCAL_TERMINAL, str(terminal))
    frames: list[Frame] = []
    running = ChatDigest()
    for kind, value in items:
        sequence = len(frames) + 1
        if kind is FrameKind.CONTENT_DELTA:
            if not isinstance(value, str) or not value:
                raise ValueError(f"item {sequence}: a content_delta's text is a non-empty str")
            running.add_text(value)
            frames.append(
                Frame(sequence=sequence, kind=kind, binding_sha256=binding_sha256, text=value)
            )
            continue
        part_class = PART_CLASSES.get(kind.value)
        if part_class is None or not isinstance(value, part_class):
            raise ValueError(f"item {sequence}: {kind.value} needs its part")
        running.add_part(kind.value, value)
        frames.append(
            Frame(sequence=sequence, kind=kind, binding_sha256=binding_sha256, part=value)
        )
    sequence = len(frames) + 1
    if terminal is FrameKind.DONE:
        content_sha256, content_frames = running.claim()
        claim = DoneDigest(content_sha256=content_sha256, content_frames=content_frames)
        frames.append(
            Frame(
                sequence=sequence, kind=terminal, binding_sha256=binding_sha256, done_digest=claim
            )
        )
    else:
        frames.append(
            Frame(sequence=sequence, kind=terminal, binding_sha256=binding_sha256, reason=reason)
        )
    return frames


def chat_item_json(item: ChatItem) -> dict[str, Any]:
    """An item as its frame's NDJSON fields: ``kind`` and its own (no sequence, no binding)."""
    kind, value = item
    if kind is FrameKind.CONTENT_DELTA:
        return {"kind": _CONTENT, "text": value}
    assert not isinstance(value, str)
    return {"kind": kind.value, **part_values(kind.value, value)}


def chat_item_of(fields: Mapping[str, Any]) -> ChatItem:
    """An item from its NDJSON fields (``chat_item_json``'s form), typed as a producer sends
    it (``ValueError`` otherwise): strings, integers >= 0, a non-empty text."""
    kind = fields.get("kind")
    if kind == _CONTENT:
        text = fields.get("text")
        if set(fields) != {"kind", "text"} or not isinstance(text, str) or not text:
            raise ValueError("a content_delta is {kind, text}, its text not empty")
        return FrameKind.CONTENT_DELTA, text
    if not isinstance(kind, str) or kind not in PART_FIELDS:
        raise ValueError(f"no chat kind: {kind!r}")
    names = PART_FIELDS[kind]
    if set(fields) != {"kind", *names}:
        raise ValueError(f"a {kind} has exactly {', '.join(names)}")
    for name in names:
        value = fields[name]
        integer = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        if not (integer if name in INTEGER_FIELDS else isinstance(value, str)):
            raise ValueError(f"{kind}.{name}: {value!r}")
    return FrameKind(kind), PART_CLASSES[kind](**{name: fields[name] for name in names})
