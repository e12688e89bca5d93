"""The budget ledger shared by several processes (each with its own ledger objects, as
producers have): both backends, the JSON file and a private Redis server."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest

from replywire.producer.budget.options import RedisOptions
from replywire.producer.budget.stores import open_ledger
from replywire.producer.budget.usage import Rates, estimate_prompt_tokens
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason
from tests.budget_values import BODY
from tests.redis_server import redis_server

#: One reservation's worst case: BODY's prompt and 1000 output tokens.
WORST_USD = Rates().cost(estimate_prompt_tokens(BODY), 1000)


def options(prefix: str | None) -> RedisOptions:
    return RedisOptions() if prefix is None else RedisOptions(prefix=prefix)


def reserve_from_threads(spec: str, prefix: str | None, budget: float, first: int) -> int:
    """One process's share: 20 reservations from 4 threads, each with its own ledger object."""

    def reserve(index: int) -> bool:
        try:
            open_ledger(spec, options=options(prefix), budget_usd=budget).reserve(
                f"call-{index}", body=BODY, max_output_tokens=1000
            )
        except RequestRefused as refused:
            assert refused.reason is Reason.BUDGET_EXHAUSTED
            return False
        return True

    with ThreadPoolExecutor(max_workers=4) as pool:
        return sum(pool.map(reserve, range(first, first + 20)))


def reservations_from_two_processes(spec: str, prefix: str | None) -> None:
    """40 reservations from 8 threads in 2 processes, room for 5: exactly 5 are granted."""
    budget = WORST_USD * 5.5
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        shares = [pool.submit(reserve_from_threads, spec, prefix, budget, n) for n in (0, 20)]
        granted = [share.result() for share in shares]
    assert sum(granted) == 5
    totals = open_ledger(spec, options=options(prefix), budget_usd=budget).totals()
    assert totals["entries"] == 5
    assert totals["committed_usd"] <= budget


@pytest.mark.parametrize("backend", ["file", "redis"])
def test_reservations_from_two_processes_never_exceed_the_budget(
    backend: str, tmp_path: Path
) -> None:
    if backend == "file":
        reservations_from_two_processes(str(tmp_path / "ledger.json"), None)
    else:
        with redis_server() as server:
            reservations_from_two_processes(server.url, "processes:")
