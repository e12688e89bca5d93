"""The consumer's network edge: one gRPC stream, flow-controlled, fed to the sans-IO core.

Two tasks share a bounded queue:

* the **reader** moves chunks from the call into the queue. When the queue is
  full it stops calling ``read()``; gRPC then stops returning HTTP/2 window
  to the producer, whose writes block. The channel's window is bounded
  (``grpc.http2.lookahead_bytes`` with BDP probing off): with gRPC's defaults a
  reader that stops lets the server push megabytes into one stream;
* the **processor** applies each chunk to the ``ReplyConsumer`` core (after an
  optional simulated per-chunk delay) and turns how the stream ended into the
  result document.

Time is bounded twice: an overall deadline and an idle timeout (no chunk for
that long). Either cancels the RPC and ends ``incomplete`` with the partial
content kept. A peer that went silent without closing (its host cut off: no reset
ever comes) is found sooner by gRPC's keepalive: a ping every ``keepalive_s`` of
silence, unanswered within ``keepalive_timeout_s``, closes the connection, and the
call ends ``UNAVAILABLE``, a transport failure that a resume repairs. A refusal by
the producer (a gRPC status whose details are one of our refusal codes, before any
chunk) is ``refused``; any other failure of the call is ``error`` /
``transport_io_error`` with the gRPC code and details.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import grpc
import structlog

from consumer.reader_states import SPEC as READER_SPEC
from consumer.reader_states import ReaderInput, ReaderState
from consumer.security import Security
from shared.errors import ProtocolFailure, Reason
from shared.fsm import Machine
from shared.machine import ReplyConsumer
from shared.pb import replywire_pb2 as pb
from shared.pb import replywire_pb2_grpc as pb_grpc
from shared.requests import ReplyRequest
from shared.result import Flow, StreamResult

DEFAULT_WINDOW_BYTES: Final = 64 * 1024
DEFAULT_QUEUE_SIZE: Final = 8
DEFAULT_DEADLINE_S: Final = 300.0
DEFAULT_IDLE_TIMEOUT_S: Final = 120.0
DEFAULT_RESUME_BACKOFF_S: Final = 0.25
DEFAULT_RESUME_BACKOFF_MAX_S: Final = 2.0
#: gRPC keepalive: a ping after this much silence on the connection ...
DEFAULT_KEEPALIVE_S: Final = 10.0
#: ... unanswered within this, and the connection is closed (UNAVAILABLE).
DEFAULT_KEEPALIVE_TIMEOUT_S: Final = 5.0
#: The shortest keepalive: gRPC's own client sends no more than a ping a second, and a
#: producer accepts that by default (its --min-ping-interval-s, producer.server).
MIN_KEEPALIVE_S: Final = 1.0
#: Resumes of `consumer stream` (the StreamOptions default, 0, is today's behaviour: none).
DEFAULT_RESUME_ATTEMPTS: Final = 3
#: How long a deliberate stop (Ctrl-C) waits for the producer to confirm ``Cancel``.
CANCEL_TIMEOUT_S: Final = 2.0
#: Named endings of the producer that are a broken transport, not a verdict: resumable.
RESUMABLE_REASONS: Final = frozenset({Reason.PRODUCER_SHUTDOWN, Reason.CONNECTION_AGED_OUT})
#: How a reply ended on the producer that its reader is told as the RPC's status details
#: (after content, or on a resume): the result's own reason, never resumed.
REPLY_ENDINGS: Final = frozenset({Reason.GENERATOR_LOST, Reason.REPLY_ABANDONED})
#: A producer that does not stream says why in the status details: one of these codes.
KNOWN_REASONS: Final = frozenset(reason.value for reason in Reason)
#: Trailing metadata the producer sends with such an answer that the result keeps.
PASSED_METADATA: Final = frozenset({"retry-delay", "provider-http-status"})


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamOptions:
    target: str
    queue_size: int = DEFAULT_QUEUE_SIZE
    process_delay_s: float = 0.0
    mode: Literal["stream", "buffered"] = "stream"
    window_bytes: int = DEFAULT_WINDOW_BYTES
    max_message_bytes: int = 4 << 20
    deadline_s: float | None = None
    idle_timeout_s: float | None = None
    #: TLS material and the bearer token (none: plaintext, no token).
    security: Security = field(default_factory=Security)
    #: Resumes after a transport failure (0: none, the stream ends transport_io_error).
    resume_attempts: int = 0
    #: The first backoff before a resume; it doubles per attempt up to the cap, with jitter.
    resume_backoff_s: float = DEFAULT_RESUME_BACKOFF_S
    resume_backoff_max_s: float = DEFAULT_RESUME_BACKOFF_MAX_S
    #: A ping after this much silence; unanswered within the timeout, the call ends
    #: UNAVAILABLE (resumable). A cut-off producer is found within about their sum.
    keepalive_s: float = DEFAULT_KEEPALIVE_S
    keepalive_timeout_s: float = DEFAULT_KEEPALIVE_TIMEOUT_S

    def __post_init__(self) -> None:
        if not MIN_KEEPALIVE_S <= self.keepalive_s < float("inf"):
            raise ValueError(
                f"keepalive must be >= {MIN_KEEPALIVE_S:g} s (gRPC pings no faster; nor does a "
                "producer accept it by default)"
            )
        if not 0 < self.keepalive_timeout_s < float("inf"):
            raise ValueError("keepalive timeout must be > 0")
        if self.resume_attempts < 0:
            raise ValueError("resume attempts must be >= 0")
        if not 0 <= self.resume_backoff_s <= self.resume_backoff_max_s:
            raise ValueError("resume backoff must be >= 0 and at most its cap")
        if self.queue_size < 1:
            raise ValueError("queue size must be >= 1")
        if self.window_bytes < 1024:
            raise ValueError("window must be >= 1024 bytes")
        for name in ("deadline_s", "idle_timeout_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0")


def channel_options(options: StreamOptions) -> list[tuple[str, int | str]]:
    return [
        *options.security.channel_options(),
        # A bounded stream window: a paused reader really stops the producer.
        ("grpc.http2.lookahead_bytes", options.window_bytes),
        ("grpc.http2.bdp_probe", 0),
        ("grpc.max_receive_message_length", options.max_message_bytes),
        ("grpc.max_send_message_length", options.max_message_bytes),
        # A paid or partial stream is never retried behind our back.
        ("grpc.enable_retries", 0),
        # Each channel its own connection: a resume's new channel must not share the broken
        # connection's subchannel (gRPC's global pool), which is in reconnect backoff.
        ("grpc.use_local_subchannel_pool", 1),
        # A target of several producers (``ipv4:A,B``, ``dns:///name:port``): gRPC's own
        # round_robin picks among the connected ones, so a resume goes to a live producer.
        ("grpc.lb_policy_name", "round_robin"),
        # A producer cut off mid-stream sends no reset: an unanswered ping is how the call
        # learns it (UNAVAILABLE), bounded. Pings also while the consumer sends nothing
        # (a server stream: the consumer never does), and with no call in flight.
        ("grpc.keepalive_time_ms", round(options.keepalive_s * 1000)),
        ("grpc.keepalive_timeout_ms", round(options.keepalive_timeout_s * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]


def open_channel(options: StreamOptions) -> grpc.aio.Channel:
    """A channel to the producer: TLS when a CA is given, plaintext otherwise."""
    if options.security.tls:
        return grpc.aio.secure_channel(
            options.target, options.security.credentials(), options=channel_options(options)
        )
    return grpc.aio.insecure_channel(options.target, options=channel_options(options))


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """The call ended: cleanly (``code`` None), with a gRPC status, by the idle timer, or
    because the reader could not go on (``broken``: a named reason)."""

    code: grpc.StatusCode | None = None
    details: str = ""
    idle: bool = False
    metadata: tuple[tuple[str, str], ...] = ()
    broken: Reason | None = None

    @property
    def resumable(self) -> bool:
        """A transport failure a resume may repair: UNAVAILABLE, unless the producer named a
        reason other than its own shutdown or a connection's age (a refusal, a verdict)."""
        if self.code is not grpc.StatusCode.UNAVAILABLE or self.broken is not None:
            return False
        return self.details not in KNOWN_REASONS or Reason(self.details) in RESUMABLE_REASONS


