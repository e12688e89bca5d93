"""The hashed recording: load, verify, and bind the development cases.

The recording holds complete saved replies and the trace of the request that
produced each. Loading verifies, in this order and with the lab's codes:

1. the file's SHA-256 against the pinned value (``recording_hash_mismatch``);
2. the case against the development allowlist (``development_case_required``);
3. ``digest(messages) == request_sha256 == metadata.request_sha256``
   (``recorded_request_mismatch``);
4. the context supplied in the last message equals the selected context
   (``recorded_context_mismatch``).

A binding is everything a saved reply answers: the messages, request hash,
schema, corpus identity and selected context. A request whose binding differs
in any byte is refused (``request_binding_mismatch``) rather than served a
reply that answered something else.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from replywire.shared.chat_frames import ChatItem
from replywire.shared.digest import digest, strict_json
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason

#: SHA-256 of fixtures/recording.json (this project's rebuild; see fixtures/PROVENANCE.md).
RECORDING_SHA256: Final = "f018294e73fd2e5dcb8d770475ee3d0c8a8c5c1a7ab0bec4bb908ff656a0cf35"
DEVELOPMENT_CASES: Final = ("utf8-write", "replace-file", "json-result-type", "backup-schedule")
CONTEXT_KEYS: Final = ("chunk_id", "source_id", "text", "url")


@dataclass(frozen=True, slots=True)
class BoundCase:
    """A verified binding and the saved reply that answers it."""

    case_id: str
    binding: Mapping[str, Any]
    binding_sha256: str
    request_sha256: str
    content: str
    #: A converted live capture keeps the provider's text events: replay uses their boundaries.
    provider_events: tuple[str, ...] | None = None
    #: A chat case's turn, its content frames in order (``content`` is then its text).
    chat_items: tuple[ChatItem, ...] | None = None


def _event(events: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    for event in events:
        if event.get("kind") == kind:
            return event
    raise RequestRefused(Reason.RECORDED_REQUEST_MISMATCH, f"no {kind} event")


def _bind(case_id: str, entry: Mapping[str, Any]) -> BoundCase:
    """The lab's ``load_binding`` for one verified recording entry."""
    try:
        metadata = entry["metadata"]
        events = metadata["trace"]["events"]
        request = _event(events, "model_request_ready")
        selected = _event(events, "context_selected")
        candidates = {
            row["chunk_id"]: row for row in _event(events, "retrieval_completed")["candidates"]
        }
        context = [
            {key: candidates[chunk][key] for key in CONTEXT_KEYS} for chunk in selected["chunk_ids"]
        ]
        messages = request["messages"]
        request_sha256 = request["request_sha256"]
        content = metadata["raw_message"]["content"]
    except (KeyError, TypeError, IndexError) as error:
        raise RequestRefused(Reason.RECORDED_REQUEST_MISMATCH, f"{case_id}: {error!r}") from error
    if digest(messages) != request_sha256 or request_sha256 != metadata.get("request_sha256"):
        raise RequestRefused(Reason.RECORDED_REQUEST_MISMATCH, case_id)
    try:
        supplied = strict_json(messages[-1][1])
        supplied_context = supplied["context"]
    except (ValueError, RecursionError, KeyError, TypeError, IndexError) as error:
        raise RequestRefused(Reason.RECORDED_CONTEXT_MISMATCH, case_id) from error
    if supplied_context != [{"id": row["source_id"], "text": row["text"]} for row in context]:
        raise RequestRefused(Reason.RECORDED_CONTEXT_MISMATCH, case_id)
    binding = {
        "case_id": case_id,
        "request_sha256": request_sha256,
        "messages": messages,
        "schema": request["schema"],
        "corpus_identity": _event(events, "request_accepted")["identity"],
        "selected_context": context,
    }
    if not isinstance(content, str):
        raise RequestRefused(Reason.RECORDED_REQUEST_MISMATCH, f"{case_id}: content")
    provider_events = None
    if "provider" in metadata:
        provider = metadata["provider"]
        events = provider.get("events") if isinstance(provider, dict) else None
        if (
            not isinstance(events, list)
            or not all(isinstance(text, str) and text for text in events)
            or "".join(events) != content
        ):
            raise RequestRefused(Reason.RECORDED_REQUEST_MISMATCH, f"{case_id}: provider events")
        provider_events = tuple(events)
    return BoundCase(
        case_id=case_id,
        binding=binding,
        binding_sha256=digest(binding),
        request_sha256=request_sha256,
        content=content,
        provider_events=provider_events,
    )


