"""The budget ledger in one process: reserve, settle, keep, release, refuse; per identity and in
total; a provider's usage is checked before it is charged; the ledger stays consistent.

Every test that takes ``make_ledger`` runs against both backends: the JSON file and Redis
(a private server, tests/redis_server.py; each test has its own key prefix)."""

from __future__ import annotations

import itertools
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from replywire.producer.budget.ledger import Ledger
from replywire.producer.budget.options import RedisOptions
from replywire.producer.budget.redis_ledger import RedisLedger
from replywire.producer.budget.stores import open_ledger
from replywire.producer.budget.usage import Rates, estimate_prompt_tokens, usage_cost
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason
from tests.budget_values import BODY, GOOD_USAGE, PROMPT_ESTIMATE
from tests.redis_server import RedisServer, free_port, redis_server

MakeLedger = Callable[..., Ledger]


_prefixes = itertools.count()


def options(prefix: str | None) -> RedisOptions:
    return RedisOptions() if prefix is None else RedisOptions(prefix=prefix)


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


@pytest.fixture(params=["file", "redis"])
def make_ledger(request: pytest.FixtureRequest, tmp_path: Path) -> MakeLedger:
    """A factory of ledgers over one store (a file, or a Redis prefix) for this test."""
    if request.param == "file":
        spec = str(tmp_path / "ledger.json")
        prefix = None
    else:
        spec = request.getfixturevalue("redis").url
        prefix = f"test-{next(_prefixes)}:"

    def make(**kwargs: Any) -> Ledger:
        return open_ledger(spec, options=options(prefix), **kwargs)

    return make


DEFAULT_RATES = Rates()


def worst(rates: Rates = DEFAULT_RATES) -> float:
    return rates.cost(estimate_prompt_tokens(BODY), 1000)


def test_reserve_settle_and_keep(make_ledger: MakeLedger) -> None:
    ledger = make_ledger(budget_usd=1.0)
    assert ledger.reserve("a", body=BODY, max_output_tokens=1000) == pytest.approx(worst())
    ledger.reserve("b", body=BODY, max_output_tokens=1000)
    usage = {"promptTokenCount": 100, "candidatesTokenCount": 20, "thoughtsTokenCount": 5}
    settlement = ledger.settle("a", usage)
    cost = settlement.cost_usd
    assert cost == pytest.approx((100 * 0.25 + 25 * 1.50) / 1e6)
    assert settlement.reserved_usd == pytest.approx(worst())
    assert settlement.usage_rejected is None
    ledger.keep_reservation("b", "aborted")
    entries = ledger.entries()
    assert [(e["call_id"], e["state"]) for e in entries] == [("a", "settled"), ("b", "failed")]
    assert ledger.totals()["committed_usd"] == pytest.approx(cost + worst())


def test_a_budget_must_be_positive(make_ledger: MakeLedger) -> None:
    with pytest.raises(ValueError):
        make_ledger(budget_usd=0)


def test_a_reservation_past_the_budget_is_refused_at_the_edge(make_ledger: MakeLedger) -> None:
    one = worst()
    ledger = make_ledger(budget_usd=one * 2)
    ledger.reserve("a", body=BODY, max_output_tokens=1000)
    ledger.reserve("b", body=BODY, max_output_tokens=1000)  # exactly at the budget
    with pytest.raises(RequestRefused) as info:
        ledger.reserve("c", body=BODY, max_output_tokens=1000)
    assert info.value.reason is Reason.BUDGET_EXHAUSTED
    assert ledger.totals()["entries"] == 2


def test_concurrent_reservations_never_exceed_the_budget(make_ledger: MakeLedger) -> None:
    budget = worst() * 5.5

    def reserve(index: int) -> bool:
        try:
            make_ledger(budget_usd=budget).reserve(
                f"call-{index}", body=BODY, max_output_tokens=1000
            )
        except RequestRefused:
            return False
        return True

    with ThreadPoolExecutor(max_workers=8) as pool:
        granted = list(pool.map(reserve, range(40)))
    assert sum(granted) == 5
    totals = make_ledger(budget_usd=budget).totals()
    assert totals["committed_usd"] <= budget
    assert totals["entries"] == 5


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
def test_implausible_usage_settles_at_the_reservation(make_ledger: MakeLedger, name: str) -> None:
    ledger = make_ledger(budget_usd=worst() * 2)
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


