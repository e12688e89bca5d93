"""The ledger when its store fails: idempotent reserves, a reserve whose answer was lost asked
again or abandoned, owner leases and their reconciliation, settles retried in the background
and at shutdown, and the bounds that say how long all that may take.

Real stores only: a private valkey/redis server (tests/redis_server.py), paused with SIGSTOP
(its commands then wait in its socket buffers and run when it resumes, as a stalled server's
do), and the JSON file. No producer process here: tests/system/test_gemini_ledger_faults.py runs the
same faults through producers and the fake Gemini server.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from replywire.producer.budget.file_ledger import BudgetLedger
from replywire.producer.budget.keeper import LedgerKeeper
from replywire.producer.budget.ledger import AlreadyLeft, Ledger, Owner, Settlement
from replywire.producer.budget.options import RedisOptions
from replywire.producer.budget.redis_ledger import RedisLedger
from replywire.producer.budget.stores import open_ledger
from replywire.producer.budget.usage import Rates, estimate_prompt_tokens, usage_cost
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason
from tests.budget_values import BODY
from tests.budget_values import GOOD_USAGE as USAGE
from tests.ledger_keeping import TIMEOUT_S, policy, settle_job, unavailable
from tests.processes import wait_for
from tests.redis_server import RedisServer, redis_server

pytestmark = pytest.mark.timeout(60)


WORST = Rates().cost(estimate_prompt_tokens(BODY), 1000)


_prefixes = itertools.count()


#: A ledger over one store for this test: ``make(owner=..., timeout_s=...)``.
MakeLedger = Callable[..., Ledger]


@pytest.fixture(scope="module")
def shared_redis() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    """A server of its own (a test pauses it)."""
    with redis_server() as server:
        yield server


def on_redis(server: RedisServer, prefix: str, owner: Owner | None = None) -> RedisLedger:
    options = RedisOptions(prefix=prefix, timeout_s=TIMEOUT_S)
    return RedisLedger(server.url, budget_usd=1.0, options=options, owner=owner)


@pytest.fixture(params=["file", "redis"])
def make_ledger(request: pytest.FixtureRequest, tmp_path: Path) -> MakeLedger:
    if request.param == "file":
        spec, prefix = str(tmp_path / "ledger.json"), "unused:"
    else:
        spec, prefix = request.getfixturevalue("shared_redis").url, f"faults-{next(_prefixes)}:"

    def make(owner: Owner | None = None, timeout_s: float = TIMEOUT_S) -> Ledger:
        options = RedisOptions(prefix=prefix, timeout_s=timeout_s)
        return open_ledger(spec, budget_usd=1.0, options=options, owner=owner)

    return make


def reserve(ledger: Ledger, call_id: str, **fields: Any) -> float:
    return ledger.reserve(call_id, body=BODY, max_output_tokens=1000, **fields)


def abandon(ledger: Ledger, call_id: str, identity: str = "anonymous") -> str:
    return ledger.abandon(
        call_id, body=BODY, max_output_tokens=1000, why="reserve_unanswered", identity=identity
    )


def state_of(ledger: Ledger, call_id: str) -> str:
    (entry,) = [e for e in ledger.entries() if e["call_id"] == call_id]
    return str(entry["state"])


def warm(ledger: RedisLedger) -> None:
    """One reserve and its abandon, so that the server has the scripts: a script it does not
    know is refused (NOSCRIPT), never run late; one it knows runs when a paused server
    resumes."""
    reserve(ledger, "warm-up")
    abandon(ledger, "warm-up")


def refused_unavailable(operation: Callable[[], object]) -> RequestRefused:
    with pytest.raises(RequestRefused) as refused:
        operation()
    assert refused.value.reason is Reason.LEDGER_UNAVAILABLE
    return refused.value


def test_a_reserve_asked_again_answers_the_same_reservation(make_ledger: MakeLedger) -> None:
    ledger = make_ledger()
    assert reserve(ledger, "a") == pytest.approx(WORST)
    assert reserve(ledger, "a") == pytest.approx(WORST)  # the same answer
    assert reserve(ledger, "a") == pytest.approx(WORST)
    totals = ledger.totals()
    assert totals["entries"] == 1  # never a second reservation
    assert totals["committed_usd"] == pytest.approx(WORST)
    assert [e["state"] for e in ledger.entries()] == ["reserved"]
    # The same call id with other fields, or from another owner, is not this reservation.
    with pytest.raises(AlreadyLeft, match="already reserved"):
        ledger.reserve("a", body=BODY, max_output_tokens=999)
    with pytest.raises(AlreadyLeft):
        reserve(make_ledger(), "a")
    assert ledger.totals()["committed_usd"] == pytest.approx(WORST)


def test_a_reserve_asked_again_never_revives_a_call_that_left_reserved(
    make_ledger: MakeLedger,
) -> None:
    ledger = make_ledger()
    reserve(ledger, "a")
    ledger.release("a", "never sent")
    with pytest.raises(AlreadyLeft, match="already released"):
        reserve(ledger, "a")
    assert ledger.totals()["committed_usd"] == 0
    assert ledger.totals()["entries"] == 1


def test_a_reserve_whose_answer_was_lost_is_found_when_asked_again(redis: RedisServer) -> None:
    """Paused: the reserve's answer never comes (``ledger_unavailable``), but the script waits
    in the server's socket buffer and runs when it resumes. Asked again, the ledger answers
    that reservation: one, not two."""
    ledger = on_redis(redis, "lost:")
    warm(ledger)
    redis.pause()
    try:
        refused_unavailable(lambda: reserve(ledger, "late"))
    finally:
        redis.resume()
    wait_for(lambda: bool(ledger.client.exists(ledger.call_key("late"))), timeout=10)
    assert reserve(ledger, "late") == pytest.approx(WORST)
    totals = ledger.totals()
    assert (totals["entries"], totals["committed_usd"]) == (2, pytest.approx(WORST))


def test_a_reserve_given_up_on_is_released_when_it_lands_late(redis: RedisServer) -> None:
    """The producer gave up (refused the stream): the late reservation is released, and its
    money comes back."""
    ledger = on_redis(redis, "given-up:")
    warm(ledger)
    redis.pause()
    try:
        refused_unavailable(lambda: reserve(ledger, "late"))
        refused_unavailable(lambda: abandon(ledger, "late"))  # not yet: still paused
    finally:
        redis.resume()
    wait_for(lambda: bool(ledger.client.exists(ledger.call_key("late"))), timeout=10)
    # The abandon sent while paused ran after the reserve, or before it (then the reserve
    # found its tombstone); asked again it answers either way.
    try:
        assert abandon(ledger, "late") == "released"
    except AlreadyLeft as moved:
        assert (moved.state, moved.by) == ("released", ledger.owner.id)
    assert state_of(ledger, "late") == "released"
    assert ledger.totals()["committed_usd"] == 0
    assert ledger.client.scard("given-up:reserved") == 0


def test_a_reserve_given_up_on_before_it_lands_finds_a_tombstone(make_ledger: MakeLedger) -> None:
    ledger = make_ledger()
    assert abandon(ledger, "late") == "tombstoned"
    with pytest.raises(AlreadyLeft, match="already released"):
        reserve(ledger, "late")  # the late copy of the reserve: nothing reserved
    totals = ledger.totals()
    assert (totals["entries"], totals["committed_usd"]) == (0, 0)
    (entry,) = ledger.entries()
    assert (entry["state"], entry["released"]) == ("released", "reserve_unanswered")
    # Abandoned again (a retry whose answer was lost): found done by this owner.
    with pytest.raises(AlreadyLeft) as again:
        abandon(ledger, "late")
    assert (again.value.state, again.value.by) == ("released", ledger.owner.id)


def test_the_identity_is_part_of_an_entry_s_key(make_ledger: MakeLedger) -> None:
    ledger = make_ledger()
    odd = "team:a/b c%"
    reserve(ledger, "same", identity=odd)
    reserve(ledger, "same", identity="other")  # another entry: another key
    ledger.settle("same", USAGE, identity=odd)
    with pytest.raises(KeyError):
        ledger.settle("same", USAGE)  # anonymous has no such call
    assert ledger.totals(odd)["committed_usd"] == pytest.approx(usage_cost(USAGE, Rates()))
    assert ledger.totals("other")["committed_usd"] == pytest.approx(WORST)
    states = sorted((e["identity"], e["state"]) for e in ledger.entries())
    assert states == [("other", "reserved"), (odd, "settled")]
    if isinstance(ledger, RedisLedger):
        key = ledger.call_key("same", odd)
        assert key == f"{ledger.prefix}call:team%3Aa%2Fb%20c%25:same"
        assert ledger.client.hget(key, "state") == "settled"


def lapse(ledger: Ledger) -> None:
    """Wait (bounded) until ``ledger``'s owner lease has lapsed."""
    if isinstance(ledger, RedisLedger):
        key = ledger.lease_key(ledger.owner.id)
        wait_for(lambda: not ledger.client.exists(key), timeout=10)
    else:
        assert isinstance(ledger, BudgetLedger)
        lease = ledger._read()["owners"][ledger.owner.id]
        wait_for(lambda: ledger.clock() >= lease["lease_until"], timeout=10)


