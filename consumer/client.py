"""The consumer's network edge: one gRPC stream, flow-controlled, fed to the sans-IO core.

Two tasks share a bounded queue:

* the **reader** moves chunks from the call into the queue. When the queue is
  full it stops calling ``read()``; gRPC then stops returning HTTP/2 window
  to the producer, whose writes block. The channel's window is bounded
  (``grpc.http2.lookahead_bytes`` with BDP probing off): with gRPC's defaults a
  reader that stops lets the server push megabytes into one stream. gRPC's
  transport returns window once more after the reader's last ``read()`` (see
  ``announced_window``), so the channel announces half of ``window_bytes``: a
  paused stream holds at most ``window_bytes`` in the consumer's transport;
* the **processor** applies each chunk to the ``ReplyConsumer`` core (after an
  optional simulated per-chunk delay) and turns how the stream ended into the
  result document.

With no per-chunk delay to simulate (stream mode), the reader applies every chunk
itself in the pass of the event loop that read it, and there is no processor task: the
reader is the stream's work, run in the caller's own task when nothing can end it from
outside (no deadline, nothing to interrupt it), else raced against both. As many tasks
and event-loop passes per stream as a bare grpc.aio client's. The queue then holds only
how the call ended; with a delay, or buffered, the processor task runs as above.

Channels are kept by a ``ReplyClient``: one per target and channel options, shared by
every stream it runs (a new TCP connection and HTTP/2 handshake per stream cost more
than the stream). The HTTP/2 window is per stream, so backpressure is unchanged. A
stream whose connection broke retires the channel: its resume, and the next stream,
get a new connection, never the broken one's reconnect backoff.

Time is bounded twice: an overall deadline and an idle timeout (no chunk for
that long). Either cancels the RPC and ends ``incomplete`` with the partial
content kept. A peer that went silent without closing (its host cut off: no reset
ever comes) is found sooner by gRPC's keepalive: a ping every ``keepalive_s`` of
silence, unanswered within ``keepalive_timeout_s``, closes the connection, and the
call ends ``UNAVAILABLE``, a transport failure that a resume repairs. A refusal by
the producer (a gRPC status whose details are one of our refusal codes, before any
chunk) is ``refused``; any other failure of the call is ``error`` /
``transport_io_error`` with the gRPC code and details.

What the peer sent is a reason only when it is a registered code
(``shared.errors.registered``): a gRPC status's details name a refusal or a reply's
ending only by their exact code, and a terminal's own reason is judged by the core. The
details themselves are kept as ``transport.grpc_details`` (and in the trace), scrubbed
and bounded like every ``detail`` (``shared.errors.scrubbed_detail``), never as a reason.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import grpc
import structlog

from consumer.reader_states import SPEC as READER_SPEC
from consumer.reader_states import ReaderInput, ReaderState
from consumer.security import Security
from shared.consumer_core import ReplyConsumer
from shared.errors import REPLY_ENDINGS, ProtocolFailure, Reason, registered, scrubbed_detail
from shared.fsm import Machine
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
#: producer accepts that by default (its --min-ping-interval-s, producer.settings).
MIN_KEEPALIVE_S: Final = 1.0
#: Resumes of `consumer stream` (the StreamOptions default, 0, is today's behaviour: none).
DEFAULT_RESUME_ATTEMPTS: Final = 3
#: How long a deliberate stop (Ctrl-C) waits for the producer to confirm ``Cancel``.
CANCEL_TIMEOUT_S: Final = 2.0
#: Named endings of the producer that are a broken transport, not a verdict: resumable
#: (the transport faults' abort is one on purpose: its code named, it still resumes).
RESUMABLE_REASONS: Final = frozenset(
    {Reason.PRODUCER_SHUTDOWN, Reason.CONNECTION_AGED_OUT, Reason.CONTROLLED_TRANSPORT_ABORT}
)
TRANSPORT_FAILED: Final = Reason.TRANSPORT_IO_ERROR.value
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
    #: TLS material and the bearer token (none: plaintext, no token). A token with a
    #: plaintext channel to a target that is not local is refused unless ``insecure``.
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
        # A token never goes in clear to another host unless the security says --insecure:
        # refused here, before any connection (a ConfigurationError: a usage error).
        self.security.check(self.target)
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


def announced_window(window_bytes: int) -> int:
    """The HTTP/2 stream window the channel announces so that a paused stream holds at
    most ``window_bytes`` in the consumer's transport: half of it.

    gRPC's chttp2 transport counts a stream's unread bytes only while a ``read()`` is
    pending (the stream's "pending size", set when a read completes). Once the reader
    stops, the bytes that arrive after its last read look consumed, and the transport
    returns them to the producer in one WINDOW_UPDATE: at once if it exceeds
    max(announced / 2, 8 KiB), else with the connection's next write (a keepalive ping,
    another stream, the ``Cancel`` of a stop). Sending the update forgets the pending
    size, so it happens once per pause. The producer can therefore get twice the
    announced window past the chunks the consumer has read; announcing half keeps that
    to ``window_bytes`` (measured on the wire: bench.memory, tests/test_flow_window.py).
    """
    return window_bytes // 2


def channel_options(options: StreamOptions) -> list[tuple[str, int | str]]:
    return [
        *options.security.channel_options(),
        # A bounded stream window: a paused reader really stops the producer, after at
        # most window_bytes (half announced, half the one update gRPC re-grants).
        ("grpc.http2.lookahead_bytes", announced_window(options.window_bytes)),
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
    """A channel to the producer: TLS with --tls or --tls-ca, plaintext otherwise. The token
    is the channel's call credentials (every call carries it: Open, resumes, Cancel), over
    TLS or gRPC's local credentials (a loopback target or a Unix socket); only under
    --insecure does a plaintext channel to another host carry it, as each call's metadata
    (consumer.security)."""
    credentials = options.security.credentials(options.target)
    if credentials is not None:
        return grpc.aio.secure_channel(
            options.target, credentials, options=channel_options(options)
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
    #: The reader applied a chunk itself and the core refused the stream: its verdict stands.
    judged: bool = False

    @property
    def resumable(self) -> bool:
        """A transport failure a resume may repair: UNAVAILABLE, unless the producer named a
        reason other than its own shutdown or a connection's age (a refusal, a verdict)."""
        if self.code is not grpc.StatusCode.UNAVAILABLE or self.broken is not None or self.judged:
            return False
        named = registered(self.details)
        return named is None or named in RESUMABLE_REASONS


