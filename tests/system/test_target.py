"""Several producers behind one target (gRPC's own syntax and its round_robin policy):
a stream whose producer is killed mid-stream resumes on another one."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from replywire.children import stop_process
from tests.processes import Producer, consumer_process, producer, run_consumer, wait_for
from tests.runs import CASE, essence


def sent(p: Producer, stream_id: str) -> int:
    return sum(1 for r in p.stream_trace(stream_id) if r["event"] == "chunk_sent")


def test_a_killed_producer_of_two_the_stream_resumes_on_the_other(tmp_path: Path) -> None:
    with (
        producer(tmp_path, "--log-level", "debug", name="a") as a,
        producer(tmp_path, "--log-level", "debug", name="b") as b,
    ):
        target = f"ipv4:127.0.0.1:{a.port},127.0.0.1:{b.port}"
        unbroken = run_consumer(target, "--case", CASE)
        assert unbroken.returncode == 0
        result_path = tmp_path / "result.json"
        with consumer_process(
            tmp_path,
            target,
            "--case",
            CASE,
            "--chunk-interval-ms",
            "150",
            "--resume-attempts",
            "8",
            "--stream-id",
            "two",
            "--result",
            str(result_path),
        ) as consumer:
            wait_for(lambda: sent(a, "two") + sent(b, "two") >= 3, timeout=30)
            serving, other = (a, b) if sent(a, "two") else (b, a)
            stop_process(serving.process, signal.SIGKILL)
            assert consumer.wait(timeout=60) == 0
        result = json.loads(result_path.read_text())
        assert essence(result) == essence(unbroken.result)
        assert result["stats"]["reconnects"] >= 1
        assert result["stream_id"] == "two"
        # Both traces name the stream; the other producer regenerated and completed it.
        assert serving.stream_trace("two")
        records = [r for r in other.stream_trace("two") if r["event"] == "state_changed"]
        verify = [r for r in records if r.get("input") == "verify"]
        assert verify and verify[-1]["resume_after"] >= 2
        assert records[-1]["to_state"] == "completed"