def test_a_lapsed_owner_s_reservations_are_reconciled(make_ledger: MakeLedger) -> None:
    """Owner A's lease lapses with two reservations held: one never marked sending (released,
    nothing was spent) and one that may have been sent (failed: the worst case stays). A
    reconciler never touches a live owner's, nor its own."""
    a = make_ledger(Owner.new(lease_s=2))
    b = make_ledger(Owner.new(lease_s=30))
    reserve(a, "unsent")
    reserve(a, "sent")
    a.mark_sending("sent")
    reserve(b, "b-own")
    assert b.reconcile() == []  # A's lease still runs
    lapse(a)
    assert a.reconcile() == []  # never its own
    moved = sorted(b.reconcile(), key=lambda row: row["call_id"])
    assert [(m["call_id"], m["state"], m["owner"]) for m in moved] == [
        ("sent", "failed", a.owner.id),
        ("unsent", "released", a.owner.id),
    ]
    assert b.reconcile() == []  # once
    assert b.totals()["committed_usd"] == pytest.approx(2 * WORST)  # sent + b-own
    entries = {e["call_id"]: e for e in b.entries()}
    assert entries["sent"]["failure"] == "owner_lease_lapsed"
    assert entries["unsent"]["released"] == "owner_lease_lapsed (never sent)"
    assert entries["sent"]["settled_by"] == f"reconcile:{b.owner.id}"
    assert entries["b-own"]["state"] == "reserved"
    # A, back too late: it can no longer send the released call, and its settle of the kept
    # one finds it failed (the worst case stands: a lapse can cost money, never lose it).
    with pytest.raises(AlreadyLeft) as unsent:
        a.mark_sending("unsent")
    assert (unsent.value.state, unsent.value.by) == ("released", f"reconcile:{b.owner.id}")
    with pytest.raises(AlreadyLeft, match="already failed"):
        a.settle("sent", USAGE)


