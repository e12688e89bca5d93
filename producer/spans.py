"""The producer's spans, when tracing is on (``runtime/tracing.py``).

``replywire.serve``: one per delivery (an ``Open``), a child of the consumer's span when
its ``traceparent`` came with the call (a malformed or oversized one is ignored with a
``trace_context_ignored`` record: the span starts a trace of its own). A resume is a
new span in the same trace, linked to the stream's first one (served here, or kept with
the reply by a shared log: ``Generations.attach``). A ``Cancel`` relayed from another
replica is ``replywire.cancel_relayed`` where it stops the generation. Attributes:
the RPC (OpenTelemetry's semantic conventions), the stream (id, case, caller,
resume_after), and at the end its final state, reason, chunks and bytes sent; each
state transition is an event (``producer/states.py``). Status: OK for a completed
stream, else an error whose description is the reason.

The reply log's generation (``replywire.generation``) and the provider call
(``gemini.stream_generate_content``, under the generation) have spans of their own,
made where they run (``producer/generation.py``; the call's begun in
``producer/sources/gemini/source.py`` and ended in ``producer/sources/gemini/call_ledger.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import grpc
import structlog

from replywire.producer.replylog.interface import ReplyKey
from replywire.producer.states import ProducerStream, StreamState

if TYPE_CHECKING:  # OpenTelemetry is imported only when tracing is on
    from opentelemetry.trace import Link, Span

    from replywire.runtime.otel import Tracing

SPAN_NAME: Final = "replywire.serve"
CANCEL_SPAN_NAME: Final = "replywire.cancel"
RELAYED_CANCEL_SPAN_NAME: Final = "replywire.cancel_relayed"
GENERATION_SPAN_NAME: Final = "replywire.generation"
RPC_SERVICE: Final = "replywire.v1.ReplyStream"


def rpc_attributes(method: str) -> dict[str, Any]:
    """The RPC conventions' attributes, the current ones (``rpc.system.name``, the
    fully-qualified ``rpc.method``) and the earlier ones many back ends still read."""
    return {
        "rpc.system.name": "grpc",
        "rpc.system": "grpc",
        "rpc.service": RPC_SERVICE,
        "rpc.method": f"{RPC_SERVICE}/{method}",
    }


def cancel_span(tracing: Tracing, context: grpc.aio.ServicerContext[Any, Any]) -> Span:
    """A ``Cancel``'s span, in the trace of the stream it stops (the consumer sends the
    stream's context with it), its ids in the ``stream_cancel_requested`` record."""
    from opentelemetry.trace import SpanKind  # noqa: PLC0415 - tracing is on

    metadata: Any = context.invocation_metadata() or ()
    parent, _ = tracing.context_from_metadata(metadata)
    span = tracing.start(
        CANCEL_SPAN_NAME, kind=SpanKind.SERVER, parent=parent, attributes=rpc_attributes("Cancel")
    )
    structlog.contextvars.bind_contextvars(**tracing.ids(span))
    return span


def relayed_cancel_span(tracing: Tracing, traceparent: str | None, stream_id: str) -> Span:
    """The stop of a generation here by a ``Cancel`` another replica relayed through the
    shared reply log: an asynchronous message, so, as OpenTelemetry's messaging
    conventions have a message's ``process`` span, a ``CONSUMER`` span whose parent is
    the relaying replica's ``Cancel`` span (the message's creation context, its
    ``traceparent`` carried in the relay) and which links to it as well. A missing one
    starts a trace of its own; a malformed or oversized one too, with a
    ``trace_context_ignored`` record (validated as an ``Open``'s is)."""
    from opentelemetry.trace import Link, SpanKind, get_current_span  # noqa: PLC0415

    parent, ignored = tracing.context_from(traceparent, None)
    if ignored is not None:
        structlog.get_logger().warning("trace_context_ignored", why=ignored, relayed=True)
    links: tuple[Link, ...] = ()
    if parent is not None:
        creation = get_current_span(parent).get_span_context()
        links = (Link(creation, {"replywire.link": "relayed_cancel"}),)
    return tracing.start(
        RELAYED_CANCEL_SPAN_NAME,
        kind=SpanKind.CONSUMER,
        parent=parent,
        attributes={
            "messaging.operation.type": "process",
            "messaging.operation.name": "cancel",
            "replywire.stream_id": stream_id,
        },
        links=links,
    )


class ServeSpan:
    """A delivery's span: begun when the stream is known, current in its task (its
    children's parent, its ids in its records), ended with the stream's final state."""

    def __init__(
        self,
        tracing: Tracing,
        context: grpc.aio.ServicerContext[Any, Any],
        caller: str,
        *,
        stream_id: str,
        case_id: str,
        resume_after: int,
    ) -> None:
        """Begun before the stream's first record (its ids are in every one of them), from
        the ids the edge read off the request's envelope."""
        from opentelemetry.trace import SpanKind  # noqa: PLC0415 - tracing is on

        self.tracing = tracing
        metadata: Any = context.invocation_metadata() or ()
        parent, ignored = tracing.context_from_metadata(metadata)
        key = ReplyKey(caller, stream_id) if stream_id else None
        link = tracing.link_to_first(key) if key is not None and resume_after else None
        self.span = tracing.start(
            SPAN_NAME,
            kind=SpanKind.SERVER,
            parent=parent,
            attributes={
                **rpc_attributes("Open"),
                "replywire.stream_id": stream_id,
                "replywire.case_id": case_id,
                "replywire.caller": caller,
                "replywire.resume_after": resume_after,
            },
            links=() if link is None else (link,),
        )
        if key is not None and link is None:
            tracing.remember_first(key, self.span)
        self._ids = tracing.bind_ids(self.span)
        self._current = tracing.current(self.span)
        if ignored is not None:
            structlog.get_logger().warning("trace_context_ignored", why=ignored)

    def end(self, stream: ProducerStream) -> None:
        """The stream's final state on the span, and the span ended."""
        state, reason = stream.state, stream.reason
        completed = state is StreamState.COMPLETED
        attributes: dict[str, Any] = {
            "replywire.status": state.value,
            "replywire.frames": stream.chunks_sent,
            "replywire.bytes": stream.bytes_sent,
        }
        if reason:
            attributes["replywire.reason"] = reason
        if not completed:
            attributes["error.type"] = reason or state.value
        self.tracing.end(
            self.span, error=None if completed else (reason or state.value), attributes=attributes
        )
        self.tracing.not_current(self._current)
        self.tracing.unbind_ids(self._ids)


class GenerationSpan:
    """A reply's generation (``replywire.generation``): begun under the delivery that
    started it, current in the generation's own task (the provider call's parent, its ids
    in the task's records), ended with the generation's outcome."""

    def __init__(self, tracing: Tracing, stream_id: str) -> None:
        from opentelemetry.trace import SpanKind  # noqa: PLC0415 - tracing is on

        self.tracing = tracing
        self.span = tracing.start(
            GENERATION_SPAN_NAME,
            kind=SpanKind.INTERNAL,
            parent=None,  # the current context: the delivery's span
            attributes={"replywire.stream_id": stream_id},
        )

    def make_current(self) -> None:
        """The span current for the rest of the calling task (the generation's)."""
        self.tracing.current(self.span)
        self.tracing.bind_ids(self.span)

    def end(self, outcome: str, frames: int) -> None:
        completed = outcome == "completed"
        attributes: dict[str, Any] = {"replywire.outcome": outcome, "replywire.frames": frames}
        if not completed:
            attributes["error.type"] = outcome
        self.tracing.end(self.span, error=None if completed else outcome, attributes=attributes)
