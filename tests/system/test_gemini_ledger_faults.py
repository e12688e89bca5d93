"""A slow, flaky or lost ledger store, and a lost producer, never drain the budget.

Real processes: a private persistent valkey/redis server (tests/redis_server.py; paused
with SIGSTOP, killed with SIGKILL and restarted on the same port from its append-only
file), ``python -m producer --source gemini`` on the fake Gemini server, consumers.
Faults land during a reserve and during a settle; producers are stopped while their
ledger is down, or killed with a reservation outstanding. Afterwards, in every case,
nothing is left ``reserved`` and the committed total is what the calls the fake
provider saw cost (``expected_committed``): a call it answered in full is charged the
usage it reported, a call that never reached it costs nothing. The one exception is
spelled out where it happens: a call whose usage died with its producer is kept at its
worst case.

Short leases and timeouts (``FAST``) keep each test to seconds; every wait is bounded.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from harness.fake_gemini.checks import validate
from harness.fake_gemini.scripts import Scripts
from replywire.children import stop_process
from replywire.producer.budget.file_ledger import BudgetLedger
from replywire.producer.budget.ledger import Ledger
from replywire.producer.budget.options import RedisOptions
from replywire.producer.budget.redis_ledger import RedisLedger
from replywire.producer.budget.usage import Rates, estimate_prompt_tokens, usage_cost
from tests.processes import (
    FakeGeminiProcess,
    Producer,
    consumer_process,
    fake_gemini,
    producer,
    run_consumer,
    wait_for,
)
from tests.redis_server import cut_off, link_back, redis_server, replicated_pair

pytestmark = pytest.mark.timeout(120)

API_KEY = "AIzaSy-ledger-faults-key-0123456789"
CASE = "replace-file"
PREFIX = "faults:"
LEASE_S = 3.0
#: A lease of 3 s refreshed every second, a ledger operation given up after 1 s, leases
#: checked twice a second, settles retried from 50 ms up to 0.5 s apart, 1 s of last tries.
FAST = ("--ledger-lease-s", str(LEASE_S), "--ledger-timeout-s", "1",
        "--ledger-reconcile-s", "0.5", "--ledger-retry-s", "0.05",
        "--ledger-retry-cap-s", "0.5", "--ledger-final-try-s", "1")  # fmt: skip
#: Bounded waits: for what follows at once, and for what follows a lease's lapse.
PROMPTLY_S = 30.0


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGeminiProcess]:
    with fake_gemini(API_KEY) as server:
        yield server


def gemini_producer(
    tmp_path: Path, fake: FakeGeminiProcess, ledger: str, *flags: str, name: str, model: str
) -> AbstractContextManager[Producer]:
    return producer(
        tmp_path,
        "--source", "gemini", "--gemini-base-url", fake.base_url, "--model", model,
        "--ledger", ledger, "--ledger-prefix", PREFIX, "--budget-usd", "1.0", *FAST, *flags,
        name=name, env={"GEMINI_API_KEY": API_KEY},
    )  # fmt: skip


def reader(spec: str) -> Ledger:
    """The shared ledger, as a test reads it (it reconciles nothing itself)."""
    if spec.startswith("redis://"):
        return RedisLedger(spec, budget_usd=1.0, options=RedisOptions(prefix=PREFIX))
    return BudgetLedger(Path(spec), budget_usd=1.0)


def worst_case(call: dict[str, Any]) -> float:
    body = call["body"]
    return Rates().cost(
        estimate_prompt_tokens(body), int(body["generationConfig"]["maxOutputTokens"])
    )


def reported_cost(call: dict[str, Any]) -> float:
    """What the fake provider reported a call it answered in full used, at the ledger's rates
    (the fake's own counting: ``Scripts.usage``)."""
    counter = Scripts()
    turn = validate(call["model"], call["body"])
    return usage_cost(counter.usage(turn, "".join(counter.texts(turn))), Rates())


def expected_committed(calls: list[dict[str, Any]]) -> float:
    """The calls the provider saw: one it answered in full is charged its usage; one it did
    not finish may have cost anything up to its worst case, which is kept."""
    return sum(reported_cost(c) if c["body_completed"] else worst_case(c) for c in calls)


def reserved(ledger: Ledger) -> list[dict[str, Any]]:
    return [e for e in ledger.entries() if e["state"] == "reserved"]


def records(p: Producer, event: str) -> list[dict[str, Any]]:
    return [r for r in p.trace() if r["event"] == event]


def owner_of(p: Producer) -> str:
    (record,) = records(p, "ledger_owner")
    return str(record["owner"])


def entry(ledger: Ledger, call_id: str) -> dict[str, Any]:
    (found,) = [e for e in ledger.entries() if e["call_id"] == call_id]
    return found


def assert_accounted(ledger: Ledger, calls: list[dict[str, Any]]) -> float:
    committed = float(ledger.totals()["committed_usd"])
    assert reserved(ledger) == []
    assert committed == pytest.approx(expected_committed(calls), rel=1e-9, abs=1e-12)
    return committed


def complete(target: str, stream_id: str) -> None:
    run = run_consumer(target, "--case", CASE, "--stream-id", stream_id)
    assert (run.returncode, run.result["status"]) == (0, "complete"), run.result


# --- during a reserve -------------------------------------------------------------------------


def test_redis_paused_during_a_reserve(tmp_path: Path, fake: FakeGeminiProcess) -> None:
    """The reserve's answer does not come (and its re-read's neither): the stream is refused
    ``ledger_unavailable`` with no provider call. The scripts wait in the paused server and
    run when it resumes: the late reservation is released (the abandon), not left held."""
    before = len(fake.log())
    with (
        redis_server(persistent=True) as server,
        gemini_producer(tmp_path, fake, server.url, name="p", model="gemini-3.1-flash-lite") as p,
    ):
        ledger = reader(server.url)
        complete(p.target, "warm")  # the server knows the scripts from here on
        server.pause()
        try:
            stalled = run_consumer(p.target, "--case", CASE, "--stream-id", "stalled")
        finally:
            server.resume()
        wait_for(lambda: bool(records(p, "budget_reserve_abandoned")), timeout=PROMPTLY_S)
        complete(p.target, "after")
        wait_for(lambda: len(records(p, "budget_settled")) == 2, timeout=PROMPTLY_S)
        calls = fake.log()[before:]
        committed = assert_accounted(ledger, calls)
        (abandoned,) = records(p, "budget_reserve_abandoned")
        late = entry(ledger, abandoned["call_id"])
        unanswered = records(p, "budget_reserve_unanswered")
    assert (stalled.returncode, stalled.result["reason"]) == (5, "ledger_unavailable")
    assert len(calls) == 2  # warm and after: the stalled stream called nobody
    assert [u["call_id"] for u in unanswered] == [abandoned["call_id"]]
    assert late["state"] == "released"
    assert late["released"] == "reserve_unanswered (refused)"
    print(f"provider calls {len(calls)}, committed {committed:.9f} USD; the stalled reserve:",
          "a tombstone" if late.get("tombstone") else "landed late, released")  # fmt: skip


def test_with_ledger_durability_a_primary_alone_sends_nothing(
    tmp_path: Path, fake: FakeGeminiProcess
) -> None:
    """``--ledger-durability replica`` on a primary cut off from its replica: the reserve's
    wait is answered short, asked again, short again: the stream is refused
    ``ledger_unavailable`` with no provider call, and the reservation the primary took
    alone is released (the abandon). The replica back, the next stream completes."""
    before = len(fake.log())
    durable = ("--ledger-durability", "replica", "--ledger-durability-timeout-s", "0.3")
    with (
        replicated_pair() as (primary, _replica),
        gemini_producer(
            tmp_path, fake, primary.url, *durable, name="p", model="gemini-3.1-flash-lite"
        ) as p,
    ):
        ledger = reader(primary.url)
        complete(p.target, "linked")
        cut_off(primary)
        alone = run_consumer(p.target, "--case", CASE, "--stream-id", "alone")
        wait_for(lambda: bool(records(p, "budget_reserve_abandoned")), timeout=PROMPTLY_S)
        link_back(primary)
        complete(p.target, "back")
        wait_for(lambda: len(records(p, "budget_settled")) == 2, timeout=PROMPTLY_S)
        calls = fake.log()[before:]
        committed = assert_accounted(ledger, calls)
        (abandoned,) = records(p, "budget_reserve_abandoned")
        released = entry(ledger, abandoned["call_id"])["state"]
        unanswered = records(p, "budget_reserve_unanswered")
    assert (alone.returncode, alone.result["reason"]) == (5, "ledger_unavailable")
    assert len(calls) == 2  # linked and back: the stream of the primary alone called nobody
    assert released == "released"
    assert "0 of 1 replicas had the write" in unanswered[0]["detail"]
    print(f"provider calls {len(calls)}, committed {committed:.9f} USD; the reserve of the "
          f"primary alone: {len(unanswered)} short waits, then released")  # fmt: skip


@pytest.mark.parametrize("restart", ["at once", "after the refusal"])
def test_redis_killed_during_a_reserve_and_restarted(
    tmp_path: Path, fake: FakeGeminiProcess, restart: str
) -> None:
    """Paused with the reserve in its buffer, then killed (the reserve is lost with it) and
    restarted from its append-only file: at once (the re-read may reach the restarted server
    and the stream is served), or once the stream was refused ``ledger_unavailable`` (the
    abandon lands after the restart: a tombstone). Either way the ledger holds what the
    provider saw."""
    before = len(fake.log())
    result = tmp_path / "killed.json"
    with (
        redis_server(persistent=True) as server,
        gemini_producer(tmp_path, fake, server.url, name="p", model="gemini-3.1-flash-lite") as p,
    ):
        ledger = reader(server.url)
        complete(p.target, "warm")
        server.pause()
        with consumer_process(
            tmp_path, p.target, "--case", CASE, "--stream-id", "killed", "--result", str(result)
        ) as consumer:  # fmt: skip
            try:
                wait_for(lambda: bool(records(p, "budget_reserve_unanswered")), timeout=PROMPTLY_S)
            finally:
                server.kill()
                if restart == "at once":
                    server.restart()
            consumer.wait(timeout=60)
        outcome = json.loads(result.read_text())
        if restart != "at once":
            assert (outcome["status"], outcome["reason"]) == ("error", "ledger_unavailable")
            server.restart()
        if outcome["status"] != "complete":
            assert outcome["reason"] == "ledger_unavailable"
            wait_for(lambda: bool(records(p, "budget_reserve_abandoned")), timeout=PROMPTLY_S)
        complete(p.target, "after")
        wait_for(
            lambda: len(records(p, "budget_settled")) == len(fake.log()) - before,
            timeout=PROMPTLY_S,
        )
        calls = fake.log()[before:]
        committed = assert_accounted(ledger, calls)
        abandoned = records(p, "budget_reserve_abandoned")
    assert len(calls) == (3 if outcome["status"] == "complete" else 2)
    if restart != "at once":  # the reserve died with the server: nothing to release
        assert [a["found"] for a in abandoned] == ["tombstoned"]
    print(f"restarted {restart}: the stream {outcome['status']}, provider calls {len(calls)}, "
          f"committed {committed:.9f} USD")  # fmt: skip


# --- during a settle --------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["paused", "killed and restarted"])
def test_redis_fails_during_a_settle(tmp_path: Path, fake: FakeGeminiProcess, fault: str) -> None:
    """The provider's reply is under way when the store goes; the reply is accepted, its
    settle fails, the stream ends anyway, and the settle is retried until the store is back:
    the call is charged the usage the provider reported."""
    before = len(fake.log())
    result = tmp_path / "settle.json"
    with (
        redis_server(persistent=True) as server,
        gemini_producer(tmp_path, fake, server.url, name="p", model="fake-slow-drip") as p,
    ):
        ledger = reader(server.url)
        with consumer_process(
            tmp_path, p.target, "--case", CASE, "--stream-id", "settle", "--result", str(result)
        ) as consumer:  # fmt: skip
            wait_for(lambda: bool(records(p, "provider_stream_opened")), timeout=PROMPTLY_S)
            if fault == "paused":
                server.pause()
            else:
                server.kill()
            try:
                wait_for(lambda: len(records(p, "budget_settle_retrying")) >= 2, timeout=60)
                # The stream's end was not held up by the settle.
                assert consumer.wait(timeout=60) == 0
            finally:
                if fault == "paused":
                    server.resume()
                else:
                    server.restart()
        wait_for(lambda: bool(records(p, "budget_settled")), timeout=PROMPTLY_S)
        calls = fake.log()[before:]
        committed = assert_accounted(ledger, calls)
        (settled,) = records(p, "budget_settled")
        retrying = records(p, "budget_settle_retrying")
    assert json.loads(result.read_text())["status"] == "complete"
    assert len(calls) == 1 and calls[0]["body_completed"]
    assert settled["tries"] == len(retrying) + 1
    assert committed == pytest.approx(reported_cost(calls[0]))
    assert committed < worst_case(calls[0])
    print(f"{fault}: {len(retrying)} failed tries, then settled at {committed:.9f} USD "
          f"= the provider's usage (worst case {worst_case(calls[0]):.9f})")  # fmt: skip


def test_a_producer_stopped_while_its_ledger_is_down_leaves_it_to_the_next(
    tmp_path: Path, fake: FakeGeminiProcess
) -> None:
    """Redis is killed mid-reply; the settle keeps failing; the producer is stopped (SIGTERM):
    its last tries fail too, the call is logged ``budget_left_reserved``. Redis restarts; the
    next producer reconciles the entry once the first one's lease lapsed: the request was
    sent and its usage died with the first producer, so its worst case is kept (failed)."""
    before = len(fake.log())
    with redis_server(persistent=True) as server:
        ledger = reader(server.url)
        with gemini_producer(
            tmp_path, fake, server.url, name="first", model="fake-slow-drip"
        ) as first:
            with consumer_process(tmp_path, first.target, "--case", CASE) as consumer:
                wait_for(lambda: bool(records(first, "provider_stream_opened")), timeout=PROMPTLY_S)
                server.kill()
                wait_for(lambda: bool(records(first, "budget_settle_retrying")), timeout=60)
                assert consumer.wait(timeout=60) == 0
            assert stop_process(first.process) == 0
        (left,) = records(first, "budget_left_reserved")
        server.restart()
        with gemini_producer(
            tmp_path, fake, server.url, name="second", model="fake-slow-drip"
        ) as second:
            wait_for(lambda: bool(records(second, "budget_reconciled")), timeout=PROMPTLY_S)
            (reconciled,) = records(second, "budget_reconciled")
            owners = owner_of(first), owner_of(second)
        calls = fake.log()[before:]
        kept = entry(ledger, left["call_id"])
        assert reserved(ledger) == []
        committed = float(ledger.totals()["committed_usd"])
    assert len(calls) == 1 and calls[0]["body_completed"]
    assert (reconciled["call_id"], reconciled["owner"]) == (left["call_id"], owners[0])
    assert (kept["state"], kept["failure"]) == ("failed", "owner_lease_lapsed")
    assert kept["settled_by"] == f"reconcile:{owners[1]}"
    assert committed == pytest.approx(worst_case(calls[0]))
    lost = reported_cost(calls[0])
    print(f"left reserved at shutdown, reconciled by the next producer: committed "
          f"{committed:.9f} USD = the worst case (usage {lost:.9f} lost)")  # fmt: skip


# --- a producer killed with a reservation outstanding -----------------------------------------


@pytest.fixture(params=["file", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The ``--ledger`` two producers share: a file, or a persistent Redis."""
    if request.param == "file":
        yield str(tmp_path / "ledger.json")
        return
    with redis_server(persistent=True) as server:
        yield server.url


def test_a_killed_producer_s_reservation_is_reconciled_by_another(
    tmp_path: Path, fake: FakeGeminiProcess, store: str
) -> None:
    """Producer a is killed (SIGKILL) mid-reply, its call's entry ``reserved`` and marked
    sending; producer b, on the same ledger, reconciles it once a's lease lapsed: kept at
    its worst case (the provider saw the request, never finished it, reported nothing)."""
    before = len(fake.log())
    ledger = reader(store)
    with (
        gemini_producer(tmp_path, fake, store, name="a", model="fake-slow-drip") as a,
        gemini_producer(tmp_path, fake, store, name="b", model="fake-slow-drip") as b,
    ):
        with consumer_process(tmp_path, a.target, "--case", CASE) as consumer:
            wait_for(lambda: bool(records(a, "provider_stream_opened")), timeout=PROMPTLY_S)
            stop_process(a.process, signal.SIGKILL)
            consumer.wait(timeout=60)
        (opened,) = records(a, "provider_stream_opened")
        wait_for(lambda: bool(records(b, "budget_reconciled")), timeout=PROMPTLY_S)
        (reconciled,) = records(b, "budget_reconciled")
        owners = owner_of(a), owner_of(b)
        calls = fake.log()[before:]
        kept = entry(ledger, opened["call_id"])
        committed = assert_accounted(ledger, calls)
    assert len(calls) == 1 and not calls[0]["body_completed"]
    assert (reconciled["call_id"], reconciled["owner"]) == (opened["call_id"], owners[0])
    assert (kept["state"], kept["failure"]) == ("failed", "owner_lease_lapsed")
    assert kept["settled_by"] == f"reconcile:{owners[1]}"
    assert committed == pytest.approx(worst_case(calls[0]))
    backend = "file" if store.endswith(".json") else "redis"
    print(f"{backend}: killed with its call under way; reconciled by b: "
          f"committed {committed:.9f} USD = the worst case")  # fmt: skip


def test_a_reserve_that_lands_after_its_producer_died_is_released(
    tmp_path: Path, fake: FakeGeminiProcess
) -> None:
    """Producer a's reserve waits in a paused Redis; a is killed before it hears back. Redis
    resumes and runs the reserve: a reservation with no request behind it, owned by a dead
    producer. Producer b releases it once a's lease lapsed (the lease the late reserve
    itself set), or a's abandon did first if a lived long enough to send one."""
    before = len(fake.log())
    with (
        redis_server(persistent=True) as server,
        gemini_producer(tmp_path, fake, server.url, name="a", model="gemini-3.1-flash-lite") as a,
        gemini_producer(tmp_path, fake, server.url, name="b", model="gemini-3.1-flash-lite") as b,
    ):
        ledger = reader(server.url)
        complete(a.target, "warm")
        server.pause()
        try:
            with consumer_process(tmp_path, a.target, "--case", CASE, "--stream-id", "orphan"):
                wait_for(lambda: bool(records(a, "budget_reserve_unanswered")), timeout=PROMPTLY_S)
                stop_process(a.process, signal.SIGKILL)
        finally:
            server.resume()
        resumed = time.monotonic()
        (unanswered,) = records(a, "budget_reserve_unanswered")
        call_id = unanswered["call_id"]

        def resolved() -> bool:
            """The late reserve landed and left reserved, or it never landed: Redis may
            drop a dead client's queued command when it sees the connection closed. Past
            a's lease and two reconciliations an entry that is not there never came."""
            rows = [e for e in ledger.entries() if e["call_id"] == call_id]
            if rows:
                return bool(rows[0]["state"] != "reserved")
            return time.monotonic() - resumed > LEASE_S + 2.0

        wait_for(resolved, timeout=PROMPTLY_S)
        landed = [e for e in ledger.entries() if e["call_id"] == call_id]
        if landed and landed[0].get("released") == "owner_lease_lapsed (never sent)":
            # b's record follows its move in the ledger: wait for it, not only the move.
            wait_for(lambda: bool(records(b, "budget_reconciled")), timeout=PROMPTLY_S)
        reconciled = records(b, "budget_reconciled")
        calls = fake.log()[before:]
        committed = assert_accounted(ledger, calls)
    assert len(calls) == 1  # warm only: the orphan never reached the provider
    if not landed:
        print(f"the dead producer's reserve never landed: committed {committed:.9f} USD")
        return
    (orphan,) = landed
    assert orphan["state"] == "released" and not orphan.get("tombstone")  # it did land late
    if orphan["released"] == "owner_lease_lapsed (never sent)":
        assert [(r["call_id"], r["state"]) for r in reconciled] == [(call_id, "released")]
        by = "b's reconciliation"
    else:
        assert orphan["released"].startswith("reserve_unanswered")
        by = "a's abandon, sent before it died"
    print(f"late reserve of a dead producer released by {by}: committed {committed:.9f} USD "
          f"(the warm call only)")  # fmt: skip
