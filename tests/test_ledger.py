"""The budget ledger in one process: reserve, settle, keep, release, refuse; per identity and in
total; a provider's usage is checked before it is charged; the file stays consistent."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from producer.gemini.ledger import (
    BudgetLedger,
    Rates,
    check_usage,
    estimate_prompt_tokens,
    usage_cost,
)
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
    settlement = ledger.settle("a", usage)
    cost = settlement.cost_usd
    assert cost == pytest.approx((100 * 0.25 + 25 * 1.50) / 1e6)
    assert settlement.reserved_usd == pytest.approx(worst())
    assert settlement.usage_rejected is None
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
    with pytest.raises(RequestRefused) as refused:
        BudgetLedger(path, budget_usd=1).totals()
    assert refused.value.reason is Reason.LEDGER_UNAVAILABLE


# --- usage from the provider is checked -----------------------------------------------------

PROMPT_ESTIMATE = estimate_prompt_tokens(BODY)
GOOD_USAGE = {"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120}
BAD_USAGES: dict[str, dict[str, object]] = {
    "negative prompt": {"promptTokenCount": -1_000_000_000, "candidatesTokenCount": 20},
    "negative output": {"promptTokenCount": 100, "candidatesTokenCount": -5},
    "huge output": {"promptTokenCount": 100, "candidatesTokenCount": 1_000_000_000},
    "prompt above the estimate": {"promptTokenCount": PROMPT_ESTIMATE + 1},
    "thoughts past max output": {"promptTokenCount": 1, "candidatesTokenCount": 600,
                                 "thoughtsTokenCount": 401},
    "float": {"promptTokenCount": 100, "candidatesTokenCount": 12.5},
    "string": {"promptTokenCount": "100"},
    "bool": {"promptTokenCount": True},
    "null": {"promptTokenCount": None},
    "missing prompt": {"candidatesTokenCount": 20, "totalTokenCount": 20},
    "cached above prompt": {"promptTokenCount": 10, "cachedContentTokenCount": 11},
    "total below its parts": {"promptTokenCount": 100, "candidatesTokenCount": 20,
                              "totalTokenCount": 119},
    "total past the worst case": {"promptTokenCount": 100, "totalTokenCount": 100 + 1001},
}  # fmt: skip


@pytest.mark.parametrize("name", list(BAD_USAGES))
def test_implausible_usage_settles_at_the_reservation(tmp_path: Path, name: str) -> None:
    ledger = BudgetLedger(tmp_path / "ledger.json", budget_usd=worst() * 2)
    ledger.reserve("good", body=BODY, max_output_tokens=1000)
    ledger.settle("good", GOOD_USAGE)
    before = ledger.totals()["committed_usd"]
    ledger.reserve("bad", body=BODY, max_output_tokens=1000)
    settlement = ledger.settle("bad", BAD_USAGES[name])
    assert settlement.usage_rejected is not None
    assert settlement.cost_usd == settlement.reserved_usd == pytest.approx(worst())
    after = ledger.totals()["committed_usd"]
    # Never down, never past the reservation (so never past the budget).
    assert after == pytest.approx(before + worst())
    assert after <= ledger.budget_usd
    entry = ledger.entries()[-1]
    assert (entry["state"], entry["cost_usd"]) == ("settled", entry["reserved_usd"])
    assert entry["usage"] is None
    assert entry["usage_rejected"] == settlement.usage_rejected


def test_plausible_usage_is_charged_as_reported() -> None:
    bounds = {"prompt_estimate": PROMPT_ESTIMATE, "max_output_tokens": 1000}
    assert check_usage(GOOD_USAGE, **bounds) is None
    # Gemini leaves out counts that are 0; the total may count tokens we do not list.
    assert check_usage({"promptTokenCount": PROMPT_ESTIMATE}, **bounds) is None
    at_the_edge = {"promptTokenCount": 5, "candidatesTokenCount": 900, "thoughtsTokenCount": 100}
    assert check_usage(at_the_edge, **bounds) is None
    assert check_usage({"promptTokenCount": 10, "totalTokenCount": 25}, **bounds) is None


def test_a_count_left_out_is_still_charged_from_the_total() -> None:
    rates = Rates(1.0, 2.0)
    assert usage_cost({"promptTokenCount": 10, "totalTokenCount": 25}, rates) == pytest.approx(
        (10 * 1.0 + 15 * 2.0) / 1e6
    )


def test_an_entry_leaves_reserved_exactly_once(tmp_path: Path) -> None:
    ledger = BudgetLedger(tmp_path / "ledger.json", budget_usd=1.0)
    ledger.reserve("a", body=BODY, max_output_tokens=1000)
    ledger.keep_reservation("a", "aborted")
    for again in (
        lambda: ledger.settle("a", GOOD_USAGE),
        lambda: ledger.release("a", "late"),
        lambda: ledger.keep_reservation("a", "twice"),
    ):
        with pytest.raises(ValueError, match="already failed"):
            again()
    with pytest.raises(KeyError):
        ledger.release("unknown", "never reserved")


# --- released reservations ------------------------------------------------------------------


def test_a_released_reservation_counts_nothing(tmp_path: Path) -> None:
    ledger = BudgetLedger(tmp_path / "ledger.json", budget_usd=worst() * 1.5)
    ledger.reserve("a", body=BODY, max_output_tokens=1000)
    with pytest.raises(RequestRefused):
        ledger.reserve("b", body=BODY, max_output_tokens=1000)
    ledger.release("a", "cancelled_by_consumer")
    assert ledger.totals()["committed_usd"] == 0
    ledger.reserve("b", body=BODY, max_output_tokens=1000)  # the room came back
    states = [(e["call_id"], e["state"]) for e in ledger.entries()]
    assert states == [("a", "released"), ("b", "reserved")]


# --- per identity -----------------------------------------------------------------------------


def test_one_identity_exhausts_its_share_and_another_is_still_served(tmp_path: Path) -> None:
    one = worst()
    ledger = BudgetLedger(
        tmp_path / "ledger.json", budget_usd=one * 10, budget_per_identity_usd=one * 2.5
    )
    for index in range(2):
        ledger.reserve(f"greedy-{index}", body=BODY, max_output_tokens=1000, identity="greedy")
    with pytest.raises(RequestRefused) as info:
        ledger.reserve("greedy-2", body=BODY, max_output_tokens=1000, identity="greedy")
    assert info.value.reason is Reason.BUDGET_EXHAUSTED
    assert "per-identity" in info.value.detail
    ledger.reserve("polite-0", body=BODY, max_output_tokens=1000, identity="polite")
    assert ledger.totals("greedy")["committed_usd"] == pytest.approx(one * 2)
    assert ledger.totals("polite")["committed_usd"] == pytest.approx(one)
    assert [e["identity"] for e in ledger.entries()] == ["greedy", "greedy", "polite"]
    # Settling for less gives the identity its room back; the total still binds everyone.
    ledger.settle("greedy-0", GOOD_USAGE)
    ledger.reserve("greedy-2", body=BODY, max_output_tokens=1000, identity="greedy")


def test_the_total_binds_every_identity(tmp_path: Path) -> None:
    one = worst()
    ledger = BudgetLedger(
        tmp_path / "ledger.json", budget_usd=one * 2.5, budget_per_identity_usd=one * 2
    )
    ledger.reserve("a-0", body=BODY, max_output_tokens=1000, identity="a")
    ledger.reserve("b-0", body=BODY, max_output_tokens=1000, identity="b")
    with pytest.raises(RequestRefused) as info:
        ledger.reserve("c-0", body=BODY, max_output_tokens=1000, identity="c")
    assert "per-identity" not in info.value.detail


def test_an_unnamed_caller_is_anonymous_and_the_share_defaults_to_the_budget(
    tmp_path: Path,
) -> None:
    ledger = BudgetLedger(tmp_path / "ledger.json", budget_usd=1.0)
    assert ledger.budget_per_identity_usd == 1.0
    ledger.reserve("a", body=BODY, max_output_tokens=1000)
    assert ledger.entries()[0]["identity"] == "anonymous"
    with pytest.raises(ValueError):
        BudgetLedger(tmp_path / "ledger.json", budget_usd=1.0, budget_per_identity_usd=0)


def test_concurrent_identities_each_get_their_share_and_no_more(tmp_path: Path) -> None:
    one = worst()
    path = tmp_path / "ledger.json"
    # Per identity 2.5 worst cases: 2 each. In total 5.5: at most 5 in all.
    budget, share = one * 5.5, one * 2.5

    def reserve(index: int) -> str | None:
        identity = f"caller-{index % 4}"
        try:
            BudgetLedger(path, budget_usd=budget, budget_per_identity_usd=share).reserve(
                f"call-{index}", body=BODY, max_output_tokens=1000, identity=identity
            )
        except RequestRefused:
            return None
        return identity

    with ThreadPoolExecutor(max_workers=8) as pool:
        granted = [identity for identity in pool.map(reserve, range(40)) if identity]
    assert len(granted) == 5
    assert max(granted.count(f"caller-{n}") for n in range(4)) == 2
    ledger = BudgetLedger(path, budget_usd=budget, budget_per_identity_usd=share)
    assert ledger.totals()["committed_usd"] <= budget
    for n in range(4):
        assert ledger.totals(f"caller-{n}")["committed_usd"] <= share
