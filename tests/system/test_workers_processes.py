"""``--workers N``: one producer as N processes on one port (real processes, real gRPC on
loopback, a private Redis server as the shared reply log).

Two workers serve streams on the one port the parent printed, both take some (each
worker's own trace file says which it served); a stream started on one worker and cut
resumes on the other through the Redis log; the one ``/metrics`` sums both; SIGTERM to the
parent drains both (every stream in some worker's trace reaches a final state); a worker
killed by SIGKILL makes the parent stop the other and exit 1; a parent killed by SIGKILL
leaves no worker behind. The refusals (a memory reply log, ``--workers 0``, ...) are rows of
tests/system/test_wrong_inputs_processes.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from replywire.children import read_listening_port, stop_process
from replywire.producer.states import FINAL_STATES
from replywire.producer.workers import worker_trace_file
from replywire.shared.recording import Recording
from tests.processes import (
    ROOT,
    Producer,
    concurrent_replies,
    consumer_process,
    read_trace,
    run_consumer,
    wait_for,
)
from tests.producer_records import exposition, samples
from tests.redis_server import RedisServer, redis_server
from tests.reset_proxy import ResetProxy
from tests.runs import CASE

FINAL_VALUES = {state.value for state in FINAL_STATES}
WORKERS = 2


@dataclass
class Workers(Producer):
    """The parent, its port, and where it (``trace``) and each worker write their traces."""

    def worker_trace(self, index: int) -> list[dict[str, Any]]:
        path = worker_trace_file(self.trace_path, index)
        return read_trace(path) if path.exists() else []

    def worker_pids(self) -> list[int]:
        return [r["pid"] for r in self.trace() if r["event"] == "worker_started"]

    def served_by(self, stream_id: str) -> list[int]:
        """The workers whose traces hold records of ``stream_id``."""
        return [
            index
            for index in range(1, WORKERS + 1)
            if any(r.get("stream_id") == stream_id for r in self.worker_trace(index))
        ]

    def finals(self) -> dict[str, list[str]]:
        """Each stream's final states over every worker's trace."""
        found: dict[str, list[str]] = {}
        for index in range(1, WORKERS + 1):
            for r in self.worker_trace(index):
                if r["event"] == "state_changed" and r["to_state"] in FINAL_VALUES:
                    found.setdefault(r["stream_id"], []).append(r["to_state"])
        return found


@contextmanager
def workers(tmp_path: Path, server: RedisServer, *args: str) -> Iterator[Workers]:
    trace_path = tmp_path / "producer.jsonl"
    command = [sys.executable, "-m", "replywire.producer", "--port", "0", "--workers",
               str(WORKERS), "--reply-log", server.url, "--log-format", "json",
               "--trace-flush-ms", "0", "--trace-file", str(trace_path), *args]  # fmt: skip
    with (tmp_path / "stderr").open("w") as stderr:
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr)
    try:
        port = read_listening_port(process, 60)
        assert port is not None, (tmp_path / "stderr").read_text()
        yield Workers(process, port, trace_path)
    finally:
        stop_process(process)
        if process.stdout:
            process.stdout.close()


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) has stopped serving.
    with Path(f"/proc/{pid}/stat").open() as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_two_workers_share_one_port_and_one_metrics_endpoint(
    tmp_path: Path, recording: Recording
) -> None:
    stream_ids = [f"w-{i}" for i in range(16)]  # on one worker alone: 1 in 32,768
    with redis_server() as server, workers(tmp_path, server, "--metrics-port", "0") as w:
        assert (tmp_path / "stderr").read_text() == ""
        listening = [
            next(r for r in w.worker_trace(i) if r["event"] == "producer_listening")
            for i in range(1, WORKERS + 1)
        ]
        assert {r["port"] for r in listening} == {w.port}  # --port 0: one port for both
        results = concurrent_replies([w.target], recording, CASE, stream_ids, deadline_s=30)
        assert [r["status"] for r in results] == ["complete"] * len(stream_ids)
        wait_for(lambda: set(w.finals()) == set(stream_ids))
        served = {sid: w.served_by(sid) for sid in stream_ids}
        assert all(len(by) == 1 for by in served.values()), served
        assert {by[0] for by in served.values()} == {1, 2}, "one worker took every stream"
        metrics_port = next(r["port"] for r in w.trace() if r["event"] == "metrics_listening")
        summed = samples(exposition(metrics_port))
        ended = ("replywire_streams_ended_total", (("outcome", "completed"), ("reason", "")))
        assert summed[ended] == len(stream_ids)
        assert summed[("replywire_workers_running", ())] == WORKERS
        chunks = summed[("replywire_chunks_written_total", ())]
        w.process.send_signal(signal.SIGTERM)
        assert w.process.wait(timeout=60) == 0
        stopped = [w.worker_trace(i)[-1] for i in range(1, WORKERS + 1)]
    assert [r["event"] for r in stopped] == ["producer_stopped"] * WORKERS
    assert sum(r["streams_completed"] for r in stopped) == len(stream_ids)
    assert sum(r["chunks_written"] for r in stopped) == chunks
    # The trace commands read the workers' files with the parent's, from the folder.
    joined = subprocess.run(
        [sys.executable, "-m", "replywire", "join-traces", str(tmp_path), "--stream-id", "w-0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    records = [json.loads(line) for line in joined.stdout.splitlines()]
    assert [r["to_state"] for r in records if r["event"] == "state_changed"][-1] == "completed"


def test_a_stream_cut_on_one_worker_resumes_on_the_other_through_the_redis_log(
    tmp_path: Path,
) -> None:
    """The proxy resets the consumer's first connection mid-stream; its resume opens a new
    connection, which the kernel gives either worker: tried again (a new stream id) until
    one lands on the other worker, which attaches to the reply the first one logged."""
    with redis_server() as server, workers(tmp_path, server, "--log-level", "debug") as w:
        for attempt in range(16):
            stream_id = f"moved-{attempt}"
            result_path = tmp_path / f"{stream_id}.json"
            with (
                ResetProxy(w.port, None, reset_after_s=1.0) as proxy,
                consumer_process(
                    tmp_path, proxy.target, "--case", CASE, "--chunk-interval-ms", "300",
                    "--resume-attempts", "8", "--stream-id", stream_id,
                    "--result", str(result_path),
                ) as consumer,
            ):  # fmt: skip
                assert consumer.wait(timeout=60) == 0
            assert proxy.reset_done
            if len(w.served_by(stream_id)) == WORKERS:
                break
        else:
            pytest.fail("16 resumes all landed on the worker that began their stream")
        result = json.loads(result_path.read_text())
        first = next(
            i for i in range(1, WORKERS + 1)
            if any(r.get("input") == "verify" for r in w.worker_trace(i)
                   if r.get("stream_id") == stream_id)
        )  # fmt: skip
        other = WORKERS + 1 - first
        resumed = [r for r in w.worker_trace(other) if r.get("stream_id") == stream_id]
    assert result["status"] == "complete" and result["stats"]["reconnects"] >= 1
    attached = [r for r in resumed if r.get("input") == "attach"]
    assert len(attached) == 1 and attached[0]["resume_after"] >= 1
    assert resumed[-1]["to_state"] == "completed"


def test_sigterm_drains_every_worker(tmp_path: Path, recording: Recording) -> None:
    stream_ids = [f"d-{i}" for i in range(8)]
    with redis_server() as server, workers(tmp_path, server, "--shutdown-grace-s", "0.5") as w:
        with consumer_process(
            tmp_path, w.target, "--case", CASE, "--chunk-interval-ms", "1000",
            "--stream-id", "slow", "--resume-attempts", "0",
        ):  # fmt: skip
            wait_for(lambda: len(w.served_by("slow")) == 1, timeout=30)
            results = concurrent_replies([w.target], recording, CASE, stream_ids, deadline_s=30)
            assert [r["status"] for r in results] == ["complete"] * len(stream_ids)
            pids = w.worker_pids()
            w.process.send_signal(signal.SIGTERM)
            assert w.process.wait(timeout=60) == 0
        finals = w.finals()
        parent = w.trace()
    assert not any(running(pid) for pid in pids)
    assert set(finals) == {*stream_ids, "slow"}
    assert all(len(states) == 1 for states in finals.values()), finals
    assert finals["slow"] == ["shutdown"]  # 1 s a chunk: past the grace
    exits = [r for r in parent if r["event"] == "worker_exited"]
    assert sorted((r["worker"], r["exit_code"], r["asked"]) for r in exits) == [
        (1, 0, True), (2, 0, True),
    ]  # fmt: skip
    assert parent[-1]["event"] == "producer_stopped" and parent[-1]["exit_code"] == 0


def test_a_worker_killed_stops_the_others_and_the_parent_says_so(tmp_path: Path) -> None:
    with redis_server() as server, workers(tmp_path, server) as w:
        pids = w.worker_pids()
        assert run_consumer(w.target, "--case", CASE).returncode == 0
        os.kill(pids[0], signal.SIGKILL)
        assert w.process.wait(timeout=60) == 1
        parent = w.trace()
    assert not any(running(pid) for pid in pids)
    died = next(r for r in parent if r["event"] == "worker_exited" and r["worker"] == 1)
    assert died["level"] == "error" and died["exit_code"] == -signal.SIGKILL
    assert not died["asked"]
    stopped = next(r for r in parent if r["event"] == "worker_exited" and r["worker"] == 2)
    assert stopped["asked"] and stopped["exit_code"] == 0
    assert parent[-1]["event"] == "producer_stopped" and parent[-1]["exit_code"] == 1
    lines = (tmp_path / "stderr").read_text().splitlines()
    assert lines == [f"producer: worker 1 (pid {pids[0]}) exited with -9; stopping the others"]


def test_workers_outlive_no_parent_killed(tmp_path: Path) -> None:
    """SIGKILL leaves the parent no chance to forward anything: each worker hears its stdin
    pipe close and stops as on SIGTERM."""
    with redis_server() as server, workers(tmp_path, server) as w:
        pids = w.worker_pids()
        os.kill(w.process.pid, signal.SIGKILL)
        w.process.wait(timeout=10)
        wait_for(lambda: not any(running(pid) for pid in pids), timeout=30)
        ends = [w.worker_trace(i)[-1]["event"] for i in range(1, WORKERS + 1)]
    assert ends == ["producer_stopped"] * WORKERS
