"""A paid call in the budget ledger: reserved, marked sending, and recorded exactly once.

Every reservation leaves ``reserved`` exactly once (``CallLedger.settle``): settled
from the reported usage (the ledger checks it), kept once the request may have reached
the provider (its headers started to be sent: httpcore's ``trace`` hook, seen by
``source``), released before that. Ledger writes run in a thread and are waited for to
their end even when the consumer cancels meanwhile (a thread cannot be stopped:
abandoning it would leave a reservation nobody records); the cancellation is passed on
afterwards.

A ledger that fails does not hold a reservation for good (``keeper``): a reserve whose
answer did not come back is asked again (it is idempotent) up to ``RESERVE_REREADS``
times, and if the stream is refused ``ledger_unavailable`` after all, the reservation is
``abandon``-ed in the background (released if it was written, or a tombstone a late copy
of it finds). The entry is marked sending before the request goes: if that fails,
nothing is sent and the reservation is released. A settle that fails is tried again in
the background (the stream's end does not wait for it).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from replywire.producer.budget.entry_states import FAILED, RELEASED, SETTLED
from replywire.producer.budget.keeper import RESERVE_REREADS, Job, LedgerKeeper, detail_of
from replywire.producer.budget.ledger import ANONYMOUS, AlreadyLeft, Ledger, NotWritten, Settlement
from replywire.producer.budget.usage import estimate_prompt_tokens, shown
from replywire.producer.metrics import record_ledger_spend
from replywire.producer.sources.gemini.call_span import end_call_span
from replywire.producer.sources.gemini.capture import CallCapture
from replywire.producer.sources.gemini.settings import GeminiSettings
from replywire.runtime.tracing import active
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason

T = TypeVar("T")


@dataclass(slots=True)
class Call:
    """One paid provider call: its id, its evidence (``--record``) and its bound logger."""

    call_id: str
    capture: CallCapture | None
    log: structlog.typing.FilteringBoundLogger
    identity: str = ANONYMOUS
    #: Set (before any await) by the one ``CallLedger.settle`` of the call.
    recorded: bool = False
    #: What settling charged (once it landed), and why the usage was not believed.
    charged: float | None = None
    usage_rejected: str | None = None
    #: The call's span when tracing is on (``producer/sources/gemini/call_span.py``), ended when
    #: the call is recorded.
    span: Any = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.identity, self.call_id)


def _answer_lost(error: BaseException | None) -> bool:
    """Whether ``error`` is the ledger failing in a way that may have changed it (its
    answer lost), not one that certainly changed nothing (``NotWritten``)."""
    return (
        isinstance(error, RequestRefused)
        and error.reason is Reason.LEDGER_UNAVAILABLE
        and not isinstance(error, NotWritten)
    )


def cancelled_outcome(error: BaseException) -> str:
    """The outcome a call cut short by a cancellation is recorded with: the producer's own
    stop at shutdown by its name (a generation's task is cancelled with the reason it was
    stopped for: ``producer.generation``), any other as the consumer's."""
    if error.args and error.args[0] == Reason.PRODUCER_SHUTDOWN.value:
        return Reason.PRODUCER_SHUTDOWN.value
    return "cancelled_by_consumer"


async def run_to_the_end(work: Awaitable[T]) -> tuple[asyncio.Future[T], str | None]:
    """Await ``work`` to its end even if the awaiting task is cancelled meanwhile; return
    it (done) and, if a cancellation arrived (which the caller must pass on), its outcome
    (``cancelled_outcome``)."""
    task = asyncio.ensure_future(work)
    cancelled: str | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as error:
            cancelled = cancelled_outcome(error)
    return task, cancelled


