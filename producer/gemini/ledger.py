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
  expiry). Every reserve and every sending mark refreshes it; ``producer.gemini.keeper``
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

``Ledger`` is the interface the Gemini source uses; ``BudgetLedger`` (this file)
and ``redis_ledger.RedisLedger`` (``--ledger redis://HOST:PORT/DB``) implement
it with the same rules; ``ledgers.open_ledger`` picks one from the ``--ledger`` value.

Why one file: the ``Ledger`` interface, the rules both ledgers share (usage checks, owner
leases) and the file ledger that is their reference implementation.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from producer.files import write_atomically
from producer.gemini.protocol import USAGE_KEYS
from shared.errors import Reason, RequestRefused

FORMAT: Final = "replywire-ledger/1"
#: A deliberately high estimate: about 3 bytes per token (Gemini averages about 4 characters).
BYTES_PER_TOKEN_ESTIMATE: Final = 3
PROMPT_OVERHEAD_TOKENS: Final = 16
#: Who is charged when the caller is not authenticated.
ANONYMOUS: Final = "anonymous"
#: Entry states; a ``released`` entry is not counted (the request was never sent).
RESERVED, SETTLED, FAILED, RELEASED = "reserved", "settled", "failed", "released"
MAX_SHOWN_CHARS: Final = 40
#: How long an owner's lease lasts without a refresh (``--ledger-lease-s``).
DEFAULT_LEASE_S: Final = 30.0
#: The longest one ledger operation waits: a Redis round trip, the file ledger's lock.
TIMEOUT_S: Final = 5.0
#: Why a reconciler moved a lapsed owner's reservation.
LEASE_LAPSED: Final = "owner_lease_lapsed"
#: How often the file ledger tries its lock while another process holds it.
LOCK_POLL_S: Final = 0.005


@dataclass(frozen=True, slots=True)
class Rates:
    input_usd_per_mtok: float = 0.25
    output_usd_per_mtok: float = 1.50

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (
            input_tokens * self.input_usd_per_mtok + output_tokens * self.output_usd_per_mtok
        ) / 1_000_000


def estimate_prompt_tokens(body: Mapping[str, Any]) -> int:
    size = len(json.dumps(body, ensure_ascii=False).encode("utf-8"))
    return math.ceil(size / BYTES_PER_TOKEN_ESTIMATE) + PROMPT_OVERHEAD_TOKENS


def _count(usage: Mapping[str, object], key: str) -> int:
    value = usage.get(key, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def charged_tokens(usage: Mapping[str, object]) -> tuple[int, int]:
    """The input and output tokens reported usage is charged for (cached and thinking tokens
    in full, never discounted).

    Output is what the total counts beyond the prompt, if that is more than the
    candidates and thoughts reported (a count left out is still paid for).
    """
    prompt = _count(usage, "promptTokenCount")
    output = _count(usage, "candidatesTokenCount") + _count(usage, "thoughtsTokenCount")
    beyond_prompt = _count(usage, "totalTokenCount") - prompt
    return prompt, max(output, beyond_prompt)


def usage_cost(usage: Mapping[str, object], rates: Rates) -> float:
    """Reported usage at our rates (``charged_tokens``)."""
    return rates.cost(*charged_tokens(usage))


def shown(value: object) -> object:
    """A reported value as a log or ledger field: bounded, never the provider's whole text."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**15:
        return value
    return repr(value)[:MAX_SHOWN_CHARS]


def _first_malformed_count(usage: Mapping[str, object]) -> str | None:
    """The first of ``USAGE_KEYS`` present but not a JSON integer >= 0, or None."""
    for key in USAGE_KEYS:
        if key in usage:
            value = usage[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                return key
    return None


def check_usage(
    usage: Mapping[str, object], *, prompt_estimate: int, max_output_tokens: int
) -> str | None:
    """Why the reported usage cannot be what the call cost, or None if it can be.

    Every count is a JSON integer >= 0; ``promptTokenCount`` is present (a call
    always has a prompt; Gemini leaves out only the counts that are 0); the
    prompt count is at most the reservation's prompt estimate (deliberately
    high, so a count above it is a provider's error, not ours); cached tokens
    are part of the prompt; candidates plus thoughts, and the total beyond the
    prompt, are at most ``maxOutputTokens``. So a settled cost is never more
    than the reservation.
    """
    malformed = _first_malformed_count(usage)
    if malformed is not None:
        return f"{malformed} is not a non-negative integer"
    if "promptTokenCount" not in usage:
        return "promptTokenCount is missing"
    prompt = _count(usage, "promptTokenCount")
    output = _count(usage, "candidatesTokenCount") + _count(usage, "thoughtsTokenCount")
    if prompt > prompt_estimate:
        return f"promptTokenCount exceeds the prompt estimate {prompt_estimate}"
    if _count(usage, "cachedContentTokenCount") > prompt:
        return "cachedContentTokenCount exceeds promptTokenCount"
    if output > max_output_tokens:
        return f"candidates + thoughts exceed maxOutputTokens {max_output_tokens}"
    if "totalTokenCount" in usage:
        total = _count(usage, "totalTokenCount")
        if total < prompt + output:
            return "totalTokenCount is less than its parts"
        if total - prompt > max_output_tokens:
            return f"totalTokenCount beyond the prompt exceeds maxOutputTokens {max_output_tokens}"
    return None


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


def _same_reservation(entry: Mapping[str, Any], fields: Mapping[str, Any]) -> bool:
    return all(entry.get(key) == value for key, value in fields.items())


class BudgetLedger:
    def __init__(
        self,
        path: Path,
        *,
        budget_usd: float,
        budget_per_identity_usd: float | None = None,
        rates: Rates | None = None,
        owner: Owner | None = None,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        """``timeout_s``: the longest wait for the lock (another process holds it)."""
        per_identity = budget_usd if budget_per_identity_usd is None else budget_per_identity_usd
        if not budget_usd > 0 or not per_identity > 0:
            raise ValueError("the budget (and the per-identity budget) must be > 0")
        if not timeout_s > 0:
            raise ValueError("the ledger timeout must be > 0 seconds")
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        self.budget_usd = budget_usd
        self.budget_per_identity_usd = per_identity
        self.rates = rates or Rates()
        self.owner = owner or Owner.new()
        self.timeout_s = timeout_s
        #: Wall time, which the leases are judged by (every process on one host shares it).
        self.clock: Callable[[], float] = time.time
        path.parent.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def _locked(self, *, write: bool = True) -> Iterator[dict[str, Any]]:
        """The ledger, read under its lock (waited for at most ``timeout_s``) and written back
        after (unless ``write`` is false, or the body raised). A ledger that cannot be
        locked, read or written fails closed: ``ledger_unavailable`` (the detail, with the
        path, is for the producer's trace; the client sees the code only)."""
        try:
            lock = self.lock_path.open("a")
        except OSError as error:
            raise _not_written("lock", self.lock_path, error) from error
        with lock:
            self._acquire(lock)
            try:
                ledger = self._read()
                yield ledger
                if write:
                    try:
                        self._write(ledger)
                    except OSError as error:
                        raise _unavailable("write", self.path, error) from error
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _acquire(self, lock: Any) -> None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise NotWritten(
                        f"cannot lock the ledger {self.lock_path} within {self.timeout_s} s"
                    ) from None
                time.sleep(LOCK_POLL_S)
            except OSError as error:
                raise _not_written("lock", self.lock_path, error) from error

    def _read(self) -> dict[str, Any]:
        try:
            if not self.path.exists():
                return {"format": FORMAT, "entries": [], "owners": {}}
            ledger = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:  # a directory, unreadable, truncated, not JSON
            raise _not_written("read", self.path, error) from error
        if (
            not isinstance(ledger, dict)
            or ledger.get("format") != FORMAT
            or not isinstance(ledger.get("entries"), list)
            or not all(isinstance(entry, dict) for entry in ledger["entries"])
            or not isinstance(ledger.setdefault("owners", {}), dict)
        ):
            raise NotWritten(f"{self.path} is not a {FORMAT} ledger")
        return ledger

    def check(self) -> None:
        """Read and write the ledger once (at start): a broken one stops the producer, not a
        call."""
        with self._locked():
            pass

    def _write(self, ledger: dict[str, Any]) -> None:
        write_atomically(self.path, (json.dumps(ledger, indent=1) + "\n").encode("utf-8"))

    def _hold_lease(self, ledger: dict[str, Any]) -> bool:
        """Extend this owner's lease in ``ledger``; whether it was still alive."""
        now = self.clock()
        lease = ledger["owners"].get(self.owner.id)
        alive = isinstance(lease, dict) and now < float(lease.get("lease_until", 0))
        ledger["owners"][self.owner.id] = {
            **self.owner.describe(),
            "lease_until": now + self.owner.lease_s,
        }
        return alive

    @staticmethod
    def _find(ledger: Mapping[str, Any], identity: str, call_id: str) -> dict[str, Any] | None:
        for entry in ledger["entries"]:
            if entry["call_id"] == call_id and entry.get("identity", ANONYMOUS) == identity:
                found: dict[str, Any] = entry
                return found
        return None

    @staticmethod
    def committed(ledger: Mapping[str, Any], identity: str | None = None) -> float:
        """Settled costs plus every reservation still held (reserved or failed); of one
        identity, or of all. A released reservation counts nothing."""
        return sum(
            float(entry["cost_usd"] if entry["state"] == SETTLED else entry["reserved_usd"])
            for entry in ledger["entries"]
            if entry["state"] != RELEASED
            and (identity is None or entry.get("identity", ANONYMOUS) == identity)
        )

    def _reservation(
        self, call_id: str, body: Mapping[str, Any], max_output_tokens: int, identity: str
    ) -> dict[str, Any]:
        """The fields a reservation of this call is known by (the same on every attempt)."""
        prompt_estimate = estimate_prompt_tokens(body)
        return {
            "call_id": call_id,
            "identity": identity,
            "owner": self.owner.id,
            "reserved_usd": self.rates.cost(prompt_estimate, max_output_tokens),
            "prompt_tokens_estimate": prompt_estimate,
            "max_output_tokens": max_output_tokens,
        }

    def reserve(
        self,
        call_id: str,
        *,
        body: Mapping[str, Any],
        max_output_tokens: int,
        identity: str = ANONYMOUS,
        **meta: Any,
    ) -> float:
        """Reserve the worst case of one call, or refuse with ``budget_exhausted``; the same
        call asked again answers the same reservation."""
        fields = self._reservation(call_id, body, max_output_tokens, identity)
        worst = float(fields["reserved_usd"])
        with self._locked() as ledger:
            existing = self._find(ledger, identity, call_id)
            if existing is not None:
                if existing["state"] == RESERVED and _same_reservation(existing, fields):
                    self._hold_lease(ledger)
                    return worst
                raise AlreadyLeft(call_id, existing["state"], existing.get("settled_by", ""))
            total = self.committed(ledger)
            own = self.committed(ledger, identity)
            if total + worst > self.budget_usd:
                raise RequestRefused(
                    Reason.BUDGET_EXHAUSTED,
                    f"committed {total:.6f} + worst case {worst:.6f} > budget {self.budget_usd}",
                )
            if own + worst > self.budget_per_identity_usd:
                raise RequestRefused(
                    Reason.BUDGET_EXHAUSTED,
                    f"identity committed {own:.6f} + worst case {worst:.6f}"
                    f" > per-identity budget {self.budget_per_identity_usd}",
                )
            ledger["entries"].append(
                {
                    **fields,
                    "state": RESERVED,
                    "cost_usd": None,
                    "usage": None,
                    "reserved_at": self.clock(),
                    **meta,
                }
            )
            self._hold_lease(ledger)
        return worst

    def _reserved_entry(
        self, ledger: Mapping[str, Any], identity: str, call_id: str
    ) -> dict[str, Any]:
        entry = self._find(ledger, identity, call_id)
        if entry is None:
            raise KeyError(call_id)
        if entry["state"] != RESERVED:
            raise AlreadyLeft(
                call_id, entry["state"], entry.get("settled_by", ""), _settlement_of(entry)
            )
        return entry

    def mark_sending(self, call_id: str, *, identity: str = ANONYMOUS) -> None:
        """Say the request may reach the provider from now on (before it is sent)."""
        with self._locked() as ledger:
            entry = self._reserved_entry(ledger, identity, call_id)
            if entry.get("owner") != self.owner.id:
                raise AlreadyLeft(call_id, "reserved", str(entry.get("owner")))
            entry["sending_at"] = self.clock()
            self._hold_lease(ledger)

    def _leave_reserved(
        self,
        call_id: str,
        identity: str,
        decide: Callable[[Mapping[str, Any]], dict[str, Any]],
    ) -> dict[str, Any]:
        """Move one ``reserved`` entry to its final state (``decide(entry)`` gives the fields)."""
        with self._locked() as ledger:
            entry = self._reserved_entry(ledger, identity, call_id)
            entry.update(decide(entry), settled_at=self.clock(), settled_by=self.owner.id)
            return dict(entry)

    def settle(
        self, call_id: str, usage: Mapping[str, object], *, identity: str = ANONYMOUS
    ) -> Settlement:
        """Charge the reported usage if it is plausible (``check_usage``), else the reservation."""

        def decide(entry: Mapping[str, Any]) -> dict[str, Any]:
            rejected = check_usage(
                usage,
                prompt_estimate=int(entry["prompt_tokens_estimate"]),
                max_output_tokens=int(entry["max_output_tokens"]),
            )
            if rejected is None:
                cost = usage_cost(usage, self.rates)
                return {"state": SETTLED, "cost_usd": cost, "usage": dict(usage)}
            return {
                "state": SETTLED,
                "cost_usd": float(entry["reserved_usd"]),
                "usage_rejected": rejected,
                "reported_usage": {key: shown(value) for key, value in usage.items()},
            }

        settlement = _settlement_of(self._leave_reserved(call_id, identity, decide))
        assert settlement is not None  # settled above
        return settlement

    def keep_reservation(self, call_id: str, why: str, *, identity: str = ANONYMOUS) -> None:
        """The request may have reached the provider but no usage came back: the worst case
        stays committed."""
        self._leave_reserved(call_id, identity, lambda entry: {"state": FAILED, "failure": why})

    def release(self, call_id: str, why: str, *, identity: str = ANONYMOUS) -> None:
        """The request never started to be sent: nothing was spent, the reservation goes."""
        self._leave_reserved(call_id, identity, lambda entry: {"state": RELEASED, "released": why})

    def abandon(
        self,
        call_id: str,
        *,
        body: Mapping[str, Any],
        max_output_tokens: int,
        why: str,
        identity: str = ANONYMOUS,
    ) -> str:
        """Release a reserve the producer gave up on, or leave a tombstone in its place."""
        now = self.clock()
        with self._locked() as ledger:
            entry = self._find(ledger, identity, call_id)
            if entry is None:
                fields = self._reservation(call_id, body, max_output_tokens, identity)
                ledger["entries"].append(
                    {**fields, "state": RELEASED, "released": why, "tombstone": True,
                     "cost_usd": None, "usage": None, "settled_at": now,
                     "settled_by": self.owner.id}
                )  # fmt: skip
                return "tombstoned"
            self._reserved_entry(ledger, identity, call_id)
            if entry.get("owner") != self.owner.id:
                raise AlreadyLeft(call_id, "reserved", str(entry.get("owner")))
            entry.update(state=RELEASED, released=why, settled_at=now, settled_by=self.owner.id)
            return "released"

    def refresh_lease(self) -> bool:
        with self._locked() as ledger:
            return self._hold_lease(ledger)

    def drop_lease(self) -> None:
        with self._locked(write=False) as ledger:
            if ledger["owners"].pop(self.owner.id, None) is not None:
                try:
                    self._write(ledger)
                except OSError as error:
                    raise _unavailable("write", self.path, error) from error

    def reconcile(self) -> list[dict[str, Any]]:
        """Move the reservations of owners whose lease lapsed; forget lapsed owners that hold
        nothing. Written only if something changed."""
        moved: list[dict[str, Any]] = []
        with self._locked(write=False) as ledger:
            now, owners = self.clock(), ledger["owners"]
            for entry in ledger["entries"]:
                owner = entry.get("owner")
                if entry["state"] != RESERVED or owner is None or owner == self.owner.id:
                    continue  # (an entry of an older producer has no owner: left alone)
                if _lease_alive(owners.get(owner), now):
                    continue
                if entry.get("sending_at") is not None:
                    entry.update(state=FAILED, failure=LEASE_LAPSED)
                else:
                    entry.update(state=RELEASED, released=f"{LEASE_LAPSED} (never sent)")
                entry.update(settled_at=now, settled_by=self.owner.reconciler)
                moved.append(_reconciled(entry, owner))
            holding = {e.get("owner") for e in ledger["entries"] if e["state"] == RESERVED}
            gone = [o for o in owners if o not in holding and not _lease_alive(owners[o], now)]
            for owner in gone:
                del owners[owner]
            if moved or gone:
                try:
                    self._write(ledger)
                except OSError as error:
                    raise _unavailable("write", self.path, error) from error
        return moved

    def close(self) -> None:
        """Nothing to let go of: every operation opens and closes the files it needs."""

    def entries(self) -> list[dict[str, Any]]:
        with self._locked(write=False) as ledger:
            return list(ledger["entries"])

    def totals(self, identity: str | None = None) -> dict[str, Any]:
        with self._locked(write=False) as ledger:
            return {
                "budget_usd": self.budget_usd,
                "budget_per_identity_usd": self.budget_per_identity_usd,
                "committed_usd": self.committed(ledger, identity),
                # Reservations ever granted: a tombstone (``abandon``) was never one.
                "entries": sum(1 for e in ledger["entries"] if not e.get("tombstone")),
            }


def _lease_alive(lease: object, now: float) -> bool:
    """Whether an owner's lease (its record in the file ledger) still runs at ``now``."""
    if not isinstance(lease, dict):
        return False
    try:
        return now < float(lease.get("lease_until", 0))
    except (TypeError, ValueError):
        return False


def _reconciled(entry: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """What a reconciler says of an entry it moved (a trace record's fields)."""
    return {
        "call_id": entry["call_id"],
        "identity": entry.get("identity", ANONYMOUS),
        "owner": owner,
        "state": entry["state"],
        "reserved_usd": float(entry["reserved_usd"]),
    }


def _settlement_of(entry: Mapping[str, Any]) -> Settlement | None:
    """What a settled entry charged; None for any other state."""
    if entry["state"] != SETTLED:
        return None
    return Settlement(
        cost_usd=float(entry["cost_usd"]),
        reserved_usd=float(entry["reserved_usd"]),
        usage_rejected=entry.get("usage_rejected"),
    )


def _unavailable(what: str, path: Path, error: Exception) -> RequestRefused:
    return RequestRefused(Reason.LEDGER_UNAVAILABLE, f"cannot {what} the ledger {path}: {error}")


def _not_written(what: str, path: Path, error: Exception) -> NotWritten:
    return NotWritten(f"cannot {what} the ledger {path}: {error}")
