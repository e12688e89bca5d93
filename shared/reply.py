"""Final reply validation: the lab's ``validate_reply``, check for check.

Runs only after a ``done`` terminal and a clean end of input. Citations are
resolved from the bound context alone, never from anything the model wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from replywire.shared.digest import strict_json
from replywire.shared.errors import ProtocolFailure
from replywire.shared.reasons import Reason

REPLY_KEYS = frozenset({"status", "answer", "source_ids"})
REPLY_STATUSES = ("answered", "not_in_docs")


def is_blank(text: str) -> bool:
    """Every code point of ``text`` white space (the empty text included): the 29 code
    points of docs/protocol.md#white-space, which are exactly what ``str.strip`` removes
    (``str.isspace``), not JavaScript's ``\\s`` nor Unicode's ``White_Space``."""
    return not text.strip()


def validate_reply(
    content: str, binding: Mapping[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        reply = strict_json(content)
    except (ValueError, TypeError, RecursionError) as error:
        raise ProtocolFailure(Reason.INVALID_ANSWER_JSON, str(error)[:200]) from error
    if not isinstance(reply, dict) or set(reply) != REPLY_KEYS:
        raise ProtocolFailure(Reason.INVALID_ANSWER_SCHEMA, "reply keys")
    answer = reply["answer"]
    if reply["status"] not in REPLY_STATUSES or not isinstance(answer, str) or is_blank(answer):
        raise ProtocolFailure(Reason.INVALID_ANSWER_SCHEMA, "status or answer")
    try:
        answer.encode("utf-8")
    except UnicodeError as error:
        raise ProtocolFailure(Reason.INVALID_ANSWER_SCHEMA, "answer is not UTF-8") from error
    ids = reply["source_ids"]
    if (
        not isinstance(ids, list)
        or any(not isinstance(key, str) or not key for key in ids)
        or len(set(ids)) != len(ids)
    ):
        raise ProtocolFailure(Reason.INVALID_ANSWER_SCHEMA, "source_ids")
    known = {row["source_id"]: row for row in binding["selected_context"]}
    if any(key not in known for key in ids):
        raise ProtocolFailure(Reason.UNKNOWN_CONTEXT_CITATION, "source id outside the context")
    if (reply["status"] == "answered" and not ids) or (reply["status"] == "not_in_docs" and ids):
        raise ProtocolFailure(Reason.STATUS_CITATION_MISMATCH, reply["status"])
    citations = [
        {"source_id": key, "chunk_id": known[key]["chunk_id"], "url": known[key]["url"]}
        for key in ids
    ]
    return reply, citations
