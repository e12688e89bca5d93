"""One exception family with stable reason codes, and the bound of a failure's free text.

A failure is raised as a ``ReplywireError`` carrying a registered code
(``shared.reasons.Reason``): ``ProtocolFailure`` when the consumer refuses what it was
given, ``RequestRefused`` when a request cannot be bound or served. ``ConfigurationError``
is a command that cannot start (exit 2). The ``detail`` that goes with a code is text from
elsewhere, shown only as ``scrubbed_detail`` makes it.
"""

from __future__ import annotations

from typing import Final

from replywire.shared.reasons import Reason

#: The longest ``detail`` of a result (and of a trace record that carries text from elsewhere).
MAX_DETAIL_CHARS: Final = 256
#: Where a detail was cut at the bound.
CUT_MARK: Final = "\u2026"


def scrubbed_detail(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    """Free text made fit to show: every character that is not printable (control and
    format characters: C0, DEL, C1, bidi overrides, zero-width marks, line separators,
    surrogates) shown escaped as Python writes it (``\\n``, ``\\x1b``, ``\\u202e``), never
    raw; at most ``limit`` characters, cut with ``…`` at the end (never inside an
    escape). Idempotent: scrubbed text is returned as it is."""
    if len(text) <= limit and text.isprintable():
        return text
    pieces: list[str] = []
    size = 0
    for char in text[: limit + 1]:  # every character shows as one or more
        piece = char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        pieces.append(piece)
        size += len(piece)
        if size > limit:
            break
    if size <= limit:
        return "".join(pieces)
    while pieces and size + len(CUT_MARK) > limit:
        size -= len(pieces.pop())
    return "".join(pieces) + CUT_MARK


class ReplywireError(Exception):
    """Base of the family: every failure carries a stable reason code."""

    def __init__(self, reason: Reason, detail: str = "") -> None:
        super().__init__(f"{reason.value}: {detail}" if detail else reason.value)
        self.reason = reason
        self.detail = detail
        #: Extra facts for the edge to pass on (e.g. gRPC trailing metadata: a retry delay).
        self.metadata: dict[str, str] = {}

    @property
    def code(self) -> str:
        return self.reason.value


class ConfigurationError(Exception):
    """A command cannot start with its flags or files (exit 2, a one-line message)."""


class InvalidTransition(RuntimeError):
    """A caller fired an input its machine's table has no entry for (``shared.fsm``): a bug,
    never a verdict. Here, not in ``shared.fsm``: mypyc, which compiles that module, cannot
    compile a subclass of ``RuntimeError``."""


class ProtocolFailure(ReplywireError):
    """The consumer refused the bytes or frames it was given (status invalid)."""


class RequestRefused(ReplywireError):
    """The request could not be bound or served (status refused)."""
