"""A text binding (docs/protocol.md#text-binding): built from a text, and checked.

The development text source (the recording source serves it: ``make run-producer``)
answers a text binding with the text of its last ``human`` message, cut into deltas of
six code points (the 004 lab's): the caller chooses the reply, and the binding binds it.
Its case id is ``text-`` and the first 16 hex characters of ``request_sha256``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, TypeGuard

from replywire.shared.digest import digest
from replywire.shared.errors import RequestRefused
from replywire.shared.kinds import KIND_KEY, ReplyKind
from replywire.shared.reasons import Reason
from replywire.shared.recording import BoundCase

TEXT_PREFIX: Final = "text-"
BINDING_KEYS: Final = frozenset({KIND_KEY, "case_id", "request_sha256", "messages"})
ROLES: Final = frozenset({"system", "human"})
MAX_MESSAGES: Final = 64
#: The longest text the development source echoes, in code points.
MAX_ECHO_CHARS: Final = 16_384
#: The 004 lab's deltas: six code points each.
DELTA_CHARS: Final = 6


def build_text_binding(text: str, system: str | None = None) -> dict[str, Any]:
    """The binding that asks the development source for ``text``."""
    messages: list[list[str]] = [] if system is None else [["system", system]]
    messages.append(["human", text])
    return text_binding(messages)


def text_binding(messages: list[list[str]], case_id: str | None = None) -> dict[str, Any]:
    """The text binding of ``messages``, under ``case_id`` (a recorded case's name), or
    under the development source's ``text-`` and 16 hex characters of its digest."""
    request_sha256 = digest(messages)
    return {
        KIND_KEY: ReplyKind.TEXT.value,
        "case_id": case_id or TEXT_PREFIX + request_sha256[:16],
        "request_sha256": request_sha256,
        "messages": messages,
    }


def is_text_case(case_id: object) -> bool:
    return isinstance(case_id, str) and case_id.startswith(TEXT_PREFIX)


def check_text_binding(binding: object, case_id: str) -> tuple[Mapping[str, Any], str]:
    """The binding, and the text it asks for; ``request_binding_mismatch`` when it
    is not one (its shape, its case id, its digest), ``invalid_request`` when the text is
    longer than the source echoes."""
    mismatch = RequestRefused(Reason.REQUEST_BINDING_MISMATCH, "not a text binding")
    if not isinstance(binding, Mapping) or set(binding) != BINDING_KEYS:
        raise mismatch
    messages = binding["messages"]
    if binding[KIND_KEY] != ReplyKind.TEXT.value or binding["case_id"] != case_id:
        raise mismatch
    if not are_messages(messages) or binding["request_sha256"] != digest(messages):
        raise mismatch
    if case_id != TEXT_PREFIX + binding["request_sha256"][:16]:
        raise mismatch
    text: str = messages[-1][1]
    if len(text) > MAX_ECHO_CHARS:
        raise RequestRefused(Reason.INVALID_REQUEST, f"text over {MAX_ECHO_CHARS} code points")
    return binding, text


def are_messages(messages: object) -> TypeGuard[list[list[str]]]:
    """1 to 64 ``[role, text]`` pairs, each role ``system`` or ``human``, the last ``human``."""
    return (
        isinstance(messages, list)
        and 1 <= len(messages) <= MAX_MESSAGES
        and all(
            isinstance(message, list)
            and len(message) == 2
            and message[0] in ROLES
            and isinstance(message[1], str)
            for message in messages
        )
        and messages[-1][0] == "human"
    )


def text_case(binding: Mapping[str, Any], text: str) -> BoundCase:
    """A text binding and the text that answers it, as a case a source transmits: the text
    in deltas of six code points."""
    return BoundCase(
        case_id=binding["case_id"],
        binding=binding,
        binding_sha256=digest(binding),
        request_sha256=binding["request_sha256"],
        content=text,
        provider_events=text_deltas(text),
    )


def text_deltas(text: str) -> tuple[str, ...]:
    """``text`` in deltas of six code points (none for the empty text)."""
    return tuple(text[at : at + DELTA_CHARS] for at in range(0, len(text), DELTA_CHARS))
