"""Producer-side framing and the consumer core in one process (the lab's ``consume``)."""

from __future__ import annotations

import structlog

from shared.errors import ProtocolFailure
from shared.faults import Ending, Fault, Transmission, transmit
from shared.machine import Limits, ReplyConsumer
from shared.recording import Recording
from shared.result import StreamResult
from shared.wire import WireFormat
from shared.wire.chunking import ChunkPlan


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
    case_id: str,
    *,
    wire: WireFormat = WireFormat.LENGTH_PREFIXED,
    plan: ChunkPlan | None = None,
    fault: Fault | None = None,
    limits: Limits | None = None,
    ignore_duplicates: bool = False,
    logger: structlog.typing.FilteringBoundLogger | None = None,
) -> StreamResult:
    """Bind ``case_id``, produce its transmission and consume it. Raises ``RequestRefused``."""
    case = recording.case(case_id)
    transmission = transmit(
        case,
        wire=wire,
        plan=plan or ChunkPlan.parse("frame"),
        fault=fault,
        foreign_binding_sha256=recording.foreign_binding_sha256(case_id),
    )
    consumer = ReplyConsumer(
        case.binding,
        wire=wire,
        limits=limits,
        ignore_duplicates=ignore_duplicates,
        logger=logger,
    )
    return consume(consumer, transmission)
