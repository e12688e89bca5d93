"""Producer-side framing and the consumer core in one process (the lab's ``consume``)."""

from __future__ import annotations

from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.errors import ProtocolFailure
from replywire.shared.faults import Ending, Transmission, transmit
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest
from replywire.shared.result import StreamResult
from replywire.shared.trace_logger import TraceLogger


def consume(consumer: ReplyConsumer, transmission: Transmission) -> StreamResult:
    """Feed every chunk, stop at the first refusal, then end the input as the producer did."""
    for chunk in transmission.chunks:
        try:
            consumer.receive_data(chunk)
        except ProtocolFailure:
            break
    if transmission.ending is Ending.TRANSPORT_ERROR:
        return consumer.transport_error({"kind": "controlled_transport_abort"})
    return consumer.end_of_stream()


def replay(
    recording: Recording,
    request: ReplyRequest,
    *,
    logger: TraceLogger | None = None,
) -> StreamResult:
    """Produce the recorded transmission of ``request``'s case and consume it.

    Raises ``RequestRefused`` when the recording has no such case."""
    transmission = transmit(
        recording.case(request.case_id),
        wire=request.wire,
        plan=request.plan,
        fault=request.fault,
        foreign_binding_sha256=recording.foreign_binding_sha256(request.case_id),
    )
    return consume(request.consumer(logger), transmission)
