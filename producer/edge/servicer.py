"""The ``replywire.v1.ReplyStream`` servicer: ``Open`` and ``Cancel``.

A thin I/O edge: it authenticates, turns an ``OpenRequest`` into a checked request
(``shared.requests``: nothing past here reads the protobuf message), asks where its
frames come from (``producer.delivery_plan.decide``, run by ``DeliverySteps``: a
``Delivery`` from the source's plan or from the reply log), and writes them one at a
time with ``context.write()``. A write waits for HTTP/2 flow control, so a
consumer that stops reading stops the producer and nothing is buffered without bound.

Every stream ends in exactly one final state, whatever ends it (see
``producer.states``), and what it holds (its stream slot, its attachment to a
generation, its plan) is given back exactly once, after that state is logged: a
refusal, the last chunk, a transport fault, a consumer that cancels, refuses the
stream or vanishes (the write fails, or grpc.aio cancels the handler), its connection
cut by ``--max-connection-age-s`` (``connection_aged_out``), an unexpected error
(``internal_error``, detail in the trace only), or the producer's own shutdown
(``producer_shutdown``). Above ``--max-streams`` open streams (or a caller's
``--max-streams-per-identity``) a new one is refused before any work
(``producer.edge.admission``). Every stream updates the producer's Prometheus metrics
(``producer.metrics``) where it updates its counters.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final, NoReturn

import grpc
import structlog
from grpc_health.v1 import health_pb2

from replywire.producer.claims import Generations
from replywire.producer.counters import ProducerCounters
from replywire.producer.delivery import (
    ConsumerGone,
    Delivery,
    FromLog,
    FromPlan,
    Writer,
    close_even_if_cancelled,
)
from replywire.producer.delivery_plan import Record
from replywire.producer.delivery_steps import DeliverySteps
from replywire.producer.edge.admission import Admission
from replywire.producer.edge.connections import ConnectionAges, peer_of
from replywire.producer.edge.health import BoundedHealthServicer
from replywire.producer.edge.rpc import HEALTH_SERVICES, MalformedRequest, metadata_bytes
from replywire.producer.edge.security import ANONYMOUS
from replywire.producer.metrics import ProducerMetrics
from replywire.producer.replylog.interface import ReplyKey, ReplyLog
from replywire.producer.replylog.memory import MemoryReplyLog
from replywire.producer.settings import ServerSettings
from replywire.producer.sources import Source
from replywire.producer.spans import ServeSpan, cancel_span
from replywire.producer.states import ProducerStream, StreamInput, StreamState
from replywire.runtime.tracing import active
from replywire.shared.errors import ReplywireError, RequestRefused, scrubbed_detail
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import Reason
from replywire.shared.requests import CheckedRequest, check_envelope, check_request

#: How long the shutdown path waits for the streams it ended to say so.
SHUTDOWN_ABORT_S: Final = 2.0


class _Holding:
    """What an ``Open`` holds until its final state is logged: its delivery, once made."""

    __slots__ = ("delivery",)

    def __init__(self) -> None:
        self.delivery: Delivery | None = None


class ReplyStreamServicer(pb_grpc.ReplyStreamServicer):
    """One ``Open()`` per stream; every exit path ends the stream's state and gives back
    what it holds once."""

    def __init__(self, source: Source, settings: ServerSettings) -> None:
        self.source = source
        self.counters = ProducerCounters()
        self.metrics = settings.metrics or ProducerMetrics()
        #: Replies by (caller, stream id) (see producer.replylog).
        self.replies: ReplyLog = settings.reply_log or MemoryReplyLog(settings.log_limits)
        #: The replies served from the log and the generations run here.
        self.generations = Generations(self.replies, source, on_ended=self.metrics.generation_ended)
        self.allow_faults = settings.allow_faults
        self.authenticator = settings.exposure.authenticator
        self.max_metadata_bytes = settings.max_metadata_bytes
        self.max_streams = settings.max_streams
        # One identity without tokens: a per-identity bound would be --max-streams again.
        per_identity = settings.max_streams_per_identity if self.authenticator else None
        #: Streams admitted under --max-streams and --max-streams-per-identity (refused
        #: ones are in _active, never here).
        self.admission = Admission(settings.max_streams, per_identity)
        max_connection_age_s = settings.max_connection_age_s
        # grpc-stubs 1.53 predates the asyncio servicer (grpc_health.v1.health.aio).
        self.health: Any = BoundedHealthServicer(
            settings.max_health_watches, on_refused=self.metrics.request_refused
        )
        self.connections = ConnectionAges(
            max_connection_age_s, max_connection_age_s, settings.max_connection_idle_s
        )
        #: Every chunk's write, and the two ways a delivery writes them.
        self.writer = Writer(self.counters, self.metrics, self.generations)
        self._log: structlog.typing.FilteringBoundLogger = structlog.get_logger()
        # Streams in progress, by the task that serves them; the shutdown path ends them.
        self._active: dict[asyncio.Task[Any], ProducerStream] = {}
        self._shutting_down: set[asyncio.Task[Any]] = set()
        # Read when scraped: no lock taken per stream.
        self.metrics.streams_open.set_function(lambda: len(self._active))
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def open_streams(self) -> int:
        return len(self._active)

    async def set_serving(self, serving: bool) -> None:
        """Report every service SERVING or NOT_SERVING on the health service."""
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in HEALTH_SERVICES:
            await self.health.set(name, status)

    async def enter_shutdown(self) -> None:
        """NOT_SERVING for every service, for good: the first thing shutdown does."""
        await self.health.enter_graceful_shutdown()

    def _stream_ended(self, state: StreamState, reason: str) -> None:
        self.counters.stream_ended(state)
        self.metrics.stream_ended(state.value, reason)

    # grpc.aio serves a coroutine handler that writes with ``context.write()``; the
    # generated stubs only know generator handlers. A coroutine sees every way a stream
    # ends in its own frame (a generator closed at its ``yield`` sees none of them).
    async def Open(  # type: ignore[override]  # noqa: N802 - the RPC's name in the .proto
        self,
        request: pb.OpenRequest | MalformedRequest,
        context: grpc.aio.ServicerContext[pb.OpenRequest, pb.Chunk],
    ) -> None:
        structlog.contextvars.clear_contextvars()
        caller = await self._authenticate(context)
        request = await self._check_envelope(request, context, caller)
        structlog.contextvars.bind_contextvars(stream_id=request.stream_id or None)
        peer = peer_of(context)
        log = self._log.bind(case_id=request.case_id, peer=peer, caller=caller)
        connection_seen = self.connections.opened(peer)
        self.counters.streams_opened += 1
        tracing = active()  # the one check: off, no span is made
        span = (
            None
            if tracing is None
            else ServeSpan(
                tracing,
                context,
                caller,
                stream_id=request.stream_id,
                case_id=request.case_id,
                resume_after=request.resume_after,
            )
        )
        stream = ProducerStream(log, caller, on_final=self._stream_ended)
        if span is not None:
            stream.span = span.span  # each transition an event of it
        task = asyncio.current_task()
        assert task is not None
        self._active[task] = stream
        self._idle.clear()
        holding = _Holding()
        try:
            await self._serve(request, context, stream, task, holding)
        except asyncio.CancelledError:
            # grpc.aio cancels the handler when the consumer cancels or its connection drops
            # (also when --max-connection-age-s closes it: ConnectionAges tells which); the
            # shutdown path cancels it after the grace.
            if task not in self._shutting_down:
                self._cut_by_consumer_or_age(stream, connection_seen, context)
                raise
            stream.fire(StreamInput.SHUTDOWN, reason=Reason.PRODUCER_SHUTDOWN, **stream.sent)
            await _abort_unless_gone(context, Reason.PRODUCER_SHUTDOWN)
            raise
        except ConsumerGone as gone:
            why = scrubbed_detail(str(gone))
            self._cut_by_consumer_or_age(stream, connection_seen, context, why=why)
        except grpc.aio.AbortError:
            raise  # a refusal or a transport fault: the stream's final state is logged
        except Exception:
            log.exception("stream_failed")
            stream.fire(StreamInput.FAIL, reason=Reason.INTERNAL_ERROR, **stream.sent)
            await _abort_unless_gone(context, Reason.INTERNAL_ERROR)
        finally:
            self.connections.ended(peer)
            try:
                await self._finish(task, stream, holding.delivery)
            finally:
                if span is not None:
                    span.end(stream)

    async def Cancel(  # noqa: N802 - the RPC's name in the .proto
        self,
        request: pb.CancelRequest | MalformedRequest,
        context: grpc.aio.ServicerContext[pb.CancelRequest, pb.CancelReply],
    ) -> pb.CancelReply:
        """A deliberate stop: the generation of the caller's reply under this stream id is
        stopped at once (its upstream closed, its log ended ``consumer_cancelled``), not
        after the detach grace, here or, through a shared log, on the replica that
        generates it. Authenticated like ``Open``; a caller names only its own replies
        (another identity's reply under the same stream id is not found)."""
        structlog.contextvars.clear_contextvars()
        caller = await self._authenticate(context)
        stream_id = await self._check_cancel(request, context, caller)
        structlog.contextvars.bind_contextvars(stream_id=stream_id or None)
        tracing = active()
        span = None if tracing is None else cancel_span(tracing, context)
        cancelled: bool | None = None
        try:
            traceparent = None
            if tracing is not None and span is not None:
                traceparent = dict(tracing.metadata(span)).get("traceparent")
            key = ReplyKey(caller, stream_id)
            cancelled, relayed = await self.generations.cancel(key, traceparent)
            self._log.info("stream_cancel_requested", peer=peer_of(context), caller=caller,
                           cancelled=cancelled, relayed=relayed)  # fmt: skip
        finally:
            if tracing is not None and span is not None:
                failed = None if cancelled is not None else Reason.INTERNAL_ERROR.value
                tracing.end(span, error=failed, attributes={"replywire.cancelled": bool(cancelled)})
        return pb.CancelReply(cancelled=cancelled)

    async def _check_cancel(
        self,
        request: pb.CancelRequest | MalformedRequest,
        context: grpc.aio.ServicerContext[pb.CancelRequest, pb.CancelReply],
        caller: str,
    ) -> str:
        """The stream id of a well-formed ``CancelRequest`` (short and plain, as ``Open``'s)."""
        try:
            if isinstance(request, MalformedRequest):
                raise RequestRefused(Reason.INVALID_REQUEST, request.why)
            check_envelope(pb.OpenRequest(stream_id=request.stream_id))
        except RequestRefused as refused:
            await self._refuse_malformed(context, caller, refused)
        return request.stream_id

    async def _serve(
        self,
        request: pb.OpenRequest,
        context: grpc.aio.ServicerContext[pb.OpenRequest, pb.Chunk],
        stream: ProducerStream,
        task: asyncio.Task[Any],
        holding: _Holding,
    ) -> None:
        """Prepare, then deliver: the plan's own chunks (a first delivery) or the log's."""
        checked, delivery = await self._prepare(request, context, stream, task)
        holding.delivery = delivery
        match delivery:
            case FromPlan():
                await self.writer.from_plan(checked, context, stream, delivery.plan)
            case FromLog():
                await self.writer.from_log(checked, context, stream, delivery)

    async def _finish(
        self, task: asyncio.Task[Any], stream: ProducerStream, delivery: Delivery | None
    ) -> None:
        """Every exit: a final state (if nothing else gave one), what the stream holds given
        back once, the stream forgotten."""
        if stream.open:  # a BaseException nobody expects (KeyboardInterrupt, SystemExit)
            stream.fire(StreamInput.FAIL, reason=Reason.INTERNAL_ERROR, **stream.sent)
        try:
            if delivery is not None:
                if delivery.logged is not None:
                    delivery.logged.detach()
                if delivery.plan is not None and delivery.plan.needs_close:
                    await close_even_if_cancelled(delivery.plan, stream.state.value)
        finally:
            del self._active[task]
            self.admission.release(task)
            self._shutting_down.discard(task)
            if not self._active:
                self._idle.set()

    async def _authenticate(self, context: grpc.aio.ServicerContext[Any, Any]) -> str:
        """The caller's name from its bearer token, before any work; refuses without one,
        and first a request whose metadata is past ``--max-metadata-bytes``. Nothing of
        the request is logged for a caller that is not known: the peer only."""
        # grpc.aio's Metadata iterates as (key, value) pairs; grpc-stubs disagrees.
        metadata: Any = context.invocation_metadata() or ()
        size = metadata_bytes(metadata)
        if size > self.max_metadata_bytes:
            self.counters.requests_metadata_too_large += 1
            self.metrics.request_refused(Reason.METADATA_TOO_LARGE)
            self._log.warning(
                "request_metadata_too_large",
                peer=peer_of(context),
                metadata_bytes=size,
                max_metadata_bytes=self.max_metadata_bytes,
            )
            too_large = Reason.METADATA_TOO_LARGE
            await context.abort(grpc.StatusCode[REASONS[too_large].grpc_code], too_large.value)
        if self.authenticator is None:
            return ANONYMOUS
        caller = self.authenticator.identify(metadata)
        if caller is None:
            self.counters.requests_unauthenticated += 1
            self.metrics.request_refused(Reason.INVALID_TOKEN)
            self._log.warning("request_unauthenticated", peer=peer_of(context))
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, Reason.INVALID_TOKEN.value)
        return caller

    async def _check_envelope(
        self,
        request: pb.OpenRequest | MalformedRequest,
        context: grpc.aio.ServicerContext[pb.OpenRequest, pb.Chunk],
        caller: str,
    ) -> pb.OpenRequest:
        """A request that is not an OpenRequest, or whose ids are not short and plain, is
        refused before any of it is logged (its ids would be): a record with the peer and
        why, no stream."""
        try:
            if isinstance(request, MalformedRequest):
                raise RequestRefused(Reason.INVALID_REQUEST, request.why)
            check_envelope(request)
        except RequestRefused as refused:
            await self._refuse_malformed(context, caller, refused)
        return request

    async def _refuse_malformed(
        self, context: grpc.aio.ServicerContext[Any, Any], caller: str, refused: RequestRefused
    ) -> NoReturn:
        self.counters.requests_malformed += 1
        self.metrics.request_refused(Reason.INVALID_REQUEST)
        self._log.warning(
            "request_malformed",
            peer=peer_of(context),
            caller=caller,
            detail=scrubbed_detail(refused.detail),
        )
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refused.code)

    def _cut_by_consumer_or_age(
        self,
        stream: ProducerStream,
        connection_seen: float,
        context: grpc.aio.ServicerContext[Any, Any],
        **fields: object,
    ) -> None:
        """The stream is gone from under the handler (``ConnectionAges.cut`` says why)."""
        event, reason = self.connections.cut(connection_seen, context.time_remaining())
        stream.fire(event, reason=reason, **fields, **stream.sent)

    async def _prepare(
        self,
        request: pb.OpenRequest,
        context: grpc.aio.ServicerContext[pb.OpenRequest, pb.Chunk],
        stream: ProducerStream,
        task: asyncio.Task[Any],
    ) -> tuple[CheckedRequest, Delivery]:
        """Admit, check, and decide the delivery (its record fired: verify or attach), or
        refuse with the reason's status, holding nothing."""
        try:
            # The limits first: a refused stream costs no check, no source, no upstream call.
            self.admission.admit(task, stream.caller)
            checked = check_request(request, allow_faults=self.allow_faults)
            return checked, await self._delivery(checked, stream)
        except ReplywireError as error:
            stream.fire(StreamInput.REFUSE, reason=error.code, detail=scrubbed_detail(error.detail))
            if error.metadata:
                context.set_trailing_metadata(tuple(error.metadata.items()))
            await context.abort(grpc.StatusCode[REASONS[error.reason].grpc_code], error.code)
            raise AssertionError("abort raises") from error

    async def _delivery(self, checked: CheckedRequest, stream: ProducerStream) -> Delivery:
        """Where the frames come from (``producer.delivery_plan.decide``, its steps run by
        ``DeliverySteps``), its record fired; nothing is held if this raises."""
        decided = await DeliverySteps(
            self.source, self.generations, checked, stream.caller
        ).decided()
        if decided.record is Record.ATTACH:
            self._fire_attach(stream, checked, decided.delivery)
        else:
            self._fire_verify(stream, decided.delivery, decided.description)
        return decided.delivery

    def _fire_verify(
        self, stream: ProducerStream, delivery: Delivery, description: dict[str, Any]
    ) -> None:
        stream.fire(
            StreamInput.VERIFY,
            source=self.source.name,
            resume_after=delivery.resume_after,
            attempt=delivery.attempt,
            **description,
        )

    @staticmethod
    def _fire_attach(stream: ProducerStream, checked: CheckedRequest, delivery: Delivery) -> None:
        stream.fire(
            StreamInput.ATTACH,
            resume_after=delivery.resume_after,
            attempt=delivery.attempt,
            wire=checked.wire.value,
            chunks=checked.plan.describe(),
        )

    async def shutdown(self, grace_s: float, stop_now: asyncio.Event) -> None:
        """Let open streams finish within ``grace_s`` (or until ``stop_now``), then end the
        rest: each is logged ``shutdown`` and its consumer gets ``UNAVAILABLE``."""
        waiters = [asyncio.create_task(self._idle.wait()), asyncio.create_task(stop_now.wait())]
        try:
            await asyncio.wait(waiters, timeout=grace_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        remaining = list(self._active)
        for task in remaining:
            self._shutting_down.add(task)
            task.cancel()
        if remaining:
            await asyncio.wait(remaining, timeout=SHUTDOWN_ABORT_S)
        # Replies still generating for a consumer that left (its detach grace) end now: a
        # live one's upstream is closed and its ledger entry leaves reserved before exit.
        generating = self.generations.stop_all(Reason.PRODUCER_SHUTDOWN)
        if generating:
            await asyncio.wait(generating, timeout=SHUTDOWN_ABORT_S)


async def _abort_unless_gone(
    context: grpc.aio.ServicerContext[pb.OpenRequest, pb.Chunk], reason: Reason
) -> None:
    """End the RPC with the reason's status; the reason code alone is the client's detail."""
    try:
        await context.abort(grpc.StatusCode[REASONS[reason].grpc_code], reason.value)
    except grpc.aio.AbortError:
        raise
    except grpc.aio.BaseError:  # the consumer is already gone: nothing to tell it
        return
