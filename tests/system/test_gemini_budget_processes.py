"""A hostile provider cannot bend the ledger, one caller cannot starve the others, a cancelled
open gives its reservation back, a capture never holds the key, the key never travels in clear.

Real processes: the fake Gemini server, ``python -m producer --source gemini`` pointed at it,
consumers (``python -m consumer stream``, or the consumer's own client in this process when
many must run at once).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from harness.fake_gemini.scripts import BAD_USAGE
from replywire.producer.budget.options import RedisOptions
from replywire.producer.budget.redis_ledger import RedisLedger
from replywire.shared.recording import Recording
from tests.budget_values import worst_case
from tests.processes import (
    ROOT,
    FakeGeminiProcess,
    concurrent_replies,
    fake_gemini,
    producer,
    read_trace,
    run_consumer,
    wait_for,
)
from tests.redis_server import free_port, redis_server

pytestmark = pytest.mark.timeout(180)


API_KEY = "AIzaSy-budget-test-key-0123456789"


CASE = "replace-file"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGeminiProcess]:
    with fake_gemini(API_KEY) as server:
        yield server


def gemini_producer(tmp_path: Path, fake: FakeGeminiProcess, model: str, *args: str) -> Any:
    return producer(
        tmp_path,
        "--source", "gemini", "--gemini-base-url", fake.base_url, "--model", model,
        "--ledger", str(tmp_path / "ledger.json"), *args,
        name=f"producer-{model}",
        env={"GEMINI_API_KEY": API_KEY},
    )  # fmt: skip


def entries(tmp_path: Path) -> list[dict[str, Any]]:
    ledger: dict[str, Any] = json.loads((tmp_path / "ledger.json").read_text())
    return list(ledger["entries"])


def committed(rows: list[dict[str, Any]]) -> float:
    """The ledger's rule, recomputed from the file: settled costs plus kept reservations."""
    return sum(e["cost_usd"] for e in rows if e["state"] == "settled") + sum(
        e["reserved_usd"] for e in rows if e["state"] in {"failed", "reserved"}
    )


def recorded(tmp_path: Path) -> bool:
    """Every entry has left ``reserved``."""
    return all(e["state"] != "reserved" for e in entries(tmp_path))


@pytest.mark.parametrize("model", list(BAD_USAGE))
def test_implausible_usage_is_charged_at_the_reservation(
    tmp_path: Path, fake: FakeGeminiProcess, recording: Recording, model: str
) -> None:
    """Negative, huge, non-integer or missing counts: the reply still streams, the call is
    charged its reservation, the total only grows and stays within the budget."""
    budget = worst_case(recording) * 2.5
    totals = [0.0]
    with gemini_producer(tmp_path, fake, model, "--budget-usd", str(budget)) as running:
        for index in range(2):
            run = run_consumer(running.target, "--case", CASE, "--stream-id", f"{model}-{index}")
            assert (run.returncode, run.result["status"]) == (0, "complete")
            wait_for(lambda: len(entries(tmp_path)) == len(totals) and recorded(tmp_path))
            totals.append(committed(entries(tmp_path)))
        rejected = [r for r in running.trace() if r["event"] == "budget_usage_rejected"]
        trace_text = running.trace_path.read_text()
    rows = entries(tmp_path)
    assert [e["state"] for e in rows] == ["settled", "settled"]
    for entry in rows:
        assert entry["cost_usd"] == entry["reserved_usd"]
        assert entry["usage"] is None
        assert entry["usage_rejected"]
    assert totals == sorted(totals)  # never down
    assert totals[-1] == pytest.approx(sum(e["reserved_usd"] for e in rows))
    assert totals[-1] <= budget
    assert len(rejected) == 2
    assert {r["call_id"] for r in rejected} == {e["call_id"] for e in rows}
    offending = {key: value for key, value in BAD_USAGE[model].items() if value is not None}
    for key, value in offending.items():
        reported = rejected[0]["reported"][key]
        assert reported == (value if isinstance(value, int) else repr(value))
    if model == "fake-usage-missing":
        assert "promptTokenCount" not in rejected[0]["reported"]
        assert rejected[0]["why"] == "promptTokenCount is missing"
    assert API_KEY not in trace_text


