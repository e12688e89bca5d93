"""The chat recording (``fixtures/chat-recording.json``): recorded chat turns, each a chat
binding and the content frames that answer it, its SHA-256 pinned as the other recordings'
are.

A recorded chat case is asked with a chat binding (docs/protocol.md#chat-binding) whose
``case_id`` is the case's own name (``chat-…``) and whose request is the recorded one; its
reply is the recorded turn, frame for frame (``shared.chat_frames``). Pure: bytes in,
verified cases out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

from shared.chat_frames import ChatItem, chat_item_of
from shared.chats import chat_binding, chat_binding_problem, is_chat_case
from shared.digest import digest, strict_json
from shared.errors import RequestRefused
from shared.reasons import Reason
from shared.recording import BoundCase

CHAT_RECORDING_SHA256: Final = "36bc05973c1ca4679d2ea766fb51eb035c57ef0ba10983a4718aac649b15ce38"
FORMAT: Final = "replywire-chat-recording/1"


class ChatRecording:
    """The recorded chat cases, verified: the file's pinned hash, then each case."""

    def __init__(self, cases: Mapping[str, BoundCase], sha256: str) -> None:
        self._cases = dict(cases)
        self.sha256 = sha256

    @classmethod
    def from_bytes(
        cls, raw: bytes, *, expected_sha256: str = CHAT_RECORDING_SHA256
    ) -> ChatRecording:
        actual = hashlib.sha256(raw).hexdigest()
        if actual != expected_sha256:
            raise RequestRefused(Reason.RECORDING_HASH_MISMATCH, f"sha256 {actual}")
        try:
            document = strict_json(raw.decode("utf-8"))
            if document["format"] != FORMAT:
                raise ValueError(f"format {document['format']!r}")
            cases = {
                case_id: chat_case(case_id, entry["request"], entry["items"])
                for case_id, entry in document["cases"].items()
            }
        except (ValueError, RecursionError, KeyError, TypeError) as error:
            raise RequestRefused(Reason.RECORDED_REQUEST_MISMATCH, repr(error)) from error
        return cls(cases, actual)

    @property
    def case_ids(self) -> tuple[str, ...]:
        return tuple(self._cases)

    def __contains__(self, case_id: object) -> bool:
        return case_id in self._cases

    def case(self, case_id: str) -> BoundCase:
        found = self._cases.get(case_id)
        if found is None:
            raise RequestRefused(Reason.DEVELOPMENT_CASE_REQUIRED, case_id)
        return found

    def bind_request(self, case_id: str, supplied: object) -> BoundCase:
        """The recorded case, when ``supplied`` is exactly its binding
        (``request_binding_mismatch`` otherwise)."""
        case = self.case(case_id)
        if not isinstance(supplied, Mapping) or digest(supplied) != case.binding_sha256:
            raise RequestRefused(Reason.REQUEST_BINDING_MISMATCH, "not the recorded chat binding")
        return case


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
