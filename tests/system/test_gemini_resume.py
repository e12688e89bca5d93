"""A live Gemini reply is generated once into the reply log: a consumer whose connection
breaks resumes on the same producer and completes, and the provider is called once."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from replywire.children import stop_process
from tests.gemini_runs import API_KEY, gemini_producer
from tests.processes import (
    FakeGeminiProcess,
    consumer_process,
    fake_gemini,
    run_consumer,
    wait_for,
)
from tests.reset_proxy import ResetProxy

pytestmark = pytest.mark.timeout(180)

CASE = "backup-schedule"
#: A bounded wait for what must happen at once (far longer than the grace it follows).
PROMPTLY_S = 15.0
#: A consumer's deadline that a loaded machine still lets its Open reach the servicer in.
LEFT_AFTER_S = "3"
#: Seconds between the fake's 8-byte pieces: a reply of about a minute, far past the
#: deadline and the stop that follows it.
LONG_DRIP_S = "0.5"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGeminiProcess]:
    with fake_gemini(API_KEY) as server:
        yield server


def test_a_reset_mid_stream_resumes_a_live_reply_without_a_second_call(
    tmp_path: Path, fake: FakeGeminiProcess
) -> None:
    with gemini_producer(tmp_path, fake, model="fake-slow-drip") as running:
        unbroken = run_consumer(running.target, "--case", CASE)
        assert unbroken.returncode == 0
        before = len(fake.log())
        with ResetProxy(running.port, 400) as proxy:
            run = run_consumer(
                proxy.target, "--case", CASE, "--stream-id", "live-resume",
                "--chunk-interval-ms", "20", "--resume-backoff-s", "0.05",
            )  # fmt: skip
            assert proxy.reset_done
        records = [r for r in running.stream_trace("live-resume") if r["event"] == "state_changed"]
    assert run.returncode == 0, run.result
    assert run.result["status"] == "complete"
    assert run.result["accepted_answer"] == unbroken.result["accepted_answer"]
    assert run.result["provisional_content"] == unbroken.result["provisional_content"]
    assert run.result["stats"]["reconnects"] >= 1
    # One provider call for the stream, however many deliveries.
    assert len(fake.log()) == before + 1
    attach = [r for r in records if r.get("input") == "attach"]
    assert attach and attach[0]["attempt"] == 2
    assert records[-1]["to_state"] == "completed"


def test_a_producer_that_stops_ends_the_replies_still_generating(tmp_path: Path) -> None:
    """A consumer left (its deadline) and the reply generates for the detach grace; the
    producer stops meanwhile: the upstream is closed and the ledger entry leaves reserved.

    The producer is stopped only once the generation has opened its upstream (the
    reply is generating): stopped while it still reserves, marks sending or waits for
    the provider's answer, the call ends abandoned, with no stream to close. The deadline
    leaves time for the Open to reach the servicer on a loaded machine, and the reply,
    dripped slowly, outlasts it and the stop by far."""
    with fake_gemini(API_KEY, "--drip-delay-s", LONG_DRIP_S) as fake:
        with gemini_producer(
            tmp_path, fake, "--detach-grace-s", "120", model="fake-slow-drip"
        ) as running:
            run = run_consumer(running.target, "--case", CASE, "--deadline-s", LEFT_AFTER_S)
            assert run.result["reason"] == "deadline_exceeded"
            wait_for(lambda: running.logged("provider_stream_opened"), timeout=PROMPTLY_S)
        calls = fake.log()
    assert running.process.returncode == 0
    records = running.trace()
    closed = [r for r in records if r["event"] == "provider_stream_closed"]
    assert len(closed) == 1
    stopped = [r["reason"] for r in records if r["event"] == "generation_stopped"]
    assert stopped == ["producer_shutdown"] and closed[0]["outcome"] == "producer_shutdown"
    assert len(calls) == 1
    entries = json.loads((tmp_path / "ledger.json").read_text())["entries"]
    assert len(entries) == 1 and entries[0]["state"] != "reserved"


def test_a_producer_that_stops_while_the_provider_has_not_answered_records_its_stop(
    tmp_path: Path,
) -> None:
    """The consumer left (its deadline) while the provider holds its answer; the producer
    stops meanwhile: the generation is stopped ``producer_shutdown`` with the request sent
    and unanswered, and the call is recorded with that outcome (its reservation kept:
    it may have cost), not as the consumer's cancel."""
    with (
        fake_gemini(API_KEY, "--start-delay-s", "600") as fake,
        gemini_producer(
            tmp_path, fake, "--detach-grace-s", "120", model="fake-slow-start"
        ) as running,
    ):
        run = run_consumer(running.target, "--case", CASE, "--deadline-s", LEFT_AFTER_S)
        assert run.result["reason"] == "deadline_exceeded"
        wait_for(lambda: len(fake.log()) == 1, timeout=PROMPTLY_S)
    assert running.process.returncode == 0
    records = running.trace()
    stopped = [r["reason"] for r in records if r["event"] == "generation_stopped"]
    (abandoned,) = [r for r in records if r["event"] == "provider_request_abandoned"]
    (kept,) = [r for r in records if r["event"] == "budget_reservation_kept"]
    entries = json.loads((tmp_path / "ledger.json").read_text())["entries"]
    assert stopped == ["producer_shutdown"]
    assert abandoned["request_sent"] is True
    assert kept["outcome"] == "producer_shutdown"
    assert [(e["state"], e["failure"]) for e in entries] == [("failed", "producer_shutdown")]


def test_a_live_reply_nobody_comes_back_for_ends_reply_abandoned(
    tmp_path: Path, fake: FakeGeminiProcess
) -> None:
    """Its consumer vanished (SIGKILL: no Cancel) mid-reply and nobody attaches within
    --detach-grace-s: the generation stops with its own reason, the upstream is closed, the
    ledger settles, and a later Open of the stream id is told ``reply_abandoned`` (the live
    reply cannot be made again)."""
    stream_id = "abandoned"
    before = len(fake.log())
    with gemini_producer(
        tmp_path, fake, "--detach-grace-s", "0.5", model="fake-slow-drip"
    ) as running:
        with consumer_process(tmp_path, running.target, "--case", CASE,
                              "--stream-id", stream_id) as consumer:  # fmt: skip
            wait_for(
                lambda: any(r["event"] == "chunk_sent" for r in running.stream_trace(stream_id)),
                timeout=30,
            )
            stop_process(consumer, signal.SIGKILL)
        wait_for(lambda: running.logged("provider_stream_closed"), timeout=PROMPTLY_S)
        late = run_consumer(running.target, "--case", CASE, "--stream-id", stream_id)
        records = running.trace()
    stopped = [r for r in records if r["event"] == "generation_stopped"]
    assert [(r["stream_id"], r["reason"]) for r in stopped] == [(stream_id, "reply_abandoned")]
    assert late.returncode == 5
    assert (late.result["status"], late.result["reason"]) == ("error", "reply_abandoned")
    assert late.result["accepted_answer"] is None
    assert len(fake.log()) == before + 1
    assert fake.log()[before]["body_completed"] is False
    entries = json.loads((tmp_path / "ledger.json").read_text())["entries"]
    assert len(entries) == 1 and entries[0]["state"] != "reserved"
