"""The lab's published execution record, reproduced value for value.

tests/published/offline-replay.json is block [1] of the published record (the
complete offline replay result). With the lab's own NDJSON wire (``ndjson-lab``,
whose done carries no digest) and the lab's 1,2,7,3,11 fragments, our result
documents must equal it on every lab key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from replywire.shared.faults import Fault, FaultKind
from replywire.shared.recording import RECORDING_SHA256, Recording
from replywire.shared.replay import replay
from replywire.shared.requests import ReplyRequest
from replywire.shared.result import lab_view
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan

HERE = Path(__file__).resolve().parents[1]
PUBLISHED = json.loads((HERE / "published/offline-replay.json").read_text(encoding="utf-8"))
LAB_PLAN = ChunkPlan.parse("1,2,7,3,11")
#: The lab's controlled scenarios and the fault names that reproduce them (all on replace-file).
SCENARIO_FAULTS = {
    "controlled_local_cancel": FaultKind.CANCEL,
    "controlled_local_error": FaultKind.ERROR,
    "controlled_transport_eof_before_terminal": FaultKind.EOF_BEFORE_TERMINAL,
    "controlled_local_transport_io_error": FaultKind.TRANSPORT_ABORT,
}
#: The published summary table of the lab's text.
SUMMARY = {
    "utf8-write": ("complete", "not_in_docs", 0, 15, 450),
    "replace-file": ("complete", "answered", 1, 10, 299),
    "json-result-type": ("complete", "answered", 1, 11, 328),
    "backup-schedule": ("complete", "not_in_docs", 0, 15, 449),
}


def test_expected_values_are_the_published_block() -> None:
    record = json.loads((HERE.parent / "fixtures/published-lab-record.json").read_text("utf-8"))
    assert record[1] == PUBLISHED
    assert PUBLISHED["execution_mode"] == "offline-derived-ndjson-frame-replay"
    assert len(PUBLISHED["development_cases"]) == 4
    assert len(PUBLISHED["controlled_failures"]) == 4


@pytest.mark.parametrize(
    "published", PUBLISHED["development_cases"], ids=lambda case: case["case_id"]
)
def test_development_case_equals_published(recording: Recording, published: dict[str, Any]) -> None:
    result = replay(
        recording,
        ReplyRequest.for_case(
            recording, published["case_id"], wire=WireFormat.NDJSON_LAB, plan=LAB_PLAN
        ),
    ).to_dict()
    assert lab_view(result) == published["result"]
    assert result["integrity"] == "none"
    assert result["request_sha256"] == published["request_sha256"]
    selected = [
        row["source_id"] for row in recording.case(published["case_id"]).binding["selected_context"]
    ]
    assert selected == published["selected_source_ids"]
    status, answer_status, citations, frames, fragments = SUMMARY[published["case_id"]]
    assert result["status"] == status
    assert result["accepted_answer"]["status"] == answer_status
    assert len(result["citations"]) == citations
    assert result["stats"]["application_frames"] == frames
    assert result["stats"]["transport_fragments"] == fragments


@pytest.mark.parametrize(
    "published", PUBLISHED["controlled_failures"], ids=lambda case: case["scenario"]
)
def test_controlled_failure_equals_published(
    recording: Recording, published: dict[str, Any]
) -> None:
    fault = Fault(kind=SCENARIO_FAULTS[published["scenario"]])
    result = replay(
        recording,
        ReplyRequest.for_case(
            recording, "replace-file", wire=WireFormat.NDJSON_LAB, plan=LAB_PLAN, fault=fault
        ),
    ).to_dict()
    assert lab_view(result) == published["result"]
    assert result["accepted_answer"] is None


def test_saved_replies_are_preserved(recording: Recording) -> None:
    for published in PUBLISHED["development_cases"]:
        case = recording.case(published["case_id"])
        assert case.content == published["result"]["provisional_content"]
        assert published["original_complete_content_preserved"] is True


def test_our_recording_is_not_the_original_file() -> None:
    # The original file (and its hash) is not available; we pin our rebuild's hash.
    assert PUBLISHED["original_recording_sha256"].startswith("193d4c3c")
    assert PUBLISHED["original_recording_sha256"] != RECORDING_SHA256


@pytest.mark.parametrize("case_id", list(SUMMARY))
def test_length_prefixed_wire_gives_the_same_answers(recording: Recording, case_id: str) -> None:
    published = next(c for c in PUBLISHED["development_cases"] if c["case_id"] == case_id)
    for plan in ("frame", "whole", "1", "1,2,7,3,11", "64"):
        result = replay(
            recording,
            ReplyRequest.for_case(
                recording, case_id, wire=WireFormat.LENGTH_PREFIXED, plan=ChunkPlan.parse(plan)
            ),
        ).to_dict()
        assert result["status"] == "complete"
        assert result["accepted_answer"] == published["result"]["accepted_answer"]
        assert result["citations"] == published["result"]["citations"]
        assert result["provisional_content"] == published["result"]["provisional_content"]
        assert result["events"] == published["result"]["events"]
        assert (
            result["stats"]["application_frames"]
            == published["result"]["stats"]["application_frames"]
        )
        assert result["wire_format"] == "lp"