QueueItem = bytes | StreamEnded
_CHUNK: Final = pb.Chunk


def dropped_by_grpc(end: StreamEnded) -> bool:
    """gRPC's own CANCELLED, not ours and not the producer's (whose statuses name a reason):
    the producer's gRPC dropped the request before its servicer saw it (``--max-pending``
    requests were waiting), so no stream began and the producer's trace has none."""
    return end.code is grpc.StatusCode.CANCELLED and end.details == "CANCELLED"


def refused_by_http2(end: StreamEnded) -> bool:
    """The producer's HTTP/2 layer refused the stream unprocessed (RST_STREAM with
    REFUSED_STREAM, error code 7): its connection already held the streams it allows at
    once (``--max-streams`` + 1), a burst on one shared connection racing the streams
    that just ended. No stream began; it is the stream limit, said by the transport."""
    return (
        end.code is grpc.StatusCode.UNAVAILABLE
        and "RST_STREAM" in end.details
        and "error code 7" in end.details
    )


def backoff_s(options: StreamOptions, attempt: int) -> float:
    """Capped exponential backoff with jitter (half to all of it) before resume ``attempt``."""
    capped = min(options.resume_backoff_max_s, options.resume_backoff_s * 2.0 ** (attempt - 1))
    jitter: float = random.uniform(0.5, 1.0)
    return capped * jitter


