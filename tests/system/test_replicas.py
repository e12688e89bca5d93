"""Replicas share replies through one Redis reply log (``--reply-log redis://...``), across
real processes: two producers and a private valkey/redis server (tests/redis_server.py).

The consumer process streams a slow reply from replica A through a loopback proxy; A is
killed (SIGKILL) mid-stream and the proxy's upstream switched to replica B, so the
consumer's own resume loop (``--resume-attempts``) reaches B (the consumer has one
target: the proxy stands for a multi-address target). B attaches to the reply A logged
(a recorded reply is logged whole at once), or, with the log lost too, generates the
recorded reply again; either way it delivers from ``resume_after + 1`` and the result
equals an unbroken run's. In process: a reply whose generator went silent mid-reply is
generated again by the replica that reads it, once the lease lapsed.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis

from replywire.children import stop_process
from replywire.consumer.client import stream_reply
from replywire.consumer.options import StreamOptions
from replywire.producer.edge.security import ANONYMOUS
from replywire.producer.edge.server import start_server, stop_server
from replywire.producer.replylog.interface import Entry, LogLimits, ReplyKey
from replywire.producer.replylog.redis_log import RedisReplyLog
from replywire.producer.settings import ServerSettings
from replywire.producer.sources.recording import RecordingSource
from replywire.producer.states import StreamState
from replywire.shared.digest import digest
from replywire.shared.reasons import Reason
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest, check_request, parse_binding
from replywire.shared.wire import WireFormat, codec_for
from replywire.shared.wire.chunking import ChunkPlan
from tests.processes import (
    ROOT,
    Producer,
    concurrent_replies,
    consumer_process,
    producer,
    run_consumer,
    wait_for,
)
from tests.redis_server import free_port, redis_server
from tests.reset_proxy import ResetProxy
from tests.runs import CASE, essence

LEASE_S = "1"
FINAL_STATES = frozenset(
    state.value
    for state in StreamState
    if state not in (StreamState.RECEIVED, StreamState.VERIFIED, StreamState.STREAMING,
                     StreamState.STALLED)
)  # fmt: skip


@pytest.mark.parametrize("log", ["kept", "lost"])
def test_a_resume_on_another_replica_completes_when_the_generating_one_is_killed(
    tmp_path: Path, log: str
) -> None:
    with redis_server() as server:
        shared = ("--reply-log", server.url, "--reply-log-lease-s", LEASE_S, "--log-level", "debug")
        with (
            producer(tmp_path, *shared, name="a") as a,
            producer(tmp_path, *shared, name="b") as b,
            ResetProxy(a.port, None) as proxy,
        ):
            unbroken = run_consumer(b.target, "--case", CASE, "--stream-id", "unbroken")
            assert unbroken.returncode == 0, unbroken.result
            result_path = tmp_path / "result.json"
            with consumer_process(
                tmp_path, proxy.target, "--case", CASE, "--chunk-interval-ms", "150",
                "--resume-attempts", "8", "--stream-id", "replicated",
                "--result", str(result_path),
            ) as consumer:  # fmt: skip
                wait_for(lambda: _sent(a.stream_trace("replicated")) >= 4, timeout=30)
                proxy.upstream_port = b.port  # new connections reach B
                stop_process(a.process, signal.SIGKILL)
                if log == "lost":
                    with redis.Redis(port=server.port) as client:
                        client.flushdb()
                assert consumer.wait(timeout=60) == 0
            records = b.stream_trace("replicated")
    result: dict[str, Any] = json.loads(result_path.read_text())
    assert essence(result) == essence(unbroken.result)
    assert result["stats"]["reconnects"] >= 1
    # B never had the stream before: it attached to A's reply (or, with the log lost,
    # generated it again), and delivered what came after what A had sent.
    resumed = [r for r in records if r.get("input") in ("attach", "verify")]
    assert [r["input"] for r in resumed] == ["attach" if log == "kept" else "verify"]
    assert resumed[0]["resume_after"] >= 3
    assert records[-1]["to_state"] == "completed"


def _sent(records: list[dict[str, Any]]) -> int:
    return sum(1 for r in records if r["event"] == "chunk_sent")


def test_a_reply_whose_generator_went_silent_is_generated_again_by_its_reader(
    recording: Recording,
) -> None:
    """Replica A logged 3 frames and went silent (as if killed: its lease refresher stops);
    replica B, serving a consumer of that stream, reads them, sees the lease lapse, and,
    the recording being deterministic, generates the reply itself and goes on reading. A
    consumer that comes once the lease lapsed finds it ``generator_lost``: it is generated
    again from the start."""

    async def scenario(url: str) -> tuple[dict[str, Any], dict[str, Any]]:
        limits = LogLimits(lease_s=0.5)
        request = ReplyRequest(
            case_id=CASE,
            binding=recording.case(CASE).binding,
            wire=WireFormat.LENGTH_PREFIXED,
            plan=ChunkPlan.parse("frame"),
            fault=None,
            stream_id="orphan",
        )
        replica_a = RedisReplyLog(url, limits)
        for stream_id in ("orphan", "late"):
            await abandon(replica_a, replace(request, stream_id=stream_id), recording)
        settings = ServerSettings(
            host="127.0.0.1", port=0, allow_faults=False, reply_log=RedisReplyLog(url, limits)
        )
        server, port, servicer = await start_server(recording, settings)
        # Bounded: a reader that waited for ever on the silent generator would end
        # deadline_exceeded, not complete.
        options = StreamOptions(target=f"127.0.0.1:{port}", deadline_s=30)
        orphan = (await stream_reply(request, options)).to_dict()
        unbroken = (await stream_reply(replace(request, stream_id="whole"), options)).to_dict()
        late = await replica_a.find(ReplyKey(ANONYMOUS, "late"))
        assert late is not None and late.error == Reason.GENERATOR_LOST.value
        regenerated = (await stream_reply(replace(request, stream_id="late"), options)).to_dict()
        assert essence(regenerated) == essence(unbroken)
        await stop_server(server, servicer, 1.0, asyncio.Event())
        await servicer.replies.aclose()
        await replica_a.aclose()
        return orphan, unbroken

    with redis_server() as server:
        orphan, unbroken = asyncio.run(scenario(server.url))
    # Complete within its deadline: it waited for the lease to lapse, not for ever (no
    # elapsed time is asserted: that the lease is waited for while it is refreshed is
    # tests/integration/test_redis_replylog.py's).
    assert essence(orphan) == essence(unbroken)
    assert orphan["stats"]["reconnects"] == 0


async def abandon(log: RedisReplyLog, request: ReplyRequest, recording: Recording) -> None:
    """Replica A logs the first 3 frames of the request's reply and is gone (as if killed:
    no lease refresh, no end)."""
    opened = request.open_request()
    checked = check_request(opened, allow_faults=False)
    plan = await RecordingSource(recording).prepare(checked, identity="a")
    assert plan.reply_frames is not None
    binding = digest(parse_binding(opened.binding_json))
    reply = await log.create(ReplyKey(ANONYMOUS, request.stream_id), binding, checked.wire.value)
    codec = codec_for(checked.wire)
    for frame in plan.reply_frames[:3]:
        assert isinstance(frame.sequence, int)
        await reply.append(Entry(frame.sequence, codec.encode_frame(frame)))
    assert reply._refresher is not None
    reply._refresher.cancel()


def test_a_reply_log_that_does_not_answer_stops_the_producer() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "replywire.producer", "--port", "0",
         "--reply-log", f"redis://:hunter2@127.0.0.1:{free_port()}/0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("producer: cannot use --reply-log redis://127.0.0.1:")
    assert done.stderr.count("\n") == 1 and "hunter2" not in done.stderr


#: Evidence 4: streams in flight when one of two replicas gets SIGTERM.
IN_FLIGHT = 20
#: The SIGTERMed replica's --shutdown-grace-s: streams that can finish within it do so there.
SHUTDOWN_GRACE_S = "1"


def test_sigterm_on_one_of_two_replicas_with_streams_in_flight(
    tmp_path: Path, recording: Recording
) -> None:
    """20 streams over one multi-address target (round_robin over replicas a and b, one
    Redis reply log); the replica with more of them gets SIGTERM while every stream is under
    way. Each of its streams either completes there within its grace, or it ends it
    (``shutdown``, ``UNAVAILABLE`` / ``producer_shutdown``) and the stream resumes on the
    other: every one ends complete with the unbroken result, and each replica's trace has
    each of its deliveries' final state."""
    with redis_server() as server:
        shared = (
            "--reply-log", server.url, "--reply-log-lease-s", LEASE_S, "--log-level", "debug",
            "--shutdown-grace-s", SHUTDOWN_GRACE_S,
        )  # fmt: skip
        with (
            producer(tmp_path, *shared, name="a") as a,
            producer(tmp_path, *shared, name="b") as b,
        ):
            target = f"ipv4:127.0.0.1:{a.port},127.0.0.1:{b.port}"
            unbroken = run_consumer(b.target, "--case", CASE, "--stream-id", "unbroken")
            assert unbroken.returncode == 0, unbroken.result
            stream_ids = [f"flight-{i:02d}" for i in range(IN_FLIGHT)]
            with ThreadPoolExecutor(1) as pool:
                running = pool.submit(resuming_replies, target, recording, stream_ids)
                wait_for(lambda: _streaming(a, b) >= set(stream_ids), timeout=60, interval=0.1)
                # round_robin spreads picks over the replicas that are ready: how many land
                # on each varies run to run (all on one when the other connected later), so
                # the replica with more of them in flight is the one stopped.
                on = {
                    name: set(stream_ids) & {str(r.get("stream_id")) for r in replica.trace()}
                    for name, replica in (("a", a), ("b", b))
                }
                doomed, other = (a, b) if len(on["a"]) >= len(on["b"]) else (b, a)
                on_doomed = on["a"] if doomed is a else on["b"]
                assert len(on_doomed) >= IN_FLIGHT // 2
                assert stop_process(doomed.process, signal.SIGTERM) == 0
                results = running.result(timeout=120)
        # Read once both have stopped: a running producer writes its trace in batches, so a
        # stream's final record may still be held (it was, once, on a loaded machine).
        doomed_trace, other_trace = doomed.trace(), other.trace()
    for stream_id, result in zip(stream_ids, results, strict=True):
        assert essence(result) == essence(unbroken.result), (stream_id, result)
    finals_doomed, finals_other = _finals(doomed_trace), _finals(other_trace)
    completed_there = {s for s in on_doomed if finals_doomed[s] == ["completed"]}
    resumed = {s for s in on_doomed if finals_doomed[s] == ["shutdown"]}
    assert completed_there | resumed == on_doomed
    assert resumed, "the grace let every stream finish: nothing resumed"
    for stream_id in resumed:
        # The other replica attached to the reply the stopped one logged and delivered the rest.
        delivered = [r for r in other_trace if r.get("stream_id") == stream_id
                     and r.get("input") == "attach"]  # fmt: skip
        assert len(delivered) == 1 and delivered[0]["resume_after"] >= 1
        assert finals_other[stream_id] == ["completed"]
        assert results[stream_ids.index(stream_id)]["stats"]["reconnects"] >= 1
    for stream_id in set(stream_ids) - on_doomed:
        assert finals_other[stream_id] == ["completed"]
    # The stopped replica's own count: every stream it opened ended once, completed or shutdown.
    # (b also served the unbroken reference stream.)
    unbroken_there = 1 if doomed is b else 0
    (stopped,) = [r for r in doomed_trace if r["event"] == "producer_stopped"]
    assert stopped["streams_opened"] == (
        len(on_doomed) + unbroken_there + stopped["streams_refused"]
    )
    assert (stopped["streams_completed"], stopped["streams_shutdown"]) == (
        len(completed_there) + unbroken_there,
        len(resumed),
    )
    print(f"on the stopped replica: {len(on_doomed)}; completed there: {len(completed_there)}; "
          f"resumed on the other: {len(resumed)}")  # fmt: skip


def resuming_replies(
    target: str, recording: Recording, stream_ids: list[str]
) -> list[dict[str, Any]]:
    """One in-process consumer per stream id, all at once, each with resumes on, the slow
    half at 400 ms a frame and the others at 100 ms; their result documents, in order."""
    return concurrent_replies(
        [target], recording, CASE, stream_ids, deadline_s=60,
        interval_ms=lambda index: 400 if index % 2 else 100,
        resume_attempts=5, resume_backoff_s=0.05,
    )  # fmt: skip


def _streaming(*replicas: Producer) -> set[str]:
    """The stream ids some replica has sent a chunk of."""
    return {r["stream_id"] for p in replicas for r in p.trace() if r["event"] == "chunk_sent"}


def _finals(records: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each stream id's final states in one trace (one per delivery)."""
    finals: dict[str, list[str]] = {}
    for record in records:
        if record["event"] == "state_changed" and record["to_state"] in FINAL_STATES:
            finals.setdefault(record["stream_id"], []).append(record["to_state"])
    return finals
