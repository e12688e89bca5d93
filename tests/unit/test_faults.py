"""The fault catalogue: each fault's documented outcome, in both wires and several chunkings."""

from __future__ import annotations

import pytest

from replywire.shared.errors import RequestRefused
from replywire.shared.faults import (
    EXPECTED_OUTCOMES,
    FAULT_DESCRIPTIONS,
    TIMING_FAULTS,
    Ending,
    Fault,
    FaultKind,
    target_index,
    transmit,
    truncate_tail,
)
from replywire.shared.frames import FrameKind, derive_frames
from replywire.shared.reasons import Reason
from replywire.shared.recording import Recording
from replywire.shared.replay import replay
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan

PLANS = ["frame", "whole", "1", "3", "1,2,7,3,11", "4096"]


def test_every_fault_has_a_documented_outcome_and_description() -> None:
    assert set(EXPECTED_OUTCOMES) == set(FaultKind)
    assert set(FAULT_DESCRIPTIONS) == set(FaultKind)
    for kind, outcomes in EXPECTED_OUTCOMES.items():
        assert set(outcomes) == set(WireFormat)
        if kind not in TIMING_FAULTS:
            assert all(outcome.status != "complete" for outcome in outcomes.values())


REFUSING_FAULTS = [kind for kind in FaultKind if kind not in TIMING_FAULTS]


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("wire", list(WireFormat))
@pytest.mark.parametrize("kind", REFUSING_FAULTS)
def test_fault_outcome(recording: Recording, kind: FaultKind, wire: WireFormat, plan: str) -> None:
    for case_id in recording.case_ids:
        result = replay(
            recording,
            ReplyRequest.for_case(
                recording, case_id, wire=wire, plan=ChunkPlan.parse(plan), fault=Fault(kind=kind)
            ),
        ).to_dict()
        expected = EXPECTED_OUTCOMES[kind][wire]
        assert (result["status"], result["reason"]) == (expected.status, expected.reason)
        assert result["accepted_answer"] is None
        assert result["citations"] == []
        assert not any(event["kind"] == "validated_answer" for event in result["events"])
        # Partial content is kept, and it is a prefix of the saved reply.
        content = recording.case(case_id).content
        assert content.startswith(result["provisional_content"])


@pytest.mark.parametrize("wire", list(WireFormat))
def test_repeat_under_the_duplicate_policy_completes(
    recording: Recording, wire: WireFormat
) -> None:
    result = replay(
        recording,
        ReplyRequest.for_case(
            recording,
            "utf8-write",
            wire=wire,
            plan=ChunkPlan.parse("1,2,7,3,11"),
            fault=Fault(kind=FaultKind.REPEAT),
            ignore_duplicates=True,
        ),
    ).to_dict()
    assert result["status"] == "complete"
    assert result["stats"]["application_frames"] == 15
    assert [e for e in result["events"] if e["kind"] == "duplicate_dropped"] == [
        {"kind": "duplicate_dropped", "sequence": 3}
    ]


@pytest.mark.parametrize("kind", [FaultKind.OMIT, FaultKind.CORRUPT, FaultKind.FOREIGN_BINDING])
def test_the_duplicate_policy_repairs_nothing_else(recording: Recording, kind: FaultKind) -> None:
    for wire in WireFormat:
        result = replay(
            recording,
            ReplyRequest.for_case(
                recording, "replace-file", wire=wire, fault=Fault(kind=kind), ignore_duplicates=True
            ),
        ).to_dict()
        assert result["status"] == "invalid"
        assert result["reason"] == EXPECTED_OUTCOMES[kind][wire].reason


def test_target_frame_defaults_to_three_or_the_last_content_frame_and_is_never_moved(
    recording: Recording,
) -> None:
    case = recording.case("replace-file")
    frames = derive_frames(case.binding_sha256, case.content)
    assert target_index(frames, Fault(kind=FaultKind.OMIT)) == 2
    assert target_index(frames, Fault(kind=FaultKind.OMIT, target_frame=7)) == 6
    assert target_index(frames, Fault(kind=FaultKind.OMIT, target_frame=9)) == 8
    with pytest.raises(RequestRefused) as info:
        target_index(frames, Fault(kind=FaultKind.OMIT, target_frame=50))
    assert info.value.reason is Reason.FAULT_PARAMETER_OUT_OF_RANGE
    short = derive_frames(case.binding_sha256, "{}")  # one content frame, then done
    assert target_index(short, Fault(kind=FaultKind.REPEAT)) == 0


