"""The budget ledger: no paid request starts unless its worst case fits the budget.

Before each provider request the producer *reserves* its worst-case cost (the
prompt estimate at the input rate plus ``maxOutputTokens`` at the output rate)
under an exclusive ``flock`` on ``LEDGER.lock``; the ledger JSON is rewritten
atomically (temporary file, fsync, ``os.replace``). A reservation is charged to
the caller's *identity* as well as to the total: it is refused
(``budget_exhausted``) if it would take either the identity's committed amount
past the per-identity limit or the committed total past the budget, so one
caller cannot starve the others. Several producer processes may share one ledger.
An entry is named by its identity and its call id together.

Every entry leaves ``reserved`` exactly once:

* ``settled`` with the usage the provider reported, if that usage is plausible
  (``check_usage``: non-negative integers within the call's worst case);
  otherwise settled *at its reservation* (``usage_rejected`` says why): a
  hostile or broken provider can neither lower the total nor push it past the
  reservation;
* ``failed`` (the reservation is kept) once the request may have reached the
  provider but no usage came back: nobody knows what it cost, the worst case stands;
* ``released`` (not counted) when the request never started to be sent.

A ledger whose store fails (a slow, paused or restarted Redis; a file that cannot be
locked or written) must not leave an entry ``reserved`` for good, so:

* **Each reservation has an owner**: the producer process that made it (``Owner``: host,
  pid, start time and a random part), which holds a *lease* on the ledger (the file
  ledger: ``owners`` in the JSON, each with ``lease_until``; Redis: a key with a PX
  expiry). Every reserve and every sending mark refreshes it; ``producer.budget.keeper``
  refreshes it every third of its length while the process holds reservations.
* **A reserve is idempotent per call id**: the same call id with the same fields answers
  the same reservation again, never a second one; so a reserve whose answer was lost is
  simply asked again. One the producer gave up on is ``abandon``-ed: released if it was
  written, or a ``released`` tombstone written in its place so that a late copy of the
  reserve (still on its way to a paused Redis) finds it and reserves nothing.
* **Nothing is sent before the entry says so**: ``mark_sending`` (``sending_at``) moves
  nothing but succeeds only while the entry is ``reserved`` and its owner's; if it fails
  the request is not sent and the reservation is released.
* **Reservations of a lapsed owner are reconciled** (``reconcile``) by any other producer
  on the ledger: ``released`` (``owner_lease_lapsed (never sent)``) when not marked
  sending, ``failed`` (``owner_lease_lapsed``, worst case kept) when it may have been
  sent. A lease judged lapsed too early can only cost money, never lose it: the owner can
  no longer mark a released entry sending, and its late settle of a kept entry finds it
  ``failed`` (``AlreadyLeft``).

``Ledger`` (this module) is the interface the Gemini source uses, with what both ledgers
share (owners, settlements, the ways a move is refused); ``file_ledger.BudgetLedger`` and
``redis_ledger.RedisLedger`` (``--ledger redis://HOST:PORT/DB``) implement it with the same
rules, the moves of an entry being the table of ``entry_states``; ``usage`` judges and
prices what a provider reports; ``stores.open_ledger`` picks a ledger from the
``--ledger`` value.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason

#: Who is charged when the caller is not authenticated.
ANONYMOUS: Final = "anonymous"
#: How long an owner's lease lasts without a refresh (``--ledger-lease-s``).
DEFAULT_LEASE_S: Final = 30.0
#: The longest one ledger operation waits: a Redis round trip, the file ledger's lock.
TIMEOUT_S: Final = 5.0
#: Why a reconciler moved a lapsed owner's reservation.
LEASE_LAPSED: Final = "owner_lease_lapsed"


@dataclass(frozen=True, slots=True)
class Settlement:
    """What settling one call charged, against what was reserved for it."""

    cost_usd: float
    reserved_usd: float
    #: Why the reported usage was not believed (the reservation was charged), or None.
    usage_rejected: str | None = None


class NotWritten(RequestRefused):
    """``ledger_unavailable`` from a ledger that certainly changed nothing (it could not be
    locked or read): unlike a lost answer, there is nothing to look for or abandon."""

    def __init__(self, detail: str) -> None:
        super().__init__(Reason.LEDGER_UNAVAILABLE, detail)


class AlreadyLeft(ValueError):
    """The call is no longer ``reserved``: ``state`` is what it became, ``by`` who moved it
    (an owner id, or ``reconcile:OWNER``), ``settlement`` what a settle charged. A retried
    move finds its own earlier move this way (its answer was lost on the way back)."""

    def __init__(
        self, call_id: str, state: str, by: str = "", settlement: Settlement | None = None
    ) -> None:
        super().__init__(f"call {call_id} is already {state}")
        self.call_id = call_id
        self.state = state
        self.by = by
        self.settlement = settlement


@dataclass(frozen=True, slots=True)
class Owner:
    """The producer process that makes reservations, and how long its lease lasts."""

    id: str
    lease_s: float = DEFAULT_LEASE_S
    host: str = ""
    pid: int = 0
    started_at: float = 0.0

    @classmethod
    def new(cls, lease_s: float = DEFAULT_LEASE_S) -> Owner:
        """This process: host, pid, start time (ms) and a random part (a pid is reused)."""
        host, pid, started = socket.gethostname(), os.getpid(), time.time()
        owner_id = f"{host}:{pid}:{round(started * 1000)}:{secrets.token_hex(3)}"
        return cls(owner_id, lease_s, host, pid, started)

    def describe(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "started_at": self.started_at}

    @property
    def reconciler(self) -> str:
        """Who a reconciled entry says moved it."""
        return f"reconcile:{self.id}"


class Ledger(Protocol):
    """What the Gemini source needs of a budget ledger. Every method is synchronous (the
    source runs it in a thread), waits at most its timeout, and fails closed with
    ``ledger_unavailable``. An entry is named by ``identity`` and ``call_id`` together."""

    budget_usd: float
    budget_per_identity_usd: float
    owner: Owner

    def check(self) -> None:
        """Reach the ledger once (at start): a broken one stops the producer, not a call."""

    def reserve(
        self,
        call_id: str,
        *,
        body: Mapping[str, Any],
        max_output_tokens: int,
        identity: str = ANONYMOUS,
        **meta: Any,
    ) -> float:
        """Reserve the worst case of one call (its cost in USD), owned by ``owner``, or refuse
        with ``budget_exhausted``. Idempotent: the same call asked again (same identity,
        owner and worst case) answers the same reservation; anything else already under the
        call id raises ``AlreadyLeft``."""
        ...

    def mark_sending(self, call_id: str, *, identity: str = ANONYMOUS) -> None:
        """Say (before the request is sent) that the call may reach the provider; raises
        ``AlreadyLeft`` if the entry is no longer this owner's ``reserved`` one."""

    def settle(
        self, call_id: str, usage: Mapping[str, object], *, identity: str = ANONYMOUS
    ) -> Settlement:
        """Charge the reported usage if it is plausible (``check_usage``), else the reservation."""
        ...

    def keep_reservation(self, call_id: str, why: str, *, identity: str = ANONYMOUS) -> None:
        """The request may have reached the provider but no usage came back."""

    def release(self, call_id: str, why: str, *, identity: str = ANONYMOUS) -> None:
        """The request never started to be sent: the reservation goes."""

    def abandon(
        self,
        call_id: str,
        *,
        body: Mapping[str, Any],
        max_output_tokens: int,
        why: str,
        identity: str = ANONYMOUS,
    ) -> str:
        """A reserve the producer gave up on (its answer was lost): release the reservation
        if it was written (``released``), else write a released tombstone that a late copy
        of the reserve finds (``tombstoned``)."""
        ...

    def refresh_lease(self) -> bool:
        """Extend this owner's lease; whether it was still alive."""
        ...

    def drop_lease(self) -> None:
        """End this owner's lease (at shutdown): what it still holds may be reconciled."""

    def reconcile(self) -> list[dict[str, Any]]:
        """Move every ``reserved`` entry whose owner's lease lapsed: released if it was never
        marked sending, failed (kept) if it may have been sent. What was moved."""
        ...

    def close(self) -> None:
        """Let go of connections."""

    def totals(self, identity: str | None = None) -> dict[str, Any]:
        """``committed_usd`` (of one identity, or of all), the budgets, ``entries``."""
        ...

    def entries(self) -> list[dict[str, Any]]:
        """Every entry still held, oldest first (for operators and tests)."""
        ...
