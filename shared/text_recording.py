"""The text recording (``fixtures/text-recording.json``): one recorded text reply per
development case, its SHA-256 pinned as the grounded recording's is.

A recorded text case is asked with a text binding (docs/protocol.md#text-binding) whose
``case_id`` is the case's own name and whose messages are the recorded ones; its reply is
the recorded text, cut into deltas of six code points as the development text source
cuts its own (``shared.texts``). Read and checked as ``shared.pinned_cases`` says.
"""

from __future__ import annotations

from typing import Any, Final

from replywire.shared.pinned_cases import PinnedCases
from replywire.shared.recording import BoundCase
from replywire.shared.texts import are_messages, text_binding, text_case

TEXT_RECORDING_SHA256: Final = "563c3895d4b53bef83ba3bd955848969631467199933bba1b95e449522c21e5b"
FORMAT: Final = "replywire-text-recording/1"


class TextRecording(PinnedCases):
    """The recorded text cases, verified: the file's pinned hash, then its shape."""

    FORMAT = FORMAT
    SHA256 = TEXT_RECORDING_SHA256
    WHAT = "text"

    @staticmethod
    def case_of(case_id: str, entry: Any) -> BoundCase:
        return _case(case_id, entry["messages"], entry["text"])


def _case(case_id: str, messages: object, text: object) -> BoundCase:
    if not are_messages(messages) or not isinstance(text, str):
        raise ValueError(f"case {case_id}: messages and a text")
    return text_case(text_binding(messages, case_id), text)