class CallLedger:
    """The ledger's moves of the source's calls, and the keeper that retries them."""

    def __init__(self, ledger: Ledger, keeper: LedgerKeeper, settings: GeminiSettings) -> None:
        self.ledger = ledger
        self.keeper = keeper
        self.settings = settings
        self._jitter = random.Random()

    async def reserve(self, call: Call, body: Mapping[str, Any], *, case_id: str) -> None:
        """Reserve the call's worst case in the ledger, or raise with nothing held.

        A reserve whose answer did not come back (``ledger_unavailable``) may have been
        written, or may still be (a paused Redis runs it when it wakes): it is asked again,
        which answers the same reservation if there is one. If the stream is refused after
        all, the reservation is abandoned in the background (``_abandon``).
        """
        keeper, log = self.keeper, call.log
        if keeper.full:
            raise RequestRefused(
                Reason.LEDGER_UNAVAILABLE, f"{keeper.pending} ledger writes are still pending"
            )
        model, max_output_tokens = self.settings.model, self.settings.max_output_tokens
        keeper.hold(call.key)
        unanswered = tries = 0
        while True:
            tries += 1
            reserving, cancelled = await run_to_the_end(
                asyncio.to_thread(
                    self.ledger.reserve,
                    call.call_id,
                    body=body,
                    max_output_tokens=max_output_tokens,
                    identity=call.identity,
                    case_id=case_id,
                    model=model,
                )
            )
            error = reserving.exception()
            if error is None:
                break
            lost = _answer_lost(error)
            unanswered += lost
            if lost and not cancelled and tries <= RESERVE_REREADS:
                log.warning("budget_reserve_unanswered", tries=tries, detail=detail_of(error))
                try:
                    await asyncio.sleep(keeper.policy.backoff(tries, self._jitter.random()))
                except asyncio.CancelledError as stopped:
                    self._abandon(call, body, cancelled_outcome(stopped))
                    raise
                continue
            # No reservation is used: one that may have been written (or still may be) goes.
            if unanswered:
                self._abandon(call, body, cancelled or "refused")
            else:
                keeper.let_go(call.key)
            if isinstance(error, AlreadyLeft):  # the call id is taken: not this call's to use
                error = RequestRefused(Reason.LEDGER_UNAVAILABLE, str(error))
            if cancelled:
                raise asyncio.CancelledError(cancelled) from error
            raise error
        log.info(
            "budget_reserved",
            reserved_usd=reserving.result(),
            prompt_tokens_estimate=estimate_prompt_tokens(body),
            max_output_tokens=max_output_tokens,
            tries=tries,
        )
        if cancelled:
            # The consumer left (or the producer stops) while the reservation was being
            # written: nothing was sent.
            await self.settle(call, usage=None, outcome=cancelled, sent=False)
            raise asyncio.CancelledError(cancelled)

    def _abandon(self, call: Call, body: Mapping[str, Any], outcome: str) -> None:
        """The producer gave up on a reserve whose answer was lost: in the background,
        release the reservation if it was written, else leave a tombstone that a late copy
        of the reserve finds (so it reserves nothing)."""
        why = f"reserve_unanswered ({outcome})"
        call.log.warning("budget_reserve_abandoning", outcome=outcome)

        def landed(answer: Any, tries: int) -> None:
            call.log.info("budget_reserve_abandoned", found=answer or RELEASED, tries=tries)

        self.keeper.submit(
            Job(
                "abandon",
                RELEASED,
                call.call_id,
                call.identity,
                lambda: self.ledger.abandon(
                    call.call_id,
                    body=body,
                    max_output_tokens=self.settings.max_output_tokens,
                    why=why,
                    identity=call.identity,
                ),
                landed,
                call.log,
            )
        )

    async def mark_sending(self, call: Call) -> None:
        """Say in the ledger that the request may reach the provider, before it is sent. If
        that cannot be said, nothing is sent: the reservation is released."""
        marking, cancelled = await run_to_the_end(
            asyncio.to_thread(self.ledger.mark_sending, call.call_id, identity=call.identity)
        )
        error = marking.exception()
        if error is None and not cancelled:
            return
        if error is not None:
            call.log.warning("budget_sending_unmarked", detail=detail_of(error))
        outcome = cancelled or "ledger_unavailable"
        await self.settle(call, usage=None, outcome=outcome, sent=False)
        if cancelled:
            raise asyncio.CancelledError(cancelled) from error
        assert error is not None  # not cancelled: the mark failed
        raise RequestRefused(
            Reason.LEDGER_UNAVAILABLE, f"the call could not be marked sending: {detail_of(error)}"
        ) from error

    async def settle(
        self,
        call: Call,
        *,
        usage: Mapping[str, object] | None,
        outcome: str,
        finish_reason: str | None = None,
        sent: bool = True,
    ) -> None:
        """Record the call exactly once: settle it from its usage; else keep its reservation
        if the request may have reached the provider (``sent``), or release it.

        Runs to its end even if the task is cancelled meanwhile (the cancellation is
        passed on afterwards): a ledger write cut short would leave the entry reserved.
        The ledger is tried once here; if it is unavailable the move is retried in the
        background (``keeper``) and this returns: a stream's end does not wait for it.
        """
        if call.recorded:
            return
        call.recorded = True
        recording, cancelled = await run_to_the_end(
            self._record(call, usage=usage, outcome=outcome, finish_reason=finish_reason, sent=sent)
        )
        tracing = active()
        if call.span is not None and tracing is not None:
            end_call_span(tracing, call, usage=usage, outcome=outcome,
                          finish_reason=finish_reason, sent=sent)  # fmt: skip
        if cancelled:
            raise asyncio.CancelledError(cancelled)
        recording.result()

    async def _record(
        self,
        call: Call,
        *,
        usage: Mapping[str, object] | None,
        outcome: str,
        finish_reason: str | None,
        sent: bool,
    ) -> None:
        await self.keeper.run(self._move(call, usage=usage, outcome=outcome, sent=sent))
        if call.capture is not None:
            await call.capture.finish(
                outcome=outcome if sent else f"{outcome} (never sent: reservation released)",
                finish_reason=finish_reason,
                usage=None if usage is None else {k: shown(v) for k, v in usage.items()},
                usage_rejected=call.usage_rejected,
                estimated_usd=call.charged,
            )

    def _move(
        self, call: Call, *, usage: Mapping[str, object] | None, outcome: str, sent: bool
    ) -> Job:
        """The one move of the call out of ``reserved``, as a job the keeper may retry."""
        ledger, log, call_id, identity = self.ledger, call.log, call.call_id, call.identity
        if usage is not None:

            def settled(settlement: Settlement | None, tries: int) -> None:
                if settlement is None:  # never: a settled entry says what it charged
                    log.info("budget_settled", tries=tries)
                    return
                call.charged, call.usage_rejected = settlement.cost_usd, settlement.usage_rejected
                if settlement.usage_rejected is not None:
                    # Implausible usage (negative, huge, not an integer, missing): the worst
                    # case reserved for the call is what it is charged.
                    log.warning(
                        "budget_usage_rejected",
                        why=settlement.usage_rejected,
                        reported={key: shown(value) for key, value in usage.items()},
                        reserved_usd=settlement.reserved_usd,
                    )
                record_ledger_spend(settlement.cost_usd)
                log.info(
                    "budget_settled",
                    cost_usd=settlement.cost_usd,
                    reserved_usd=settlement.reserved_usd,
                    usage_rejected=settlement.usage_rejected is not None,
                    usage=None if settlement.usage_rejected else dict(usage),
                    tries=tries,
                )

            return Job(
                "settle", SETTLED, call_id, identity,
                lambda: ledger.settle(call_id, usage, identity=identity), settled, log,
            )  # fmt: skip
        if sent:
            return Job(
                "keep", FAILED, call_id, identity,
                lambda: ledger.keep_reservation(call_id, outcome, identity=identity),
                lambda _answer, tries: log.info(
                    "budget_reservation_kept", outcome=outcome, tries=tries
                ),
                log,
            )  # fmt: skip
        return Job(
            "release", RELEASED, call_id, identity,
            lambda: ledger.release(call_id, outcome, identity=identity),
            lambda _answer, tries: log.info("budget_released", outcome=outcome, tries=tries),
            log,
        )  # fmt: skip
