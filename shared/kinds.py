"""The kinds of reply (docs/protocol.md#kinds): each with its binding and its reply.

A binding names its kind in a ``kind`` key; one without it is ``grounded`` (the lab's
six-key binding, byte for byte). The request names the kind too (``OpenRequest.kind``),
so a producer can refuse a kind its source does not serve before it reads the binding.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final

from replywire.shared.errors import ConfigurationError


class ReplyKind(StrEnum):
    #: A JSON answer citing the bound passages (the lab's reply).
    GROUNDED = "grounded"
    #: Free text, the empty text included.
    TEXT = "text"
    #: A model turn: text, tool calls, thoughts, signatures, usage, the finish reason.
    CHAT = "chat"


#: The binding's key that names a kind other than ``grounded``.
KIND_KEY: Final = "kind"


def kind_of(binding: Mapping[str, Any]) -> ReplyKind:
    """The kind a binding names (``grounded`` when it names none); ``ConfigurationError``
    for a ``kind`` that is no kind, or that names ``grounded`` (whose binding has no key)."""
    named = binding.get(KIND_KEY)
    if named is None:
        return ReplyKind.GROUNDED
    if named == ReplyKind.TEXT.value:
        return ReplyKind.TEXT
    if named == ReplyKind.CHAT.value:
        return ReplyKind.CHAT
    raise ConfigurationError(f"the binding's kind is no reply kind: {named!r}")
