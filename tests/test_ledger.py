"""The budget ledger in one process: reserve, settle, keep, refuse; the file stays consistent."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from producer.gemini.ledger import BudgetLedger, Rates, estimate_prompt_tokens, usage_cost
from shared.errors import Reason, RequestRefused

BODY = {"contents": [{"role": "user", "parts": [{"text": "x" * 300}]}]}


DEFAULT_RATES = Rates()


def worst(rates: Rates = DEFAULT_RATES) -> float:
    return rates.cost(estimate_prompt_tokens(BODY), 1000)


def test_reserve_settle_and_keep(tmp_path: Path) -> None:
    ledger = BudgetLedger(tmp_path / "ledger.json", budget_usd=1.0)
    assert ledger.reserve("a", body=BODY, max_output_tokens=1000) == pytest.approx(worst())
    ledger.reserve("b", body=BODY, max_output_tokens=1000)
    usage = {"promptTokenCount": 100, "candidatesTokenCount": 20, "thoughtsTokenCount": 5}
    cost, reserved = ledger.settle("a", usage)
    assert cost == pytest.approx((100 * 0.25 + 25 * 1.50) / 1e6)
    assert reserved == pytest.approx(worst())
    ledger.keep_reservation("b", "aborted")
    entries = json.loads((tmp_path / "ledger.json").read_text())["entries"]
    assert [(e["call_id"], e["state"]) for e in entries] == [("a", "settled"), ("b", "failed")]
    assert ledger.totals()["committed_usd"] == pytest.approx(cost + worst())


def test_a_reservation_past_the_budget_is_refused_at_the_edge(tmp_path: Path) -> None:
    one = worst()
    ledger = BudgetLedger(tmp_path / "ledger.json", budget_usd=one * 2)
    ledger.reserve("a", body=BODY, max_output_tokens=1000)
    ledger.reserve("b", body=BODY, max_output_tokens=1000)  # exactly at the budget
    with pytest.raises(RequestRefused) as info:
        ledger.reserve("c", body=BODY, max_output_tokens=1000)
    assert info.value.reason is Reason.BUDGET_EXHAUSTED
    assert ledger.totals()["entries"] == 2


def test_concurrent_reservations_never_exceed_the_budget(tmp_path: Path) -> None:
    budget = worst() * 5.5
    path = tmp_path / "ledger.json"

    def reserve(index: int) -> bool:
        try:
            BudgetLedger(path, budget_usd=budget).reserve(
                f"call-{index}", body=BODY, max_output_tokens=1000
            )
        except RequestRefused:
            return False
        return True

    with ThreadPoolExecutor(max_workers=8) as pool:
        granted = list(pool.map(reserve, range(40)))
    assert sum(granted) == 5
    totals = BudgetLedger(path, budget_usd=budget).totals()
    assert totals["committed_usd"] <= budget
    assert totals["entries"] == 5


def test_usage_cost_charges_thinking_and_cached_tokens_in_full() -> None:
    rates = Rates(1.0, 2.0)
    usage = {"promptTokenCount": 10, "cachedContentTokenCount": 4, "candidatesTokenCount": 3,
             "thoughtsTokenCount": 2}  # fmt: skip
    assert usage_cost(usage, rates) == pytest.approx((10 * 1.0 + 5 * 2.0) / 1e6)


def test_a_budget_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        BudgetLedger(tmp_path / "ledger.json", budget_usd=0)


def test_a_foreign_file_is_not_a_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text('{"format": "other"}')
    with pytest.raises(ValueError):
        BudgetLedger(path, budget_usd=1).totals()
