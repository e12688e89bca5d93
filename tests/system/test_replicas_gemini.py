"""Live Gemini replies on two replicas sharing one Redis reply log, across real processes
(two producers, the fake Gemini server, a private valkey/redis server).

* The replica that generates a live reply is killed (SIGKILL) mid-reply: a live reply
  cannot be made again, so every reader, the one attached on the other replica and the
  one whose connection broke with the killed replica (it resumes on the other), ends
  ``error`` / ``generator_lost``, nothing accepted, the partial content kept, once the
  lease lapses: long before any idle timeout or grace.
* ``Cancel`` sent to the replica that does not generate the reply reaches the one that
  does, through the shared log: the upstream is closed at once and the ledger settles.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from replywire.children import stop_process
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from tests.gemini_runs import API_KEY
from tests.processes import (
    REPLICA_GRACE_S,
    ROOT,
    FakeGeminiProcess,
    Producer,
    consumer_command,
    consumer_process,
    fake_gemini,
    gemini_replicas,
    read_trace,
    run_consumer,
    wait_for,
)
from tests.redis_server import RedisServer, redis_server

pytestmark = pytest.mark.timeout(240)

CASE = "backup-schedule"
#: The replicas' lease (``--reply-log-lease-s``): a lost generator's readers end within
#: it and a quarter of it (the followers' poll) after its last refresh.
LEASE_S = 2.0
#: The replicas' detach grace, far longer than every bounded wait here: whatever stops
#: within them was not the grace.
GRACE_S = REPLICA_GRACE_S
#: A bounded wait for what must happen at once.
PROMPTLY_S = 10.0
#: A bounded wait for the readers of a lost generator: the lease and a quarter, with room
#: for two busy cores; far shorter than their idle timeout (GRACE_S), the other way out.
LOST_WITHIN_S = 30.0
#: Seconds between the fake's 8-byte pieces of a fake-slow-drip reply (its default: 0.02).
DRIP_DELAY_S = "0.1"
#: The producer stream's states that are not final.
OPEN_STATES = frozenset({"received", "verified", "streaming", "stalled"})


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGeminiProcess]:
    """Its slow drip slowed further (a reply takes some 17 s instead of 2.5 s), so that a
    kill or a cancel lands mid-reply however busy the machine is."""
    with fake_gemini(API_KEY, "--drip-delay-s", DRIP_DELAY_S) as server:
        yield server


def two_replicas(
    tmp_path: Path, fake: FakeGeminiProcess, server: RedisServer
) -> AbstractContextManager[tuple[Producer, Producer]]:
    """Replicas a and b (``tests.processes.gemini_replicas``) sharing ``server``'s reply
    log, with the lease ``LEASE_S``."""
    return gemini_replicas(
        tmp_path, fake, server.url, "--reply-log-lease-s", str(LEASE_S), api_key=API_KEY
    )


def sent(p: Producer, stream_id: str) -> int:
    return sum(1 for r in p.stream_trace(stream_id) if r["event"] == "chunk_sent")


def generator_of(a: Producer, b: Producer, stream_id: str) -> tuple[Producer, Producer]:
    """(the replica that called the provider for the stream, the other one)."""
    called = [
        p for p in (a, b) if any(r.get("input") == "verify" for r in p.stream_trace(stream_id))
    ]
    assert len(called) == 1, "one replica generates the reply"
    return (a, b) if called[0] is a else (b, a)


def timestamp(record: dict[str, Any]) -> float:
    return datetime.fromisoformat(record["timestamp"]).timestamp()


def test_killing_the_replica_that_generates_a_live_reply_ends_every_reader_generator_lost(
    tmp_path: Path, fake: FakeGeminiProcess
) -> None:
    stream_id = "lost-live"
    before = len(fake.log())
    with redis_server() as server, two_replicas(tmp_path, fake, server) as (a, b):
        unbroken = run_consumer(a.target, "--case", CASE)
        assert unbroken.returncode == 0, unbroken.result
        first_path, second_path = tmp_path / "first.json", tmp_path / "second.json"
        both = f"ipv4:127.0.0.1:{a.port},127.0.0.1:{b.port}"
        with consumer_process(
            tmp_path, both, "--case", CASE, "--stream-id", stream_id,
            "--resume-attempts", "5", "--resume-backoff-s", "0.05",
            "--idle-timeout-s", GRACE_S, "--result", str(first_path),
        ) as first:  # fmt: skip
            wait_for(lambda: sent(a, stream_id) + sent(b, stream_id) >= 1, timeout=30)
            generating, other = generator_of(a, b, stream_id)
            # A second reader of the same reply, attached on the replica that does not
            # generate it.
            with second_reader(tmp_path, other, stream_id, second_path) as second:
                wait_for(lambda: sent(other, stream_id) >= 1, timeout=30)
                calls = fake.log()[before + 1 :]
                assert [c["body_completed"] for c in calls] == [False], "killed mid-reply"
                killed_at = time.time()
                stop_process(generating.process, signal.SIGKILL)
                assert second.wait(timeout=LOST_WITHIN_S) == 5
                assert first.wait(timeout=LOST_WITHIN_S) == 5
        records = other.stream_trace(stream_id)
    unbroken_content = unbroken.result["provisional_content"]
    for path in (first_path, second_path):
        result = json.loads(path.read_text())
        assert (result["status"], result["reason"]) == ("error", "generator_lost"), result
        assert result["accepted_answer"] is None
        # The partial content is kept, and it is what the unbroken reply began with.
        assert result["provisional_content"]
        assert unbroken_content.startswith(result["provisional_content"])
        assert len(result["provisional_content"]) < len(unbroken_content)
        assert result["transport"]["grpc_details"] == "generator_lost"
    # The first reader's connection broke with the killed replica: it resumed on the other.
    assert json.loads(first_path.read_text())["stats"]["reconnects"] >= 1
    # One provider call for the stream: nobody made the live reply again.
    assert len(fake.log()) == before + 2
    # Every delivery of the stream on the surviving replica ended, told generator_lost, after
    # the kill (how soon is the bounded waits' above: no elapsed time is asserted).
    ended = [r for r in records if r["event"] == "state_changed" and r.get("reason")
             == "generator_lost"]  # fmt: skip
    assert ended, records
    for record in ended:
        assert timestamp(record) >= killed_at
    print("ended on the surviving replica:", [(r["input"], r["to_state"],
          round(timestamp(r) - killed_at, 3)) for r in ended])  # fmt: skip
    # Each of its deliveries ended so: aborted (it was reading) or refused (a resume that
    # came once the lease had lapsed); none completed.
    finals = [r["to_state"] for r in records if r["event"] == "state_changed"
              and r["to_state"] not in OPEN_STATES]  # fmt: skip
    assert finals and set(finals) <= {"aborted", "refused"}
    assert len(finals) == len(ended)


@contextmanager
def second_reader(
    tmp_path: Path, other: Producer, stream_id: str, result: Path
) -> Iterator[subprocess.Popen[str]]:
    """Another consumer of the stream id, on the replica ``other`` only."""
    args = ("--case", CASE, "--stream-id", stream_id, "--idle-timeout-s", GRACE_S,
            "--result", str(result))  # fmt: skip
    with (tmp_path / "second.trace.jsonl").open("w") as trace:
        process = subprocess.Popen(
            consumer_command(other.target, *args),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=trace,
            text=True,
        )
        try:
            yield process
        finally:
            stop_process(process, signal.SIGKILL)


def cancel(target: str, stream_id: str) -> bool:
    """``ReplyStream/Cancel`` as a consumer sends it on Ctrl-C (bounded)."""
    with grpc.insecure_channel(target) as channel:
        reply: pb.CancelReply = pb_grpc.ReplyStreamStub(channel).Cancel(
            pb.CancelRequest(stream_id=stream_id), timeout=10
        )
    return reply.cancelled


def test_a_cancel_on_the_replica_that_does_not_generate_stops_the_generation(
    tmp_path: Path, fake: FakeGeminiProcess
) -> None:
    """The consumer of a live reply on replica a is gone (its reply would generate for the
    120 s grace); its ``Cancel`` lands on replica b (as round_robin may send it): b relays
    it through the shared log, a stops the generation at once, closes the upstream and
    settles its ledger, and b answers ``cancelled``."""
    stream_id = "relayed-cancel"
    before = len(fake.log())
    with redis_server() as server, two_replicas(tmp_path, fake, server) as (a, b):
        with consumer_process(
            tmp_path, a.target, "--case", CASE, "--stream-id", stream_id,
            "--resume-attempts", "0",
        ) as consumer:  # fmt: skip
            wait_for(lambda: sent(a, stream_id) >= 1, timeout=30)
            stop_process(consumer, signal.SIGKILL)  # gone without a Cancel of its own
        assert fake.log()[before]["body_completed"] is False
        assert cancel(b.target, stream_id) is True
        wait_for(lambda: bool(fake.log()[before]["client_disconnected"]), timeout=PROMPTLY_S)
        wait_for(a.released_upstream, timeout=PROMPTLY_S)
        # A second Cancel: nothing is generating any more.
        assert cancel(b.target, stream_id) is False
        wait_for(lambda: len(requests_of(b, stream_id)) == 2)  # the trace is written in batches
        a_records, b_records = a.stream_trace(stream_id), b.stream_trace(stream_id)
    assert fake.log()[before]["body_completed"] is False
    assert len(fake.log()) == before + 1
    requested = [r for r in b_records if r["event"] == "stream_cancel_requested"]
    assert [(r["relayed"], r["cancelled"]) for r in requested] == [(True, True), (True, False)]
    relayed = [r for r in a_records if r["event"] == "stream_cancel_relayed"]
    assert [r["cancelled"] for r in relayed] == [True]
    stopped = [r for r in a.trace() if r["event"] == "generation_stopped"]
    assert [(r["stream_id"], r["reason"]) for r in stopped] == [(stream_id, "consumer_cancelled")]
    entries = json.loads((tmp_path / "a" / "ledger.json").read_text())["entries"]
    assert len(entries) == 1 and entries[0]["state"] != "reserved"
    assert (
        not (tmp_path / "b" / "ledger.json").exists()
        or not json.loads((tmp_path / "b" / "ledger.json").read_text())["entries"]
    )


def test_ctrl_c_on_a_consumer_of_two_replicas_stops_the_generation_wherever_it_runs(
    tmp_path: Path, fake: FakeGeminiProcess
) -> None:
    """The consumer's own Cancel (SIGINT) through a multi-address target: round_robin sends
    it to either replica; the generation stops at once either way."""
    stream_id = "ctrl-c-two"
    before = len(fake.log())
    with redis_server() as server, two_replicas(tmp_path, fake, server) as (a, b):
        both = f"ipv4:127.0.0.1:{a.port},127.0.0.1:{b.port}"
        with consumer_process(
            tmp_path, both, "--case", CASE, "--stream-id", stream_id,
            "--chunk-interval-ms", "300", "--result", str(tmp_path / "result.json"),
        ) as consumer:  # fmt: skip
            wait_for(lambda: sent(a, stream_id) + sent(b, stream_id) >= 1, timeout=30)
            generating, _ = generator_of(a, b, stream_id)
            assert stop_process(consumer, signal.SIGINT) == 3
        wait_for(lambda: bool(fake.log()[before]["client_disconnected"]), timeout=PROMPTLY_S)
        wait_for(
            lambda: generating.logged("generation_stopped"),
            timeout=PROMPTLY_S,
        )
        requested = [
            r for p in (a, b) for r in p.stream_trace(stream_id)
            if r["event"] == "stream_cancel_requested"
        ]  # fmt: skip
    result = json.loads((tmp_path / "result.json").read_text())
    assert (result["status"], result["reason"]) == ("incomplete", "consumer_cancelled")
    assert [r["cancelled"] for r in requested] == [True]
    consumer_trace = read_trace(tmp_path / "consumer.trace.jsonl")
    assert [r["cancelled"] for r in consumer_trace if r["event"] == "cancel_sent"] == [True]
    name = "a" if generating is a else "b"
    entries = json.loads((tmp_path / name / "ledger.json").read_text())["entries"]
    assert len(entries) == 1 and entries[0]["state"] != "reserved"


def requests_of(p: Producer, stream_id: str) -> list[dict[str, Any]]:
    """The ``Cancel`` requests ``p`` answered for the stream."""
    return [r for r in p.stream_trace(stream_id) if r["event"] == "stream_cancel_requested"]