class IdleWatch:
    """The idle timeout (no chunk for ``timeout_s`` while reading) with one timer per
    silence, not a task and a timer per read (``asyncio.wait_for``): a read notes when it
    began; the timer, when it fires, sets itself again for that moment plus the timeout
    while a chunk came since, and else cancels the reading task, whose read then raises
    ``TimeoutError`` (as ``asyncio.timeout`` does: a cancel from elsewhere stays one).
    A reader paused on a full queue is not reading: the timeout does not run."""

    def __init__(self, call: grpc.aio.UnaryStreamCall[pb.OpenRequest, pb.Chunk], timeout_s: float):
        self._call = call
        self._timeout_s = timeout_s
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None  # called by the reading task
        self._task = task
        self._cancelling = task.cancelling()
        self._began = self._loop.time()
        self._reading = False
        self._expired = False
        self._timer = self._loop.call_at(self._began + timeout_s, self._check)

    async def read(self) -> object:
        self._began = self._loop.time()
        self._reading = True
        try:
            return await self._call.read()
        except asyncio.CancelledError:
            if self._expired and self._task.uncancel() <= self._cancelling:
                raise TimeoutError from None
            raise
        finally:
            self._reading = False

    def _check(self) -> None:
        now = self._loop.time()
        if self._reading and now >= self._began + self._timeout_s:
            self._expired = True
            self._task.cancel()
            return
        # A read began since (a chunk came), or the reader is paused: not idle.
        due = self._began + self._timeout_s if self._reading else now + self._timeout_s
        self._timer = self._loop.call_at(due, self._check)

    def close(self) -> None:
        self._timer.cancel()