def test_the_per_identity_budget_binds_before_the_total(
    tmp_path: Path, fake: FakeGeminiProcess, recording: Recording
) -> None:
    # The first call is charged its whole reservation (its usage is implausible), so a second
    # would take the caller past its share of 1.5 worst cases; the total has room for 600.
    share = worst_case(recording) * 1.5
    with gemini_producer(
        tmp_path, fake, "fake-usage-huge",
        "--budget-usd", "1.0", "--budget-per-identity-usd", str(share),
    ) as running:  # fmt: skip
        first = run_consumer(running.target, "--case", CASE)
        second = run_consumer(running.target, "--case", CASE)
    assert first.result["status"] == "complete"
    assert (second.result["status"], second.result["reason"]) == ("refused", "budget_exhausted")
    (entry,) = entries(tmp_path)
    assert entry["identity"] == "anonymous"  # no --auth-tokens: every caller is anonymous
    assert entry["state"] == "settled"


def test_each_token_s_caller_is_charged_its_own_share(
    tmp_path: Path, fake: FakeGeminiProcess, recording: Recording
) -> None:
    """With --auth-tokens, the identity charged is the token's name: alice exhausting her
    share does not starve bob."""
    tokens = tmp_path / "tokens"
    tokens.write_text("alice token-for-alice-0123456789\nbob token-for-bob-0123456789xx\n")
    for name in ("alice", "bob"):
        (tmp_path / f"{name}.token").write_text(
            f"token-for-{name}-0123456789" + "xx" * (name == "bob")
        )
    share = worst_case(recording) * 1.5
    with gemini_producer(
        tmp_path, fake, "fake-usage-huge", "--auth-tokens", str(tokens),
        "--budget-usd", "1.0", "--budget-per-identity-usd", str(share),
    ) as running:  # fmt: skip
        token = ("--auth-token-file", str(tmp_path / "alice.token"))
        alice = [run_consumer(running.target, "--case", CASE, *token) for _ in range(2)]
        bob = run_consumer(
            running.target, "--case", CASE, "--auth-token-file", str(tmp_path / "bob.token")
        )
    assert [r.result["status"] for r in alice] == ["complete", "refused"]
    assert alice[1].result["reason"] == "budget_exhausted"
    assert bob.result["status"] == "complete"
    assert sorted(entry["identity"] for entry in entries(tmp_path)) == ["alice", "bob"]


#: A quick consumer's deadline: short of ``fake-slow-start``'s 2 s hold (measured from
#: later, once the request is sent), so it always leaves before the answer; long enough for
#: its Open to reach the servicer on a loaded machine (with 0.5 s, CI once saw three of six
#: expire in the client, never seen by the producer).
QUICK_DEADLINE_S = 1.5


def quick_cancels(target: str, recording: Recording, count: int, prefix: str) -> list[Any]:
    """``count`` consumers at once that give up after ``QUICK_DEADLINE_S``."""
    ids = [f"{prefix}-{index}" for index in range(count)]
    return concurrent_replies([target], recording, CASE, ids, deadline_s=QUICK_DEADLINE_S)