def test_an_entry_leaves_reserved_exactly_once(make_ledger: MakeLedger) -> None:
    ledger = make_ledger(budget_usd=1.0)
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


def test_a_released_reservation_counts_nothing(make_ledger: MakeLedger) -> None:
    ledger = make_ledger(budget_usd=worst() * 1.5)
    ledger.reserve("a", body=BODY, max_output_tokens=1000)
    with pytest.raises(RequestRefused):
        ledger.reserve("b", body=BODY, max_output_tokens=1000)
    ledger.release("a", "cancelled_by_consumer")
    assert ledger.totals()["committed_usd"] == 0
    ledger.reserve("b", body=BODY, max_output_tokens=1000)  # the room came back
    states = [(e["call_id"], e["state"]) for e in ledger.entries()]
    assert states == [("a", "released"), ("b", "reserved")]


def test_one_identity_exhausts_its_share_and_another_is_still_served(
    make_ledger: MakeLedger,
) -> None:
    one = worst()
    ledger = make_ledger(budget_usd=one * 10, budget_per_identity_usd=one * 2.5)
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
    ledger.settle("greedy-0", GOOD_USAGE, identity="greedy")
    ledger.reserve("greedy-2", body=BODY, max_output_tokens=1000, identity="greedy")


def test_the_total_binds_every_identity(make_ledger: MakeLedger) -> None:
    one = worst()
    ledger = make_ledger(budget_usd=one * 2.5, budget_per_identity_usd=one * 2)
    ledger.reserve("a-0", body=BODY, max_output_tokens=1000, identity="a")
    ledger.reserve("b-0", body=BODY, max_output_tokens=1000, identity="b")
    with pytest.raises(RequestRefused) as info:
        ledger.reserve("c-0", body=BODY, max_output_tokens=1000, identity="c")
    assert "per-identity" not in info.value.detail


def test_an_unnamed_caller_is_anonymous_and_the_share_defaults_to_the_budget(
    make_ledger: MakeLedger,
) -> None:
    ledger = make_ledger(budget_usd=1.0)
    assert ledger.budget_per_identity_usd == 1.0
    ledger.reserve("a", body=BODY, max_output_tokens=1000)
    assert ledger.entries()[0]["identity"] == "anonymous"
    with pytest.raises(ValueError):
        make_ledger(budget_usd=1.0, budget_per_identity_usd=0)


def test_concurrent_identities_each_get_their_share_and_no_more(make_ledger: MakeLedger) -> None:
    one = worst()
    # Per identity 2.5 worst cases: 2 each. In total 5.5: at most 5 in all.
    budget, share = one * 5.5, one * 2.5

    def reserve(index: int) -> str | None:
        identity = f"caller-{index % 4}"
        try:
            make_ledger(budget_usd=budget, budget_per_identity_usd=share).reserve(
                f"call-{index}", body=BODY, max_output_tokens=1000, identity=identity
            )
        except RequestRefused:
            return None
        return identity

    with ThreadPoolExecutor(max_workers=8) as pool:
        granted = [identity for identity in pool.map(reserve, range(40)) if identity]
    assert len(granted) == 5
    assert max(granted.count(f"caller-{n}") for n in range(4)) == 2
    ledger = make_ledger(budget_usd=budget, budget_per_identity_usd=share)
    assert ledger.totals()["committed_usd"] <= budget
    for n in range(4):
        assert ledger.totals(f"caller-{n}")["committed_usd"] <= share


def test_settled_and_released_calls_expire_and_the_sums_do_not(redis: RedisServer) -> None:
    ledger = RedisLedger(redis.url, budget_usd=1.0, options=RedisOptions(prefix="ttl:", ttl_s=600))
    for call_id in ("settled", "failed", "released", "reserved"):
        ledger.reserve(call_id, body=BODY, max_output_tokens=1000)
    ledger.settle("settled", GOOD_USAGE)
    ledger.keep_reservation("failed", "aborted")
    ledger.release("released", "never sent")
    client = ledger.client
    ttls = {call_id: client.ttl(ledger.call_key(call_id)) for call_id in ("settled", "released")}
    assert all(0 < ttl <= 600 for ttl in ttls.values()), ttls
    assert ledger.call_key("settled") == "ttl:call:anonymous:settled"
    for key in ("ttl:call:anonymous:failed", "ttl:call:anonymous:reserved", "ttl:committed",
                "ttl:seq", "ttl:reserved"):  # fmt: skip
        assert client.ttl(key) == -1, key  # no expiry
    assert ledger.totals()["committed_usd"] == pytest.approx(usage_cost(GOOD_USAGE, Rates())
                                                              + 2 * worst())  # fmt: skip


