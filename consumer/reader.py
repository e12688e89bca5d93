"""The reader: moves chunks from the gRPC call into the bounded queue, or applies them.

When the queue is full it stops calling ``read()``; gRPC then stops returning HTTP/2
window to the producer, whose writes block (the window is bounded:
``consumer/channels.py``). With no per-chunk delay to simulate (stream mode), the reader
applies every chunk itself in the pass of the event loop that read it and queues only
how the call ended (``StreamEnded``); with a delay, or buffered, every chunk goes through
the queue to the processor (``consumer/session.py``). The reader's states are
``consumer/reader_states.py``; its idle timeout is ``IdleWatch``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import grpc
import structlog

from replywire.consumer.options import StreamOptions
from replywire.consumer.reader_states import SPEC as READER_SPEC
from replywire.consumer.reader_states import ReaderInput, ReaderState
from replywire.shared.fsm import Machine
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.reasons import Reason, registered

#: Named endings of the producer that are a broken transport, not a verdict: resumable
#: (the transport faults' abort is one on purpose: its code named, it still resumes).
RESUMABLE_REASONS: Final = frozenset(
    {Reason.PRODUCER_SHUTDOWN, Reason.CONNECTION_AGED_OUT, Reason.CONTROLLED_TRANSPORT_ABORT}
)

#: What gRPC's details say of a peer that answered, but not in HTTP/2 (an HTTP/1 server on
#: the port): ``Failed parsing HTTP/2 (Expected SETTINGS frame as the first frame, ...)``.
NOT_HTTP2_DETAIL: Final = "Failed parsing HTTP/2"
#: The result's ``transport.message`` for it: said once, never resumed (it will not mend).
NOT_A_GRPC_SERVER: Final = "not a gRPC server: the peer answered, but not in HTTP/2"


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
        if self.not_grpc_server:
            return False
        named = registered(self.details)
        return named is None or named in RESUMABLE_REASONS

    @property
    def not_grpc_server(self) -> bool:
        """The peer is no gRPC server: it does not speak HTTP/2 (an HTTP/1 server)."""
        return self.code is grpc.StatusCode.UNAVAILABLE and NOT_HTTP2_DETAIL in self.details


QueueItem = bytes | StreamEnded
_CHUNK: Final = pb.Chunk


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