class Recording:
    """A verified recording: every allowlisted case is bound at load time."""

    def __init__(
        self,
        cases: Mapping[str, BoundCase],
        sha256: str,
        entries: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self._cases = dict(cases)
        self._entries = dict(entries or {})
        self.sha256 = sha256

    @classmethod
    def from_bytes(
        cls,
        raw: bytes,
        *,
        expected_sha256: str = RECORDING_SHA256,
        allowlist: tuple[str, ...] = DEVELOPMENT_CASES,
    ) -> Recording:
        actual = hashlib.sha256(raw).hexdigest()
        if actual != expected_sha256:
            raise RequestRefused(Reason.RECORDING_HASH_MISMATCH, f"sha256 {actual}")
        try:
            responses = strict_json(raw.decode("utf-8"))["responses"]
            # A converted capture may hold only some cases; the others are not served.
            entries = {
                case_id: responses[case_id][0] for case_id in allowlist if case_id in responses
            }
        except (ValueError, RecursionError, KeyError, TypeError, IndexError) as error:
            raise RequestRefused(Reason.RECORDED_REQUEST_MISMATCH, repr(error)) from error
        if not entries:
            raise RequestRefused(Reason.RECORDED_REQUEST_MISMATCH, "no development case recorded")
        cases = {case_id: _bind(case_id, entry) for case_id, entry in entries.items()}
        return cls(cases, actual, entries)

    @property
    def case_ids(self) -> tuple[str, ...]:
        return tuple(self._cases)

    def case(self, case_id: object) -> BoundCase:
        if not isinstance(case_id, str) or case_id not in self._cases:
            raise RequestRefused(
                Reason.DEVELOPMENT_CASE_REQUIRED,
                f"unknown case {repr(case_id)[:80]}; known: {', '.join(self._cases)}",
            )
        return self._cases[case_id]

    def bind_request(self, case_id: object, supplied: object) -> BoundCase:
        """A request for ``case_id`` carrying ``supplied``: the case first (the allowlist:
        ``development_case_required``), then the binding, which must equal that case's
        (``request_binding_mismatch``, whatever it names: a ``case_id`` in it that is not
        the request's, on the allowlist or not, is a binding that differs)."""
        case = self.case(case_id)
        if not isinstance(supplied, dict) or digest(supplied) != case.binding_sha256:
            raise RequestRefused(Reason.REQUEST_BINDING_MISMATCH, "not the case's binding")
        return case

    def raw_entry(self, case_id: str) -> Mapping[str, Any]:
        """The verified recording entry of a development case, as stored."""
        self.case(case_id)
        return self._entries[case_id]

    def checked_binding(self, binding: object) -> BoundCase:
        """The lab's ``checked_binding``: a supplied binding must equal the recording's."""
        if not isinstance(binding, dict):
            raise RequestRefused(Reason.REQUEST_BINDING_MISMATCH, "binding is not an object")
        try:
            case_id = binding["case_id"]
        except KeyError as error:
            raise RequestRefused(
                Reason.REQUEST_BINDING_MISMATCH, "binding has no case_id"
            ) from error
        bound = self.case(case_id)
        if digest(binding) != bound.binding_sha256:
            raise RequestRefused(Reason.REQUEST_BINDING_MISMATCH, str(case_id))
        return bound

    def foreign_binding_sha256(self, case_id: str) -> str:
        """Another development case's binding hash (for the foreign-binding fault)."""
        ids = self.case_ids
        other = self._cases[ids[(ids.index(case_id) + 1) % len(ids)]].binding_sha256
        if other == self._cases[case_id].binding_sha256:  # a one-case recording
            return digest({"foreign_to": other})
        return other