def test_redis_sums_are_exact_integers(redis: RedisServer) -> None:
    """1,000 settlements of one prompt token each: no float drift (pico-dollars)."""
    ledger = RedisLedger(redis.url, budget_usd=10.0, options=RedisOptions(prefix="exact:"))
    for index in range(1000):
        ledger.reserve(f"c{index}", body=BODY, max_output_tokens=1000, identity="one")
        ledger.settle(f"c{index}", {"promptTokenCount": 1}, identity="one")
    assert ledger.client.hget("exact:committed", "total") == str(1000 * 250_000)
    assert ledger.totals("one")["committed_usd"] == 1000 * 250_000 / 10**12


def test_redis_killed_mid_run_is_ledger_unavailable() -> None:
    with redis_server() as server:
        ledger = RedisLedger(server.url, budget_usd=1.0)
        ledger.reserve("a", body=BODY, max_output_tokens=1000)
        server.kill()
        for operation in (
            lambda: ledger.reserve("b", body=BODY, max_output_tokens=1000),
            lambda: ledger.settle("a", GOOD_USAGE),
            lambda: ledger.keep_reservation("a", "aborted"),
            lambda: ledger.release("a", "never sent"),
            ledger.totals,
            ledger.check,
        ):
            with pytest.raises(RequestRefused) as refused:
                operation()
            assert refused.value.reason is Reason.LEDGER_UNAVAILABLE
            assert f"127.0.0.1:{server.port}" in refused.value.detail


def test_redis_that_answers_garbage_is_ledger_unavailable(redis: RedisServer) -> None:
    ledger = RedisLedger(redis.url, budget_usd=1.0, options=RedisOptions(prefix="garbage:"))
    ledger.client.rpush("garbage:committed", "not a hash")
    for operation in (
        ledger.check,
        ledger.totals,
        lambda: ledger.reserve("a", body=BODY, max_output_tokens=1000),
    ):
        with pytest.raises(RequestRefused) as refused:
            operation()
        assert refused.value.reason is Reason.LEDGER_UNAVAILABLE
    ledger.client.delete("garbage:committed")
    ledger.client.hset("garbage:committed", "total", "twelve")
    with pytest.raises(RequestRefused) as refused:
        ledger.reserve("a", body=BODY, max_output_tokens=1000)
    assert refused.value.reason is Reason.LEDGER_UNAVAILABLE
    with pytest.raises(RequestRefused):
        ledger.check()


def test_a_server_that_is_not_redis_is_ledger_unavailable() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def answer_garbage() -> None:
            for _ in range(4):
                try:
                    connection, _address = listener.accept()
                except OSError:  # the test ended with fewer connections: the listener closed
                    return
                with connection:
                    connection.recv(4096)
                    connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        thread = threading.Thread(target=answer_garbage, daemon=True)
        thread.start()
        url = f"redis://:sekrit-password@127.0.0.1:{port}/0"
        ledger = RedisLedger(url, budget_usd=1.0, options=RedisOptions(timeout_s=2))
        with pytest.raises(RequestRefused) as refused:
            ledger.reserve("a", body=BODY, max_output_tokens=1000)
    assert refused.value.reason is Reason.LEDGER_UNAVAILABLE
    assert "sekrit" not in refused.value.detail
    assert f"redis://127.0.0.1:{port}/0" in refused.value.detail


def test_an_unreachable_redis_names_no_password() -> None:
    port = free_port()
    ledger = open_ledger(f"redis://user:sekrit-password@127.0.0.1:{port}/3", budget_usd=1.0)
    with pytest.raises(RequestRefused) as refused:
        ledger.check()
    assert refused.value.reason is Reason.LEDGER_UNAVAILABLE
    assert "sekrit" not in refused.value.detail
    assert f"redis://127.0.0.1:{port}/3" in refused.value.detail
