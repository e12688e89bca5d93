"""A chat reply's parts as frames carry them (docs/protocol.md#chat-frames), and the record
each content frame adds to a chat reply's content digest (docs/protocol.md#chat-digest).

A frame of one of the five chat kinds (``FrameKind.TOOL_CALL`` … ``FINISH``) holds its
fields in ``Frame.part``, one of the classes below. Decoded frames keep every field as the
wire gave it (``AsSent``): the consumer core judges the values (docs/protocol.md#chat-rules),
so a wrongly typed field gives the same reason on both wires. A producer builds them with
the right types.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final, TypeAlias

from replywire.shared.digest import canonical_json

#: A field as the wire gave it (see ``shared.frames.AsSent``).
AsSent: TypeAlias = object


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallPart:
    """A fragment of the call at ``index``: the first names it, each adds ``arguments``."""

    index: AsSent
    id: AsSent
    name: AsSent
    arguments: AsSent


@dataclass(frozen=True, slots=True, kw_only=True)
class ThoughtPart:
    """A thought summary's text."""

    text: AsSent


@dataclass(frozen=True, slots=True, kw_only=True)
class SignaturePart:
    """A thought signature, kept with its part: ``"text"``, ``"thought"`` or ``"tool_call"``
    (``index`` the call's; else 0)."""

    part: AsSent
    index: AsSent
    value: AsSent


@dataclass(frozen=True, slots=True, kw_only=True)
class UsagePart:
    """The provider's usage report, cumulative: the last one counts."""

    prompt_tokens: AsSent
    cached_tokens: AsSent
    completion_tokens: AsSent
    thoughts_tokens: AsSent
    tool_use_prompt_tokens: AsSent
    total_tokens: AsSent


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishPart:
    """The turn's finish reason, as the provider gave it."""

    reason: AsSent


ChatPart: TypeAlias = ToolCallPart | ThoughtPart | SignaturePart | UsagePart | FinishPart

#: Each chat frame kind's fields, in the order the NDJSON wire writes them (after
#: ``sequence``, ``kind``, ``binding_sha256``) and the lp wire numbers them (1, 2, …).
PART_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "tool_call": ("index", "id", "name", "arguments"),
    "thought": ("text",),
    "signature": ("part", "index", "value"),
    "usage": (
        "prompt_tokens",
        "cached_tokens",
        "completion_tokens",
        "thoughts_tokens",
        "tool_use_prompt_tokens",
        "total_tokens",
    ),
    "finish": ("reason",),
}
#: The class of each chat frame kind's part.
PART_CLASSES: Final[dict[str, type[ChatPart]]] = {
    "tool_call": ToolCallPart,
    "thought": ThoughtPart,
    "signature": SignaturePart,
    "usage": UsagePart,
    "finish": FinishPart,
}
#: The integer fields (varints on lp); the others are strings.
INTEGER_FIELDS: Final = frozenset({"index"} | set(PART_FIELDS["usage"]))
#: The parts a signature may belong to.
SIGNED_PARTS: Final = ("text", "thought", "tool_call")
#: The usage counts that add up to the total (``cached_tokens`` is part of the prompt's).
USAGE_COMPONENTS: Final = (
    "prompt_tokens",
    "completion_tokens",
    "thoughts_tokens",
    "tool_use_prompt_tokens",
)


def part_values(kind: str, part: ChatPart) -> dict[str, object]:
    """The part's fields by name, in ``PART_FIELDS`` order."""
    return {name: getattr(part, name) for name in PART_FIELDS[kind]}


def record(kind: str, fields: dict[str, object]) -> bytes:
    """A content frame's record in a chat reply's content digest: the canonical JSON of its
    kind and its own fields (the NDJSON object without ``sequence`` and ``binding_sha256``),
    then a line feed (docs/protocol.md#chat-digest). ``fields`` are the checked values
    (``{"text": …}`` for a ``content_delta``, ``part_values`` for a chat frame)."""
    return canonical_json({"kind": kind, **fields}) + b"\n"


class ChatDigest:
    """A chat reply's running content digest and count, as a producer sends its frames (the
    consumer core keeps its own, from what it applied): ``done`` carries ``claim()``."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.frames = 0

    def add_text(self, text: str) -> None:
        self._hash.update(record("content_delta", {"text": text}))
        self.frames += 1

    def add_part(self, kind: str, part: ChatPart) -> None:
        self._hash.update(record(kind, part_values(kind, part)))
        self.frames += 1

    def claim(self) -> tuple[str, int]:
        """``(content_sha256, content_frames)`` of every content frame added."""
        return self._hash.hexdigest(), self.frames
