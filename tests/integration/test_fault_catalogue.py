"""The fault catalogue's transport faults over real gRPC on loopback: the consumer's own client
against the producer's own server, in this process.

``transport-abort`` and ``abort-after-done`` break a stream's first delivery only: with the
consumer's default resume (``--resume-attempts``, 3) it reconnects once and completes; with
``--resume-attempts 0`` it ends as the catalogue says without resume. Both outcomes are read
from the catalogue (``RESUMED_OUTCOMES``, ``EXPECTED_OUTCOMES``), whose table the docs show.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from replywire.consumer.client import stream_reply
from replywire.consumer.options import DEFAULT_RESUME_ATTEMPTS, StreamOptions
from replywire.producer.edge.server import start_server
from replywire.producer.settings import ServerSettings
from replywire.shared.faults import (
    EXPECTED_OUTCOMES,
    RESUMED_OUTCOMES,
    RESUMED_RECONNECTS,
    Fault,
    FaultKind,
)
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan

pytestmark = pytest.mark.timeout(120)


def test_the_resumed_faults_are_the_transport_faults_that_break_the_call() -> None:
    assert set(RESUMED_OUTCOMES) == {FaultKind.TRANSPORT_ABORT, FaultKind.ABORT_AFTER_DONE}


async def run_all(
    recording: Recording, kind: FaultKind, wire: WireFormat, attempts: int
) -> list[tuple[str, dict[str, Any]]]:
    server, port, _ = await start_server(
        recording, ServerSettings(host="127.0.0.1", port=0, allow_faults=True)
    )
    options = StreamOptions(
        target=f"127.0.0.1:{port}",
        deadline_s=30,
        idle_timeout_s=10,
        resume_attempts=attempts,
        resume_backoff_s=0.01,
        resume_backoff_max_s=0.05,
    )
    results = []
    try:
        for case_id in recording.case_ids:
            request = ReplyRequest.for_case(
                recording,
                case_id,
                wire=wire,
                plan=ChunkPlan.parse("1,2,7,3,11"),
                fault=Fault(kind=kind),
                stream_id=f"{kind.value}-{wire.value}-{attempts}-{case_id}",
            )
            results.append((case_id, (await stream_reply(request, options)).to_dict()))
    finally:
        await server.stop(0)
    return results


@pytest.mark.parametrize("wire", list(WireFormat), ids=str)
@pytest.mark.parametrize("kind", [FaultKind.TRANSPORT_ABORT, FaultKind.ABORT_AFTER_DONE], ids=str)
def test_with_the_default_resume_a_transport_fault_completes_after_one_reconnect(
    recording: Recording, kind: FaultKind, wire: WireFormat
) -> None:
    expected = RESUMED_OUTCOMES[kind]
    for case_id, result in asyncio.run(run_all(recording, kind, wire, DEFAULT_RESUME_ATTEMPTS)):
        assert (result["status"], result["reason"]) == (expected.status, expected.reason), case_id
        assert result["stats"]["reconnects"] == RESUMED_RECONNECTS
        assert result["accepted_answer"] is not None
        assert result["provisional_content"] == recording.case(case_id).content


@pytest.mark.parametrize("wire", list(WireFormat), ids=str)
@pytest.mark.parametrize("kind", [FaultKind.TRANSPORT_ABORT, FaultKind.ABORT_AFTER_DONE], ids=str)
def test_without_resume_a_transport_fault_is_the_catalogues_error(
    recording: Recording, kind: FaultKind, wire: WireFormat
) -> None:
    expected = EXPECTED_OUTCOMES[kind][wire]
    for case_id, result in asyncio.run(run_all(recording, kind, wire, 0)):
        assert (result["status"], result["reason"]) == (expected.status, expected.reason), case_id
        assert result["stats"]["reconnects"] == 0
        assert result["accepted_answer"] is None
        assert result["transport"]["grpc_details"] == "controlled_transport_abort"
