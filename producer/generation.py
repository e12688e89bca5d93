"""A reply's generation: the one task that makes a reply into the reply log, and that
ends it, and its upstream, whatever ends it.

The servicer claims a reply in the log first (``ReplyLog.create``: whoever creates it
makes it) and only then starts its generation here. A live reply's upstream (the paid
provider call) is opened by the generation's own task, not by the RPC that claimed it:
a consumer that leaves, resumes, or is joined by others meanwhile changes nothing, and
no second call is made for the same reply. The claimant learns how the opening went
from ``opened`` (the upstream's description for its ``verified`` record, or the
refusal it must answer with).

Deliveries ``attach()`` and ``detach()``; when the last one detaches before the reply
ended, generation goes on for ``grace_s``; if none attaches by then it is stopped
(``reply_abandoned``). ``stop(reason)`` stops it at once: ``consumer_cancelled`` (the
``Cancel`` RPC), ``producer_shutdown``, ``reply_abandoned``.

Every generation run as a task ends exactly once, with one outcome (``completed`` or a
registered reason code), and every ending does the same three things: the upstream,
if it was opened, is closed (a live reply's provider response closed, its ledger entry
settled, its capture written), the log is ended with the outcome (its readers end with
it), and one ``generation_ended`` record is written. A failed ending closes the
upstream first (stop paying before anything else can wait on a failing store); a
completed one ends the log first (its readers need not wait for the ledger). Both run
to their end even if the task is cancelled meanwhile. A reply known in advance (a
recording's) that the log takes at once is logged in the constructor, with no task and
no record: nothing of it can fail later.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Final, Protocol

import structlog

from replywire.producer.replylog.interface import Entry, LogEnded, LoggedReply, ReplyLogFailed
from replywire.producer.sources import StreamPlan
from replywire.producer.spans import GenerationSpan
from replywire.runtime.tracing import active
from replywire.shared.errors import ReplywireError, RequestRefused
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import Reason
from replywire.shared.wire import WireCodec

#: A generation's outcome when its reply was made whole.
COMPLETED: Final = "completed"


class Upstream(Protocol):
    """A live reply's source, opened by its generation."""

    #: Fields for the claimant's ``verified`` record (model, call id, ...).
    description: dict[str, Any]

    def entries(self) -> AsyncGenerator[Entry, None]:
        """The reply's frames as log entries, as they are made; raises ``LogEnded`` after
        the last one when the reply ends in error instead of with its terminal."""
        ...

    async def close(self, outcome: str) -> None:
        """Release what the upstream holds (its response, its ledger reservation)."""
        ...


Opener = Callable[[], Awaitable[Upstream]]


class PlanUpstream:
    """A live source's plan as a generation's upstream: its frames encoded for the log."""

    def __init__(self, plan: StreamPlan, codec: WireCodec) -> None:
        self.plan = plan
        self.description = plan.description
        self._codec = codec

    async def entries(self) -> AsyncGenerator[Entry, None]:
        live = self.plan.live_frames()
        if live is None:
            raise TypeError("a live upstream's plan has live frames")
        # aclosing: closing these entries closes the plan's own read of its upstream.
        async with aclosing(live) as frames:
            async for frame in frames:
                assert isinstance(frame.sequence, int)
                yield Entry(frame.sequence, self._codec.encode_frame(frame))

    async def close(self, outcome: str) -> None:
        await self.plan.close(outcome)


@dataclass(frozen=True, slots=True)
class Opened:
    """How opening the upstream went, for the delivery that claimed the reply: its
    description, or the refusal to answer with (nothing was generated)."""

    description: dict[str, Any]
    refusal: ReplywireError | None = None


def _refusal(outcome: str) -> RequestRefused:
    reason = Reason(outcome) if outcome in REASONS else Reason.INTERNAL_ERROR
    return RequestRefused(reason, "the generation ended before its upstream opened")