class Reader:
    """Moves chunks from the call into the bounded queue; logs its own state changes."""

    def __init__(
        self,
        call: grpc.aio.UnaryStreamCall[pb.OpenRequest, pb.Chunk],
        queue: asyncio.Queue[QueueItem],
        options: StreamOptions,
        logger: structlog.typing.FilteringBoundLogger,
        apply: Callable[[bytes], bool] | None = None,
    ) -> None:
        self.call = call
        self.queue = queue
        self.options = options
        #: Applies a chunk to the core at once (False: the core refused the stream); None:
        #: every chunk goes through the queue (a simulated delay, or buffered mode).
        self.apply = apply
        self.chunks_read = 0
        self.pauses = 0
        self.paused_s = 0.0
        self._log = logger.bind(component="reader")
        self.machine = Machine(READER_SPEC, self._log)

    @property
    def state(self) -> ReaderState:
        return self.machine.state

    async def run(self) -> None:
        try:
            await self._read_all()
        except asyncio.CancelledError:
            if not self.machine.finished:
                self.machine.fire(ReaderInput.ENDED, why="cancelled")
            raise
        except Exception as error:  # a reader that dies must end the stream, never hang it
            self._log.exception("reader_failed")
            if not self.machine.finished:
                await self._broken(Reason.READER_FAILED, type(error).__name__)

    async def _read_all(self) -> None:
        idle_s = self.options.idle_timeout_s
        if idle_s is None:
            await self._read_chunks(self.call.read)
            return
        watch = IdleWatch(self.call, idle_s)
        try:
            await self._read_chunks(watch.read)
        finally:
            watch.close()

    async def _read_chunks(self, read: Callable[[], Awaitable[object]]) -> None:
        """Chunk by chunk until the call ends (its end queued) or the core refused. A chunk
        is applied here when the processor waits on an empty queue (it would apply it next,
        one event-loop pass later), else queued. One loop, no call per chunk but the read
        and the core's: this is the consumer's per-chunk path."""
        apply, queue = self.apply, self.queue
        while True:
            try:
                message = await read()
            except TimeoutError:
                self.machine.fire(ReaderInput.ENDED, why="idle_timeout")
                await self.queue.put(StreamEnded(idle=True))
                return
            except grpc.aio.AioRpcError as error:
                await self._failed(error)
                return
            if type(message) is not _CHUNK:
                await self._not_a_chunk(message)
                return
            self.chunks_read += 1
            if self.chunks_read == 1:
                self.machine.fire(ReaderInput.FIRST_MESSAGE)
            if apply is None or queue.qsize():
                await self._enqueue(message.data)
            elif not apply(message.data):
                self.machine.fire(ReaderInput.ENDED, why="refused")
                queue.put_nowait(StreamEnded(judged=True))
                return

    async def _failed(self, error: grpc.aio.AioRpcError) -> None:
        self.machine.fire(ReaderInput.ENDED, why=error.code().name)
        # grpc.aio's Metadata iterates as (key, value) pairs; grpc-stubs disagrees.
        pairs: Any = error.trailing_metadata() or ()
        trailing = tuple((str(key), str(value)) for key, value in pairs)
        await self.queue.put(StreamEnded(error.code(), error.details() or "", metadata=trailing))

    async def _not_a_chunk(self, message: object) -> None:
        if message is grpc.aio.EOF:  # type: ignore[attr-defined]  # missing from grpc-stubs
            self.machine.fire(ReaderInput.ENDED, why="eof")
            await self.queue.put(StreamEnded())
            return
        # grpc.aio hands over None for a message that does not parse as a Chunk.
        await self._broken(Reason.INVALID_TRANSPORT_MESSAGE, type(message).__name__)

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
        client: ReplyClient,
    ) -> None:
        self.request = request
        self.consumer = consumer
        self.options = options
        self._log = logger
        #: Where the channels come from (the client closes them, not the session).
        self.client = client
        self.reader: Reader | None = None
        self._call: grpc.aio.UnaryStreamCall[pb.OpenRequest, pb.Chunk] | None = None
        self.attempt = 0
        self._pauses = 0
        self._paused_s = 0.0
        #: Debug records are built only when written (their values cost per chunk).
        self._debug = logger.is_enabled_for(logging.DEBUG)

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
        # No event to watch when nobody can interrupt (no task waits on one per call).
        stop = interrupted
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
                grpc_details=scrubbed_detail(outcome.details),
            )
            self.request = _resumed(self.request, resume_after)
            if ends_at is not None and loop.time() + wait >= ends_at:
                result = self.consumer.abort(Reason.DEADLINE_EXCEEDED)
                break
            if await _interrupted_within(stop, wait):
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
        self, stop: asyncio.Event | None, remaining_s: float | None
    ) -> StreamResult | StreamEnded:
        """One connection, one call: the result, or how a resumable failure ended it."""
        options = self.options
        kept = await self.client.checkout(options)
        try:
            outcome = await self._call_once(kept.stub, stop, remaining_s)
            if isinstance(outcome, StreamEnded) or outcome.reason == TRANSPORT_FAILED:
                self.client.retire(options, kept.channel)  # a broken transport: never reused
        finally:
            await self.client.checkin(kept)
        return outcome

    async def _call_once(
        self,
        stub: pb_grpc.ReplyStreamAsyncStub,
        stop: asyncio.Event | None,
        remaining_s: float | None,
    ) -> StreamResult | StreamEnded:
        """The call: request, reader, processor, until one of them ends it.

        With nothing to simulate (stream mode, no per-chunk delay) the reader applies every
        chunk itself and there is no processor: the reader is the work. A processor task
        runs (and takes chunks from the queue) only in buffered mode or with a delay. The
        work runs in this task when nothing can end it from outside (no deadline, nothing
        to interrupt it); else as a task raced against the deadline and the interrupt."""
        options = self.options
        # A gRPC deadline backs up our own (ours fires first and says why).
        backstop = remaining_s + 5 if remaining_s is not None else None
        call = self._call = stub.Open(
            self.request,
            timeout=backstop,
            metadata=options.security.call_metadata(options.target),
        )
        size = 0 if options.mode == "buffered" else options.queue_size
        queue: asyncio.Queue[QueueItem] = asyncio.Queue(maxsize=size)
        log = self._log.bind(attempt=self.attempt) if self.attempt else self._log
        direct = options.mode == "stream" and not options.process_delay_s
        reader = self.reader = Reader(call, queue, options, log, self._apply if direct else None)
        reader_task = None if direct else asyncio.create_task(reader.run(), name="reader")
        try:
            if stop is None and remaining_s is None:
                return await self._work(queue, direct)
            return await self._race(self._work(queue, direct), stub, stop, remaining_s)
        finally:
            if reader_task is not None:
                reader_task.cancel()
            call.cancel()
            if reader_task is not None:
                await asyncio.gather(reader_task, return_exceptions=True)
            self._pauses += reader.pauses
            self._paused_s += reader.paused_s

    async def _work(
        self, queue: asyncio.Queue[QueueItem], direct: bool
    ) -> StreamResult | StreamEnded:
        if not direct:
            return await self._process(queue)
        assert self.reader is not None
        await self.reader.run()
        if queue.empty():  # the reader always queues how the call ended; never hang on it
            return self._judge(StreamEnded(broken=Reason.READER_FAILED, details="no ending"))
        item = queue.get_nowait()
        assert isinstance(item, StreamEnded)  # the reader applied every chunk itself
        return self._judge(item)

    async def _race(
        self,
        work: Coroutine[Any, Any, StreamResult | StreamEnded],
        stub: pb_grpc.ReplyStreamAsyncStub,
        stop: asyncio.Event | None,
        remaining_s: float | None,
    ) -> StreamResult | StreamEnded:
        """The work against the deadline and the interrupt, whichever ends first."""
        processing = asyncio.create_task(work, name="processor")
        stop_waiter = None if stop is None else asyncio.create_task(stop.wait())
        waiters = {processing} if stop_waiter is None else {processing, stop_waiter}
        try:
            done, _ = await asyncio.wait(
                waiters, timeout=remaining_s, return_when=asyncio.FIRST_COMPLETED
            )
            if processing in done:
                return processing.result()
            if stop_waiter in done:
                return await self._stop_on_request(stub, processing)
            return self.consumer.abort(Reason.DEADLINE_EXCEEDED)
        finally:
            for task in waiters:
                task.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

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
            options = self.options
            call: Any = stub.Cancel(
                request,
                timeout=CANCEL_TIMEOUT_S,
                metadata=options.security.call_metadata(options.target),
            )
            reply: pb.CancelReply = await call
        except grpc.aio.AioRpcError as error:
            self._log.info("cancel_unconfirmed", grpc_code=error.code().name)
            return
        self._log.info("cancel_sent", cancelled=reply.cancelled)

    async def _cancel_on_new_channel(self) -> None:
        """``Cancel`` between attempts (the broken channel is retired: a new one)."""
        async with self.client.channel(self.options) as channel:
            await self._cancel_generation(pb_grpc.ReplyStreamStub(channel))

    async def _process(self, queue: asyncio.Queue[QueueItem]) -> StreamResult | StreamEnded:
        if self.options.mode == "buffered":
            return await self._process_buffered(queue)
        while True:
            item = await queue.get()
            if isinstance(item, StreamEnded):
                return self._judge(item)
            if not self._apply(item):
                return self.consumer.result()
            if self.options.process_delay_s:
                await asyncio.sleep(self.options.process_delay_s)

    def _judge(self, end: StreamEnded) -> StreamResult | StreamEnded:
        """How the call ended: the verdict, or (resumable) the ending for the resume loop."""
        if end.judged:
            return self.consumer.result()
        return end if end.resumable else self._ended(end)

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
        consumer = self.consumer
        try:
            consumer.receive_data(data)
        except ProtocolFailure:
            self.cancel()  # nothing after the first refusal is read
            return False
        if self._debug:
            self._log.debug(
                "chunk_applied",
                size=len(data),
                bytes_applied=consumer.stats.bytes_received,
                frames_applied=consumer.stats.application_frames,
            )
        return True

    def _ended(self, end: StreamEnded) -> StreamResult:
        if end.broken is not None:
            self.cancel()
            message = scrubbed_detail(end.details)
            return self.consumer.transport_error({"message": message}, reason=end.broken)
        if end.idle:
            self.cancel()
            return self.consumer.abort(Reason.IDLE_TIMEOUT)
        if end.code is None:
            return self.consumer.end_of_stream()
        if end.code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return self.consumer.abort(Reason.DEADLINE_EXCEEDED)
        # The peer's text: kept scrubbed and bounded, never raw (a reason only if a code).
        transport: dict[str, Any] = {
            "grpc_code": end.code.name,
            "grpc_details": scrubbed_detail(end.details),
        }
        transport.update(
            (key, scrubbed_detail(value)) for key, value in end.metadata if key in PASSED_METADATA
        )
        nothing_received = self.consumer.stats.transport_fragments == 0
        named = registered(end.details)
        if nothing_received and not self.attempt and named is not None:
            # The producer named why it did not stream (a refusal, or the provider failing
            # before the stream): report that reason, with its own status.
            return self._not_streamed(named, transport)
        if nothing_received and dropped_by_grpc(end):
            return self._not_streamed(Reason.PRODUCER_OVERLOADED, transport)
        if nothing_received and refused_by_http2(end):
            return self._not_streamed(Reason.STREAM_LIMIT, transport)
        return self.consumer.transport_error(transport, reason=_transport_reason(end))

    def _not_streamed(self, reason: Reason, transport: dict[str, Any]) -> StreamResult:
        """The producer's answer instead of a stream: its reason, with its own status."""
        self._log.info("request_not_streamed", status=reason.status.value, **transport)
        return StreamResult(
            status=reason.status,
            reason=reason.value,
            case_id=self.request.case_id,
            request_sha256=self.consumer.binding.get("request_sha256"),
            binding_sha256=self.consumer.binding_sha256,
            wire_format=self.consumer.wire.value,
            detail=f"producer answered {transport['grpc_code']}",
            transport=transport,
        )


