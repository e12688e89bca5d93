"""The text recording (``fixtures/text-recording.json``): one recorded text reply per
development case, its SHA-256 pinned as the grounded recording's is.

A recorded text case is asked with a text binding (docs/protocol.md#text-binding) whose
``case_id`` is the case's own name and whose messages are the recorded ones; its reply is
the recorded text, cut into deltas of six code points as the development text source
cuts its own (``shared.texts``). Pure: bytes in, verified cases out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Final

from shared.digest import digest, strict_json
from shared.errors import RequestRefused
from shared.reasons import Reason
from shared.recording import BoundCase
from shared.texts import are_messages, text_binding, text_case

TEXT_RECORDING_SHA256: Final = "563c3895d4b53bef83ba3bd955848969631467199933bba1b95e449522c21e5b"
FORMAT: Final = "replywire-text-recording/1"


class TextRecording:
    """The recorded text cases, verified: the file's pinned hash, then its shape."""

    def __init__(self, cases: Mapping[str, BoundCase], sha256: str) -> None:
        self._cases = dict(cases)
        self.sha256 = sha256

    @classmethod
    def from_bytes(
        cls, raw: bytes, *, expected_sha256: str = TEXT_RECORDING_SHA256
    ) -> TextRecording:
        actual = hashlib.sha256(raw).hexdigest()
        if actual != expected_sha256:
            raise RequestRefused(Reason.RECORDING_HASH_MISMATCH, f"sha256 {actual}")
        try:
            document = strict_json(raw.decode("utf-8"))
            if document["format"] != FORMAT:
                raise ValueError(f"format {document['format']!r}")
            cases = {
                case_id: _case(case_id, entry["messages"], entry["text"])
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
            raise RequestRefused(Reason.REQUEST_BINDING_MISMATCH, "not the recorded text binding")
        return case


def _case(case_id: str, messages: object, text: object) -> BoundCase:
    if not are_messages(messages) or not isinstance(text, str):
        raise ValueError(f"case {case_id}: messages and a text")
    return text_case(text_binding(messages, case_id), text)