async def run_to_the_end(work: Awaitable[None]) -> None:
    """Await ``work`` to its end even if the awaiting task is cancelled meanwhile; the
    cancellation is passed on afterwards."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
        except Exception:  # the task is done: its result is read below
            break
    if cancelled:
        raise asyncio.CancelledError
    task.result()


class Generation:
    """One reply's generation (see the module's docstring)."""

    def __init__(
        self,
        reply: LoggedReply,
        source: tuple[Entry, ...] | Opener,
        *,
        grace_s: float,
        on_ended: Callable[[str], None] | None = None,
    ) -> None:
        self.reply = reply
        self.grace_s = grace_s
        #: Told the outcome once the generation ended (a metric).
        self._on_ended = on_ended
        self.attempts = 0
        self._attached = 0
        self._grace: asyncio.TimerHandle | None = None
        self._source = source
        self._log: structlog.typing.FilteringBoundLogger = structlog.get_logger().bind(
            stream_id=reply.key.stream_id, identity=reply.key.identity
        )
        #: Why the generation was stopped (the log's error ending); None: not stopped.
        self.stopped: Reason | None = None
        loop = asyncio.get_running_loop()
        #: Resolved once the upstream is opened (or could not be): see ``Opened``.
        self.opened: asyncio.Future[Opened] = loop.create_future()
        self.task: asyncio.Future[None]
        if isinstance(source, tuple) and reply.log_now(source):  # logged and ended, here
            self.opened.set_result(Opened({}))
            self.task = loop.create_future()
            self.task.set_result(None)
            return
        if isinstance(source, tuple):
            self.opened.set_result(Opened({}))
        tracing = active()  # the one check: off, no span is made
        #: The generation's span (under the delivery's that started it), when tracing is on.
        self._span = None if tracing is None else GenerationSpan(tracing, reply.key.stream_id)
        self.task = asyncio.create_task(self._run(), name=f"generation-{reply.key}")

    async def _run(self) -> None:
        if self._span is not None:
            self._span.make_current()  # this task's: the provider call's parent
        upstream: Upstream | None = None
        outcome = COMPLETED
        try:
            if isinstance(self._source, tuple):  # known in advance: logged at once
                await self.reply.extend(self._source)
            else:
                upstream = await self._open(self._source)
                async with aclosing(upstream.entries()) as entries:
                    async for entry in entries:
                        await self.reply.append(entry)
        except LogEnded as ended:  # the upstream said the reply ends in error
            outcome = ended.reason.value
        except ReplyLogFailed as failed:
            self._log.warning("reply_log_write_failed", reason=failed.reason.value,
                              detail=failed.detail)  # fmt: skip
            outcome = failed.reason.value
        except asyncio.CancelledError:
            outcome = (self.stopped or Reason.PRODUCER_SHUTDOWN).value
            await self._end(upstream, outcome)
            raise
        except Exception:
            self._log.exception("generation_failed")
            outcome = Reason.INTERNAL_ERROR.value
        await self._end(upstream, outcome)

    async def _open(self, opener: Opener) -> Upstream:
        """Open the upstream; a refusal ends the generation with its code (``LogEnded``)
        after the claimant has been told."""
        try:
            upstream = await opener()
        except ReplywireError as refused:
            self.opened.set_result(Opened({}, refused))
            raise LogEnded(refused.code) from refused
        self.opened.set_result(Opened(upstream.description))
        return upstream

    async def _end(self, upstream: Upstream | None, outcome: str) -> None:
        if not self.opened.done():
            self.opened.set_result(Opened({}, _refusal(outcome)))
        await run_to_the_end(self._close_and_end(upstream, outcome))

    async def _close_and_end(self, upstream: Upstream | None, outcome: str) -> None:
        if outcome == COMPLETED:
            outcome = await self._end_log(None)
            await self._close(upstream, outcome)
        else:
            await self._close(upstream, outcome)
            await self._end_log(outcome)
        self._log.info("generation_ended", outcome=outcome, frames=self.reply.frames)
        if self._span is not None:
            self._span.end(outcome, self.reply.frames)
        if self._on_ended is not None:
            self._on_ended(outcome)

    async def _close(self, upstream: Upstream | None, outcome: str) -> None:
        if upstream is None:
            return
        try:
            await upstream.close(outcome)
        except Exception:  # the generation's ending stands: log it, never answer with it
            self._log.exception("upstream_close_failed", outcome=outcome)

    async def _end_log(self, ending: str | None) -> str:
        """End the log with ``ending``; the generation's outcome: ``ending`` (or
        ``completed``), or why the end could not be written (its readers then see the
        lease lapse: ``generator_lost``)."""
        outcome = ending or COMPLETED
        try:
            await self.reply.end(ending)
        except ReplyLogFailed as failed:
            self._log.warning("reply_end_not_logged", outcome=outcome,
                              reason=failed.reason.value, detail=failed.detail)  # fmt: skip
            return outcome if ending else failed.reason.value
        except Exception:
            self._log.exception("reply_end_not_logged", outcome=outcome)
            return outcome if ending else Reason.INTERNAL_ERROR.value
        return outcome

    def attach(self) -> int:
        """A delivery starts; returns its attempt number (1 for the first)."""
        self.attempts += 1
        self._attached += 1
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None
        return self.attempts

    def detach(self) -> None:
        self._attached -= 1
        if self._attached == 0 and not self.task.done():
            loop = asyncio.get_running_loop()
            self._grace = loop.call_later(self.grace_s, self._abandon)

    def stop(self, reason: Reason) -> bool:
        """Stop generating now; the log ends ``reason``. False if it had already ended."""
        if self.task.done():
            return False
        if self.stopped is None:
            self.stopped = reason
            self._log.info("generation_stopped", reason=reason.value)
        # The reason rides the cancellation: a provider call cut short by it is recorded
        # with it (producer.sources.gemini.call_ledger.cancelled_outcome).
        self.task.cancel(reason.value)
        return True

    def _abandon(self) -> None:
        self._grace = None
        if self._attached == 0:
            self.stop(Reason.REPLY_ABANDONED)
