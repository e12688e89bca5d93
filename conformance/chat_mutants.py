"""Mutants of the Python core's chat turn (``shared.chat_turn``), each one rule wrong: a
consumer that drops the tool calls, one that adds usage reports up, one that appends a
fragment to the call begun last instead of the call its ``index`` names. The chat group's
vectors must catch each (``conformance.mutants`` serves them with the others)."""

from __future__ import annotations

from typing import Any, Final

from replywire.shared.chat_parts import ToolCallPart, UsagePart
from replywire.shared.chat_turn import ChatTurn

_TURN_DOCUMENT: Final = ChatTurn.document
_TURN_USAGE: Final = ChatTurn._usage
_TURN_TOOL_CALL: Final = ChatTurn._tool_call


def _document_without_calls(self: ChatTurn, text: str) -> dict[str, Any]:
    """The turn with its tool calls dropped: accepted (nothing to validate) with none."""
    return {**_TURN_DOCUMENT(self, text), "tool_calls": []}


def _usage_summed(self: ChatTurn, part: UsagePart) -> None:
    """Each usage report added to the ones before it, instead of replacing them."""
    before = self.usage
    _TURN_USAGE(self, part)
    if before is not None and self.usage is not None:
        self.usage = {name: before[name] + count for name, count in self.usage.items()}


def _fragment_to_latest_call(self: ChatTurn, part: ToolCallPart) -> None:
    """A fragment of a call begun appended to the call begun last (the order fragments
    arrived in), not to the call its ``index`` names."""
    begun = len(self.calls)
    if type(part.index) is int and 0 <= part.index < begun - 1:
        part = ToolCallPart(index=begun - 1, id=part.id, name=part.name, arguments=part.arguments)
    _TURN_TOOL_CALL(self, part)


#: Each chat mutant: the patches (owner, attribute, replacement) that make it.
CHAT_MUTANTS: Final[dict[str, tuple[tuple[object, str, Any], ...]]] = {
    "chat-calls-dropped": ((ChatTurn, "document", _document_without_calls),),
    "chat-usage-summed": ((ChatTurn, "_usage", _usage_summed),),
    "chat-fragments-by-arrival": ((ChatTurn, "_tool_call", _fragment_to_latest_call),),
}