def test_a_settle_is_retried_until_it_lands(redis: RedisServer) -> None:
    """The first try fails (paused): the call is not held up; the keeper tries again with
    backoff, one record per failed try, until the server is back."""
    ledger = on_redis(redis, "retry:")
    keeper = LedgerKeeper(ledger, policy())
    reserve(ledger, "call")
    landed: list[tuple[Any, int]] = []

    async def run() -> bool:
        keeper.start()
        redis.pause()
        try:
            first = await keeper.run(settle_job(ledger, "call", landed))
            for _ in range(500):  # bounded: until a few tries failed
                if len([r for r in records if r["event"] == "budget_settle_retrying"]) >= 3:
                    break
                await asyncio.sleep(0.02)
        finally:
            redis.resume()
        for _ in range(500):
            if landed:
                break
            await asyncio.sleep(0.02)
        await keeper.aclose()
        return first

    with capture_logs() as records:
        first = asyncio.run(run())
    assert first is False
    ((settlement, tries),) = landed
    assert isinstance(settlement, Settlement)
    assert settlement.cost_usd == pytest.approx(usage_cost(USAGE, Rates()))
    retrying = [r for r in records if r["event"] == "budget_settle_retrying"]
    assert len(retrying) >= 3
    assert tries >= len(retrying) + 1
    assert [r["tries"] for r in retrying] == list(range(1, len(retrying) + 1))
    assert all(r["op"] == "settle" and "ledger" in r["detail"] for r in retrying)
    assert all(0 < r["retry_in_s"] <= 0.1 for r in retrying)  # capped
    assert state_of(ledger, "call") == "settled"
    assert on_redis(redis, "retry:").totals()["committed_usd"] == pytest.approx(settlement.cost_usd)


def test_a_retried_settle_that_had_landed_counts_as_landed(make_ledger: MakeLedger) -> None:
    """The settle landed but its answer was lost; the retry finds it done by this owner."""
    ledger = make_ledger()
    reserve(ledger, "call")
    ledger.settle("call", USAGE)  # the try whose answer was lost
    landed: list[tuple[Any, int]] = []
    keeper = LedgerKeeper(ledger, policy())
    assert asyncio.run(keeper.run(settle_job(ledger, "call", landed))) is True
    ((settlement, tries),) = landed
    assert settlement.cost_usd == pytest.approx(usage_cost(USAGE, Rates()))
    assert tries == 1


