"""How one stream's frames reach its consumer, once its delivery is decided: from its
plan (a first delivery, its fault with it: the chunks as they are made, with their
stalls, then the abort a transport fault asks for), or from the reply log, from
``resume_after + 1``, cut afresh by the request's chunking, never with a fault (a reply
whose generator is lost is taken over, a bounded number of times). Every chunk goes
through one write, which waits for the consumer's HTTP/2 window and counts it.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import aclosing
from dataclasses import dataclass
from typing import Final

import grpc
import structlog

from replywire.producer.claims import Attached, Generations
from replywire.producer.counters import ProducerCounters
from replywire.producer.delivery_plan import Origin
from replywire.producer.metrics import ProducerMetrics
from replywire.producer.replylog.interface import LogEnded
from replywire.producer.sources import Stall, StreamPlan
from replywire.producer.states import ProducerStream, StreamInput
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import Reason
from replywire.shared.requests import CheckedRequest
from replywire.shared.wire.chunking import Chunker

#: Takeovers of a reply whose generator was lost, per delivery (each needs a lapsed lease).
MAX_TAKEOVERS: Final = 3

Context = grpc.aio.ServicerContext[pb.OpenRequest, pb.Chunk]


@dataclass(frozen=True, slots=True)
class FromPlan:
    """A first delivery from ``plan``'s own chunks, its fault with them; ``logged``: its
    attachment to the reply's generation here, when the reply is logged as it goes."""

    resume_after: int
    plan: StreamPlan
    logged: Attached | None = None

    @property
    def attempt(self) -> int:
        return self.logged.attempt if self.logged is not None else 1


@dataclass(frozen=True, slots=True)
class FromLog:
    """A delivery from the reply log, from ``resume_after + 1`` (a resume, an attach, every
    live reply's). ``plan``: one to generate the reply from again should its generator be
    lost, or the prepared plan whose reply another delivery generates (closed at the end)."""

    resume_after: int
    logged: Attached
    plan: StreamPlan | None = None

    @property
    def attempt(self) -> int:
        return self.logged.attempt


#: Where one Open's frames come from (``producer.delivery_plan`` decides which). What it
#: holds until the stream has ended: ``logged``'s attachment to this process's generation
#: of the reply, and ``plan`` (closed then, if it holds anything: a generation owns a live
#: reply's).
Delivery = FromPlan | FromLog


def delivery_of(
    origin: Origin, resume_after: int, plan: StreamPlan | None, logged: Attached | None
) -> Delivery:
    """The delivery ``decide`` chose, from what its steps found."""
    if origin is Origin.PLAN:
        assert plan is not None
        return FromPlan(resume_after, plan, logged)
    assert logged is not None
    return FromLog(resume_after, logged, plan)


class ConsumerGone(Exception):
    """A write failed because the stream is gone on the consumer's side."""


class Writer:
    """The writes of every stream of one servicer, counted in its counters and metrics."""

    def __init__(
        self, counters: ProducerCounters, metrics: ProducerMetrics, generations: Generations
    ) -> None:
        self.counters = counters
        self.metrics = metrics
        self.generations = generations

    async def from_plan(
        self,
        checked: CheckedRequest,
        context: Context,
        stream: ProducerStream,
        plan: StreamPlan,
    ) -> None:
        stream.fire(StreamInput.START)
        if plan.fixed_chunks is not None:  # a recording's, fault-free or nearly
            for data in plan.fixed_chunks:
                await self.write(checked, context, stream, data)
        else:
            await self._generated(checked, context, stream, plan)
        if plan.abort_details is not None:
            reason = plan.abort_details
            stream.fire(StreamInput.ABORT, reason=reason.value, **stream.sent)
            await context.abort(grpc.StatusCode[REASONS[reason].grpc_code], reason.value)
        stream.fire(StreamInput.COMPLETE, **stream.sent)

    async def _generated(
        self,
        checked: CheckedRequest,
        context: Context,
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
                await self.write(checked, context, stream, data)

    async def from_log(
        self,
        checked: CheckedRequest,
        context: Context,
        stream: ProducerStream,
        delivery: FromLog,
    ) -> None:
        """A delivery from the log: the logged frames from ``resume_after + 1`` on, cut
        afresh by this request's chunking, never with a fault. A reply whose generator is
        lost is taken over (a source that regenerates) at most ``MAX_TAKEOVERS`` times;
        what a takeover attached to is detached here."""
        attached = delivery.logged
        stream.fire(StreamInput.START)
        chunker = Chunker(checked.plan)
        after = delivery.resume_after
        taken: list[Attached] = []
        try:
            while True:
                try:
                    async for entry in attached.reply.read(after):
                        for data in chunker.feed(entry.data):
                            await self.write(checked, context, stream, data)
                        after = entry.sequence
                    break
                except LogEnded as ended:
                    took = None
                    if len(taken) < MAX_TAKEOVERS:
                        took = await self.generations.take_over(
                            ended, attached, checked, delivery.plan
                        )
                    if took is None:
                        await self._abort_ended(context, stream, attached, ended.reason)
                    else:
                        attached = took
                        taken.append(took)
        finally:
            for took in taken:
                took.detach()
        for data in chunker.flush():
            await self.write(checked, context, stream, data)
        stream.fire(StreamInput.COMPLETE, **stream.sent)

    @staticmethod
    async def _abort_ended(
        context: Context,
        stream: ProducerStream,
        attached: Attached,
        reason: Reason,
    ) -> None:
        """The reply ended without its terminal: the RPC ends with that reason. A reply
        refused before it was made (its generation here was told why) passes the
        refusal's metadata on too (a retry delay)."""
        stream.fire(StreamInput.ABORT, reason=reason.value, **stream.sent)
        generation = attached.generation
        if generation is not None and generation.opened.done():
            refusal = generation.opened.result().refusal
            if refusal is not None and refusal.reason is reason and refusal.metadata:
                context.set_trailing_metadata(tuple(refusal.metadata.items()))
        await context.abort(grpc.StatusCode[REASONS[reason].grpc_code], reason.value)

    async def write(
        self,
        checked: CheckedRequest,
        context: Context,
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
            raise ConsumerGone(type(error).__name__) from error
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


async def close_even_if_cancelled(plan: StreamPlan, outcome: str) -> None:
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
