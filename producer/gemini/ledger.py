"""The budget ledger: no paid request starts unless its worst case fits the budget.

Before each provider request the producer *reserves* its worst-case cost (the
prompt estimate at the input rate plus ``maxOutputTokens`` at the output rate)
under an exclusive ``flock`` on ``LEDGER.lock``; the ledger JSON is rewritten
atomically (temporary file, fsync, ``os.replace``). A reservation is charged to
the caller's *identity* as well as to the total: it is refused
(``budget_exhausted``) if it would take either the identity's committed amount
past the per-identity limit or the committed total past the budget, so one
caller cannot starve the others. Several producer processes may share one ledger.

Every entry leaves ``reserved`` exactly once:

* ``settled`` with the usage the provider reported, if that usage is plausible
  (``check_usage``: non-negative integers within the call's worst case);
  otherwise settled *at its reservation* (``usage_rejected`` says why): a
  hostile or broken provider can neither lower the total nor push it past the
  reservation;
* ``failed`` (the reservation is kept) once the request may have reached the
  provider but no usage came back: nobody knows what it cost, the worst case stands;
* ``released`` (not counted) when the request never started to be sent.

``Ledger`` is the interface the Gemini source uses; ``BudgetLedger`` (this file)
and ``redis_ledger.RedisLedger`` (``--ledger redis://HOST:PORT/DB``) implement
it with the same rules; ``ledgers.open_ledger`` picks one from the ``--ledger`` value.
"""

from __future__ import annotations

import fcntl
import json
import math
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


class Ledger(Protocol):
    """What the Gemini source needs of a budget ledger. Every method is synchronous (the
    source runs it in a thread) and fails closed with ``ledger_unavailable``."""

    budget_usd: float
    budget_per_identity_usd: float

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
        """Reserve the worst case of one call (its cost in USD), or refuse with
        ``budget_exhausted``."""
        ...

    def settle(self, call_id: str, usage: Mapping[str, object]) -> Settlement:
        """Charge the reported usage if it is plausible (``check_usage``), else the reservation."""
        ...

    def keep_reservation(self, call_id: str, why: str) -> None:
        """The request may have reached the provider but no usage came back."""

    def release(self, call_id: str, why: str) -> None:
        """The request never started to be sent: the reservation goes."""

    def totals(self, identity: str | None = None) -> dict[str, Any]:
        """``committed_usd`` (of one identity, or of all), the budgets, ``entries``."""
        ...

    def entries(self) -> list[dict[str, Any]]:
        """Every entry still held, oldest first (for operators and tests)."""
        ...


class BudgetLedger:
    def __init__(
        self,
        path: Path,
        *,
        budget_usd: float,
        budget_per_identity_usd: float | None = None,
        rates: Rates | None = None,
    ) -> None:
        per_identity = budget_usd if budget_per_identity_usd is None else budget_per_identity_usd
        if not budget_usd > 0 or not per_identity > 0:
            raise ValueError("the budget (and the per-identity budget) must be > 0")
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        self.budget_usd = budget_usd
        self.budget_per_identity_usd = per_identity
        self.rates = rates or Rates()
        path.parent.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        """The ledger, read under its lock and written back after. A ledger that cannot be
        locked, read or written fails closed: ``ledger_unavailable`` (the detail, with the
        path, is for the producer's trace; the client sees the code only)."""
        try:
            lock = self.lock_path.open("a")
        except OSError as error:
            raise _unavailable("lock", self.lock_path, error) from error
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                ledger = self._read()
                yield ledger
                try:
                    self._write(ledger)
                except OSError as error:
                    raise _unavailable("write", self.path, error) from error
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> dict[str, Any]:
        try:
            if not self.path.exists():
                return {"format": FORMAT, "entries": []}
            ledger = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:  # a directory, unreadable, truncated, not JSON
            raise _unavailable("read", self.path, error) from error
        if (
            not isinstance(ledger, dict)
            or ledger.get("format") != FORMAT
            or not isinstance(ledger.get("entries"), list)
            or not all(isinstance(entry, dict) for entry in ledger["entries"])
        ):
            raise RequestRefused(Reason.LEDGER_UNAVAILABLE, f"{self.path} is not a {FORMAT} ledger")
        return ledger

    def check(self) -> None:
        """Read the ledger once (at start): a broken one stops the producer, not a call."""
        with self._locked():
            pass

    def _write(self, ledger: dict[str, Any]) -> None:
        write_atomically(self.path, (json.dumps(ledger, indent=1) + "\n").encode("utf-8"))

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

    def reserve(
        self,
        call_id: str,
        *,
        body: Mapping[str, Any],
        max_output_tokens: int,
        identity: str = ANONYMOUS,
        **meta: Any,
    ) -> float:
        """Reserve the worst case of one call, or refuse with ``budget_exhausted``."""
        prompt_estimate = estimate_prompt_tokens(body)
        worst = self.rates.cost(prompt_estimate, max_output_tokens)
        with self._locked() as ledger:
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
                    "call_id": call_id,
                    "identity": identity,
                    "state": RESERVED,
                    "reserved_usd": worst,
                    "prompt_tokens_estimate": prompt_estimate,
                    "max_output_tokens": max_output_tokens,
                    "cost_usd": None,
                    "usage": None,
                    "reserved_at": time.time(),
                    **meta,
                }
            )
        return worst

    def _leave_reserved(
        self, call_id: str, decide: Callable[[Mapping[str, Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        """Move one ``reserved`` entry to its final state (``decide(entry)`` gives the fields)."""
        with self._locked() as ledger:
            for entry in ledger["entries"]:
                if entry["call_id"] == call_id:
                    if entry["state"] != RESERVED:
                        raise ValueError(f"call {call_id} is already {entry['state']}")
                    entry.update(decide(entry), settled_at=time.time())
                    return dict(entry)
        raise KeyError(call_id)

    def settle(self, call_id: str, usage: Mapping[str, object]) -> Settlement:
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

        entry = self._leave_reserved(call_id, decide)
        return Settlement(
            cost_usd=float(entry["cost_usd"]),
            reserved_usd=float(entry["reserved_usd"]),
            usage_rejected=entry.get("usage_rejected"),
        )

    def keep_reservation(self, call_id: str, why: str) -> None:
        """The request may have reached the provider but no usage came back: the worst case
        stays committed."""
        self._leave_reserved(call_id, lambda entry: {"state": FAILED, "failure": why})

    def release(self, call_id: str, why: str) -> None:
        """The request never started to be sent: nothing was spent, the reservation goes."""
        self._leave_reserved(call_id, lambda entry: {"state": RELEASED, "released": why})

    def entries(self) -> list[dict[str, Any]]:
        with self._locked() as ledger:
            return list(ledger["entries"])

    def totals(self, identity: str | None = None) -> dict[str, Any]:
        with self._locked() as ledger:
            return {
                "budget_usd": self.budget_usd,
                "budget_per_identity_usd": self.budget_per_identity_usd,
                "committed_usd": self.committed(ledger, identity),
                "entries": len(ledger["entries"]),
            }


def _unavailable(what: str, path: Path, error: Exception) -> RequestRefused:
    return RequestRefused(Reason.LEDGER_UNAVAILABLE, f"cannot {what} the ledger {path}: {error}")