#: What makes two streams' channels interchangeable: target, TLS material, channel options.
ChannelKey = tuple[str, Security, tuple[tuple[str, int | str], ...]]


def channel_key(options: StreamOptions) -> ChannelKey:
    return (options.target, options.security, tuple(channel_options(options)))


#: How long a new channel's first streams wait for its connection before they are sent.
CONNECT_WAIT_S: Final = 5.0
_SETTLED: Final = frozenset(
    {
        grpc.ChannelConnectivity.READY,
        grpc.ChannelConnectivity.TRANSIENT_FAILURE,
        grpc.ChannelConnectivity.SHUTDOWN,
    }
)


async def _connected(channel: grpc.aio.Channel) -> None:
    """Wait (bounded) until a new channel is connected or has failed. Streams sent on it
    before the producer's HTTP/2 SETTINGS arrive are not held to its concurrent-stream
    bound: a burst past the bound is refused (RST_STREAM REFUSED_STREAM, UNAVAILABLE to
    the caller); once connected, gRPC queues the excess until streams end. A channel that
    failed, or is still connecting after the bound, is used as it is (its call fails or
    waits as it would have)."""
    loop = asyncio.get_running_loop()
    ends_at = loop.time() + CONNECT_WAIT_S
    state = channel.get_state(try_to_connect=True)
    while state not in _SETTLED and loop.time() < ends_at:
        try:
            await asyncio.wait_for(channel.wait_for_state_change(state), ends_at - loop.time())
        except TimeoutError:
            return
        state = channel.get_state()


