"""Every generation ends, across real processes (a producer on the fake Gemini server,
the consumer, a private valkey/redis server):

* A live reply whose log write fails at frame k (the memory log's frame bound, the
  Redis server killed, the lease lost) closes its provider call and settles its ledger
  entry at once, while the producer runs on, writes the generation's final record, and
  its reader ends with the named reason (``reply_log_limit``, ``reply_log_unavailable``,
  ``generator_lost``), the partial content kept.
* A read from at, past or far past the end of a complete reply (``resume_after`` = last,
  last + 1, 2^64 - 1) ends at once on both logs, with no takeover.

The figures each test prints (how long after the failed write the upstream was closed
and the ledger settled; how long a read from the end took) come from the producer's own
trace timestamps; nothing here asserts a time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis

from replywire.producer.edge.security import ANONYMOUS
from replywire.producer.replylog.interface import ReplyKey
from replywire.producer.replylog.redis_log import DEFAULT_PREFIX
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan
from tests.gemini_runs import API_KEY
from tests.processes import (
    FakeGeminiProcess,
    Producer,
    consumer_process,
    fake_gemini,
    producer,
    run_consumer,
    wait_for,
)
from tests.producer_records import metrics_port, scrape
from tests.redis_server import RedisServer, redis_server

pytestmark = pytest.mark.timeout(240)

CASE = "backup-schedule"
#: The frames logged before the log fails: the reply (``fake-slow-drip``, a piece every
#: 0.05 s) is far from made then; its last event carries the last delta and the finish.
AT_FRAME = 1
#: Far longer than anything here takes: what happens within it was not a shutdown.
PROMPTLY_S = 20.0


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGeminiProcess]:
    with fake_gemini(API_KEY, "--drip-delay-s", "0.05") as server:
        yield server


def live(tmp_path: Path, fake: FakeGeminiProcess, *args: str, model: str = "fake-slow-drip") -> Any:
    """A producer on the fake; by default its slow drip (a reply takes seconds), so that
    a fault lands mid-reply."""
    return producer(
        tmp_path,
        "--source", "gemini", "--gemini-base-url", fake.base_url, "--model", model,
        "--ledger", str(tmp_path / "ledger.json"), "--budget-usd", "1.0",
        "--log-level", "debug", *args,
        env={"GEMINI_API_KEY": API_KEY},
    )  # fmt: skip


def at(record: dict[str, Any]) -> float:
    return datetime.fromisoformat(record["timestamp"]).timestamp()


def upstream_released(p: Producer) -> bool:
    return p.logged("generation_ended") and p.released_upstream()


def check_the_generation_ended(
    p: Producer, fake: FakeGeminiProcess, tmp_path: Path, reason: str, call: int
) -> None:
    """While the producer still runs: the provider saw its stream closed before its end,
    the ledger entry left reserved, the generation's final record names ``reason``."""
    wait_for(lambda: upstream_released(p), timeout=PROMPTLY_S)
    wait_for(lambda: bool(fake.log()[call]["client_disconnected"]), timeout=PROMPTLY_S)
    entry = fake.log()[call]
    assert entry["body_completed"] is False
    trace = p.trace()
    ended = [r for r in trace if r["event"] == "generation_ended"]
    assert [(r["outcome"], r["identity"]) for r in ended] == [(reason, ANONYMOUS)]
    closed = next(r for r in trace if r["event"] == "provider_stream_closed")
    assert closed["outcome"] == reason
    ledger = json.loads((tmp_path / "ledger.json").read_text())["entries"]
    assert len(ledger) == 1 and ledger[0]["state"] in {"settled", "failed"}
    failed = [r for r in trace if r["event"] == "reply_log_write_failed"]
    settled = next(r for r in trace if r["event"].startswith("budget_") and r["event"]
                   != "budget_reserved")  # fmt: skip
    if failed:
        since = at(failed[0])
        print(f"{reason}: upstream closed {at(closed) - since:.3f} s and ledger "
              f"{settled['event']} {at(settled) - since:.3f} s after the failed write")  # fmt: skip


def test_a_live_reply_over_the_memory_logs_frame_bound_ends_reply_log_limit(
    tmp_path: Path, fake: FakeGeminiProcess
) -> None:
    call = len(fake.log())
    bound = ("--reply-log-max-frames", str(AT_FRAME), "--metrics-port", "0")
    with live(tmp_path, fake, *bound) as running:
        run = run_consumer(running.target, "--case", CASE, "--stream-id", "over-bound")
        check_the_generation_ended(running, fake, tmp_path, "reply_log_limit", call)
        generations = {
            labels: value
            for (name, labels), value in scrape(metrics_port(running)).items()
            if name == "replywire_generations_ended_total"
        }
    assert generations == {(("outcome", "reply_log_limit"),): 1.0}
    assert (run.result["status"], run.result["reason"]) == ("error", "reply_log_limit")
    assert run.result["stats"]["application_frames"] == AT_FRAME
    assert run.result["provisional_content"]  # the partial content kept
    assert run.result["accepted_answer"] is None


