"""The chat recording (``fixtures/chat-recording.json``): recorded chat turns, each a chat
binding and the content frames that answer it, its SHA-256 pinned as the other recordings'
are.

A recorded chat case is asked with a chat binding (docs/protocol.md#chat-binding) whose
``case_id`` is the case's own name (``chat-…``) and whose request is the recorded one; its
reply is the recorded turn, frame for frame (``shared.chat_frames``). Read and checked as
``shared.pinned_cases`` says.
"""

from __future__ import annotations

from typing import Any, Final

from replywire.shared.chat_frames import ChatItem, chat_item_of
from replywire.shared.chats import chat_binding, chat_binding_problem, is_chat_case
from replywire.shared.digest import digest
from replywire.shared.pinned_cases import PinnedCases
from replywire.shared.recording import BoundCase

CHAT_RECORDING_SHA256: Final = "36bc05973c1ca4679d2ea766fb51eb035c57ef0ba10983a4718aac649b15ce38"
FORMAT: Final = "replywire-chat-recording/1"


class ChatRecording(PinnedCases):
    """The recorded chat cases, verified: the file's pinned hash, then each case."""

    FORMAT = FORMAT
    SHA256 = CHAT_RECORDING_SHA256
    WHAT = "chat"

    @staticmethod
    def case_of(case_id: str, entry: Any) -> BoundCase:
        return chat_case(case_id, entry["request"], entry["items"])


def chat_case(case_id: str, request: Any, items: Any) -> BoundCase:
    """A recorded case: its binding and its turn (``ValueError`` when either is not what it
    must be). The binding's schema is not checked here: the file is pinned by its hash, and
    the tests check every recorded binding against the schema (so a producer's start does
    not load ``jsonschema``)."""
    if not is_chat_case(case_id) or not isinstance(request, dict) or not isinstance(items, list):
        raise ValueError(f"case {case_id}: a chat- case, a request and its items")
    binding = chat_binding(request, case_id)
    problem = chat_binding_problem(binding, case_id, recorded=True, schema=False)
    if problem is not None:
        raise ValueError(f"case {case_id}: {problem}")
    turn: tuple[ChatItem, ...] = tuple(chat_item_of(item) for item in items)
    text = "".join(value for _, value in turn if isinstance(value, str))
    return BoundCase(
        case_id=case_id,
        binding=binding,
        binding_sha256=digest(binding),
        request_sha256=binding["request_sha256"],
        content=text,
        chat_items=turn,
    )
