"""A chat reply's validation once it is done and the call ended cleanly
(docs/protocol.md#chat-reply): the finish came, then each call in ``index`` order — its
arguments a strict JSON object, its name a tool the binding's request declared, its
arguments valid against that tool's ``parameters`` by JSON Schema 2020-12 (the maintained
``jsonschema`` library's ``Draft202012Validator``) — and the accepted turn, its calls'
arguments as the objects they parse to. Also the turn's notes (``usage_total_mismatch``).

Pure Python, never compiled (``native``): it runs once per reply, and ``jsonschema`` is a
library of its own, imported when a call is first validated: importing the core loads no
third-party package (tests/system/test_imports.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from replywire.shared.chat_parts import USAGE_COMPONENTS
from replywire.shared.digest import canonical_json, strict_json
from replywire.shared.errors import ProtocolFailure
from replywire.shared.reasons import Reason

#: The notes a chat reply may carry, in the order the result lists them.
USAGE_TOTAL_MISMATCH: Final = "usage_total_mismatch"


class CallRefused(ProtocolFailure):
    """A call the reply's validation refused: ``call`` names it (``{"index", "id", "name"}``)."""

    def __init__(self, reason: Reason, call: Mapping[str, Any], detail: str = "") -> None:
        super().__init__(reason, detail)
        self.call: dict[str, Any] = {key: call[key] for key in ("index", "id", "name")}


def declared_parameters(binding: Mapping[str, Any]) -> dict[str, Any]:
    """The binding's declared tools: name -> its ``parameters`` schema."""
    tools: Sequence[Mapping[str, Any]] = binding["request"]["tools"]
    return {tool["name"]: tool["parameters"] for tool in tools}


def parsed_arguments(arguments: str) -> dict[str, Any] | None:
    """A call's arguments as the object they are, or None: not strict JSON, not an object,
    or a value with no canonical form (a string holding a lone surrogate from a ``\\u``
    escape, a number that reads as infinity: docs/protocol.md#chat-reply)."""
    try:
        value = strict_json(arguments)
        if not isinstance(value, dict):
            return None
        canonical_json(value)  # json.dumps refuses neither; its UTF-8 encoding refuses one
    except (ValueError, RecursionError, UnicodeError):
        return None
    if _has_infinity(value):
        return None
    return value


def _has_infinity(value: Any) -> bool:
    if isinstance(value, float):
        return value in (float("inf"), float("-inf"))
    if isinstance(value, dict):
        return any(_has_infinity(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_infinity(item) for item in value)
    return False


def validate_turn(turn: Mapping[str, Any], binding: Mapping[str, Any]) -> dict[str, Any]:
    """The accepted answer of a chat reply whose turn is ``turn`` (``ChatTurn.document``),
    or ``ProtocolFailure``: ``chat_finish_missing``; ``CallRefused`` with
    ``tool_call_malformed``, ``tool_call_undeclared`` or ``tool_call_arguments_invalid``
    for the first call, in ``index`` order, that fails (all three checks before the next)."""
    if turn["finish_reason"] is None:
        raise ProtocolFailure(Reason.CHAT_FINISH_MISSING)
    declared = declared_parameters(binding)
    calls: list[dict[str, Any]] = []
    for call in turn["tool_calls"]:
        arguments = parsed_arguments(call["arguments"])
        if arguments is None:
            raise CallRefused(Reason.TOOL_CALL_MALFORMED, call)
        if call["name"] not in declared:
            raise CallRefused(Reason.TOOL_CALL_UNDECLARED, call)
        error = _first_error(declared[call["name"]], arguments)
        if error is not None:
            raise CallRefused(Reason.TOOL_CALL_ARGUMENTS_INVALID, call, error[:200])
        calls.append({**call, "arguments": arguments})
    return {**turn, "tool_calls": calls}


def _first_error(parameters: Mapping[str, Any], arguments: dict[str, Any]) -> str | None:
    """Why ``arguments`` are not valid against ``parameters`` (JSON Schema 2020-12), or None."""
    from jsonschema import Draft202012Validator  # noqa: PLC0415 (see the module's docstring)

    error = next(iter(Draft202012Validator(parameters).iter_errors(arguments)), None)
    return None if error is None else error.message


def notes(usage: Mapping[str, int] | None) -> list[str]:
    """The turn's notes: ``usage_total_mismatch`` when the reported total is not the sum of
    its parts (``cached_tokens`` is part of ``prompt_tokens``); kept as reported."""
    if usage is not None and usage["total_tokens"] != sum(usage[name] for name in USAGE_COMPONENTS):
        return [USAGE_TOTAL_MISMATCH]
    return []