QueueItem = bytes | StreamEnded


def backoff_s(options: StreamOptions, attempt: int) -> float:
    """Capped exponential backoff with jitter (half to all of it) before resume ``attempt``."""
    capped = min(options.resume_backoff_max_s, options.resume_backoff_s * 2.0 ** (attempt - 1))
    jitter: float = random.uniform(0.5, 1.0)
    return capped * jitter


class Reader:
    """Moves chunks from the call into the bounded queue; logs its own state changes."""

    def __init__(
        self,
        call: grpc.aio.UnaryStreamCall[pb.OpenRequest, pb.Chunk],
        queue: asyncio.Queue[QueueItem],
        options: StreamOptions,
        logger: structlog.typing.FilteringBoundLogger,
    ) -> None:
        self.call = call
        self.queue = queue
        self.options = options
        self.chunks_read = 0
        self.pauses = 0
        self.paused_s = 0.0
        self._log = logger.bind(component="reader")
        self.machine = Machine(READER_SPEC, self._log)

    @property
    def state(self) -> ReaderState:
        return self.machine.state

    async def _read(self) -> pb.Chunk | object:
        if self.options.idle_timeout_s is None:
            return await self.call.read()
        return await asyncio.wait_for(self.call.read(), self.options.idle_timeout_s)

    async def run(self) -> None:
        try:
            while (message := await self._receive()) is not None:
                self.chunks_read += 1
                if self.state is ReaderState.CONNECTING:
                    self.machine.fire(ReaderInput.FIRST_MESSAGE)
                await self._enqueue(message.data)
        except asyncio.CancelledError:
            if not self.machine.finished:
                self.machine.fire(ReaderInput.ENDED, why="cancelled")
            raise
        except Exception as error:  # a reader that dies must end the stream, never hang it
            self._log.exception("reader_failed")
            if not self.machine.finished:
                await self._broken(Reason.READER_FAILED, type(error).__name__)

    async def _receive(self) -> pb.Chunk | None:
        """The next chunk, or None once the call has ended (its end is already queued)."""
        try:
            message = await self._read()
        except TimeoutError:
            self.machine.fire(ReaderInput.ENDED, why="idle_timeout")
            await self.queue.put(StreamEnded(idle=True))
            return None
        except grpc.aio.AioRpcError as error:
            self.machine.fire(ReaderInput.ENDED, why=error.code().name)
            # grpc.aio's Metadata iterates as (key, value) pairs; grpc-stubs disagrees.
            pairs: Any = error.trailing_metadata() or ()
            trailing = tuple((str(key), str(value)) for key, value in pairs)
            await self.queue.put(
                StreamEnded(error.code(), error.details() or "", metadata=trailing)
            )
            return None
        if message is grpc.aio.EOF:  # type: ignore[attr-defined]  # missing from grpc-stubs
            self.machine.fire(ReaderInput.ENDED, why="eof")
            await self.queue.put(StreamEnded())
            return None
        if not isinstance(message, pb.Chunk):
            # grpc.aio hands over None for a message that does not parse as a Chunk.
            await self._broken(Reason.INVALID_TRANSPORT_MESSAGE, type(message).__name__)
            return None
        return message

    async def _broken(self, reason: Reason, what: str) -> None:
        self.machine.fire(ReaderInput.ENDED, why=reason.value, message=what)
        await self.queue.put(StreamEnded(broken=reason, details=what))

    async def _enqueue(self, data: bytes) -> None:
        if not self.queue.full():
            self.queue.put_nowait(data)
            return
        # Full: stop reading. gRPC stops granting window; the producer's writes block.
        self.pauses += 1
        started = time.monotonic()
        self._log.info("reads_paused", queue_depth=self.queue.qsize(), chunks_read=self.chunks_read)
        self.machine.fire(ReaderInput.QUEUE_FULL)
        await self.queue.put(data)
        waited = time.monotonic() - started
        self.paused_s += waited
        self.machine.fire(ReaderInput.QUEUE_DRAINED)
        self._log.info("reads_resumed", paused_ms=round(waited * 1000, 3))


