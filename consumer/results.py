"""Exit codes and the printable forms of result documents (shared by every consumer command)."""

from __future__ import annotations

from typing import Any, Final

from shared.errors import ReplywireError, Status

#: Exit codes, documented in the README and kept for every consumer command.
EXIT_USAGE: Final = 2
EXIT_CODES: Final = {
    Status.COMPLETE: 0,
    Status.INCOMPLETE: 3,
    Status.CANCELLED: 4,
    Status.ERROR: 5,
    Status.INVALID: 6,
    Status.REFUSED: 7,
}


def exit_code(result: dict[str, Any]) -> int:
    return EXIT_CODES[Status(result["status"])]


def refused_result(
    error: ReplywireError, *, case_id: str | None, wire_format: str
) -> dict[str, Any]:
    """A result document for a request that was never streamed."""
    return {
        "status": Status.REFUSED.value,
        "reason": error.code,
        "accepted_answer": None,
        "citations": [],
        "provisional_content": "",
        "local_terminal": None,
        "stats": {"bytes_received": 0, "transport_fragments": 0, "application_frames": 0},
        "events": [],
        "case_id": case_id,
        "request_sha256": None,
        "binding_sha256": None,
        "wire_format": wire_format,
        "detail": error.detail,
    }
