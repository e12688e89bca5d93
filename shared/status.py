"""A stream's final status, as the result document writes it, and the exit code of each.

Every registered reason code carries one of these statuses
(``shared.reason_registry.REASONS``); every consumer command exits with the code of its
result's status (``EXIT_CODES``), or with ``EXIT_USAGE`` when its flags or files are wrong.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """Final status of one stream, as written into the result document."""

    COMPLETE = "complete"
    INCOMPLETE = "incomplete"
    CANCELLED = "cancelled"
    ERROR = "error"
    INVALID = "invalid"
    REFUSED = "refused"


#: Exit codes of every consumer command, by final status (2 = usage or configuration).
EXIT_CODES: dict[Status, int] = {
    Status.COMPLETE: 0,
    Status.INCOMPLETE: 3,
    Status.CANCELLED: 4,
    Status.ERROR: 5,
    Status.INVALID: 6,
    Status.REFUSED: 7,
}
EXIT_USAGE = 2
