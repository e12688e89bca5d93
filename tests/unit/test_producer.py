"""The producer's request without a connection: every wire and every fault round-trips
through an ``OpenRequest``; the per-stream state table."""

from __future__ import annotations

import pytest

from replywire.producer.states import (
    FINAL_STATES,
    OPEN_STATES,
    TRANSITIONS,
    StreamInput,
    StreamState,
)
from replywire.shared.faults import Fault, FaultKind
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest, check_request
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("wire", list(WireFormat), ids=str)
def test_every_wire_round_trips_through_the_request(recording: Recording, wire: WireFormat) -> None:
    case = recording.case("replace-file")
    request = ReplyRequest(
        case_id=case.case_id,
        binding=case.binding,
        wire=wire,
        plan=ChunkPlan.parse("frame"),
        fault=None,
        stream_id="x",
    ).open_request()
    assert check_request(request, allow_faults=False).wire is wire
    assert (
        request.wire_format
        == {
            WireFormat.LENGTH_PREFIXED: pb.LENGTH_PREFIXED,
            WireFormat.NDJSON: pb.NDJSON,
            WireFormat.NDJSON_LAB: pb.NDJSON_LAB,
        }[wire]
    )
    assert pb.NDJSON_LAB == 3  # field numbers are stable: only added


def test_every_fault_round_trips_through_the_request(recording: Recording) -> None:
    case = recording.case("replace-file")
    for kind in FaultKind:
        sent = Fault(kind=kind, target_frame=4, byte_count=2, stall_ms=10)
        request = ReplyRequest(
            case_id=case.case_id,
            binding=case.binding,
            wire=WireFormat.NDJSON,
            plan=ChunkPlan.parse("1,2"),
            fault=sent,
            stream_id="x",
            chunk_interval_ms=5,
        ).open_request()
        checked = check_request(request, allow_faults=True)
        assert checked.fault == sent
        assert checked.wire is WireFormat.NDJSON
        assert checked.plan == ChunkPlan.parse("1,2")
        assert checked.interval_s == 0.005


def test_producer_state_table() -> None:
    assert set(StreamState) == OPEN_STATES | FINAL_STATES
    for source, _ in TRANSITIONS:
        assert source in OPEN_STATES
    for state in OPEN_STATES:
        assert (
            TRANSITIONS[state, StreamInput.CONSUMER_CANCELLED] is StreamState.CANCELLED_BY_CONSUMER
        )
        assert TRANSITIONS[state, StreamInput.FAIL] is StreamState.FAILED
        assert TRANSITIONS[state, StreamInput.SHUTDOWN] is StreamState.SHUTDOWN
