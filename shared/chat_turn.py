"""A chat reply's turn as the consumer core applies it (docs/protocol.md#chat-rules): each
chat frame's fields checked in the protocol's order, then the part kept with the turn — the
calls' arguments assembled by ``index`` from fragments that may interleave, the thoughts,
the signatures with the part they came with, the last usage, the finish reason — and the
chat content digest over the record of every content frame applied
(docs/protocol.md#chat-digest).

The turn's text is the core's ``Content`` (the reply's ``provisional_content``): the turn
hashes each delta's record and counts it, and is told the text's length where it needs it.
``ChatTurn.document`` is the turn as the result shows it, its calls' arguments raw;
``shared.chat_reply`` validates it once the reply is done.
"""

from __future__ import annotations

from typing import Any, Final, TypeGuard

from replywire.shared.chat_parts import (
    PART_FIELDS,
    SIGNED_PARTS,
    ChatDigest,
    ChatPart,
    FinishPart,
    SignaturePart,
    ThoughtPart,
    ToolCallPart,
    UsagePart,
)
from replywire.shared.errors import ProtocolFailure
from replywire.shared.frames import DoneDigest
from replywire.shared.reasons import Reason

#: The usage counts are uint64 on lp; NDJSON's integers are held to the same range.
_COUNT_END: Final = 1 << 64
#: The longest finish reason, in code points (docs/protocol.md#limits).
MAX_FINISH_CHARS: Final = 64
_USAGE_FIELDS: Final = PART_FIELDS["usage"]


def _is_text(value: object) -> TypeGuard[str]:
    """A string with no lone surrogate (one has no UTF-8 encoding)."""
    if type(value) is not str:
        return False
    try:
        value.encode("utf-8")
    except UnicodeError:
        return False
    return True


class ToolCall:
    """One call of the turn: named by its first fragment, its arguments every fragment's."""

    __slots__ = ("arguments", "id", "index", "name", "signed")

    def __init__(self, index: int, call_id: str, name: str, arguments: str) -> None:
        self.index = index
        self.id = call_id
        self.name = name
        self.arguments = arguments
        #: Whether a signature came for it (at most one).
        self.signed = False

    def named(self) -> dict[str, Any]:
        """``{"index", "id", "name"}``: the call as the result's ``call`` names it."""
        return {"index": self.index, "id": self.id, "name": self.name}