def test_a_settle_found_moved_by_a_reconciler_is_superseded(make_ledger: MakeLedger) -> None:
    a = make_ledger(Owner.new(lease_s=0.3))
    reserve(a, "call")
    a.mark_sending("call")
    lapse(a)
    b = make_ledger(Owner.new(lease_s=30))
    assert [m["state"] for m in b.reconcile()] == ["failed"]
    landed: list[tuple[Any, int]] = []
    with capture_logs() as records:
        done = asyncio.run(LedgerKeeper(a, policy()).run(settle_job(a, "call", landed)))
    assert done is True
    assert landed == []
    (superseded,) = [r for r in records if r["event"] == "budget_settle_superseded"]
    assert (superseded["state"], superseded["by"]) == ("failed", f"reconcile:{b.owner.id}")
    assert b.totals()["committed_usd"] == pytest.approx(WORST)


def test_at_shutdown_a_pending_settle_gets_a_last_try(redis: RedisServer) -> None:
    ledger = on_redis(redis, "last-try:")
    keeper = LedgerKeeper(ledger, policy(final_try_s=10))
    reserve(ledger, "call")
    landed: list[tuple[Any, int]] = []

    async def run() -> None:
        redis.pause()
        try:
            assert await keeper.run(settle_job(ledger, "call", landed)) is False
            closing = asyncio.ensure_future(keeper.aclose())
            await asyncio.sleep(0.1)
        finally:
            redis.resume()
        await closing

    with capture_logs() as records:
        asyncio.run(run())
    assert len(landed) == 1
    assert not [r for r in records if r["event"] == "budget_left_reserved"]
    assert state_of(on_redis(redis, "last-try:"), "call") == "settled"


def test_at_shutdown_what_cannot_land_is_left_to_the_next_producer(make_ledger: MakeLedger) -> None:
    """The store stays unavailable through the last try (here: a call the keeper's moves
    cannot reach): logged ``budget_left_reserved``; once the lease lapses, another producer
    keeps it (it was marked sending: the worst case stands)."""
    ledger = make_ledger(Owner.new(lease_s=0.9))
    reserve(ledger, "call")
    ledger.mark_sending("call")
    keeper = LedgerKeeper(ledger, policy(lease_s=0.9, final_try_s=0.2))

    job = settle_job(ledger, "call", [])
    job.attempt = unavailable

    async def run() -> None:
        keeper.hold(job.key)
        assert await keeper.run(job) is False
        await keeper.aclose()

    with capture_logs() as records:
        asyncio.run(run())
    (left,) = [r for r in records if r["event"] == "budget_left_reserved"]
    assert (left["call_id"], left["op"], left["owner"]) == ("call", "settle", ledger.owner.id)
    assert left["tries"] >= 2  # the first, and at least one last try
    assert state_of(ledger, "call") == "reserved"
    other = make_ledger(Owner.new(lease_s=30))
    # Dropped at shutdown (the store answered that): reconciled at once, or after the lapse.
    wait_for(lambda: bool(other.reconcile()), timeout=10)
    assert state_of(other, "call") == "failed"
    assert other.totals()["committed_usd"] == pytest.approx(WORST)


class CountedRefreshes(RedisLedger):
    """The Redis ledger, counting its lease refreshes (each one still a real round trip)."""

    refreshes = 0

    def refresh_lease(self) -> bool:
        alive = super().refresh_lease()
        self.refreshes += 1
        return alive


def test_the_keeper_keeps_the_lease_while_it_holds_a_reservation(redis: RedisServer) -> None:
    options = RedisOptions(prefix="heartbeat:", timeout_s=TIMEOUT_S)
    # A lease of 1.5 s (a refresh every 0.5 s): one refresh lost to a busy machine (a Redis
    # command times out after 0.3 s) still leaves the lease a second to go.
    ledger = CountedRefreshes(
        redis.url, budget_usd=1.0, options=options, owner=Owner.new(lease_s=1.5)
    )
    keeper = LedgerKeeper(ledger, policy(lease_s=1.5))
    lease = ledger.lease_key(ledger.owner.id)

    async def until(condition: Callable[[], bool]) -> bool:
        for _ in range(500):  # bounded
            if condition():
                return True
            await asyncio.sleep(0.02)
        return False

    async def run() -> tuple[bool, bool, bool]:
        keeper.start()
        # Five heartbeats' time (not the 10 s of 500 polls it was): holding nothing, the
        # keeper refreshes at none of them, and the lease is never set.
        await asyncio.sleep(5 * keeper.policy.refresh_s)
        idle = ledger.refreshes == 0 and not ledger.client.exists(lease)
        reserve(ledger, "call")
        keeper.hold(("anonymous", "call"))
        refreshed = await until(lambda: ledger.refreshes >= 3 and bool(ledger.client.exists(lease)))
        keeper.let_go(("anonymous", "call"))
        lapsed = await until(lambda: not ledger.client.exists(lease))
        await keeper.aclose()
        return idle, refreshed, lapsed

    assert asyncio.run(run()) == (True, True, True)
