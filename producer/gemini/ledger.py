"""The budget ledger: no paid request starts unless its worst case fits the budget.

Before each provider request the producer *reserves* its worst-case cost (the
prompt estimate at the input rate plus ``maxOutputTokens`` at the output rate)
under an exclusive ``flock`` on ``LEDGER.lock``; the ledger JSON is rewritten
atomically (temporary file, fsync, ``os.replace``). After the call it *settles*
the entry with the usage the provider reported. A call that failed or was
aborted keeps its reservation: nobody knows what it cost, so the worst case
stands. A reservation that would take the committed total over the budget is
refused (``budget_exhausted``). Several producer processes may share one ledger.
"""

from __future__ import annotations

import fcntl
import json
import math
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from producer.files import write_atomically
from shared.errors import Reason, RequestRefused

FORMAT: Final = "replywire-ledger/1"
#: A deliberately high estimate: about 3 bytes per token (Gemini averages about 4 characters).
BYTES_PER_TOKEN_ESTIMATE: Final = 3
PROMPT_OVERHEAD_TOKENS: Final = 16


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


def usage_cost(usage: Mapping[str, int], rates: Rates) -> float:
    """Reported usage at our rates (cached and thinking tokens charged, never discounted)."""
    prompt = usage.get("promptTokenCount", 0)
    output = usage.get("candidatesTokenCount", 0) + usage.get("thoughtsTokenCount", 0)
    return rates.cost(prompt, output)


class BudgetLedger:
    def __init__(self, path: Path, *, budget_usd: float, rates: Rates | None = None) -> None:
        if not budget_usd > 0:
            raise ValueError("the budget must be > 0")
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        self.budget_usd = budget_usd
        self.rates = rates or Rates()
        path.parent.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        with self.lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                ledger = self._read()
                yield ledger
                self._write(ledger)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> dict[str, Any]:
        if not self.path.exists():
            return {"format": FORMAT, "entries": []}
        ledger: dict[str, Any] = json.loads(self.path.read_text(encoding="utf-8"))
        if ledger.get("format") != FORMAT:
            raise ValueError(f"{self.path} is not a {FORMAT} ledger")
        return ledger

    def _write(self, ledger: dict[str, Any]) -> None:
        write_atomically(self.path, (json.dumps(ledger, indent=1) + "\n").encode("utf-8"))

    @staticmethod
    def committed(ledger: Mapping[str, Any]) -> float:
        """Settled costs plus every reservation not settled (reserved or failed)."""
        return sum(
            float(entry["cost_usd"] if entry["state"] == "settled" else entry["reserved_usd"])
            for entry in ledger["entries"]
        )

    def reserve(
        self, call_id: str, *, body: Mapping[str, Any], max_output_tokens: int, **meta: Any
    ) -> float:
        """Reserve the worst case of one call, or refuse with ``budget_exhausted``."""
        worst = self.rates.cost(estimate_prompt_tokens(body), max_output_tokens)
        with self._locked() as ledger:
            committed = self.committed(ledger)
            if committed + worst > self.budget_usd:
                raise RequestRefused(
                    Reason.BUDGET_EXHAUSTED,
                    f"committed {committed:.6f} + worst case {worst:.6f}"
                    f" > budget {self.budget_usd}",
                )
            ledger["entries"].append(
                {
                    "call_id": call_id,
                    "state": "reserved",
                    "reserved_usd": worst,
                    "cost_usd": None,
                    "usage": None,
                    "reserved_at": time.time(),
                    **meta,
                }
            )
        return worst

    def _update(self, call_id: str, **fields: Any) -> dict[str, Any]:
        with self._locked() as ledger:
            for entry in ledger["entries"]:
                if entry["call_id"] == call_id:
                    entry.update(fields)
                    return dict(entry)
        raise KeyError(call_id)

    def settle(self, call_id: str, usage: Mapping[str, int]) -> tuple[float, float]:
        """Record the reported usage; returns (cost, what was reserved for the call)."""
        cost = usage_cost(usage, self.rates)
        entry = self._update(
            call_id, state="settled", cost_usd=cost, usage=dict(usage), settled_at=time.time()
        )
        return cost, float(entry["reserved_usd"])

    def keep_reservation(self, call_id: str, why: str) -> None:
        """The call failed or was aborted: its worst case stays committed."""
        self._update(call_id, state="failed", failure=why, settled_at=time.time())

    def totals(self) -> dict[str, Any]:
        with self._locked() as ledger:
            return {
                "budget_usd": self.budget_usd,
                "committed_usd": self.committed(ledger),
                "entries": len(ledger["entries"]),
            }
