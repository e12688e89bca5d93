"""One consumer stream: the call, the processor, the verdict, and the resume loop.

Two tasks share a bounded queue:

* the **reader** (``consumer/reader.py``) moves chunks from the call into the queue, and
  stops reading while it is full: the producer's writes block;
* the **processor** applies each chunk to the ``ReplyConsumer`` core (after an
  optional simulated per-chunk delay) and turns how the stream ended into the
  result document.

With no per-chunk delay to simulate (stream mode), the reader applies every chunk
itself in the pass of the event loop that read it, and there is no processor task: the
reader is the stream's work, run in the caller's own task when nothing can end it from
outside (no deadline, nothing to interrupt it), else raced against both. As many tasks
and event-loop passes per stream as a bare grpc.aio client's. The queue then holds only
how the call ended; with a delay, or buffered, the processor task runs as above.

A transport failure a resume may repair (``StreamEnded.resumable``) is resumed, up to
``resume_attempts`` times, on a new connection under the same stream id, after the
last frame applied. A refusal by the producer (a gRPC status whose details are one of
our refusal codes, before any chunk) is ``refused``; any other failure of the call is
``error`` / ``transport_io_error`` with the gRPC code and details.

What the peer sent is a reason only when it is a registered code
(``shared.reasons.registered``): a gRPC status's details name a refusal or a reply's
ending only by their exact code, and a terminal's own reason is judged by the core. The
details themselves are kept as ``transport.grpc_details`` (and in the trace), scrubbed
and bounded like every ``detail`` (``shared.errors.scrubbed_detail``), never as a reason.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine
from typing import Any, Final

import grpc
import structlog

from replywire.consumer.channels import ChannelPool
from replywire.consumer.interrupt import interrupted_within
from replywire.consumer.options import StreamOptions
from replywire.consumer.reader import NOT_A_GRPC_SERVER, QueueItem, Reader, StreamEnded
from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.errors import ProtocolFailure, scrubbed_detail
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.reason_registry import REASONS, REPLY_ENDINGS
from replywire.shared.reasons import Reason, registered
from replywire.shared.result import Flow, StreamResult

#: How long a deliberate stop (Ctrl-C) waits for the producer to confirm ``Cancel``.
CANCEL_TIMEOUT_S: Final = 2.0
TRANSPORT_FAILED: Final = Reason.TRANSPORT_IO_ERROR.value
#: Trailing metadata the producer sends with such an answer that the result keeps.
PASSED_METADATA: Final = frozenset({"retry-delay", "provider-http-status"})


def dropped_by_grpc(end: StreamEnded) -> bool:
    """gRPC's own CANCELLED, not ours and not the producer's (whose statuses name a reason):
    the producer's gRPC dropped the request before its servicer saw it (``--max-pending``
    requests were waiting), so no stream began and the producer's trace has none."""
    return end.code is grpc.StatusCode.CANCELLED and end.details == "CANCELLED"


def metadata_refused_by_grpc(end: StreamEnded) -> bool:
    """gRPC's own refusal of a header list past its limit: the producer's gRPC refused the
    request's metadata (past twice its ``--max-metadata-bytes``) before its servicer saw
    it, or this channel refused the producer's (past ``max_metadata_bytes``)."""
    return end.code is grpc.StatusCode.RESOURCE_EXHAUSTED and end.details.startswith(
        "received metadata size exceeds"
    )


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


class StreamSession:
    """One consumer stream over gRPC: request, reader, processor, verdict; after a transport
    failure, up to ``resume_attempts`` resumes on a new connection under the same stream id."""

    def __init__(
        self,
        request: pb.OpenRequest,
        consumer: ReplyConsumer,
        options: StreamOptions,
        logger: structlog.typing.FilteringBoundLogger,
        client: ChannelPool,
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
        #: The trace context sent with every call of the stream (the Open, each resume, a
        #: Cancel): empty unless tracing is on (``consumer/spans.py``).
        self.trace_metadata: tuple[tuple[str, str], ...] = ()
        #: Told of each attempt and resume (the stream's span events), when tracing is on.
        self.on_event: Callable[..., None] | None = None

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
            if self.on_event is not None:
                self.on_event("stream_resuming", attempt=self.attempt, resume_after=resume_after)
            if ends_at is not None and loop.time() + wait >= ends_at:
                result = self.consumer.abort(Reason.DEADLINE_EXCEEDED)
                break
            if await interrupted_within(stop, wait):
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
        self._log.info(
            "stream_finished",
            status=result.status.value,
            reason=result.reason,
            **result.stats.to_dict(),
            **verdict_fields(result),
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
            metadata=options.security.call_metadata(options.target) + self.trace_metadata,
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
                metadata=options.security.call_metadata(options.target) + self.trace_metadata,
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
        if end.not_grpc_server:  # said as what it is, once: no resume mends it
            transport["message"] = NOT_A_GRPC_SERVER
            return self.consumer.transport_error(transport, reason=Reason.TRANSPORT_IO_ERROR)
        nothing_received = self.consumer.stats.transport_fragments == 0
        named = registered(end.details)
        if nothing_received and not self.attempt and named is not None:
            # The producer named why it did not stream (a refusal, or the provider failing
            # before the stream): report that reason, with its own status.
            return self._not_streamed(named, transport)
        if nothing_received and dropped_by_grpc(end):
            return self._not_streamed(Reason.PRODUCER_OVERLOADED, transport)
        if nothing_received and metadata_refused_by_grpc(end):
            return self._not_streamed(Reason.METADATA_TOO_LARGE, transport)
        if nothing_received and refused_by_http2(end):
            return self._not_streamed(Reason.STREAM_LIMIT, transport)
        return self.consumer.transport_error(transport, reason=_transport_reason(end))

    def _not_streamed(self, reason: Reason, transport: dict[str, Any]) -> StreamResult:
        """The producer's answer instead of a stream: its reason, with its own status."""
        self._log.info("request_not_streamed", status=REASONS[reason].status.value, **transport)
        return StreamResult(
            status=REASONS[reason].status,
            reason=reason.value,
            case_id=self.request.case_id,
            request_sha256=self.consumer.binding.get("request_sha256"),
            binding_sha256=self.consumer.binding_sha256,
            wire_format=self.consumer.wire.value,
            detail=f"producer answered {transport['grpc_code']}",
            transport=transport,
        )


def _transport_reason(end: StreamEnded) -> Reason:
    """The reason of a call that broke: the reply's own ending when the producer named one
    (``generator_lost``, ``reply_abandoned``), else ``transport_io_error``."""
    named = registered(end.details)
    return named if named is not None and named in REPLY_ENDINGS else Reason.TRANSPORT_IO_ERROR


def verdict_fields(result: StreamResult) -> dict[str, Any]:
    """What ``stream_finished`` adds for a reply of another kind than grounded: its
    ``kind``, and the call a tool call reason refused (``call_index``, ``call_id``,
    ``call_name``: the timeline names it with the verdict)."""
    fields: dict[str, Any] = {}
    if result.kind is not None:
        fields["kind"] = result.kind
    if result.call is not None:
        fields.update((f"call_{key}", result.call.get(key)) for key in ("index", "id", "name"))
    return fields


def _resumed(request: pb.OpenRequest, resume_after: int) -> pb.OpenRequest:
    """The same request, resuming after ``resume_after`` (the stream id is the same)."""
    resumed = pb.OpenRequest()
    resumed.CopyFrom(request)
    resumed.resume_after = resume_after
    return resumed
