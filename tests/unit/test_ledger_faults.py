"""The ledger's bounds without a server: a file ledger held past its timeout refuses and
writes nothing, a file lease runs to its last instant, a new call past the pending-moves bound
is refused before the ledger is asked, the settle backoff, and the ledger settings and flags
at and past their edges. The faults of a real store are
tests/integration/test_ledger_faults_in_process.py's, through producers
tests/system/test_gemini_ledger_faults.py's."""

from __future__ import annotations

import asyncio
import fcntl
from pathlib import Path
from typing import Any

import pytest
import structlog

from replywire.producer.budget.file_ledger import BudgetLedger
from replywire.producer.budget.keeper import LedgerPolicy
from replywire.producer.budget.ledger import Ledger, NotWritten, Owner
from replywire.producer.flags import build_parser
from replywire.producer.sources.gemini.call_ledger import Call
from replywire.producer.sources.gemini.settings import GeminiSettings
from replywire.producer.sources.gemini.source import GeminiSource
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason
from replywire.shared.recording import Recording
from tests.budget_values import BODY
from tests.ledger_keeping import policy, settle_job, unavailable

pytestmark = pytest.mark.timeout(60)


def reserve(ledger: Ledger, call_id: str, **fields: Any) -> float:
    return ledger.reserve(call_id, body=BODY, max_output_tokens=1000, **fields)


def test_a_file_ledger_held_past_its_timeout_refuses_and_wrote_nothing(tmp_path: Path) -> None:
    """Another process holds the lock longer than ``timeout_s``: ``ledger_unavailable``, and
    certainly nothing written (``NotWritten``: no answer to look for, nothing to abandon)."""
    ledger = BudgetLedger(tmp_path / "ledger.json", budget_usd=1.0, timeout_s=0.2)
    ledger.check()
    with ledger.lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with pytest.raises(NotWritten) as refused:
                reserve(ledger, "a")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    assert refused.value.reason is Reason.LEDGER_UNAVAILABLE
    assert "within 0.2 s" in refused.value.detail
    assert ledger.entries() == []
    reserve(ledger, "a")  # the lock is free again


def test_a_file_lease_runs_until_its_last_instant(tmp_path: Path) -> None:
    """At the edge, by the ledger's clock: alive before ``lease_until``, lapsed at it."""
    path = tmp_path / "ledger.json"
    a = BudgetLedger(path, budget_usd=1.0, owner=Owner.new(lease_s=10))
    b = BudgetLedger(path, budget_usd=1.0, owner=Owner.new(lease_s=10))
    now = 1_000_000.0
    a.clock = lambda: now
    reserve(a, "held")
    until = a._read()["owners"][a.owner.id]["lease_until"]
    assert until == now + 10
    b.clock = lambda: until - 1e-6
    assert b.reconcile() == []
    b.clock = lambda: until
    assert [m["state"] for m in b.reconcile()] == ["released"]
    # A lapsed owner that holds nothing any more is forgotten.
    assert a.owner.id not in b._read()["owners"]
    assert b.owner.id not in b._read()["owners"]  # b never reserved: it has no lease


def test_past_max_pending_moves_a_new_call_is_refused_before_the_ledger_is_asked(
    tmp_path: Path, recording: Recording
) -> None:
    ledger = BudgetLedger(tmp_path / "ledger.json", budget_usd=1.0)
    source = GeminiSource(
        recording, GeminiSettings(), api_key="k" * 30, ledger=ledger, policy=policy(max_pending=1)
    )
    stuck = settle_job(ledger, "stuck", [])
    stuck.attempt = unavailable  # never lands

    async def run() -> RequestRefused:
        assert await source.keeper.run(stuck) is False
        assert source.keeper.full
        call = Call("new", None, structlog.get_logger())
        with pytest.raises(RequestRefused) as refused:
            await source.calls.reserve(call, BODY, case_id="replace-file")
        source.keeper._pending.clear()  # let shutdown be quick: the stuck move is not real
        await source.aclose()
        return refused.value

    refused = asyncio.run(run())
    assert refused.reason is Reason.LEDGER_UNAVAILABLE
    assert "1 ledger writes are still pending" in refused.detail
    assert not (tmp_path / "ledger.json").exists()  # the ledger was never asked


def test_backoff_doubles_up_to_its_cap_less_its_jitter() -> None:
    exact = LedgerPolicy(retry_s=0.1, retry_cap_s=0.5, retry_jitter=0)
    assert [exact.backoff(tries, 0.9) for tries in range(1, 6)] == pytest.approx(
        [0.1, 0.2, 0.4, 0.5, 0.5]
    )
    assert exact.backoff(10**6, 0.5) == 0.5  # far past the cap: still the cap
    jittered = LedgerPolicy(retry_s=0.1, retry_cap_s=0.5, retry_jitter=0.5)
    assert jittered.backoff(9, 0.0) == 0.5
    assert jittered.backoff(9, 0.999999) == pytest.approx(0.25, abs=1e-6)
    full = LedgerPolicy(retry_s=0.1, retry_cap_s=0.5, retry_jitter=1)
    assert 0 < full.backoff(9, 0.999999) < 1e-6


@pytest.mark.parametrize(
    "fields",
    [
        {"lease_s": 3.0, "timeout_s": 1.0},  # the edge: a timeout of a third of the lease
        {"retry_s": 0.5, "retry_cap_s": 0.5},
        {"retry_jitter": 0.0},
        {"retry_jitter": 1.0},
        {"final_try_s": 0.0},
    ],
)
def test_ledger_settings_at_their_edge_are_taken(fields: dict[str, float]) -> None:
    LedgerPolicy(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"lease_s": 3.0, "timeout_s": 1.001}, "--ledger-timeout-s"),  # just past the edge
        ({"lease_s": 0.0}, "--ledger-lease-s"),
        ({"lease_s": float("inf")}, "--ledger-lease-s"),
        ({"timeout_s": 0.0}, "--ledger-timeout-s"),
        ({"reconcile_s": 0.0}, "--ledger-reconcile-s"),
        ({"retry_s": 0.0}, "--ledger-retry-s"),
        ({"retry_s": 0.5, "retry_cap_s": 0.499}, "--ledger-retry-cap-s"),
        ({"retry_jitter": 1.001}, "--ledger-retry-jitter"),
        ({"retry_jitter": -0.001}, "--ledger-retry-jitter"),
        ({"final_try_s": float("nan")}, "--ledger-final-try-s"),
    ],
)
def test_ledger_settings_past_their_edge_are_refused(fields: dict[str, float], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        LedgerPolicy(**fields)  # type: ignore[arg-type]


def test_ledger_flags_have_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPLYWIRE_LEDGER_LEASE_S", "9")
    monkeypatch.setenv("REPLYWIRE_LEDGER_RETRY_CAP_S", "4")
    args = build_parser().parse_args(["--ledger-reconcile-s", "2"])
    assert (args.ledger_lease_s, args.ledger_retry_cap_s, args.ledger_reconcile_s) == (9, 4, 2)
    monkeypatch.delenv("REPLYWIRE_LEDGER_LEASE_S")
    defaults = build_parser().parse_args([])
    assert defaults.ledger_timeout_s <= defaults.ledger_lease_s / 3
