"""Every fault's parameters, checked against the reply: every value a fault accepts yields its
documented outcome, and every other is refused (``fault_parameter_out_of_range``) before a
byte is sent.

The ranges, for a reply of C content frames whose done frame is D bytes on the wire:

* ``target_frame`` (omit, repeat, corrupt, foreign-binding, stall): 1..C (unset: 3, or C
  when C < 3). K = C + 1 would omit, repeat, corrupt or re-bind done, or stall after it.
* ``byte_count`` (truncate-tail): 1..D - 1 (unset: 3): the cut ends inside the done frame.
  D or more ends the stream at or before a frame boundary (``missing_terminal``).
* ``stall_ms`` (stall): 1..600000, the request's own bound (``invalid_request`` past it).
* A parameter given to a fault that does not take it is refused too.

Each plan is run through the sans-IO consumer core in this process (``shared.replay``):
every development case, every wire (ndjson-lab too: faults apply there) and chunkings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from replywire.runtime.recording_file import load_recording
from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.errors import RequestRefused
from replywire.shared.faults import (
    DEFAULT_TARGET_FRAME,
    DEFAULT_TRUNCATE_BYTES,
    EXPECTED_OUTCOMES,
    FAULT_PARAMETERS,
    MAX_STALL_MS,
    REPEAT_WITH_DUPLICATE_POLICY,
    Ending,
    Fault,
    FaultKind,
    Transmission,
    transmit,
    truncate_tail,
)
from replywire.shared.frames import FrameKind
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import Reason
from replywire.shared.replay import consume, replay
from replywire.shared.requests import ReplyRequest
from replywire.shared.status import Status
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import LAB_PATTERN, ChunkMode, ChunkPlan, cut

RECORDING: Final = load_recording()
CASE_IDS: Final = RECORDING.case_ids
PARAMETERS: Final = ("target_frame", "byte_count", "stall_ms")


@dataclass(frozen=True)
class Reply:
    """What the ranges are made of, read off the fault-free transmission."""

    content_frames: int
    done_bytes: int
    encoded: tuple[bytes, ...]


def fault_free(case_id: str, wire: WireFormat) -> Reply:
    plain = transmit(RECORDING.case(case_id), wire=wire, plan=ChunkPlan(ChunkMode.FRAME))
    kinds = [frame.kind for frame in plain.frames]
    assert kinds[-1] is FrameKind.DONE and set(kinds[:-1]) == {FrameKind.CONTENT_DELTA}
    return Reply(len(kinds) - 1, len(plain.encoded[-1]), plain.encoded)


def in_range(reply: Reply, name: str, value: int) -> bool:
    if name == "target_frame":
        return 1 <= value <= reply.content_frames
    if name == "byte_count":
        return 1 <= value <= reply.done_bytes - 1
    return 1 <= value <= MAX_STALL_MS


def accepted(fault: Fault, reply: Reply) -> bool:
    given_ = {name: getattr(fault, name) for name in PARAMETERS if getattr(fault, name)}
    return all(
        name in FAULT_PARAMETERS[fault.kind] and in_range(reply, name, value)
        for name, value in given_.items()
    )


PLANS: Final = st.one_of(
    st.sampled_from(["frame", "whole", "1", ",".join(map(str, LAB_PATTERN)), "4096"]).map(
        ChunkPlan.parse
    ),
    st.lists(st.integers(1, 64), min_size=1, max_size=5).map(
        lambda sizes: ChunkPlan(ChunkMode.SIZES, tuple(sizes))
    ),
)


def near(edge: int) -> st.SearchStrategy[int]:
    """Values at and around a range's upper edge, and anywhere below it."""
    return st.one_of(
        st.integers(max(1, edge - 2), edge + 2), st.integers(1, max(1, edge)), st.just(1)
    )


@st.composite
def plans(draw: st.DrawFn) -> tuple[str, WireFormat, ChunkPlan, Fault, bool]:
    case_id = draw(st.sampled_from(CASE_IDS), label="case")
    wire = draw(st.sampled_from(list(WireFormat)), label="wire")
    kind = draw(st.sampled_from(list(FaultKind)), label="fault")
    reply = fault_free(case_id, wire)
    # Mostly the fault's own parameters, sometimes one it does not take.
    names = sorted(FAULT_PARAMETERS[kind])
    if not names or draw(st.integers(0, 4)) == 0:
        names = [draw(st.sampled_from(PARAMETERS))]
    values: dict[str, int | None] = {}
    for name in names:
        if draw(st.booleans()):
            continue  # unset: the default
        if name == "target_frame":
            values[name] = draw(near(reply.content_frames))
        elif name == "byte_count":
            values[name] = draw(near(reply.done_bytes))
        else:
            values[name] = draw(st.sampled_from([1, 250, MAX_STALL_MS]))
    fault = Fault(kind=kind, **values)
    return case_id, wire, draw(PLANS, label="chunks"), fault, draw(st.booleans())


@settings(max_examples=600, deadline=None)
@given(plans())
def test_every_accepted_parameter_yields_the_documented_outcome_and_every_other_is_refused(
    plan: tuple[str, WireFormat, ChunkPlan, Fault, bool],
) -> None:
    case_id, wire, chunks, fault, ignore_duplicates = plan
    reply = fault_free(case_id, wire)
    request = ReplyRequest.for_case(
        RECORDING, case_id, wire=wire, plan=chunks, fault=fault, ignore_duplicates=ignore_duplicates
    )
    try:
        result = replay(RECORDING, request).to_dict()
    except RequestRefused as refused:
        event("refused")
        assert refused.reason is Reason.FAULT_PARAMETER_OUT_OF_RANGE
        assert not accepted(fault, reply), fault
        return
    event("accepted")
    assert accepted(fault, reply), fault
    expected = EXPECTED_OUTCOMES[fault.kind][wire]
    if fault.kind is FaultKind.REPEAT and ignore_duplicates:
        expected = REPEAT_WITH_DUPLICATE_POLICY
    assert (result["status"], result["reason"]) == (expected.status, expected.reason), fault
    if expected.status is not Status.COMPLETE:
        assert result["accepted_answer"] is None
        assert RECORDING.case(case_id).content.startswith(result["provisional_content"])
    if fault.kind is FaultKind.STALL:
        assert_stall_after_frame_k(case_id, wire, chunks, fault, reply)