def test_omit_targets_the_requested_frame(recording: Recording) -> None:
    result = replay(
        recording,
        ReplyRequest.for_case(
            recording, "replace-file", fault=Fault(kind=FaultKind.OMIT, target_frame=6)
        ),
    ).to_dict()
    assert (result["status"], result["reason"]) == ("invalid", "invalid_sequence")
    assert result["stats"]["application_frames"] == 5


@pytest.mark.parametrize("count", [1, 3, 10])
def test_truncate_tail_drops_exactly_n_bytes(recording: Recording, count: int) -> None:
    case = recording.case("json-result-type")
    for wire in WireFormat:
        whole = transmit(case, wire=wire, plan=ChunkPlan.parse("whole"))
        cut = transmit(
            case,
            wire=wire,
            plan=ChunkPlan.parse("whole"),
            fault=Fault(kind=FaultKind.TRUNCATE_TAIL, byte_count=count),
        )
        assert cut.chunks[0] == whole.chunks[0][:-count]


def test_truncate_tail_keeps_frame_split() -> None:
    assert truncate_tail([b"abc", b"def", b"gh"], 3) == [b"abc", b"de"]
    assert truncate_tail([b"abc"], 5) == []


def test_transport_abort_is_two_frames_then_a_transport_error(recording: Recording) -> None:
    case = recording.case("replace-file")
    transmission = transmit(
        case,
        wire=WireFormat.NDJSON,
        plan=ChunkPlan.parse("1"),
        fault=Fault(kind=FaultKind.TRANSPORT_ABORT),
    )
    assert transmission.ending is Ending.TRANSPORT_ERROR
    assert len(transmission.chunks) == 1
    assert transmission.chunks[0].count(b"\n") == 2


def test_cancel_and_error_halve_the_content(recording: Recording) -> None:
    case = recording.case("replace-file")
    for kind, terminal in (
        (FaultKind.CANCEL, FrameKind.CANCEL),
        (FaultKind.ERROR, FrameKind.ERROR),
    ):
        transmission = transmit(
            case, wire=WireFormat.NDJSON, plan=ChunkPlan.parse("frame"), fault=Fault(kind=kind)
        )
        last = transmission.frames[-1]
        assert last.kind is terminal
        assert last.reason == f"controlled_local_{terminal.value}"
        text = "".join(str(frame.text) for frame in transmission.frames[:-1])
        assert text == case.content[: len(case.content) // 2]


@pytest.mark.parametrize(
    "fault",
    [{"target_frame": 0}, {"target_frame": -1}, {"byte_count": 0}, {"byte_count": 2**21}],
)
def test_invalid_fault_parameters_are_refused(fault: dict[str, int]) -> None:
    with pytest.raises(RequestRefused) as info:
        Fault(kind=FaultKind.OMIT, **fault)
    assert info.value.reason is Reason.INVALID_REQUEST


def test_foreign_binding_needs_another_binding(recording: Recording) -> None:
    with pytest.raises(RequestRefused) as info:
        transmit(
            recording.case("replace-file"),
            wire=WireFormat.NDJSON,
            plan=ChunkPlan.parse("frame"),
            fault=Fault(kind=FaultKind.FOREIGN_BINDING),
        )
    assert info.value.reason is Reason.INVALID_REQUEST


def test_a_stall_changes_nothing_in_one_process_but_marks_where_to_pause(
    recording: Recording,
) -> None:
    case = recording.case("replace-file")
    fault = Fault(kind=FaultKind.STALL, stall_ms=250)
    transmission = transmit(
        case, wire=WireFormat.NDJSON, plan=ChunkPlan.parse("frame"), fault=fault
    )
    assert transmission.stall is not None
    assert (transmission.stall.after_chunks, transmission.stall.milliseconds) == (3, 250)
    pattern = transmit(
        case, wire=WireFormat.NDJSON, plan=ChunkPlan.parse("1,2,7,3,11"), fault=fault
    )
    assert pattern.stall is not None
    sent = sum(len(chunk) for chunk in pattern.chunks[: pattern.stall.after_chunks])
    three_frames = sum(len(chunk) for chunk in transmission.chunks[:3])
    assert sent >= three_frames > sent - len(pattern.chunks[pattern.stall.after_chunks - 1])
    assert (
        replay(recording, ReplyRequest.for_case(recording, "replace-file", fault=fault)).to_dict()[
            "status"
        ]
        == "complete"
    )


def test_abort_after_done_is_not_accepted(recording: Recording) -> None:
    for wire in WireFormat:
        result = replay(
            recording,
            ReplyRequest.for_case(
                recording, "replace-file", wire=wire, fault=Fault(kind=FaultKind.ABORT_AFTER_DONE)
            ),
        ).to_dict()
        assert (result["status"], result["reason"]) == ("error", "transport_io_error")
        assert result["local_terminal"] == "done"
        assert result["accepted_answer"] is None
