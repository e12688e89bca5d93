"""A recording of reply cases pinned by its SHA-256 (the text and the chat recordings):
the file's hash checked first, then its format, then each case built by the recording's
own rule; the cases then looked up by id and a request's binding compared with the
recorded one. Pure: bytes in, verified cases out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from replywire.shared.digest import digest, strict_json
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason
from replywire.shared.recording import BoundCase


class PinnedCases:
    """The recorded cases, verified: the file's pinned hash, then each case. A recording
    names its ``FORMAT``, its pinned ``SHA256``, what it records (``WHAT``, said in a
    refusal) and how an entry becomes a case (``case_of``)."""

    FORMAT: ClassVar[str]
    SHA256: ClassVar[str]
    WHAT: ClassVar[str]

    def __init__(self, cases: Mapping[str, BoundCase], sha256: str) -> None:
        self._cases = dict(cases)
        self.sha256 = sha256

    @staticmethod
    def case_of(case_id: str, entry: Any) -> BoundCase:
        """One entry of the file as its case (``ValueError``, ``KeyError`` or ``TypeError``
        when it is not what it must be)."""
        raise NotImplementedError

    @classmethod
    def from_bytes(cls, raw: bytes, *, expected_sha256: str | None = None) -> Self:
        actual = hashlib.sha256(raw).hexdigest()
        if actual != (cls.SHA256 if expected_sha256 is None else expected_sha256):
            raise RequestRefused(Reason.RECORDING_HASH_MISMATCH, f"sha256 {actual}")
        try:
            document = strict_json(raw.decode("utf-8"))
            if document["format"] != cls.FORMAT:
                raise ValueError(f"format {document['format']!r}")
            cases = {
                case_id: cls.case_of(case_id, entry) for case_id, entry in document["cases"].items()
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
            raise RequestRefused(
                Reason.REQUEST_BINDING_MISMATCH, f"not the recorded {self.WHAT} binding"
            )
        return case
