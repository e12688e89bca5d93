"""The budget ledger in one process: reserve, settle, keep, release, refuse; per identity and in
total; a provider's usage is checked before it is charged; the ledger stays consistent.

Every test that takes ``make_ledger`` runs against both backends: the JSON file and Redis
(a private server, tests/redis_server.py; each test has its own key prefix)."""

from __future__ import annotations

from pathlib import Path

import pytest

from replywire.producer.budget.file_ledger import BudgetLedger
from replywire.producer.budget.usage import Rates, check_usage, usage_cost
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason
from tests.budget_values import GOOD_USAGE, PROMPT_ESTIMATE


def test_usage_cost_charges_thinking_and_cached_tokens_in_full() -> None:
    rates = Rates(1.0, 2.0)
    usage = {"promptTokenCount": 10, "cachedContentTokenCount": 4, "candidatesTokenCount": 3,
             "thoughtsTokenCount": 2}  # fmt: skip
    assert usage_cost(usage, rates) == pytest.approx((10 * 1.0 + 5 * 2.0) / 1e6)


def test_a_foreign_file_is_not_a_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text('{"format": "other"}')
    with pytest.raises(RequestRefused) as refused:
        BudgetLedger(path, budget_usd=1).totals()
    assert refused.value.reason is Reason.LEDGER_UNAVAILABLE


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