def assert_stall_after_frame_k(
    case_id: str, wire: WireFormat, chunks: ChunkPlan, fault: Fault, reply: Reply
) -> None:
    """The pause comes after the first chunk that completes content frame K."""
    transmission = transmit(RECORDING.case(case_id), wire=wire, plan=chunks, fault=fault)
    assert transmission.stall is not None
    k = fault.target_frame or min(DEFAULT_TARGET_FRAME, reply.content_frames)
    frame_end = sum(map(len, reply.encoded[:k]))
    after = transmission.stall.after_chunks
    assert sum(map(len, transmission.chunks[:after])) >= frame_end
    assert sum(map(len, transmission.chunks[: after - 1])) < frame_end


# --- the edges, named -------------------------------------------------------------------------


def outcome(case_id: str, wire: WireFormat, fault: Fault) -> tuple[str, str | None]:
    result = replay(RECORDING, ReplyRequest.for_case(RECORDING, case_id, wire=wire, fault=fault))
    return result.status.value, result.reason


def refused_reason(case_id: str, wire: WireFormat, fault: Fault) -> Reason:
    with pytest.raises(RequestRefused) as info:
        outcome(case_id, wire, fault)
    return info.value.reason


FRAME_FAULTS: Final = [
    FaultKind.OMIT,
    FaultKind.REPEAT,
    FaultKind.CORRUPT,
    FaultKind.FOREIGN_BINDING,
    FaultKind.STALL,
]


@pytest.mark.parametrize("wire", list(WireFormat))
@pytest.mark.parametrize("kind", FRAME_FAULTS)
def test_the_last_content_frame_is_the_last_target(kind: FaultKind, wire: WireFormat) -> None:
    for case_id in CASE_IDS:
        last = fault_free(case_id, wire).content_frames
        expected = EXPECTED_OUTCOMES[kind][wire]
        at_edge = outcome(case_id, wire, Fault(kind=kind, target_frame=last))
        assert at_edge == (expected.status.value, expected.reason)
        for past in (last + 1, last + 100):
            reason = refused_reason(case_id, wire, Fault(kind=kind, target_frame=past))
            assert reason is Reason.FAULT_PARAMETER_OUT_OF_RANGE


@pytest.mark.parametrize("wire", list(WireFormat))
def test_truncate_tail_cuts_inside_the_done_frame_or_is_refused(wire: WireFormat) -> None:
    for case_id in CASE_IDS:
        done = fault_free(case_id, wire).done_bytes
        for inside in (1, DEFAULT_TRUNCATE_BYTES, done - 1):
            fault = Fault(kind=FaultKind.TRUNCATE_TAIL, byte_count=inside)
            assert outcome(case_id, wire, fault) == ("invalid", "truncated_frame")
        for past in (done, done + 1, 10 * done):
            fault = Fault(kind=FaultKind.TRUNCATE_TAIL, byte_count=past)
            assert refused_reason(case_id, wire, fault) is Reason.FAULT_PARAMETER_OUT_OF_RANGE


@pytest.mark.parametrize("wire", list(WireFormat))
def test_why_a_cut_of_the_whole_done_frame_is_refused(wire: WireFormat) -> None:
    """Cut unchecked, the done frame's length ends the stream on a frame boundary: the
    consumer sees a clean end without a terminal, not a truncated frame."""
    case = RECORDING.case("replace-file")
    reply = fault_free(case.case_id, wire)
    plain_plan = ChunkPlan(ChunkMode.FRAME)
    plain = transmit(case, wire=wire, plan=plain_plan)
    kept = truncate_tail(list(reply.encoded), reply.done_bytes)
    unchecked = Transmission(plain.frames, tuple(cut(kept, plain_plan)), Ending.CLEAN)
    result = consume(ReplyConsumer(case.binding, wire=wire), unchecked)
    assert (result.status, result.reason) == ("incomplete", "missing_terminal")


@pytest.mark.parametrize(
    ("kind", "parameter"),
    [
        (kind, name)
        for kind in FaultKind
        for name in PARAMETERS
        if name not in FAULT_PARAMETERS[kind]
    ],
)
def test_a_parameter_the_fault_does_not_take_is_refused(kind: FaultKind, parameter: str) -> None:
    fault = Fault(kind=kind, **{parameter: 1})
    reason = refused_reason("replace-file", WireFormat.LENGTH_PREFIXED, fault)
    assert reason is Reason.FAULT_PARAMETER_OUT_OF_RANGE


def test_the_reason_is_a_refusal_with_invalid_argument() -> None:
    info = REASONS[Reason.FAULT_PARAMETER_OUT_OF_RANGE]
    assert (info.status, info.grpc_code) == ("refused", "INVALID_ARGUMENT")


def test_the_defaults_fit_every_case_on_every_wire() -> None:
    for case_id in CASE_IDS:
        for wire in WireFormat:
            reply = fault_free(case_id, wire)
            assert reply.content_frames >= DEFAULT_TARGET_FRAME
            assert reply.done_bytes > DEFAULT_TRUNCATE_BYTES
