"""The file ledger (``--ledger PATH``): the ledger's JSON under an exclusive ``flock`` on
``PATH.lock``, rewritten atomically (temporary file, fsync, ``os.replace``); several producer
processes on one host may share it. The reference implementation of the rules in
``producer.budget.ledger``; each move of an entry is checked against ``entry_states``."""

from __future__ import annotations

import fcntl
import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from replywire.producer.budget.entry_states import (
    RELEASED,
    RESERVED,
    SETTLED,
    EntryInput,
    EntryState,
    allowed,
)
from replywire.producer.budget.ledger import (
    ANONYMOUS,
    LEASE_LAPSED,
    TIMEOUT_S,
    AlreadyLeft,
    NotWritten,
    Owner,
    Settlement,
)
from replywire.producer.budget.usage import (
    Rates,
    check_usage,
    estimate_prompt_tokens,
    shown,
    usage_cost,
)
from replywire.producer.files import write_atomically
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason

FORMAT: Final = "replywire-ledger/1"
#: How often the file ledger tries its lock while another process holds it.
LOCK_POLL_S: Final = 0.005


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
                again = allowed(existing["state"], EntryInput.RESERVE) is not None
                if again and _same_reservation(existing, fields):
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

    def _entry_to_move(
        self, ledger: Mapping[str, Any], identity: str, call_id: str, event: EntryInput
    ) -> tuple[dict[str, Any], EntryState]:
        """The entry ``event`` moves, and where to (``entry_states``' table); ``AlreadyLeft``
        when the table has no such move from the entry's state."""
        entry = self._find(ledger, identity, call_id)
        if entry is None:
            raise KeyError(call_id)
        target = allowed(entry["state"], event)
        if target is None:
            raise AlreadyLeft(
                call_id, entry["state"], entry.get("settled_by", ""), _settlement_of(entry)
            )
        return entry, target

    def mark_sending(self, call_id: str, *, identity: str = ANONYMOUS) -> None:
        """Say the request may reach the provider from now on (before it is sent)."""
        with self._locked() as ledger:
            entry, _ = self._entry_to_move(ledger, identity, call_id, EntryInput.MARK_SENDING)
            if entry.get("owner") != self.owner.id:
                raise AlreadyLeft(call_id, "reserved", str(entry.get("owner")))
            entry["sending_at"] = self.clock()
            self._hold_lease(ledger)

    def _leave_reserved(
        self,
        call_id: str,
        identity: str,
        event: EntryInput,
        decide: Callable[[Mapping[str, Any]], dict[str, Any]],
    ) -> dict[str, Any]:
        """Move one ``reserved`` entry on ``event`` to its final state (the table's);
        ``decide(entry)`` gives the other fields."""
        with self._locked() as ledger:
            entry, target = self._entry_to_move(ledger, identity, call_id, event)
            entry.update(decide(entry), state=target.value)
            entry.update(settled_at=self.clock(), settled_by=self.owner.id)
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
                return {"cost_usd": cost, "usage": dict(usage)}
            return {
                "cost_usd": float(entry["reserved_usd"]),
                "usage_rejected": rejected,
                "reported_usage": {key: shown(value) for key, value in usage.items()},
            }

        settlement = _settlement_of(
            self._leave_reserved(call_id, identity, EntryInput.SETTLE, decide)
        )
        assert settlement is not None  # settled above
        return settlement

    def keep_reservation(self, call_id: str, why: str, *, identity: str = ANONYMOUS) -> None:
        """The request may have reached the provider but no usage came back: the worst case
        stays committed."""
        self._leave_reserved(call_id, identity, EntryInput.KEEP, lambda entry: {"failure": why})

    def release(self, call_id: str, why: str, *, identity: str = ANONYMOUS) -> None:
        """The request never started to be sent: nothing was spent, the reservation goes."""
        self._leave_reserved(call_id, identity, EntryInput.RELEASE, lambda entry: {"released": why})

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
                tombstone = allowed(EntryState.ABSENT, EntryInput.ABANDON)
                assert tombstone is not None  # the table has it
                ledger["entries"].append(
                    {**fields, "state": tombstone.value, "released": why, "tombstone": True,
                     "cost_usd": None, "usage": None, "settled_at": now,
                     "settled_by": self.owner.id}
                )  # fmt: skip
                return "tombstoned"
            _, target = self._entry_to_move(ledger, identity, call_id, EntryInput.ABANDON)
            if entry.get("owner") != self.owner.id:
                raise AlreadyLeft(call_id, "reserved", str(entry.get("owner")))
            entry.update(state=target.value, released=why, settled_at=now, settled_by=self.owner.id)
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
                sent = entry.get("sending_at") is not None
                event = EntryInput.RECONCILE_SENT if sent else EntryInput.RECONCILE_UNSENT
                target = allowed(entry["state"], event)
                assert target is not None  # reserved, checked above
                if sent:
                    entry.update(state=target.value, failure=LEASE_LAPSED)
                else:
                    entry.update(state=target.value, released=f"{LEASE_LAPSED} (never sent)")
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
