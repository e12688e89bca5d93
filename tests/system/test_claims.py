"""Claim, then pay: a live reply is claimed in the reply log before its provider is called,
and the call is made by the reply's generation, not by the RPC that claimed it.

* 20 Opens at once of one new live stream id, spread over two replicas sharing a Redis
  reply log: one provider call, 20 equal results.
* A consumer whose connection is reset one second into a live reply whose provider has
  not answered yet (``fake-slow-start``) resumes and completes: one provider call.
* A claim refused before the call (the budget) ends every reader of it with that
  reason and nothing charged; once the refusal no longer holds, an Open of the same
  stream id claims it anew and completes.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import structlog

from replywire.consumer.client import stream_reply
from replywire.consumer.options import StreamOptions
from replywire.producer.budget.file_ledger import BudgetLedger
from replywire.producer.edge.server import start_server, stop_server
from replywire.producer.settings import ServerSettings
from replywire.producer.sources.gemini.settings import GeminiSettings
from replywire.producer.sources.gemini.source import GeminiSource
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan
from tests.gemini_runs import API_KEY
from tests.processes import (
    FakeGeminiProcess,
    concurrent_replies,
    fake_gemini,
    producer,
    run_consumer,
)
from tests.redis_server import redis_server
from tests.reset_proxy import ResetProxy
from tests.runs import essence

pytestmark = pytest.mark.timeout(240)

CASE = "backup-schedule"
OPENS = 20


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGeminiProcess]:
    with fake_gemini(API_KEY) as server:
        yield server


def live_args(tmp_path: Path, fake: FakeGeminiProcess, model: str) -> tuple[str, ...]:
    return (
        "--source", "gemini", "--gemini-base-url", fake.base_url, "--model", model,
        "--ledger", str(tmp_path / "ledger.json"), "--budget-usd", "1.0",
    )  # fmt: skip


def test_twenty_opens_of_one_new_live_reply_on_two_replicas_make_one_call(
    tmp_path: Path, fake: FakeGeminiProcess, recording: Recording
) -> None:
    before = len(fake.log())
    with ExitStack() as stack:
        server = stack.enter_context(redis_server())
        args = (*live_args(tmp_path, fake, "fake-slow-drip"), "--reply-log", server.url)
        replicas = [
            stack.enter_context(
                producer(tmp_path, *args, name=name, env={"GEMINI_API_KEY": API_KEY})
            )
            for name in ("a", "b")
        ]
        results = concurrent_replies(
            [p.target for p in replicas], recording, CASE, ["one-id"] * OPENS, deadline_s=120
        )
        inputs = [
            r["input"]
            for p in replicas
            for r in p.stream_trace("one-id")
            if r["event"] == "state_changed" and r["from_state"] == "received"
        ]
    assert [r["status"] for r in results] == ["complete"] * OPENS, results[0]
    assert len({json.dumps(essence(r)) for r in results}) == 1
    assert len(fake.log()) == before + 1  # one provider call
    assert sorted(inputs) == ["attach"] * (OPENS - 1) + ["verify"]
    ledger = json.loads((tmp_path / "ledger.json").read_text())["entries"]
    assert [entry["state"] for entry in ledger] == ["settled"]


def test_a_reset_one_second_into_a_live_reply_resumes_without_a_second_call(
    tmp_path: Path, fake: FakeGeminiProcess
) -> None:
    """The provider holds its answer for 2 s (``fake-slow-start``): the consumer's first
    connection is reset at 1 s, before any frame, while the call is in flight."""
    with producer(
        tmp_path, *live_args(tmp_path, fake, "fake-slow-start"), env={"GEMINI_API_KEY": API_KEY}
    ) as running:
        before = len(fake.log())
        with ResetProxy(running.port, None, reset_after_s=1.0) as proxy:
            run = run_consumer(
                proxy.target, "--case", CASE, "--stream-id", "reset-at-1s",
                "--resume-backoff-s", "0.05",
            )  # fmt: skip
            assert proxy.reset_done and proxy.connections >= 2
        calls = fake.log()[before:]
        inputs = [r["input"] for r in running.stream_trace("reset-at-1s")
                  if r["event"] == "state_changed" and r["from_state"] == "received"]  # fmt: skip
    assert (run.result["status"], run.result["reason"]) == ("complete", None), run.result
    assert run.result["stats"]["reconnects"] >= 1
    assert len(calls) == 1 and calls[0]["body_completed"] is True
    # The first Open was gone while the call was in flight (its generation went on); the
    # resume attached to the reply that call made.
    assert inputs[0] == "consumer_cancelled" and set(inputs[1:]) == {"attach"}, inputs


_QUIET = structlog.wrap_logger(
    None, wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL)
)


def test_a_refused_claim_charges_nothing_and_the_stream_id_can_be_claimed_anew(
    tmp_path: Path, fake: FakeGeminiProcess, recording: Recording
) -> None:
    """A producer in this process (its ledger's budget is raised between the two rounds):
    five Opens at once of one stream id with a budget that fits no call are all refused
    ``budget_exhausted`` (one claim, the others attached to it), with no call and no
    entry; with the budget raised, the same stream id is claimed anew and completes."""

    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any], int]:
        ledger = BudgetLedger(tmp_path / "ledger.json", budget_usd=1e-9)
        source = GeminiSource(
            recording,
            GeminiSettings(base_url=fake.base_url, model="fake-slow-drip"),
            api_key=API_KEY,
            ledger=ledger,
        )
        settings = ServerSettings(host="127.0.0.1", port=0, allow_faults=False)
        server, port, servicer = await start_server(source, settings)
        request = ReplyRequest(
            case_id=CASE,
            binding=recording.case(CASE).binding,
            wire=WireFormat.LENGTH_PREFIXED,
            plan=ChunkPlan.parse("frame"),
            stream_id="refused-first",
        )
        options = StreamOptions(target=f"127.0.0.1:{port}", deadline_s=60)
        refused = await asyncio.gather(
            *(stream_reply(request, options, logger=_QUIET) for _ in range(5))
        )
        entries_after_refusal = len(ledger.entries())
        ledger.budget_usd = ledger.budget_per_identity_usd = 1.0
        served = await stream_reply(request, options, logger=_QUIET)
        await stop_server(server, servicer, 1.0, asyncio.Event())
        await source.aclose()
        return [r.to_dict() for r in refused], served.to_dict(), entries_after_refusal

    before = len(fake.log())
    refused, served, entries = asyncio.run(scenario())
    assert {(r["status"], r["reason"]) for r in refused} == {("refused", "budget_exhausted")}
    assert entries == 0
    assert (served["status"], served["reason"]) == ("complete", None)
    assert len(fake.log()) == before + 1  # the one call is the second round's