def test_open_then_cancel_leaves_no_reservation_behind(
    tmp_path: Path, fake: FakeGeminiProcess, recording: Recording
) -> None:
    """Phase 1: the test holds the ledger's lock, so every open is cancelled while its
    reservation is being written; each is written, then released, and logged. Phase 2: the
    provider is slow to answer (``fake-slow-start``), so each open is cancelled after its
    request was sent; those keep their reservations. Then a patient consumer is served.
    A live reply is prepared by its generation, which outlives its consumer for the detach
    grace (a resume would attach): a grace of 0 stops it as soon as its consumer leaves."""
    lock_path = tmp_path / "ledger.json.lock"
    requests_before = len(fake.log())
    first, second = 12, 6
    with gemini_producer(
        tmp_path, fake, "fake-slow-start", "--budget-usd", "0.05", "--detach-grace-s", "0"
    ) as running:

        def cancelled() -> int:
            """Streams whose consumer left, and whose generation has ended since."""
            trace = running.trace()
            left = sum(
                1
                for r in trace
                if r["event"] == "state_changed" and r["to_state"] == "cancelled_by_consumer"
            )
            return min(left, sum(1 for r in trace if r["event"] == "generation_ended"))

        with lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                results = quick_cancels(running.target, recording, first, "held")
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        assert {r["reason"] for r in results} == {"deadline_exceeded"}
        wait_for(lambda: cancelled() == first, timeout=30)
        phase_one = entries(tmp_path)
        results = quick_cancels(running.target, recording, second, "sent")
        assert {r["reason"] for r in results} == {"deadline_exceeded"}
        wait_for(lambda: cancelled() == first + second, timeout=30)
        patient = run_consumer(running.target, "--case", CASE, "--stream-id", "patient")
        wait_for(lambda: running.logged("budget_settled"))
        trace = running.trace()
    assert patient.result["status"] == "complete"
    assert len(phase_one) == first
    assert {e["state"] for e in phase_one} == {"released"}
    rows = entries(tmp_path)
    assert "reserved" not in {e["state"] for e in rows}
    final_events = {"budget_released", "budget_reservation_kept", "budget_settled"}
    for entry in rows:
        records = [r["event"] for r in trace if r.get("call_id") == entry["call_id"]]
        assert "budget_reserved" in records
        assert len(final_events.intersection(records)) == 1
    phase_two = [e["state"] for e in rows[first : first + second]]
    assert set(phase_two) <= {"failed", "released"}
    assert "failed" in phase_two  # sent, then cancelled: the reservation is kept
    assert rows[-1]["state"] == "settled"
    # Only what may have reached the provider is committed; a released open never did.
    reached = [e for e in rows if e["state"] != "released"]
    assert committed(rows) == pytest.approx(
        sum(e["cost_usd"] for e in reached if e["state"] == "settled")
        + sum(e["reserved_usd"] for e in reached if e["state"] == "failed")
    )
    provider_requests = len(fake.log()) - requests_before
    assert provider_requests <= len(reached)
    assert provider_requests >= 1
    released = [r for r in trace if r["event"] == "budget_released"]
    assert {r["outcome"] for r in released} == {"cancelled_by_consumer"}


