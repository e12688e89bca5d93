"""Exit codes and the printable forms of result documents (shared by every consumer command)."""

from __future__ import annotations

from typing import Any

from shared.errors import EXIT_CODES, EXIT_USAGE, ReplywireError, Status

__all__ = ["EXIT_CODES", "EXIT_USAGE", "exit_code", "refused_result"]


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