class StreamSession:
    """One consumer stream over gRPC: request, reader, processor, verdict; after a transport
    failure, up to ``resume_attempts`` resumes on a new connection under the same stream id."""

    def __init__(
        self,
        request: pb.OpenRequest,
        consumer: ReplyConsumer,
        options: StreamOptions,
        logger: structlog.typing.FilteringBoundLogger,
    ) -> None:
        self.request = request
        self.consumer = consumer
        self.options = options
        self._log = logger
        self.reader: Reader | None = None
        self._call: grpc.aio.UnaryStreamCall[pb.OpenRequest, pb.Chunk] | None = None
        self.attempt = 0
        self._pauses = 0
        self._paused_s = 0.0

    def cancel(self) -> None:
        if self._call is not None:
            self._call.cancel()

    async def run(self, interrupted: asyncio.Event | None = None) -> StreamResult:
        options = self.options
        self._log.info(
            "stream_opening",
            target=options.target,
            case_id=self.request.case_id,
            queue_size=options.queue_size,
            window_bytes=options.window_bytes,
            mode=options.mode,
            resume_attempts=options.resume_attempts,
        )
        stop = interrupted or asyncio.Event()
        loop = asyncio.get_running_loop()
        ends_at = loop.time() + options.deadline_s if options.deadline_s else None
        while True:
            remaining = None if ends_at is None else max(ends_at - loop.time(), 0.0)
            outcome = await self._deliver(stop, remaining)
            if isinstance(outcome, StreamResult):
                result = outcome
                break
            if self.attempt >= options.resume_attempts or self.consumer.finished:
                result = self._ended(outcome)
                break
            self.attempt += 1
            resume_after = self.consumer.resume(self.attempt)
            wait = backoff_s(options, self.attempt)
            self._log.info(
                "stream_resuming",
                attempt=self.attempt,
                resume_after=resume_after,
                backoff_ms=round(wait * 1000, 3),
                grpc_code=outcome.code.name if outcome.code else None,
                grpc_details=outcome.details,
            )
            self.request = _resumed(self.request, resume_after)
            if ends_at is not None and loop.time() + wait >= ends_at:
                result = self.consumer.abort(Reason.DEADLINE_EXCEEDED)
                break
            stopped = asyncio.create_task(stop.wait())
            await asyncio.wait({stopped}, timeout=wait)
            stopped.cancel()
            if stop.is_set():
                await self._cancel_on_new_channel()
                result = self.consumer.abort(Reason.CONSUMER_CANCELLED)
                break
        flow = Flow(
            mode=options.mode,
            queue_size=options.queue_size,
            window_bytes=options.window_bytes,
            reads_paused=self._pauses,
            paused_ms=round(self._paused_s * 1000, 3),
        )
        return result.with_stream(self.request.stream_id, flow)

    async def _deliver(
        self, stop: asyncio.Event, remaining_s: float | None
    ) -> StreamResult | StreamEnded:
        """One connection, one call: the result, or how a resumable failure ended it."""
        options = self.options
        async with open_channel(options) as channel:
            stub = pb_grpc.ReplyStreamStub(channel)
            # A gRPC deadline backs up our own (ours fires first and says why).
            backstop = remaining_s + 5 if remaining_s is not None else None
            self._call = stub.Open(
                self.request, timeout=backstop, metadata=options.security.call_metadata()
            )
            size = 0 if options.mode == "buffered" else options.queue_size
            queue: asyncio.Queue[QueueItem] = asyncio.Queue(maxsize=size)
            log = self._log.bind(attempt=self.attempt) if self.attempt else self._log
            self.reader = Reader(self._call, queue, options, log)
            reader_task = asyncio.create_task(self.reader.run(), name="reader")
            processing = asyncio.create_task(self._process(queue), name="processor")
            stop_waiter = asyncio.create_task(stop.wait())
            try:
                done, _ = await asyncio.wait(
                    {processing, stop_waiter},
                    timeout=remaining_s,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                outcome: StreamResult | StreamEnded
                if processing in done:
                    outcome = processing.result()
                elif stop_waiter in done:
                    outcome = await self._stop_on_request(stub, processing)
                else:
                    outcome = self.consumer.abort(Reason.DEADLINE_EXCEEDED)
            finally:
                for task in (processing, stop_waiter, reader_task):
                    task.cancel()
                self._call.cancel()
                await asyncio.gather(processing, stop_waiter, reader_task, return_exceptions=True)
                self._pauses += self.reader.pauses
                self._paused_s += self.reader.paused_s
        return outcome

    async def _stop_on_request(
        self, stub: pb_grpc.ReplyStreamStub, processing: asyncio.Task[Any]
    ) -> StreamResult:
        """Ctrl-C mid-call: stop applying (the generation's end that the Cancel brings must
        not end the stream first), send ``Cancel``, end ``consumer_cancelled``."""
        processing.cancel()
        await asyncio.gather(processing, return_exceptions=True)
        await self._cancel_generation(stub)
        if self.consumer.finished:  # the processor ended the stream just before
            return self.consumer.result()
        return self.consumer.abort(Reason.CONSUMER_CANCELLED)

    async def _cancel_generation(self, stub: pb_grpc.ReplyStreamStub) -> None:
        """A deliberate stop: ask the producer to stop generating this reply at once (a
        broken connection alone leaves it generating for the detach grace). Bounded; a
        producer that does not answer in time, or at all, changes nothing here."""
        request = pb.CancelRequest(stream_id=self.request.stream_id)
        try:
            # The stub of an aio channel answers with a call to await; grpc-stubs says not.
            call: Any = stub.Cancel(
                request, timeout=CANCEL_TIMEOUT_S, metadata=self.options.security.call_metadata()
            )
            reply: pb.CancelReply = await call
        except grpc.aio.AioRpcError as error:
            self._log.info("cancel_unconfirmed", grpc_code=error.code().name)
            return
        self._log.info("cancel_sent", cancelled=reply.cancelled)

    async def _cancel_on_new_channel(self) -> None:
        """``Cancel`` between attempts (no channel is open then)."""
        async with open_channel(self.options) as channel:
            await self._cancel_generation(pb_grpc.ReplyStreamStub(channel))

    async def _process(self, queue: asyncio.Queue[QueueItem]) -> StreamResult | StreamEnded:
        if self.options.mode == "buffered":
            return await self._process_buffered(queue)
        while True:
            item = await queue.get()
            if isinstance(item, StreamEnded):
                return item if item.resumable else self._ended(item)
            if not self._apply(item):
                return self.consumer.result()
            if self.options.process_delay_s:
                await asyncio.sleep(self.options.process_delay_s)

    async def _process_buffered(
        self, queue: asyncio.Queue[QueueItem]
    ) -> StreamResult | StreamEnded:
        """Read the whole body first (bounded by the stream byte limit), then decode."""
        body: list[bytes] = []
        size = 0
        limit = self.consumer.limits.max_stream_bytes
        while True:
            item = await queue.get()
            if isinstance(item, StreamEnded):
                break
            body.append(item)
            size += len(item)
            if size > limit:  # the core refuses it; stop reading now
                self.cancel()
                item = StreamEnded()
                break
        for chunk in body:
            if not self._apply(chunk):
                return self.consumer.result()
        return item if item.resumable else self._ended(item)

    def _apply(self, data: bytes) -> bool:
        try:
            self.consumer.receive_data(data)
        except ProtocolFailure:
            self.cancel()  # nothing after the first refusal is read
            return False
        self._log.debug(
            "chunk_applied",
            size=len(data),
            bytes_applied=self.consumer.stats.bytes_received,
            frames_applied=self.consumer.stats.application_frames,
        )
        return True

    def _ended(self, end: StreamEnded) -> StreamResult:
        if end.broken is not None:
            self.cancel()
            return self.consumer.transport_error({"message": end.details}, reason=end.broken)
        if end.idle:
            self.cancel()
            return self.consumer.abort(Reason.IDLE_TIMEOUT)
        if end.code is None:
            return self.consumer.end_of_stream()
        if end.code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return self.consumer.abort(Reason.DEADLINE_EXCEEDED)
        transport: dict[str, Any] = {"grpc_code": end.code.name, "grpc_details": end.details}
        transport.update({key: value for key, value in end.metadata if key in PASSED_METADATA})
        nothing_received = self.consumer.stats.transport_fragments == 0
        if nothing_received and not self.attempt and end.details in KNOWN_REASONS:
            # The producer named why it did not stream (a refusal, or the provider failing
            # before the stream): report that reason, with its own status.
            reason = Reason(end.details)
            self._log.info("request_not_streamed", status=reason.status.value, **transport)
            return StreamResult(
                status=reason.status,
                reason=reason.value,
                case_id=self.request.case_id,
                request_sha256=self.consumer.binding.get("request_sha256"),
                binding_sha256=self.consumer.binding_sha256,
                wire_format=self.consumer.wire.value,
                detail=f"producer answered {end.code.name}",
                transport=transport,
            )
        return self.consumer.transport_error(transport, reason=_transport_reason(end))


async def stream_reply(
    request: ReplyRequest,
    options: StreamOptions,
    *,
    logger: structlog.typing.FilteringBoundLogger | None = None,
    interrupted: asyncio.Event | None = None,
    observer: Callable[[StreamSession], None] | None = None,
) -> StreamResult:
    """Ask for one bound reply and consume it: the request, the core, the session, the verdict.
    ``observer`` is handed the session before it runs (the live view reads it as it goes)."""
    structlog.contextvars.bind_contextvars(stream_id=request.stream_id)
    log = (logger or structlog.get_logger()).bind(case_id=request.case_id)
    consumer = request.consumer(log.bind(component="core"))
    session = StreamSession(request.open_request(), consumer, options, log)
    if observer is not None:
        observer(session)
    result = await session.run(interrupted)
    log.info(
        "stream_finished",
        status=result.status.value,
        reason=result.reason,
        **result.stats.to_dict(),
    )
    return result


def _transport_reason(end: StreamEnded) -> Reason:
    """The reason of a call that broke: the reply's own ending when the producer named one
    (``generator_lost``, ``reply_abandoned``), else ``transport_io_error``."""
    if end.details in KNOWN_REASONS and Reason(end.details) in REPLY_ENDINGS:
        return Reason(end.details)
    return Reason.TRANSPORT_IO_ERROR


def _resumed(request: pb.OpenRequest, resume_after: int) -> pb.OpenRequest:
    """The same request, resuming after ``resume_after`` (the stream id is the same)."""
    resumed = pb.OpenRequest()
    resumed.CopyFrom(request)
    resumed.resume_after = resume_after
    return resumed


def install_interrupt(event: asyncio.Event) -> Callable[[], None]:
    """Ctrl-C / SIGTERM set ``event``; returns a function that removes the handlers."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, event.set)

    def remove() -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)

    return remove