class ChatTurn:
    """The turn as applied so far; ``apply`` checks a chat frame and keeps its part."""

    def __init__(self, max_tool_calls: int) -> None:
        self._max_tool_calls = max_tool_calls
        self._thoughts: list[str] = []
        self._thought_chars = 0
        self.calls: list[ToolCall] = []
        self.signatures: list[dict[str, Any]] = []
        self.usage: dict[str, int] | None = None
        self.finish_reason: str | None = None
        #: Code points the content limit counts besides the text: the thoughts, every
        #: call's arguments, every signature's value.
        self.characters = 0
        #: The records of the content frames applied (the six kinds): done's claim.
        self._digest = ChatDigest()

    @property
    def frames(self) -> int:
        """Content frames applied (the six kinds): ``done.content_frames``."""
        return self._digest.frames

    @property
    def thoughts(self) -> str:
        return "".join(self._thoughts)

    def check_open(self) -> None:
        """After a ``finish`` only ``usage`` may come: any other content frame (a
        ``content_delta``, a second ``finish``) is ``frame_after_finish``."""
        if self.finish_reason is not None:
            raise ProtocolFailure(Reason.FRAME_AFTER_FINISH)

    def add_text(self, text: str) -> int:
        """A checked ``content_delta`` (the core keeps the text): its record. Returns the
        code points the content limit counts besides the text (``characters``)."""
        self._digest.add_text(text)
        return self.characters

    def apply(self, kind: str, part: ChatPart | None, text_chars: int) -> None:
        """A chat frame of ``kind``: its checks (docs/protocol.md#chat-rules), then its part
        kept and its record hashed. ``text_chars`` is the text's length so far (a text
        signature's ``at``). Raises ``ProtocolFailure`` with the kind's reason."""
        if kind != "usage":
            self.check_open()
        if isinstance(part, ToolCallPart):
            self._tool_call(part)
        elif isinstance(part, ThoughtPart):
            self._thought(part)
        elif isinstance(part, SignaturePart):
            self._signature(part, text_chars)
        elif isinstance(part, UsagePart):
            self._usage(part)
        elif isinstance(part, FinishPart):
            self._finish(part)
        else:  # a decoder always gives the part of its kind
            raise TypeError(f"a {kind} frame without its part")
        self._digest.add_part(kind, part)

    def _tool_call(self, part: ToolCallPart) -> None:
        index, call_id, name, arguments = part.index, part.id, part.name, part.arguments
        begun = len(self.calls)
        # An integer as the wires carry it: on NDJSON a number token with no fraction and no
        # exponent (``true``, ``1.0`` are not).
        if type(index) is not int or not 0 <= index <= begun:
            raise ProtocolFailure(Reason.INVALID_TOOL_CALL, "index")
        if not (_is_text(call_id) and _is_text(name) and _is_text(arguments)):
            raise ProtocolFailure(Reason.INVALID_TOOL_CALL, "id, name or arguments")
        if index == begun:
            if not name:
                raise ProtocolFailure(Reason.INVALID_TOOL_CALL, "a new call without a name")
            if begun >= self._max_tool_calls:
                raise ProtocolFailure(Reason.TOOL_CALL_LIMIT, f"call {begun + 1}")
            self.calls.append(ToolCall(index, call_id, name, arguments))
        else:
            call = self.calls[index]
            if call_id not in ("", call.id) or name not in ("", call.name):
                raise ProtocolFailure(Reason.INVALID_TOOL_CALL, "the call's id or name changed")
            if not arguments:
                raise ProtocolFailure(Reason.INVALID_TOOL_CALL, "a fragment without arguments")
            call.arguments += arguments
        self.characters += len(arguments)

    def _thought(self, part: ThoughtPart) -> None:
        text = part.text
        if not _is_text(text) or not text:
            raise ProtocolFailure(Reason.INVALID_THOUGHT)
        self._thoughts.append(text)
        self._thought_chars += len(text)
        self.characters += len(text)

    def _signature(self, part: SignaturePart, text_chars: int) -> None:
        signed, index, value = part.part, part.index, part.value
        if signed not in SIGNED_PARTS:
            raise ProtocolFailure(Reason.INVALID_SIGNATURE, "part")
        if not _is_text(value) or not value:
            raise ProtocolFailure(Reason.INVALID_SIGNATURE, "value")
        if type(index) is not int:
            raise ProtocolFailure(Reason.INVALID_SIGNATURE, "index")
        if signed == "tool_call":
            if not 0 <= index < len(self.calls) or self.calls[index].signed:
                raise ProtocolFailure(Reason.INVALID_SIGNATURE, "no such call, or signed")
            self.calls[index].signed = True
            self.signatures.append({"part": signed, "index": index, "value": value})
        else:
            if index != 0:
                raise ProtocolFailure(Reason.INVALID_SIGNATURE, "index")
            at = text_chars if signed == "text" else self._thought_chars
            self.signatures.append({"part": signed, "at": at, "value": value})
        self.characters += len(value)

    def _usage(self, part: UsagePart) -> None:
        counts: dict[str, int] = {}
        for name in _USAGE_FIELDS:
            value = getattr(part, name)
            if type(value) is not int or not 0 <= value < _COUNT_END:
                raise ProtocolFailure(Reason.INVALID_USAGE, name)
            counts[name] = value
        self.usage = counts

    def _finish(self, part: FinishPart) -> None:
        reason = part.reason
        if not _is_text(reason) or not 1 <= len(reason) <= MAX_FINISH_CHARS:
            raise ProtocolFailure(Reason.INVALID_FINISH)
        self.finish_reason = reason

    def matches(self, claim: DoneDigest) -> bool:
        """Whether done's claim is exactly the content frames applied, by their records."""
        return (claim.content_sha256, claim.content_frames) == self._digest.claim()

    def document(self, text: str) -> dict[str, Any]:
        """The turn as the result's ``turn`` shows it: ``text`` (the core's), the calls'
        arguments as the raw text they came as."""
        return {
            "text": text,
            "thoughts": self.thoughts,
            "tool_calls": [{**call.named(), "arguments": call.arguments} for call in self.calls],
            "signatures": [dict(signature) for signature in self.signatures],
            "usage": dict(self.usage) if self.usage is not None else None,
            "finish_reason": self.finish_reason,
        }