@dataclass(slots=True, eq=False)
class _Kept:
    """A channel the client keeps, how many streams use it now, and its first connection."""

    channel: grpc.aio.Channel
    connecting: asyncio.Task[None]
    #: The channel's stub, made once (a stub per call makes its callables per call).
    stub: pb_grpc.ReplyStreamAsyncStub
    users: int = 0
    retired: bool = False


class ReplyClient:
    """Streams bound replies over the channels it keeps: one per target and channel
    options (``channel_key``), shared by every stream it runs, closed with the client.

        async with ReplyClient(options) as client:
            result = await client.stream(request)

    Each stream is its own HTTP/2 stream with its own window, so backpressure is what it
    is with a channel per stream. A stream that ends with a broken transport retires its
    channel: the resume and later streams open a new one (the old one, in gRPC's
    reconnect backoff, is closed once its last stream ends). Many concurrent streams on
    one channel share one connection, and so the producer's per-connection stream bound
    (``--max-streams`` + 1): beyond it gRPC queues them in the client (a new channel's
    first streams wait for its connection, so they are held to the bound too), and a
    stream the producer's HTTP/2 layer still refuses at that bound is ``stream_limit``.
    """

    def __init__(
        self,
        options: StreamOptions,
        *,
        logger: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.options = options
        self._logger = logger
        self._kept: dict[ChannelKey, _Kept] = {}
        #: The key of the client's own options, made once (every stream would make it).
        self._own_key = channel_key(options)
        #: Retired channels still in use: closed by their last stream, or by close().
        self._retired: list[_Kept] = []

    async def __aenter__(self) -> ReplyClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def channels(self) -> int:
        """Channels open now (kept, or retired and still in use)."""
        return len(self._kept) + len(self._retired)

    def _key(self, options: StreamOptions) -> ChannelKey:
        return self._own_key if options is self.options else channel_key(options)

    @asynccontextmanager
    async def channel(self, options: StreamOptions) -> AsyncIterator[grpc.aio.Channel]:
        """The kept channel for ``options`` (opened on first use), for one call."""
        kept = await self.checkout(options)
        try:
            yield kept.channel
        finally:
            await self.checkin(kept)

    async def checkout(self, options: StreamOptions) -> _Kept:
        """The kept channel for ``options`` (opened on first use), counted as in use until
        ``checkin``: what ``channel()`` does, without a context manager per stream."""
        key = self._key(options)
        kept = self._kept.get(key)
        if kept is None:
            channel = open_channel(options)
            connecting = asyncio.create_task(_connected(channel))
            kept = self._kept[key] = _Kept(channel, connecting, pb_grpc.ReplyStreamStub(channel))
        kept.users += 1
        if not kept.connecting.done():
            try:
                await asyncio.shield(kept.connecting)
            except BaseException:
                await self.checkin(kept)
                raise
        return kept

    async def checkin(self, kept: _Kept) -> None:
        """The call on ``kept`` ended; a retired channel's last call closes it."""
        kept.users -= 1
        if kept.retired and not kept.users:
            self._retired.remove(kept)
            await kept.channel.close(None)

    def retire(self, options: StreamOptions, channel: grpc.aio.Channel) -> None:
        """The transport under ``channel`` broke: the next call opens a new channel."""
        key = self._key(options)
        kept = self._kept.get(key)
        if kept is None or kept.channel is not channel:
            return  # already retired by another stream of the same connection
        del self._kept[key]
        kept.retired = True
        self._retired.append(kept)

    async def close(self) -> None:
        """Close every channel (a stream still running on one ends ``CANCELLED``)."""
        kept = [*self._kept.values(), *self._retired]
        self._kept.clear()
        self._retired.clear()
        for each in kept:
            each.connecting.cancel()
            await each.channel.close(None)

    async def stream(
        self,
        request: ReplyRequest,
        options: StreamOptions | None = None,
        *,
        logger: structlog.typing.FilteringBoundLogger | None = None,
        interrupted: asyncio.Event | None = None,
        observer: Callable[[StreamSession], None] | None = None,
    ) -> StreamResult:
        """Ask for one bound reply and consume it: the request, the core, the session, the
        verdict. ``options``: this stream's (the client's by default); ``observer`` is
        handed the session before it runs."""
        options = options or self.options
        structlog.contextvars.bind_contextvars(stream_id=request.stream_id)
        log = (logger or self._logger or structlog.get_logger()).bind(case_id=request.case_id)
        sent = request.open_request()
        consumer = request.consumer(log.bind(component="core"), sent=sent)
        session = StreamSession(sent, consumer, options, log, self)
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


async def stream_reply(
    request: ReplyRequest,
    options: StreamOptions,
    *,
    logger: structlog.typing.FilteringBoundLogger | None = None,
    interrupted: asyncio.Event | None = None,
    observer: Callable[[StreamSession], None] | None = None,
) -> StreamResult:
    """One stream on a channel of its own (``ReplyClient`` keeps channels for many).
    ``observer`` is handed the session before it runs (the live view reads it as it goes)."""
    async with ReplyClient(options) as client:
        return await client.stream(
            request, logger=logger, interrupted=interrupted, observer=observer
        )


def _transport_reason(end: StreamEnded) -> Reason:
    """The reason of a call that broke: the reply's own ending when the producer named one
    (``generator_lost``, ``reply_abandoned``), else ``transport_io_error``."""
    named = registered(end.details)
    return named if named is not None and named in REPLY_ENDINGS else Reason.TRANSPORT_IO_ERROR


def _resumed(request: pb.OpenRequest, resume_after: int) -> pb.OpenRequest:
    """The same request, resuming after ``resume_after`` (the stream id is the same)."""
    resumed = pb.OpenRequest()
    resumed.CopyFrom(request)
    resumed.resume_after = resume_after
    return resumed


async def _interrupted_within(stop: asyncio.Event | None, wait_s: float) -> bool:
    """Wait ``wait_s`` (a resume's backoff); True, at once, if ``stop`` is set meanwhile."""
    if stop is None:
        await asyncio.sleep(wait_s)
        return False
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({stopped}, timeout=wait_s)
    stopped.cancel()
    return stop.is_set()


def install_interrupt(event: asyncio.Event) -> Callable[[], None]:
    """Ctrl-C / SIGTERM set ``event``; returns a function that removes the handlers."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, event.set)

    def remove() -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)

    return remove
