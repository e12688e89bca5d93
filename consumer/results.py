"""Exit codes and the printable forms of result documents (shared by every consumer command)."""

from __future__ import annotations

from replywire.shared.errors import ReplywireError
from replywire.shared.result import StreamResult
from replywire.shared.status import EXIT_CODES, EXIT_USAGE

__all__ = ["EXIT_CODES", "EXIT_USAGE", "exit_code", "refused_result"]


def exit_code(result: StreamResult) -> int:
    return EXIT_CODES[result.status]


def refused_result(error: ReplywireError, *, case_id: str | None, wire_format: str) -> StreamResult:
    """A result document for a request that was never streamed."""
    return StreamResult.refused(error, case_id=case_id, wire_format=wire_format)
