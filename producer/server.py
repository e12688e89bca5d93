"""The ``replywire.v1.ReplyStream`` servicer and the grpc.aio server around it.

A thin I/O edge: it turns an ``OpenRequest`` into a checked request
(``shared.requests``), asks its source for the chunks, and writes them one at a
time with ``context.write()``. A write waits for HTTP/2 flow control, so a
consumer that stops reading stops the producer and nothing is buffered without
bound.

Every stream ends in exactly one final state, whatever ends it (see
``producer.states``), and its plan is closed exactly once, after that state is
logged: a refusal, the last chunk, a transport fault, a consumer that cancels,
refuses the stream or vanishes (the write fails, or grpc.aio cancels the
handler), its connection cut by ``--max-connection-age-s`` (``connection_aged_out``),
an unexpected error (``internal_error``, detail in the trace only), or the
producer's own shutdown (``producer_shutdown``). Above ``--max-streams`` open
streams a new one is refused ``RESOURCE_EXHAUSTED`` / ``stream_limit``.

Beside ``ReplyStream`` the server carries the standard health service
(``grpc.health.v1.Health``: SERVING once listening, NOT_SERVING from the start of
shutdown) and server reflection; every stream updates the producer's Prometheus
metrics (``producer.metrics``) where it updates its counters.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import aclosing
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import grpc
import structlog
from google.protobuf.message import DecodeError
from grpc_health.v1 import health as grpc_health
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from producer.admission import Admission
from producer.generation import Generation, Generations, Opened, PlanUpstream, Upstream
from producer.health import DEFAULT_MAX_HEALTH_WATCHES, BoundedHealthServicer
from producer.metrics import ProducerMetrics
from producer.replylog import (
    LogEnded,
    LoggedReply,
    LogLimits,
    MemoryReplyLog,
    ReplyBusy,
    ReplyKey,
    ReplyLog,
    log_entries,
)
from producer.security import ANONYMOUS, TokenAuthenticator
from producer.sources import Source, Stall, StreamPlan
from producer.sources.recording import RecordingSource
from producer.states import ProducerStream, StreamInput, StreamState
from shared.errors import (
    REASONS,
    REPLY_ENDINGS,
    Reason,
    ReplywireError,
    RequestRefused,
    Status,
    scrubbed_detail,
)
from shared.pb import replywire_pb2 as pb
from shared.pb import replywire_pb2_grpc as pb_grpc
from shared.recording import Recording
from shared.requests import (
    MAX_REQUEST_BYTES,
    CheckedRequest,
    binding_sha256,
    check_envelope,
    check_request,
)
from shared.wire import codec_for
from shared.wire.chunking import MAX_CHUNK_BYTES, Chunker

MAX_MESSAGE_BYTES: Final = 4 * MAX_CHUNK_BYTES
#: Streams served at once by default: 3,000 concurrent streams on one producer complete,
#: and one more than this is refused RESOURCE_EXHAUSTED / stream_limit.
DEFAULT_MAX_STREAMS: Final = 4000
DEFAULT_MAX_CONNECTION_AGE_S: Final = 300.0
#: The service names the health service reports on ("" is the whole server).
SERVICE_NAME: Final = pb.DESCRIPTOR.services_by_name["ReplyStream"].full_name
HEALTH_SERVICES: Final = ("", SERVICE_NAME)


#: The counter each final state adds to.
_COUNTER_OF: Final = {
    StreamState.COMPLETED: "streams_completed",
    StreamState.REFUSED: "streams_refused",
    StreamState.ABORTED: "streams_aborted",
    StreamState.CANCELLED_BY_CONSUMER: "streams_cancelled",
    StreamState.FAILED: "streams_failed",
    StreamState.SHUTDOWN: "streams_shutdown",
    StreamState.CONNECTION_AGED_OUT: "streams_aged_out",
}


@dataclass
class ProducerCounters:
    """What the producer has done. Every opened stream is counted once more when it ends,
    so ``streams_opened`` equals the sum of the seven final counts once no stream is open."""

    streams_opened: int = 0
    streams_completed: int = 0
    streams_refused: int = 0
    streams_aborted: int = 0
    streams_cancelled: int = 0
    streams_failed: int = 0
    streams_shutdown: int = 0
    streams_aged_out: int = 0
    chunks_written: int = 0
    bytes_written: int = 0
    #: Requests refused for a missing or wrong token: not streams (no stream id is trusted).
    requests_unauthenticated: int = 0
    #: Requests refused before any of them is logged: not an OpenRequest, or unplain ids.
    requests_malformed: int = 0

    def stream_ended(self, state: StreamState) -> None:
        name = _COUNTER_OF[state]
        setattr(self, name, getattr(self, name) + 1)

    @property
    def streams_ended(self) -> int:
        return sum(getattr(self, name) for name in _COUNTER_OF.values())

    def fields(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class MalformedRequest:
    """What the request deserializer hands the handler for bytes that are no OpenRequest."""

    why: str


def parse_open_request(data: bytes) -> pb.OpenRequest | MalformedRequest:
    """The RPC's request deserializer: a bounded parse that never raises (grpc would answer
    a raising deserializer with a bare status the trace never sees)."""
    if len(data) > MAX_REQUEST_BYTES:
        return MalformedRequest(f"request over {MAX_REQUEST_BYTES} bytes")
    try:
        return pb.OpenRequest.FromString(data)
    except DecodeError:  # e.g. a string field that is not UTF-8
        return MalformedRequest("not an OpenRequest")


def parse_cancel_request(data: bytes) -> pb.CancelRequest | MalformedRequest:
    """``Cancel``'s request deserializer, bounded and never raising like ``Open``'s."""
    if len(data) > MAX_REQUEST_BYTES:
        return MalformedRequest(f"request over {MAX_REQUEST_BYTES} bytes")
    try:
        return pb.CancelRequest.FromString(data)
    except DecodeError:
        return MalformedRequest("not a CancelRequest")


def add_servicer(servicer: ReplyStreamServicer, server: grpc.aio.Server) -> None:
    """Register ``Open`` and ``Cancel`` with bounded deserializers (the generated helper's
    are not)."""
    handlers = {
        "Open": grpc.unary_stream_rpc_method_handler(
            servicer.Open,
            request_deserializer=parse_open_request,
            response_serializer=pb.Chunk.SerializeToString,
        ),
        "Cancel": grpc.unary_unary_rpc_method_handler(
            servicer.Cancel,
            request_deserializer=parse_cancel_request,
            response_serializer=pb.CancelReply.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    # Registered with gRPC's core too (as the generated helper does): a call to a method
    # it knows is matched there, not looked up through the generic handlers per call.
    server.add_registered_method_handlers(SERVICE_NAME, handlers)  # type: ignore[attr-defined]


@dataclass(slots=True)
class _Delivery:
    """What one Open() delivers: a first delivery (the plan's own chunks, with its fault)
    or a delivery from the reply log (a resume, an attach, every live reply's)."""

    reply: LoggedReply | None = None
    generation: Generation | None = None
    attempt: int = 1
    first: bool = True
    resume_after: int = 0
    plan: StreamPlan | None = None


class _ConsumerGone(Exception):
    """A write failed because the stream is gone on the consumer's side."""


#: gRPC draws each connection's max age from ``age * (1 +/- 0.1)`` (chttp2's
#: ``kMaxConnectionAgeJitter``); the grace that follows is not jittered.
AGE_JITTER: Final = 0.1


class ConnectionAges:
    """When each connection was first seen (by ``context.peer()``), to tell a stream
    that ``--max-connection-age-s`` cut from one its consumer cancelled.

    grpc.aio gives the handler the same ``asyncio.CancelledError`` in both cases and no
    other signal: no hook on accept or close, no cancel reason (``context`` only says
    ``cancelled()``). gRPC closes a connection at the earliest ``(1 - 0.1) * age +
    grace`` after it was made. A connection is first seen at its first stream, which is
    no earlier than it was made, so a stream cut when its connection has been seen for
    at least ``(1 - 0.1) * (age + grace)`` is taken as aged out: never earlier than gRPC
    can close it, and with a margin of ``0.1 * grace`` for the time between the
    connection and its first stream. The one-sided risks: a consumer that cancels in
    that last margin of a connection's life is logged aged out; a channel that
    connected long (more than ``0.1 * grace``) before its first stream is logged
    cancelled when aged out. The peer address names a TCP connection (its client port)
    for as long as it is open; entries are forgotten once gRPC has certainly closed the
    connection (``1.1 * age + grace``, plus a second), so the table holds only
    connections of the last such span.
    """

    def __init__(
        self,
        max_age_s: float,
        grace_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cut_after_s = (1 - AGE_JITTER) * (max_age_s + grace_s)
        self.forget_after_s = (1 + AGE_JITTER) * max_age_s + grace_s + 1.0
        self._clock = clock
        self._first_seen: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._first_seen)

    def seen(self, peer: str) -> float:
        """Note a stream on ``peer``'s connection; returns when the connection was first seen."""
        now = self._clock()
        # Insertion order is first-seen order: forget from the front.
        while self._first_seen:
            oldest, since = next(iter(self._first_seen.items()))
            if now - since < self.forget_after_s:
                break
            del self._first_seen[oldest]
        return self._first_seen.setdefault(peer, now)

    def aged_out(self, first_seen: float) -> bool:
        """Whether a connection first seen at ``first_seen`` is past its max age and grace."""
        return self._clock() - first_seen >= self.cut_after_s


class ReplyStreamServicer(pb_grpc.ReplyStreamServicer):
    """One ``Open()`` per stream; every exit path ends the stream's state and its plan once."""

    def __init__(self, source: Source, settings: ServerSettings) -> None:
        self.source = source
        #: Replies by (caller, stream id), and the generation that fills each (see
        #: producer.replylog and producer.generation).
        self.replies: ReplyLog = settings.reply_log or MemoryReplyLog(settings.log_limits)
        #: The generations this process runs (a shared log's reply may be generated by
        #: another replica: then there is none here).
        self.generations = Generations(self.replies.limits.max_replies)
        self.allow_faults = settings.allow_faults
        self.authenticator = settings.exposure.authenticator
        self.max_streams = settings.max_streams
        # One identity without tokens: a per-identity bound would be --max-streams again.
        per_identity = settings.max_streams_per_identity if self.authenticator else None
        #: Streams admitted under --max-streams and --max-streams-per-identity (refused
        #: ones are in _active, never here).
        self.admission = Admission(settings.max_streams, per_identity)
        max_connection_age_s = settings.max_connection_age_s
        self.counters = ProducerCounters()
        self.metrics = settings.metrics or ProducerMetrics()
        # grpc-stubs 1.53 predates the asyncio servicer (grpc_health.v1.health.aio).
        self.health: Any = BoundedHealthServicer(settings.max_health_watches)
        self.connections = ConnectionAges(max_connection_age_s, max_connection_age_s)
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
        peer = context.peer()
        log = self._log.bind(case_id=request.case_id, peer=peer, caller=caller)
        connection_seen = self.connections.seen(peer)
        self.counters.streams_opened += 1
        stream = ProducerStream(log, caller, on_final=self._stream_ended)
        task = asyncio.current_task()
        assert task is not None
        self._active[task] = stream
        self._idle.clear()
        delivery = _Delivery()
        try:
            await self._serve(request, context, stream, task, delivery)
        except asyncio.CancelledError:
            # grpc.aio cancels the handler when the consumer cancels or its connection drops
            # (also when --max-connection-age-s closes it: ConnectionAges tells which); the
            # shutdown path cancels it after the grace.
            if task not in self._shutting_down:
                self._cut_by_consumer_or_age(stream, connection_seen)
                raise
            stream.fire(StreamInput.SHUTDOWN, reason=Reason.PRODUCER_SHUTDOWN, **stream.sent)
            await _abort_unless_gone(context, Reason.PRODUCER_SHUTDOWN)
            raise
        except _ConsumerGone as gone:
            self._cut_by_consumer_or_age(stream, connection_seen, why=scrubbed_detail(str(gone)))
        except grpc.aio.AbortError:
            raise  # a refusal or a transport fault: the stream's final state is logged
        except Exception:
            log.exception("stream_failed")
            stream.fire(StreamInput.FAIL, reason=Reason.INTERNAL_ERROR, **stream.sent)
            await _abort_unless_gone(context, Reason.INTERNAL_ERROR)
        finally:
            await self._finish(task, stream, delivery)

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
        key = ReplyKey(caller, stream_id)
        generation = self.generations.get(key)
        relayed = generation is None or generation.task.done()
        if relayed:
            cancelled = await self.replies.request_cancel(key, RELAY_CANCEL_WAIT_S)
        else:
            assert generation is not None
            cancelled = generation.stop(Reason.CONSUMER_CANCELLED)
        self._log.info("stream_cancel_requested", peer=context.peer(), caller=caller,
                       cancelled=cancelled, relayed=relayed)  # fmt: skip
        return pb.CancelReply(cancelled=cancelled)

    def _watch_relayed_cancels(self, reply: LoggedReply) -> None:
        """A ``Cancel`` another replica relays through the shared log stops the generation
        here as if it had come here (the log names the caller: it is the reply's own)."""

        def relayed(caller: str) -> None:
            generation = self.generations.get(reply.key)
            cancelled = (
                caller == reply.key.identity
                and generation is not None
                and generation.reply is reply
                and generation.stop(Reason.CONSUMER_CANCELLED)
            )
            self._log.info("stream_cancel_relayed", stream_id=reply.key.stream_id,
                           caller=caller, cancelled=cancelled)  # fmt: skip

        reply.watch_cancel(relayed)

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
            self.counters.requests_malformed += 1
            self._log.warning(
                "request_malformed",
                peer=context.peer(),
                caller=caller,
                detail=scrubbed_detail(refused.detail),
            )
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refused.code)
        return request.stream_id

    async def _serve(
        self,
        request: pb.OpenRequest,
        context: grpc.aio.ServicerContext[pb.OpenRequest, pb.Chunk],
        stream: ProducerStream,
        task: asyncio.Task[Any],
        delivery: _Delivery,
    ) -> None:
        """Prepare, then deliver: the plan's own chunks (a first delivery) or the log's."""
        checked, plan = await self._prepare(request, context, stream, task, delivery)
        if delivery.reply is not None and not delivery.first:
            await self._deliver_logged(checked, context, stream, delivery)
        else:
            assert plan is not None
            await self._deliver(checked, context, stream, plan)

    async def _finish(
        self, task: asyncio.Task[Any], stream: ProducerStream, delivery: _Delivery
    ) -> None:
        """Every exit: a final state (if nothing else gave one), the plan closed once, the
        stream forgotten."""
        if stream.open:  # a BaseException nobody expects (KeyboardInterrupt, SystemExit)
            stream.fire(StreamInput.FAIL, reason=Reason.INTERNAL_ERROR, **stream.sent)
        try:
            if delivery.generation is not None:
                delivery.generation.detach()
            if delivery.plan is not None and delivery.plan.needs_close:
                await _close_even_if_cancelled(delivery.plan, stream.state.value)
        finally:
            del self._active[task]
            self.admission.release(task)
            self._shutting_down.discard(task)
            if not self._active:
                self._idle.set()

    async def _authenticate(self, context: grpc.aio.ServicerContext[Any, Any]) -> str:
        """The caller's name from its bearer token, before any work; refuses without one.
        Nothing of the request is logged for a caller that is not known: the peer only."""
        if self.authenticator is None:
            return ANONYMOUS
        # grpc.aio's Metadata iterates as (key, value) pairs; grpc-stubs disagrees.
        metadata: Any = context.invocation_metadata()
        caller = self.authenticator.identify(metadata)
        if caller is None:
            self.counters.requests_unauthenticated += 1
            self._log.warning("request_unauthenticated", peer=context.peer())
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
            self.counters.requests_malformed += 1
            self._log.warning(
                "request_malformed",
                peer=context.peer(),
                caller=caller,
                detail=scrubbed_detail(refused.detail),
            )
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refused.code)
        return request

    def _cut_by_consumer_or_age(
        self, stream: ProducerStream, connection_seen: float, **fields: object
    ) -> None:
        """The stream is gone from under the handler: its consumer cancelled, refused it or
        vanished, or gRPC closed its connection for its age."""
        if self.connections.aged_out(connection_seen):
            stream.fire(
                StreamInput.CONNECTION_AGED,
                reason=Reason.CONNECTION_AGED_OUT,
                **fields,
                **stream.sent,
            )
        else:
            stream.fire(
                StreamInput.CONSUMER_CANCELLED,
                reason=Reason.CONSUMER_CANCELLED,
                **fields,
                **stream.sent,
            )

    async def _prepare(
        self,
        request: pb.OpenRequest,
        context: grpc.aio.ServicerContext[pb.OpenRequest, pb.Chunk],
        stream: ProducerStream,
        task: asyncio.Task[Any],
        delivery: _Delivery,
    ) -> tuple[CheckedRequest, StreamPlan | None]:
        try:
            # The limits first: a refused stream costs no check, no source, no upstream call.
            self.admission.admit(task, stream.caller)
            checked = check_request(request, allow_faults=self.allow_faults)
            delivery.resume_after = request.resume_after
            key = ReplyKey(stream.caller, request.stream_id) if request.stream_id else None
            if key is not None and not self.source.regenerates:
                # Claim, then pay: a live reply is claimed in the log before its provider
                # is called, so one call makes it, whoever else opens or resumes it.
                opened = await self._claim_live(key, request, checked, delivery)
                if opened is None:
                    self._fire_attach(stream, checked, delivery)
                    return checked, None
                stream.fire(
                    StreamInput.VERIFY,
                    source=self.source.name,
                    resume_after=request.resume_after,
                    attempt=delivery.attempt,
                    **opened.description,
                )
                return checked, None
            if key is not None and await self._attach(key, request, checked, delivery):
                await self._prepare_takeover(request, checked, stream, delivery)
                self._fire_attach(stream, checked, delivery)
                return checked, delivery.plan
            if request.resume_after and not self.source.regenerates:
                raise RequestRefused(Reason.RESUME_UNAVAILABLE, "no logged reply")
            plan = await self.source.prepare(request, checked, identity=stream.caller)
            delivery.plan = plan  # closed when this delivery ends, unless a generation owns it
            if request.resume_after and plan.reply_frames is None:
                raise RequestRefused(Reason.RESUME_UNAVAILABLE, "this reply is not logged")
            if key is not None:
                await self._generate(key, request, checked, plan, delivery)
        except ReplywireError as error:
            stream.fire(StreamInput.REFUSE, reason=error.code, detail=scrubbed_detail(error.detail))
            if error.metadata:
                context.set_trailing_metadata(tuple(error.metadata.items()))
            await context.abort(grpc.StatusCode[error.reason.grpc_code], error.code)
        stream.fire(
            StreamInput.VERIFY,
            source=self.source.name,
            resume_after=request.resume_after,
            attempt=delivery.attempt,
            **plan.description,
        )
        return checked, plan

    @staticmethod
    def _fire_attach(stream: ProducerStream, checked: CheckedRequest, delivery: _Delivery) -> None:
        stream.fire(
            StreamInput.ATTACH,
            resume_after=delivery.resume_after,
            attempt=delivery.attempt,
            wire=checked.wire.value,
            chunks=checked.plan.describe(),
        )

    async def _claim_live(
        self,
        key: ReplyKey,
        request: pb.OpenRequest,
        checked: CheckedRequest,
        delivery: _Delivery,
    ) -> Opened | None:
        """Attach to the caller's live reply of this stream id, or claim it and start its
        generation, which calls the provider; returns how that went (None: attached to a
        reply someone else claimed). The free checks come before the claim: a request
        refused for its binding claims nothing."""
        for _ in range(MAX_CLAIM_ATTEMPTS):
            if await self._attach(key, request, checked, delivery):
                return None
            if request.resume_after:
                raise RequestRefused(Reason.RESUME_UNAVAILABLE, "no logged reply")
            self.source.verify(request, checked)
            binding = binding_sha256(request.binding_json)
            try:
                reply = await self.replies.create(key, binding, checked.wire.value)
            except ReplyBusy:  # claimed by another delivery meanwhile: attach to it
                continue
            generation = self._start_live(reply, request, checked)
            delivery.reply, delivery.generation = reply, generation
            delivery.attempt = generation.attach()
            delivery.first = False
            # Shielded: a consumer that leaves now leaves the opening to the generation.
            opened = await asyncio.shield(generation.opened)
            if opened.refusal is not None:
                raise opened.refusal
            return opened
        raise RequestRefused(Reason.REPLY_LOG_UNAVAILABLE, "the reply changed hands repeatedly")

    def _start_live(
        self, reply: LoggedReply, request: pb.OpenRequest, checked: CheckedRequest
    ) -> Generation:
        """The generation of a claimed live reply: it calls the provider itself."""
        codec = codec_for(checked.wire)
        source, identity = self.source, reply.key.identity

        async def open_upstream() -> Upstream:
            plan = await source.prepare(request, checked, identity=identity)
            return PlanUpstream(plan, codec)

        generation = Generation(
            reply,
            open_upstream,
            grace_s=self.replies.limits.detach_grace_s,
            on_ended=self.metrics.generation_ended,
        )
        self.generations.add(generation)
        self._watch_relayed_cancels(reply)
        return generation

    async def _attach(
        self,
        key: ReplyKey,
        request: pb.OpenRequest,
        checked: CheckedRequest,
        delivery: _Delivery,
    ) -> bool:
        """Attach to the caller's logged reply of this stream id, if there is one (this
        process's, or another replica's in a shared log): never a second generation.
        Refuses a binding other than the logged one, and a reply that ended without its
        terminal (nothing more will come), unless the source regenerates it or it was
        refused before anything of it was made (a new Open claims it anew)."""
        reply = await self.replies.find(key)
        if reply is None:
            return False
        if binding_sha256(request.binding_json) != reply.binding_sha256:
            raise RequestRefused(Reason.RESUME_BINDING_MISMATCH, "not the logged binding")
        if checked.wire.value != reply.wire:
            raise RequestRefused(Reason.INVALID_REQUEST, "a resume in another wire format")
        if reply.error is not None:
            if self.source.regenerates:
                return False  # generated again, from the start
            if not request.resume_after and reply.frames == 0 and _refused(reply.error):
                return False
            raise _ended_reply_refusal(reply.error)
        self._attach_to(reply, delivery)
        return True

    def _attach_to(self, reply: LoggedReply, delivery: _Delivery) -> None:
        generation = self.generations.get(reply.key)
        if generation is not None and generation.reply is not reply:
            generation = None  # a shared log's reply this process no longer generates
        delivery.reply, delivery.generation = reply, generation
        # The attempt counts this process's deliveries of the reply (1: another replica's).
        delivery.attempt = generation.attach() if generation is not None else 1
        delivery.first = False

    async def _prepare_takeover(
        self,
        request: pb.OpenRequest,
        checked: CheckedRequest,
        stream: ProducerStream,
        delivery: _Delivery,
    ) -> None:
        """Attached to another replica's reply: with a source that regenerates, the plan to
        generate it here should that replica be lost (``generator_lost``)."""
        if delivery.generation is None and self.source.regenerates:
            delivery.plan = await self.source.prepare(request, checked, identity=stream.caller)

    async def _generate(
        self,
        key: ReplyKey,
        request: pb.OpenRequest,
        checked: CheckedRequest,
        plan: StreamPlan,
        delivery: _Delivery,
    ) -> None:
        """Start logging a recorded plan's reply under its key (when it has one to log)."""
        if plan.reply_frames is None:
            return
        binding = binding_sha256(request.binding_json)
        if not await self._start_generation(key, binding, checked, plan):
            found = await self.replies.find(key)
            if found is None:  # generated and expired meanwhile: rare enough to refuse
                raise RequestRefused(Reason.STREAM_LIMIT, "the reply changed hands; retry")
            self._attach_to(found, delivery)
            return
        generation = self.generations.get(key)
        assert generation is not None
        delivery.reply, delivery.generation = generation.reply, generation
        delivery.attempt = generation.attach()
        # A resume the producer has no log of (it restarted): the regenerated reply is
        # delivered from the log, from resume_after + 1, and without the fault.
        delivery.first = request.resume_after == 0

    async def _start_generation(
        self, key: ReplyKey, binding: str, checked: CheckedRequest, plan: StreamPlan
    ) -> bool:
        """Log a recorded plan's reply under its key, generated here from its frames; False
        when another delivery (here, or on another replica) generates it already."""
        try:
            reply = await self.replies.create(key, binding, checked.wire.value)
        except ReplyBusy:
            return False
        self._watch_relayed_cancels(reply)
        assert plan.reply_frames is not None
        # A recording's fault-free plan carries its log entries, made once.
        entries = plan.reply_entries
        if entries is None:
            codec = codec_for(checked.wire)
            frames = plan.reply_frames
            entries = log_entries(frames, [codec.encode_frame(frame) for frame in frames])
        generation = Generation(
            reply,
            entries,
            grace_s=self.replies.limits.detach_grace_s,
            on_ended=self.metrics.generation_ended,
        )
        self.generations.add(generation)
        return True

    async def _deliver(
        self,
        checked: CheckedRequest,
        context: grpc.aio.ServicerContext[pb.OpenRequest, pb.Chunk],
        stream: ProducerStream,
        plan: StreamPlan,
    ) -> None:
        stream.fire(StreamInput.START)
        if plan.fixed_chunks is not None:  # a recording's, fault-free or nearly
            for data in plan.fixed_chunks:
                await self._write(checked, context, stream, data)
        else:
            await self._deliver_generated(checked, context, stream, plan)
        if plan.abort_details is not None:
            reason = plan.abort_details
            stream.fire(StreamInput.ABORT, reason=reason.value, **stream.sent)
            await context.abort(grpc.StatusCode[reason.grpc_code], reason.value)
        stream.fire(StreamInput.COMPLETE, **stream.sent)

    async def _deliver_generated(
        self,
        checked: CheckedRequest,
        context: grpc.aio.ServicerContext[pb.OpenRequest, pb.Chunk],
        stream: ProducerStream,
        plan: StreamPlan,
    ) -> None:
        """The plan's chunks as its generator makes them, with the stalls between them."""
        # aclosing: the source's generator (and the upstream read it is inside) is closed
        # here, on every exit, before the plan itself is closed.
        async with aclosing(plan.chunks()) as chunks:
            async for data in chunks:
                if isinstance(data, Stall):
                    stream.fire(StreamInput.STALL, milliseconds=data.milliseconds)
                    await asyncio.sleep(data.milliseconds / 1000)
                    stream.fire(StreamInput.RESUME)
                    continue
                await self._write(checked, context, stream, data)

    async def _deliver_logged(
        self,
        checked: CheckedRequest,
        context: grpc.aio.ServicerContext[pb.OpenRequest, pb.Chunk],
        stream: ProducerStream,
        delivery: _Delivery,
    ) -> None:
        """A delivery from the log: the logged frames from ``resume_after + 1`` on, cut
        afresh by this request's chunking, never with a fault. A reply whose generator is
        lost is taken over (a source that regenerates) at most ``MAX_TAKEOVERS`` times."""
        assert delivery.reply is not None
        stream.fire(StreamInput.START)
        chunker = Chunker(checked.plan)
        after = delivery.resume_after
        takeovers = 0
        while True:
            try:
                async for entry in delivery.reply.read(after):
                    for data in chunker.feed(entry.data):
                        await self._write(checked, context, stream, data)
                    after = entry.sequence
                break
            except LogEnded as ended:
                if takeovers < MAX_TAKEOVERS and await self._take_over(ended, checked, delivery):
                    takeovers += 1
                    continue
                reason = ended.reason
                stream.fire(StreamInput.ABORT, reason=reason.value, **stream.sent)
                self._pass_refusal_metadata(context, delivery, reason)
                await context.abort(grpc.StatusCode[reason.grpc_code], reason.value)
        for data in chunker.flush():
            await self._write(checked, context, stream, data)
        stream.fire(StreamInput.COMPLETE, **stream.sent)

    @staticmethod
    def _pass_refusal_metadata(
        context: grpc.aio.ServicerContext[pb.OpenRequest, pb.Chunk],
        delivery: _Delivery,
        reason: Reason,
    ) -> None:
        """A reply refused before it was made (its generation here was told why): its
        readers here get the refusal's metadata too (a retry delay)."""
        generation = delivery.generation
        if generation is None or not generation.opened.done():
            return
        refusal = generation.opened.result().refusal
        if refusal is not None and refusal.reason is reason and refusal.metadata:
            context.set_trailing_metadata(tuple(refusal.metadata.items()))

    async def _take_over(
        self, ended: LogEnded, checked: CheckedRequest, delivery: _Delivery
    ) -> bool:
        """Another replica generated the reply and is lost: generate it here (or follow
        whoever did first) when the source regenerates it; the reading goes on where it
        was, the regenerated frames being the same."""
        reply, plan = delivery.reply, delivery.plan
        if ended.reason is not Reason.GENERATOR_LOST or plan is None or reply is None:
            return False
        self._log.info("generation_taken_over", stream_id=reply.key.stream_id)
        # Only a source that regenerates takes over: its reply is recorded, never live.
        if await self._start_generation(reply.key, reply.binding_sha256, checked, plan):
            generation = self.generations.get(reply.key)
            assert generation is not None
            generation.attach()
            delivery.reply, delivery.generation = generation.reply, generation
            return True
        found = await self.replies.find(reply.key)
        if found is None or found.error is not None:
            return False
        delivery.reply = found
        return True

    async def _write(
        self,
        checked: CheckedRequest,
        context: grpc.aio.ServicerContext[pb.OpenRequest, pb.Chunk],
        stream: ProducerStream,
        data: bytes,
    ) -> None:
        if stream.chunks_sent and checked.interval_s:
            await asyncio.sleep(checked.interval_s)
        started = time.monotonic()
        try:
            # The write waits for the consumer's HTTP/2 window, so a paused consumer
            # pauses this loop; it fails once the stream is gone on the consumer's side.
            await context.write(pb.Chunk(data=data))
        except grpc.aio.InternalError as error:
            raise _ConsumerGone(type(error).__name__) from error
        stream.bytes_sent += len(data)
        stream.chunks_sent += 1
        self.counters.chunks_written += 1
        self.counters.bytes_written += len(data)
        self.metrics.chunk_written(len(data), time.monotonic() - started)
        if stream.debug:
            stream.log.debug(
                "chunk_sent",
                index=stream.chunks_sent - 1,
                size=len(data),
                bytes_sent=stream.bytes_sent,
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


#: How long a replica that relays a ``Cancel`` waits for the generator to confirm it (within
#: the consumer's own wait for the answer, ``consumer.client.CANCEL_TIMEOUT_S``).
RELAY_CANCEL_WAIT_S: Final = 1.5


#: Tries to attach to or claim a live reply that keeps changing hands before giving up.
MAX_CLAIM_ATTEMPTS: Final = 3
#: Takeovers of a reply whose generator was lost, per delivery (each needs a lapsed lease).
MAX_TAKEOVERS: Final = 3


def _refused(ending: str) -> bool:
    """Whether a reply's ending is a refusal (nothing of it was made: a new Open may claim
    it anew), as a budget or a provider's refusal is."""
    return ending in REASONS and Reason(ending).status is Status.REFUSED


def _ended_reply_refusal(ending: str) -> RequestRefused:
    """Why a reply that ended without its terminal (and cannot be made again) is not
    delivered: its own ending when that names what happened, else ``resume_unavailable``."""
    if ending in REPLY_ENDINGS:
        return RequestRefused(Reason(ending), "the reply ended so")
    return RequestRefused(Reason.RESUME_UNAVAILABLE, f"the reply ended {ending}")


async def _abort_unless_gone(
    context: grpc.aio.ServicerContext[pb.OpenRequest, pb.Chunk], reason: Reason
) -> None:
    """End the RPC with the reason's status; the reason code alone is the client's detail."""
    try:
        await context.abort(grpc.StatusCode[reason.grpc_code], reason.value)
    except grpc.aio.AbortError:
        raise
    except grpc.aio.BaseError:  # the consumer is already gone: nothing to tell it
        return


async def _close_even_if_cancelled(plan: StreamPlan, outcome: str) -> None:
    """Close the plan to the end even when grpc.aio cancels the handler meanwhile (it does
    once it sees the consumer gone): a close cut short leaves a ledger entry reserved and
    a call missing from the capture. The cancellation is passed on afterwards."""
    closing = asyncio.ensure_future(plan.close(outcome))
    cancelled = False
    while not closing.done():
        try:
            await asyncio.shield(closing)
        except asyncio.CancelledError:
            cancelled = True
        except Exception:  # the stream's state is final: log it, never answer with it
            structlog.get_logger().exception("plan_close_failed", outcome=outcome)
    if cancelled:
        raise asyncio.CancelledError


#: How long the shutdown path waits for the streams it ended to say so.
SHUTDOWN_ABORT_S: Final = 2.0


#: The most frequent keepalive pings accepted by default: gRPC's own client sends no more
#: than one a second, the consumer's floor (consumer.client.MIN_KEEPALIVE_S).
MIN_PING_INTERVAL_S: Final = 1.0
#: Pings faster than that tolerated before GOAWAY (gRPC's own default).
MAX_PING_STRIKES: Final = 2

#: RPCs gRPC holds for the servicer (``--max-pending``): past it gRPC drops one at once.
DEFAULT_MAX_PENDING: Final = 10_000


def server_options(
    max_connection_age_s: float = DEFAULT_MAX_CONNECTION_AGE_S,
    max_streams: int = DEFAULT_MAX_STREAMS,
    min_ping_interval_s: float = MIN_PING_INTERVAL_S,
    max_pending: int = DEFAULT_MAX_PENDING,
) -> list[tuple[str, int]]:
    age_ms = int(max_connection_age_s * 1000)
    # RPCs that arrive faster than grpc.aio hands them to a handler wait as "pending" (a
    # burst of new streams: grpc.aio takes them one at a time). Past gRPC's soft limit it
    # drops them at random, past the hard one all of them, with a bare CANCELLED, before
    # the servicer sees them: its default (1,000 and 3,000) dropped 5-10 % of a burst of
    # 2,000. One bound, soft and hard alike: nothing is dropped below --max-pending, and
    # the servicer answers the excess of --max-streams itself (stream_limit).
    return [
        # Bounded streams: the servicer refuses a stream beyond max-streams over all
        # connections (stream_limit); one connection opens at most one more than that at
        # once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS). The one more is the stream that
        # hears the refusal: with exactly max-streams, a connection that holds them all
        # would queue its next stream in the client, silently, until its deadline.
        ("grpc.max_concurrent_streams", max_streams + 1),
        ("grpc.server.max_pending_requests", max_pending),
        ("grpc.server.max_pending_requests_hard_limit", max_pending),
        # One producer per port: with gRPC's default SO_REUSEPORT a second producer would
        # bind the same port silently and split the traffic.
        ("grpc.so_reuseport", 0),
        # Bounded time: a connection older than this is drained (GOAWAY) and closed after
        # the same again, so no stream, even one whose writes are blocked by a consumer
        # that stopped reading without cancelling, outlives twice this.
        ("grpc.max_connection_age_ms", age_ms),
        ("grpc.max_connection_age_grace_ms", age_ms),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        # Notice a consumer that vanished without closing its connection.
        ("grpc.keepalive_time_ms", 20_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        # A consumer's keepalive pings (how it notices a producer cut off mid-stream) are
        # accepted down to one per min_ping_interval_s, also with no call in flight; a peer
        # that pings faster gets gRPC's GOAWAY (too_many_pings) after its strikes.
        ("grpc.http2.min_ping_interval_without_data_ms", round(min_ping_interval_s * 1000)),
        ("grpc.http2.max_ping_strikes", MAX_PING_STRIKES),
        ("grpc.keepalive_permit_without_calls", 1),
    ]


@dataclass(frozen=True, slots=True)
class Exposure:
    """Who may reach the server: TLS credentials and a token check (none: plaintext, open)."""

    credentials: grpc.ServerCredentials | None = None
    authenticator: TokenAuthenticator | None = None


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """How a server listens and what it allows: one value, built by the CLI (or a test)."""

    host: str
    port: int
    allow_faults: bool
    max_connection_age_s: float = DEFAULT_MAX_CONNECTION_AGE_S
    exposure: Exposure = field(default_factory=Exposure)
    max_streams: int = DEFAULT_MAX_STREAMS
    #: Each caller's own bound (with tokens; None: not applied).
    max_streams_per_identity: int | None = None
    #: The most frequent keepalive pings a peer may send (faster: GOAWAY too_many_pings).
    min_ping_interval_s: float = MIN_PING_INTERVAL_S
    #: RPCs gRPC holds before the servicer takes them (past it: a bare CANCELLED).
    max_pending: int = DEFAULT_MAX_PENDING
    metrics: ProducerMetrics | None = None
    #: The reply log's bounds (entries, bytes, replies kept, TTL, detach grace).
    log_limits: LogLimits | None = None
    #: A shared reply log (Redis Streams); None: the in-memory log, with ``log_limits``.
    reply_log: ReplyLog | None = None
    #: Health ``Watch`` streams served at once (unauthenticated); one more: health_watch_limit.
    max_health_watches: int = DEFAULT_MAX_HEALTH_WATCHES


async def start_server(
    source: Source | Recording, settings: ServerSettings
) -> tuple[grpc.aio.Server, int, ReplyStreamServicer]:
    """Start a server; returns it with the bound port (``port=0`` picks a free one).
    Its health service says SERVING for "" and ``replywire.v1.ReplyStream`` once it
    listens; reflection lists ReplyStream, Health and itself."""
    exposure = settings.exposure
    max_connection_age_s, max_streams = settings.max_connection_age_s, settings.max_streams
    server = grpc.aio.server(
        options=server_options(
            max_connection_age_s, max_streams, settings.min_ping_interval_s, settings.max_pending
        )
    )
    if isinstance(source, Recording):
        source = RecordingSource(source)
    servicer = ReplyStreamServicer(source, settings)
    add_servicer(servicer, server)
    health_pb2_grpc.add_HealthServicer_to_server(servicer.health, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, grpc_health.SERVICE_NAME,
         reflection.SERVICE_NAME),
        server,
    )  # fmt: skip
    await servicer.set_serving(False)
    address = f"{settings.host}:{settings.port}"
    try:
        if exposure.credentials is not None:
            bound = server.add_secure_port(address, exposure.credentials)
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError as error:  # grpc's way of saying the bind failed
        raise OSError("the address is in use or not an address of this host") from error
    if bound == 0:
        raise OSError("the address is in use or not an address of this host")
    await server.start()
    await servicer.set_serving(True)
    return server, bound, servicer


async def stop_server(
    server: grpc.aio.Server,
    servicer: ReplyStreamServicer,
    grace_s: float,
    stop_now: asyncio.Event,
) -> None:
    """Stop accepting at once; let open streams finish within the grace (or until
    ``stop_now`` is set); end the rest as ``shutdown`` with ``UNAVAILABLE``."""
    # server.stop() refuses new streams at once and waits; our own shutdown ends the
    # streams still open before grpc's would cancel them with a bare status.
    stopping = asyncio.create_task(server.stop(grace_s + SHUTDOWN_ABORT_S + 1.0))
    await servicer.shutdown(grace_s, stop_now)
    await stopping