def test_an_open_that_cannot_connect_releases_its_reservation(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    with producer(
        tmp_path,
        "--source", "gemini", "--gemini-base-url", f"http://127.0.0.1:{closed_port}",
        "--ledger", str(tmp_path / "ledger.json"),
        env={"GEMINI_API_KEY": API_KEY},
    ) as running:  # fmt: skip
        run = run_consumer(running.target, "--case", CASE)
        wait_for(lambda: recorded(tmp_path))
        trace = running.trace()
    assert (run.result["status"], run.result["reason"]) == ("error", "provider_unavailable")
    (entry,) = entries(tmp_path)
    assert entry["state"] == "released"
    assert committed(entries(tmp_path)) == 0
    (released,) = [r for r in trace if r["event"] == "budget_released"]
    assert (released["call_id"], released["outcome"]) == (entry["call_id"], "unreachable")


def test_a_provider_that_echoes_the_key_leaves_no_key_in_the_capture(
    tmp_path: Path, fake: FakeGeminiProcess
) -> None:
    run_dir = tmp_path / "run"
    with gemini_producer(
        tmp_path, fake, "fake-echo-key", "--budget-usd", "1.0", "--record", str(run_dir)
    ) as running:  # fmt: skip
        run = run_consumer(running.target, "--case", CASE)
        wait_for((run_dir / "requests" / "request-001.json").exists)
        trace_bytes = running.trace_path.read_bytes()
    assert (run.result["status"], run.result["reason"]) == ("refused", "provider_rejected")
    assert API_KEY in (fake.log()[-1]["error_message"] or "")  # the provider did echo it
    files = [path for path in run_dir.rglob("*") if path.is_file()]
    sse = (run_dir / "requests" / "request-001.sse").read_bytes()
    assert b"[redacted]" in sse
    everything = [path.read_bytes() for path in files]
    everything += [trace_bytes, json.dumps(run.result).encode()]
    for data in everything:
        assert API_KEY.encode() not in data


def test_the_producer_refuses_a_plain_http_provider(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "replywire.producer", "--source", "gemini", "--port", "0",
         "--gemini-base-url", "http://example.com", "--ledger", str(tmp_path / "ledger.json")],
        cwd=ROOT, env={**os.environ, "GEMINI_API_KEY": API_KEY},
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("producer: --gemini-base-url must be https://")
    assert API_KEY not in done.stderr


@pytest.mark.parametrize("breakage", ["truncated", "a directory", "not a ledger"])
def test_a_ledger_broken_at_run_time_refuses_with_a_reason_code(
    tmp_path: Path, fake: FakeGeminiProcess, breakage: str
) -> None:
    ledger = tmp_path / "ledger.json"
    with gemini_producer(tmp_path, fake, "gemini-3.1-flash-lite") as running:
        first = run_consumer(running.target, "--case", CASE)
        assert first.result["status"] == "complete"
        if breakage == "truncated":
            ledger.write_bytes(ledger.read_bytes()[:40])
        elif breakage == "a directory":
            ledger.unlink()
            ledger.mkdir()
        else:
            ledger.write_text('{"format": "something else", "entries": []}')
        second = run_consumer(running.target, "--case", CASE)
        trace = running.trace()
    assert second.returncode == 5
    assert (second.result["status"], second.result["reason"]) == ("error", "ledger_unavailable")
    assert second.result["transport"] == {
        "grpc_code": "UNAVAILABLE",
        "grpc_details": "ledger_unavailable",
    }
    assert str(tmp_path) not in json.dumps(second.result)
    refused = [r for r in trace if r.get("to_state") == "refused"]
    assert [r["reason"] for r in refused] == ["ledger_unavailable"]
    assert str(ledger) in refused[0]["detail"]  # the detail is for the operator, in the trace


@pytest.mark.parametrize("breakage", ["a directory", "under a file", "truncated"])
def test_a_broken_ledger_stops_the_producer_at_start(
    tmp_path: Path, fake: FakeGeminiProcess, breakage: str
) -> None:
    if breakage == "a directory":
        ledger = tmp_path / "ledger.json"
        ledger.mkdir()
    elif breakage == "under a file":
        (tmp_path / "plain").write_text("")
        ledger = tmp_path / "plain" / "ledger.json"
    else:
        ledger = tmp_path / "ledger.json"
        ledger.write_text('{"format": "replywire-ledger/1", "entr')
    done = subprocess.run(
        [
            sys.executable, "-m", "replywire.producer", "--port", "0", "--source", "gemini",
            "--gemini-base-url", fake.base_url, "--ledger", str(ledger),
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=30, check=False,
        env={**os.environ, "GEMINI_API_KEY": API_KEY},
    )  # fmt: skip
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("producer: ") and "ledger" in line
    assert "Traceback" not in done.stderr


def test_redis_killed_at_run_time_refuses_with_a_reason_code_and_no_password(
    tmp_path: Path, fake: FakeGeminiProcess
) -> None:
    password = "redis-password-0123456789"
    with redis_server(password=password) as server, producer(
        tmp_path, "--source", "gemini", "--gemini-base-url", fake.base_url,
        "--ledger", server.url, env={"GEMINI_API_KEY": API_KEY},
    ) as running:  # fmt: skip
        first = run_consumer(running.target, "--case", CASE)
        server.kill()
        second = run_consumer(running.target, "--case", CASE)
        third = run_consumer(running.target, "--case", CASE)
        alive = running.process.poll() is None
        trace_text = running.trace_path.read_text()
    assert first.result["status"] == "complete"
    for run in (second, third):
        assert (run.result["status"], run.result["reason"]) == ("error", "ledger_unavailable")
        assert run.result["transport"]["grpc_details"] == "ledger_unavailable"
    assert alive  # never a crash
    refused = [r for r in read_trace(running.trace_path) if r.get("to_state") == "refused"]
    assert [r["reason"] for r in refused] == ["ledger_unavailable"] * 2
    assert f"redis://127.0.0.1:{server.port}/0" in refused[0]["detail"]
    assert password not in trace_text


def test_an_unreachable_redis_ledger_stops_the_producer_at_start(
    fake: FakeGeminiProcess,
) -> None:
    port = free_port()
    done = subprocess.run(
        [
            sys.executable, "-m", "replywire.producer", "--port", "0", "--source", "gemini",
            "--gemini-base-url", fake.base_url,
            "--ledger", f"redis://:redis-password-0123456789@127.0.0.1:{port}/0",
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=30, check=False,
        env={**os.environ, "GEMINI_API_KEY": API_KEY},
    )  # fmt: skip
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"producer: --ledger redis://127.0.0.1:{port}/0: cannot read")
    assert "redis-password" not in done.stderr


def concurrent_consumers(targets: list[str], recording: Recording, count: int) -> list[Any]:
    """``count`` consumers at once in this process, spread over ``targets``."""
    ids = [f"shared-{index}" for index in range(count)]
    return concurrent_replies(targets, recording, CASE, ids, deadline_s=60)


def test_two_producers_sharing_a_redis_ledger_never_exceed_the_budget(
    tmp_path: Path, fake: FakeGeminiProcess, recording: Recording
) -> None:
    """20 consumers at once over two producers that share one Redis ledger, with room for 5
    worst cases: each call is charged its whole reservation (``fake-usage-huge``), so exactly
    5 are served and 15 refused ``budget_exhausted``; the committed total stays within."""
    budget = worst_case(recording) * 5.5
    with redis_server() as server, ExitStack() as stack:
        args = ["--source", "gemini", "--gemini-base-url", fake.base_url,
                "--model", "fake-usage-huge", "--ledger", server.url,
                "--ledger-prefix", "shared:", "--budget-usd", str(budget)]  # fmt: skip
        env = {"GEMINI_API_KEY": API_KEY}
        producers = [
            stack.enter_context(producer(tmp_path, *args, name=f"producer-{index}", env=env))
            for index in range(2)
        ]
        results = concurrent_consumers([p.target for p in producers], recording, 20)
        ledger = RedisLedger(server.url, budget_usd=budget, options=RedisOptions(prefix="shared:"))
        wait_for(lambda: all(e["state"] != "reserved" for e in ledger.entries()))
        rows, totals = ledger.entries(), ledger.totals()
        traces = [p.trace() for p in producers]
    statuses = sorted((r["status"], r.get("reason")) for r in results)
    assert statuses.count(("complete", None)) == 5, statuses
    assert {s for s in statuses if s[0] != "complete"} == {("refused", "budget_exhausted")}
    assert totals["committed_usd"] <= budget
    assert totals["committed_usd"] == pytest.approx(5 * worst_case(recording))
    assert [e["state"] for e in rows] == ["settled"] * 5
    assert totals["entries"] == 5
    # Both producers reserved against the one ledger (each served at least one call).
    reserved = [sum(r["event"] == "budget_reserved" for r in trace) for trace in traces]
    assert sum(reserved) == 5
