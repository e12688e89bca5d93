"""Keeping the budget ledger whole when its store is slow, flaky or gone for a while.

A ``LedgerKeeper`` runs beside each ``GeminiSource`` (one per producer process):

* **A move out of ``reserved`` that fails is retried** (settle, keep_reservation,
  release, and the ``abandon`` of a reserve the producer gave up on): the first try is
  made at once; if the ledger is unavailable the call's stream ends anyway and the move is
  tried again in the background, the wait doubling from ``retry_s`` up to ``retry_cap_s``,
  less a random share of ``retry_jitter`` of it; every failed try is a
  ``budget_settle_retrying`` record, the landing the usual ``budget_settled`` /
  ``budget_reservation_kept`` / ``budget_released`` / ``budget_reserve_abandoned`` with
  its ``tries``. While one move fails the store is not asked again before its wait ends
  (one probe per wait, however many moves are pending). A retry is safe: a move that had
  landed, its answer lost, is found done by this owner (``AlreadyLeft``) and counts as
  landed; one done by someone else (a reconciler) is ``budget_settle_superseded``.
  At most ``max_pending`` moves wait; past that a new reserve is refused
  ``ledger_unavailable`` before the ledger is asked.
* **The owner lease**: while this process holds reservations, its lease is refreshed
  every third of ``lease_s`` (every reserve and sending mark refreshes it too).
* **Reconciliation**: at start and every ``reconcile_s``, reservations still ``reserved``
  whose owner's lease lapsed are moved (``Ledger.reconcile``) and logged
  ``budget_reconciled``.
* **Shutdown** (``aclose``): pending moves get a last try for at most ``final_try_s``;
  what cannot land is logged ``budget_left_reserved`` and left to the next producer's
  reconciliation. The lease is then dropped (if the ledger answers) or lapses.

The bound: a reservation whose owner stopped refreshing its lease (crashed, was killed,
stopped with moves that could not land, or lost its store for longer than ``lease_s``) is
moved at most ``lease_s + reconcile_s + timeout_s`` after the owner's last refresh by any
producer running on the ledger, or at the start of the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import structlog

from replywire.producer.budget.ledger import DEFAULT_LEASE_S, TIMEOUT_S, AlreadyLeft, Ledger

DEFAULT_RECONCILE_S: Final = 10.0
DEFAULT_RETRY_S: Final = 0.2
DEFAULT_RETRY_CAP_S: Final = 10.0
DEFAULT_RETRY_JITTER: Final = 0.5
DEFAULT_FINAL_TRY_S: Final = 5.0
MAX_PENDING: Final = 10_000
#: A reserve whose answer did not come back is asked again (it is idempotent) this many
#: times, ``retry_s`` apart and doubling, before the stream is refused ``ledger_unavailable``.
RESERVE_REREADS: Final = 1
MAX_DETAIL_CHARS: Final = 300


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerPolicy:
    """How long a lease lasts, how long one ledger operation may wait, how often leases are
    checked, how failed moves are retried, how long they may still try at shutdown."""

    lease_s: float = DEFAULT_LEASE_S
    timeout_s: float = TIMEOUT_S
    reconcile_s: float = DEFAULT_RECONCILE_S
    retry_s: float = DEFAULT_RETRY_S
    retry_cap_s: float = DEFAULT_RETRY_CAP_S
    retry_jitter: float = DEFAULT_RETRY_JITTER
    final_try_s: float = DEFAULT_FINAL_TRY_S
    max_pending: int = MAX_PENDING

    def __post_init__(self) -> None:
        for name in ("lease_s", "timeout_s", "reconcile_s", "retry_s", "retry_cap_s"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{_flag(name)} must be a finite number > 0, not {value}")
        if self.timeout_s > self.lease_s / 3:
            raise ValueError(
                f"{_flag('timeout_s')} ({self.timeout_s}) must be at most a third of "
                f"{_flag('lease_s')} ({self.lease_s}): a lease is refreshed every third of "
                "it, and a refresh may take the whole timeout"
            )
        if self.retry_cap_s < self.retry_s:
            raise ValueError(f"{_flag('retry_cap_s')} must be at least {_flag('retry_s')}")
        if not 0 <= self.retry_jitter <= 1:
            raise ValueError(f"{_flag('retry_jitter')} is a share: 0 to 1")
        if not (0 <= self.final_try_s < math.inf):
            raise ValueError(f"{_flag('final_try_s')} must be a finite number >= 0")
        if self.max_pending < 1:
            raise ValueError("max_pending must be at least 1")

    @property
    def refresh_s(self) -> float:
        """How often a holding owner refreshes its lease."""
        return self.lease_s / 3

    def backoff(self, tries: int, draw: float) -> float:
        """The wait after the ``tries``-th failed try: ``retry_s`` doubled per try, at most
        ``retry_cap_s``, less ``retry_jitter`` times ``draw`` (in [0, 1)) of it."""
        doubled = self.retry_s * 2.0 ** min(max(tries - 1, 0), 60)
        return min(self.retry_cap_s, doubled) * (1 - self.retry_jitter * draw)


def _flag(name: str) -> str:
    return "--ledger-" + name.replace("_", "-")


def detail_of(error: BaseException) -> str:
    """An error for a trace record: its detail (a refusal's), bounded."""
    text = str(getattr(error, "detail", "") or error) or type(error).__name__
    return text[:MAX_DETAIL_CHARS]


@dataclass(eq=False)
class Job:
    """One move of a call out of ``reserved``: ``attempt`` makes it once (in a thread;
    raising if the ledger is unavailable), ``landed(answer, tries)`` records it."""

    kind: str  # settle | keep | release | abandon
    target: str  # the state it moves the entry to
    call_id: str
    identity: str
    attempt: Callable[[], Any]
    landed: Callable[[Any, int], None]
    log: structlog.typing.FilteringBoundLogger
    tries: int = 0
    due: float = 0.0
    error: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.identity, self.call_id)


