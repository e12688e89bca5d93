"""The hashed recording as a source: development cases only, faults when allowed."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from producer.sources import Stall
from shared.faults import TRANSPORT_FAULTS, Ending, Transmission, transmit
from shared.frames import Frame
from shared.pb import replywire_pb2 as pb
from shared.recording import Recording
from shared.requests import CheckedRequest, parse_binding


class RecordingPlan:
    def __init__(self, transmission: Transmission, checked: CheckedRequest) -> None:
        self.transmission = transmission
        self.abort_details: str | None = None
        fault = checked.fault.kind if checked.fault else None
        # Transport faults leave the frames as they are: the log holds the whole reply,
        # and the fault applies to the first delivery only. Frame faults are not logged.
        self.reply_frames: tuple[Frame, ...] | None = (
            transmission.frames if fault is None or fault in TRANSPORT_FAULTS else None
        )
        self.description: dict[str, Any] = {
            "wire": checked.wire.value,
            "chunks": checked.plan.describe(),
            "fault": checked.fault.kind.value if checked.fault else None,
            "planned_chunks": len(transmission.chunks),
        }

    async def chunks(self) -> AsyncGenerator[bytes | Stall, None]:
        stall = self.transmission.stall
        for index, data in enumerate(self.transmission.chunks):
            yield data
            if stall is not None and index + 1 == stall.after_chunks:
                yield Stall(stall.milliseconds)
        if self.transmission.ending is Ending.TRANSPORT_ERROR:
            self.abort_details = "controlled_transport_abort"

    def live_frames(self) -> AsyncIterator[Frame] | None:
        return None  # known in advance: reply_frames

    async def close(self, outcome: str) -> None:
        return None


class RecordingSource:
    name = "recording"
    regenerates = True

    def __init__(self, recording: Recording) -> None:
        self.recording = recording

    async def prepare(
        self, request: pb.OpenRequest, checked: CheckedRequest, *, identity: str
    ) -> RecordingPlan:
        del identity  # a recorded reply costs nothing
        case = self.recording.bind_request(checked.case_id, parse_binding(request.binding_json))
        transmission = transmit(
            case,
            wire=checked.wire,
            plan=checked.plan,
            fault=checked.fault,
            foreign_binding_sha256=self.recording.foreign_binding_sha256(case.case_id),
        )
        return RecordingPlan(transmission, checked)

    async def aclose(self) -> None:
        return None