def sent(p: Producer, stream_id: str) -> int:
    return sum(1 for r in p.stream_trace(stream_id) if r["event"] == "chunk_sent")


def test_a_live_reply_whose_redis_is_killed_ends_reply_log_unavailable(
    tmp_path: Path, fake: FakeGeminiProcess
) -> None:
    call = len(fake.log())
    result_path = tmp_path / "result.json"
    with ExitStack() as stack:
        server = stack.enter_context(redis_server())
        running = stack.enter_context(live(tmp_path, fake, "--reply-log", server.url))
        args = ("--case", CASE, "--stream-id", "killed", "--result", str(result_path))
        consumer = stack.enter_context(consumer_process(tmp_path, running.target, *args))
        wait_for(lambda: sent(running, "killed") >= AT_FRAME, timeout=PROMPTLY_S)
        server.kill()
        assert consumer.wait(timeout=PROMPTLY_S) == 5
        check_the_generation_ended(running, fake, tmp_path, "reply_log_unavailable", call)
    result = json.loads(result_path.read_text())
    assert (result["status"], result["reason"]) == ("error", "reply_log_unavailable")
    assert result["provisional_content"] and result["accepted_answer"] is None


def test_a_live_reply_whose_lease_is_lost_ends_generator_lost(
    tmp_path: Path, fake: FakeGeminiProcess
) -> None:
    """The generator's lease key vanishes (as when it lapses during a stall of Redis): its
    next write is refused, the generation stops, and readers see the generator lost."""
    call = len(fake.log())
    result_path = tmp_path / "result.json"
    with ExitStack() as stack:
        server = stack.enter_context(redis_server())
        running = stack.enter_context(live(tmp_path, fake, "--reply-log", server.url))
        args = ("--case", CASE, "--stream-id", "leased", "--result", str(result_path))
        consumer = stack.enter_context(consumer_process(tmp_path, running.target, *args))
        wait_for(lambda: sent(running, "leased") >= AT_FRAME, timeout=PROMPTLY_S)
        drop_lease(server, ReplyKey(ANONYMOUS, "leased"))
        assert consumer.wait(timeout=PROMPTLY_S) == 5
        check_the_generation_ended(running, fake, tmp_path, "generator_lost", call)
    result = json.loads(result_path.read_text())
    assert (result["status"], result["reason"]) == ("error", "generator_lost")
    assert result["provisional_content"] and result["accepted_answer"] is None


def drop_lease(server: RedisServer, key: ReplyKey) -> None:
    client = redis.Redis.from_url(server.local_url)
    try:
        assert client.delete(f"{DEFAULT_PREFIX}{{{key.token}}}:lease") == 1
    finally:
        client.close()


@pytest.mark.parametrize("log", ["memory", "redis"])
def test_a_read_from_at_or_past_the_end_of_a_complete_reply_ends_at_once(
    tmp_path: Path, fake: FakeGeminiProcess, recording: Recording, log: str
) -> None:
    with ExitStack() as stack:
        args: tuple[str, ...] = ()
        if log == "redis":
            server = stack.enter_context(redis_server())
            args = ("--reply-log", server.url, "--reply-log-lease-s", "1")
        # A reply made at once: what is read here is its end.
        running = stack.enter_context(live(tmp_path, fake, *args, model="fake-running-usage"))
        whole = run_consumer(running.target, "--case", CASE, "--stream-id", "ended")
        assert whole.returncode == 0
        last = whole.result["stats"]["application_frames"]
        request = ReplyRequest(
            case_id=CASE,
            binding=recording.case(CASE).binding,
            wire=WireFormat.LENGTH_PREFIXED,
            plan=ChunkPlan.parse("frame"),
            stream_id="ended",
        ).open_request()
        taken = []
        with grpc.insecure_channel(running.target) as channel:
            stub = pb_grpc.ReplyStreamStub(channel)
            for after in (last, last + 1, 2**64 - 1):
                request.resume_after = after
                started = time.monotonic()
                chunks = list(stub.Open(request, timeout=30))
                taken.append((after, len(chunks), round(time.monotonic() - started, 3)))

        def completions() -> list[dict[str, Any]]:
            return [r for r in running.trace() if r["event"] == "state_changed"
                    and r.get("input") == "complete"]  # fmt: skip

        wait_for(lambda: len(completions()) == 4)  # records are written in batches
        trace = running.trace()
    print(f"{log}: (resume_after, chunks, seconds):", taken)
    assert [(after, chunks) for after, chunks, _ in taken] == [
        (last, 0), (last + 1, 0), (2**64 - 1, 0)
    ]  # fmt: skip
    assert not [r for r in trace if r["event"] == "generation_taken_over"]
    finals = [r["to_state"] for r in trace if r["event"] == "state_changed"
              and r.get("input") == "complete"]  # fmt: skip
    assert finals == ["completed"] * 4  # the whole reply and the three reads from its end