class LedgerKeeper:
    def __init__(
        self,
        ledger: Ledger,
        policy: LedgerPolicy | None = None,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.ledger = ledger
        self.policy = policy or LedgerPolicy(lease_s=ledger.owner.lease_s)
        self._rng = rng or random.Random()
        self._log: structlog.typing.FilteringBoundLogger = structlog.get_logger()
        self._pending: list[Job] = []
        #: (identity, call id) of every reservation this process may hold.
        self._holding: set[tuple[str, str]] = set()
        self._wake = asyncio.Event()
        self._store_due = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self._retrier: asyncio.Task[None] | None = None
        self._closing = False
        self._closed = False

    # --- what the source asks -------------------------------------------------------------

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def full(self) -> bool:
        return len(self._pending) >= self.policy.max_pending

    @property
    def holding(self) -> int:
        return len(self._holding)

    def hold(self, key: tuple[str, str]) -> None:
        """A reservation of this process may exist from now on (its lease must be kept)."""
        self._holding.add(key)

    def let_go(self, key: tuple[str, str]) -> None:
        self._holding.discard(key)

    def start(self) -> None:
        """The lease, reconciliation and retry tasks (needs a running loop; at most once)."""
        if self._tasks or self._closed:
            return
        owner, policy = self.ledger.owner, self.policy
        self._log.info(
            "ledger_owner",
            owner=owner.id,
            lease_s=owner.lease_s,
            reconcile_s=policy.reconcile_s,
            bound_s=round(policy.lease_s + policy.reconcile_s + policy.timeout_s, 3),
        )
        self._retrier = asyncio.ensure_future(self._retry_loop())
        self._tasks = [
            self._retrier,
            asyncio.ensure_future(self._reconcile_loop()),
            asyncio.ensure_future(self._heartbeat_loop()),
        ]

    async def run(self, job: Job) -> bool:
        """Try ``job`` now; if the ledger is unavailable, again in the background. Whether it
        is done (landed, or found done by someone else)."""
        if await self._try(job):
            return True
        self._schedule(job)
        return False

    def submit(self, job: Job) -> None:
        """Try ``job`` in the background only (as soon as the store may be asked)."""
        loop = asyncio.get_running_loop()
        job.due = loop.time()
        self._pending.append(job)
        self.start()
        self._wake.set()

    async def reconcile_once(self) -> list[dict[str, Any]]:
        """Move the reservations of lapsed owners now; what was moved (each logged)."""
        try:
            moved = await asyncio.to_thread(self.ledger.reconcile)
        except Exception as error:
            self._log.warning("ledger_reconcile_failed", detail=detail_of(error))
            return []
        for row in moved:
            self._log.warning("budget_reconciled", **row, reconciler=self.ledger.owner.id)
        return moved

    async def aclose(self) -> None:
        """Stop the background tasks; give pending moves a last try (``final_try_s``); log
        what is left reserved; drop the lease."""
        if self._closed:
            return
        self._closed = self._closing = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.policy.final_try_s
        self._wake.set()
        for task in self._tasks:
            if task is not self._retrier:
                task.cancel()
        # The retrier ends after the try it is making (bounded by the ledger's timeout).
        await asyncio.gather(*self._tasks, return_exceptions=True)
        while self._pending and loop.time() < deadline:
            for job in sorted(self._pending, key=lambda job: job.due):
                if loop.time() >= deadline:
                    break
                await self._try(job)
            if self._pending:
                await asyncio.sleep(min(self.policy.retry_s, max(0.0, deadline - loop.time())))
        owner = self.ledger.owner
        for job in self._pending:
            job.log.warning(
                "budget_left_reserved",
                op=job.kind,
                tries=job.tries,
                detail=job.error,
                owner=owner.id,
                lease_s=owner.lease_s,
            )
        try:
            await asyncio.to_thread(self.ledger.drop_lease)
        except Exception as error:
            self._log.warning(
                "ledger_lease_left_to_lapse", owner=owner.id, lease_s=owner.lease_s,
                detail=detail_of(error),
            )  # fmt: skip
        self.ledger.close()

    # --- the work -------------------------------------------------------------------------

    async def _try(self, job: Job) -> bool:
        """One try of ``job`` (in a thread). True when it is done."""
        job.tries += 1
        try:
            answer = await asyncio.to_thread(job.attempt)
        except AlreadyLeft as moved:
            if moved.by == self.ledger.owner.id and moved.state == job.target:
                # An earlier try had landed; its answer was lost on the way back.
                self._landed(job, moved.settlement)
            else:
                job.log.warning(
                    "budget_settle_superseded",
                    op=job.kind,
                    tries=job.tries,
                    state=moved.state,
                    by=moved.by,
                )
                self._finish(job)
            return True
        except KeyError:
            job.log.warning("budget_entry_missing", op=job.kind, tries=job.tries)
            self._finish(job)
            return True
        except Exception as error:  # ledger_unavailable, or anything else: try again later
            job.error = detail_of(error)
            return False
        self._landed(job, answer)
        return True

    def _landed(self, job: Job, answer: Any) -> None:
        try:
            job.landed(answer, job.tries)
        except Exception:
            job.log.exception("budget_record_failed", op=job.kind)
        finally:
            self._finish(job)

    def _finish(self, job: Job) -> None:
        if job in self._pending:
            self._pending.remove(job)
        self.let_go(job.key)

    def _schedule(self, job: Job) -> None:
        loop = asyncio.get_running_loop()
        delay = self.policy.backoff(job.tries, self._rng.random())
        job.due = self._store_due = loop.time() + delay
        if job not in self._pending:
            self._pending.append(job)
        job.log.warning(
            "budget_settle_retrying",
            op=job.kind,
            tries=job.tries,
            retry_in_s=round(delay, 3),
            pending=len(self._pending),
            detail=job.error,
        )
        self.start()
        self._wake.set()

    async def _retry_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closing:
            job = min(self._pending, key=lambda job: job.due, default=None)
            wait = None if job is None else max(job.due, self._store_due) - loop.time()
            if job is None or (wait is not None and wait > 0):
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
                continue
            if not await self._try(job) and not self._closing:
                self._schedule(job)

    async def _reconcile_loop(self) -> None:
        while True:
            await self.reconcile_once()
            await asyncio.sleep(self.policy.reconcile_s)

    async def _heartbeat_loop(self) -> None:
        owner = self.ledger.owner
        while True:
            await asyncio.sleep(self.policy.refresh_s)
            if not self._holding:
                continue  # nothing held: the lease may lapse (the next reserve renews it)
            try:
                alive = await asyncio.to_thread(self.ledger.refresh_lease)
            except Exception as error:
                self._log.warning(
                    "ledger_lease_refresh_failed", owner=owner.id, detail=detail_of(error)
                )
                continue
            if not alive:
                # Another producer may have reconciled what this one held meanwhile.
                self._log.warning("ledger_lease_lapsed", owner=owner.id, holding=len(self._holding))
