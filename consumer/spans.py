"""A consumer stream's span (``replywire.consume``), when tracing is on.

One span per stream, a child of the context the consumer was handed (``--traceparent``)
or the root of a new trace; its ``traceparent`` goes with every call of the stream (the
Open, each resume, a Cancel), so the producer's spans are its children. Its ids are in
every record of the stream. Attributes: the RPC (OpenTelemetry's semantic conventions),
the stream (id, case, wire), and at the end the verdict (status, reason, frames, bytes,
reconnects); each attempt's resume is an event. Status: OK for an accepted reply
(``complete``), else an error whose description is the reason.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Final, cast

import structlog

from replywire.consumer.session import StreamSession
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.result import StreamResult
from replywire.shared.status import Status

if TYPE_CHECKING:  # OpenTelemetry is imported only when tracing is on
    from replywire.runtime.otel import Tracing

SPAN_NAME: Final = "replywire.consume"
RPC_SERVICE: Final = "replywire.v1.ReplyStream"
#: The RPC conventions' attributes, both the current (``rpc.system.name``, the
#: fully-qualified ``rpc.method``) and the earlier ones many back ends still read.
RPC_ATTRIBUTES: Final = {
    "rpc.system.name": "grpc",
    "rpc.system": "grpc",
    "rpc.service": RPC_SERVICE,
    "rpc.method": f"{RPC_SERVICE}/Open",
}


def server_address(target: str) -> dict[str, Any]:
    """``server.address`` (and ``server.port``) of a gRPC target's text."""
    text = target.removeprefix("dns:///").removeprefix("ipv4:").removeprefix("ipv6:")
    if text.startswith("unix"):
        return {"server.address": text.split(":", 1)[-1]}
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return {"server.address": text}
    return {"server.address": host.strip("[]"), "server.port": int(port)}


class ConsumeSpan:
    """A stream's span: begun before the stream's core (its ids in every record of the
    stream, its context the session's), ended with the verdict, whatever ends the stream."""

    def __init__(
        self, tracing: Tracing, request: pb.OpenRequest, target: str, *, wire: str
    ) -> None:
        from opentelemetry.trace import SpanKind  # noqa: PLC0415 - tracing is on

        self.tracing = tracing
        self.span = tracing.start(
            SPAN_NAME,
            kind=SpanKind.CLIENT,
            parent=tracing.parent,
            attributes={
                **RPC_ATTRIBUTES,
                **server_address(target),
                "replywire.stream_id": request.stream_id,
                "replywire.case_id": request.case_id,
                "replywire.wire": wire,
            },
        )
        self._tokens = tracing.bind_ids(self.span)

    def events_of(
        self, log: structlog.typing.FilteringBoundLogger
    ) -> structlog.typing.FilteringBoundLogger:
        """``log``, with each ``state_changed`` record also an event of the span."""
        return cast(structlog.typing.FilteringBoundLogger, TransitionEvents(log, self.span))

    async def run(self, session: StreamSession, interrupted: asyncio.Event | None) -> StreamResult:
        span = self.span
        session.trace_metadata = self.tracing.metadata(span)
        session.on_event = lambda name, **fields: span.add_event(name, fields)
        result: StreamResult | None = None
        try:
            result = await session.run(interrupted)
            return result
        finally:
            self.tracing.end(span, **ended(result))
            self.tracing.unbind_ids(self._tokens)


class TransitionEvents:
    """A stream's logger whose ``state_changed`` records are also events of its span
    (named for the state reached, with the component, the input and the state left).
    Anything else is the logger's own: records go on as they would."""

    def __init__(self, inner: Any, span: Any, component: str | None = None) -> None:
        self._inner = inner
        self._span = span
        self._component = component

    def info(self, event: str, *args: Any, **fields: Any) -> Any:
        if event == "state_changed":
            attributes = {
                key: value
                for key, value in (
                    ("replywire.component", self._component),
                    ("replywire.from_state", fields.get("from_state")),
                    ("replywire.input", fields.get("input")),
                    ("replywire.reason", fields.get("reason")),
                )
                if isinstance(value, str)
            }
            self._span.add_event(str(fields.get("to_state")), attributes)
        return self._inner.info(event, *args, **fields)

    def bind(self, **values: Any) -> TransitionEvents:
        component = values.get("component", self._component)
        return TransitionEvents(self._inner.bind(**values), self._span, component)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def ended(result: StreamResult | None) -> dict[str, Any]:
    """The span's outcome: OK for an accepted reply, else the reason as the error."""
    if result is None:  # the stream's task was cancelled, or failed, under the span
        return {"error": "consumer_cancelled", "attributes": {"replywire.status": "cancelled"}}
    stats = result.stats
    transport = result.transport or {}
    attributes: dict[str, Any] = {
        "replywire.status": result.status.value,
        "replywire.frames": stats.application_frames,
        "replywire.bytes": stats.bytes_received,
        "replywire.reconnects": stats.reconnects,
        "rpc.response.status_code": str(transport.get("grpc_code") or "OK"),
    }
    if result.reason:
        attributes["replywire.reason"] = result.reason
    if "provider-http-status" in transport:
        attributes["replywire.provider_http_status"] = str(transport["provider-http-status"])
    accepted = result.status is Status.COMPLETE
    if not accepted:
        attributes["error.type"] = result.reason or result.status.value
    return {
        "error": None if accepted else (result.reason or result.status.value),
        "attributes": attributes,
    }
