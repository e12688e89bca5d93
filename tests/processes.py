"""Real processes for cross-process tests, started through the Makefile's entry points.

Every wait is bounded; only the processes a test started are ever signalled,
by their pid. Traces go to files so a test can read them while the process runs.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from replywire.children import read_listening_port, stop_process
from replywire.consumer.client import stream_reply
from replywire.consumer.options import StreamOptions
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 20.0


def read_trace(path: Path) -> list[dict[str, Any]]:
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:  # a line still being written
                continue
    return records


def wait_for(
    predicate: Callable[[], bool], *, timeout: float = 15.0, interval: float = 0.02
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"condition not met within {timeout} s")


@dataclass
class Producer:
    process: subprocess.Popen[bytes]
    port: int
    trace_path: Path

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def trace(self) -> list[dict[str, Any]]:
        return read_trace(self.trace_path)

    def stream_trace(self, stream_id: str) -> list[dict[str, Any]]:
        return [r for r in self.trace() if r.get("stream_id") == stream_id]

    def logged(self, *events: str) -> bool:
        """Whether the trace has a record of any of ``events`` yet."""
        return any(r["event"] in events for r in self.trace())

    def released_upstream(self) -> bool:
        """Whether the producer closed the provider's stream and settled (or kept) the
        call's ledger entry."""
        return self.logged("provider_stream_closed") and self.logged(
            "budget_settled", "budget_reservation_kept"
        )

    def states(self, stream_id: str) -> list[tuple[str | None, str]]:
        return [
            (r["from_state"], r["to_state"])
            for r in self.stream_trace(stream_id)
            if r["event"] == "state_changed"
        ]


@contextmanager
def producer(
    tmp_path: Path,
    *args: str,
    name: str = "producer",
    env: dict[str, str] | None = None,
    prefix: Sequence[str] = (),
) -> Iterator[Producer]:
    """``python -m producer --port 0 ...``; yields once it prints its port; stops it after.
    ``prefix`` runs it through a command, e.g. on a test host (tests/netns.py)."""
    trace_path = tmp_path / f"{name}.trace.jsonl"
    # Records written at the end of each event-loop pass (not held the default 5 ms). A
    # record logged in the pass that sends an RPC's status may still be held when the
    # consumer has the status: wait for it (wait_for), or read it once the producer stopped.
    command = [sys.executable, "-m", "replywire.producer", "--port", "0", "--log-format", "json",
               "--trace-flush-ms", "0", *args]  # fmt: skip
    with trace_path.open("w") as trace_file:
        process = subprocess.Popen(
            [*prefix, *command],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=trace_file,
            env={**os.environ, **(env or {})},
        )
    try:
        port = _read_port(process)
        yield Producer(process, port, trace_path)
    finally:
        stop_process(process)
        if process.stdout:
            process.stdout.close()


@dataclass
class FakeGeminiProcess:
    process: subprocess.Popen[bytes]
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.base_url}/_fake/log", timeout=10) as response:
            entries: list[dict[str, Any]] = json.loads(response.read())
        return entries


@contextmanager
def fake_gemini(
    api_key: str, *args: str, prefix: Sequence[str] = ()
) -> Iterator[FakeGeminiProcess]:
    """``python -m harness.fake_gemini --port 0``: a real HTTP server speaking Gemini's SSE
    (``prefix`` runs it through a command, e.g. on a test host; ``args``: its flags)."""
    command = [sys.executable, "-m", "harness.fake_gemini", "--port", "0", "--api-key", api_key]
    process = subprocess.Popen(
        [*prefix, *command, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield FakeGeminiProcess(process, _read_port(process))
    finally:
        stop_process(process)
        if process.stdout:
            process.stdout.close()


@contextmanager
def gemini_replicas(
    tmp_path: Path, fake: FakeGeminiProcess, reply_log: str, *flags: str, api_key: str
) -> Iterator[tuple[Producer, Producer]]:
    """Replicas a and b of the Gemini source (the fake's slow drip) sharing the reply log
    ``reply_log``, each with its own file ledger (``a/ledger.json``, ``b/ledger.json``), a
    detach grace of two minutes, traces at debug; ``flags`` for both."""
    with ExitStack() as stack:
        replicas = []
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            args = (
                "--source", "gemini", "--gemini-base-url", fake.base_url,
                "--model", "fake-slow-drip",
                "--ledger", str(tmp_path / name / "ledger.json"), "--budget-usd", "1.0",
                "--reply-log", reply_log, "--detach-grace-s", REPLICA_GRACE_S,
                "--log-level", "debug", *flags,
            )  # fmt: skip
            running = producer(tmp_path, *args, name=name, env={"GEMINI_API_KEY": api_key})
            replicas.append(stack.enter_context(running))
        yield replicas[0], replicas[1]


#: ``gemini_replicas``' detach grace: no reply is abandoned within a test.
REPLICA_GRACE_S = "120"


def _read_port(process: subprocess.Popen[bytes]) -> int:
    """Wait (bounded) for the child's ``listening on HOST:PORT`` line."""
    port = read_listening_port(process, START_TIMEOUT_S)
    if port is None:
        raise RuntimeError(f"the child did not print its port (exit code {process.poll()})")
    return port


@dataclass
class ConsumerRun:
    returncode: int
    result: dict[str, Any]
    trace: list[dict[str, Any]] = field(default_factory=list)

    def states(self, component: str) -> list[tuple[str, str]]:
        return [
            (r["from_state"], r["to_state"])
            for r in self.trace
            if r["event"] == "state_changed" and r.get("component") == component
        ]


def consumer_command(target: str, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "consumer",
        "stream",
        "--target",
        target,
        "--log-format",
        "json",
        "--trace-flush-ms",
        "0",
        *args,
    ]


def run_consumer(
    target: str, *args: str, timeout: float = 60.0, prefix: Sequence[str] = ()
) -> ConsumerRun:
    """``python -m consumer stream ...`` to completion (bounded), through ``prefix``."""
    done = subprocess.run(
        [*prefix, *consumer_command(target, *args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    result = json.loads(done.stdout) if done.stdout.strip() else {}
    trace = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    return ConsumerRun(done.returncode, result, trace)


@contextmanager
def consumer_process(
    tmp_path: Path, target: str, *args: str, prefix: Sequence[str] = ()
) -> Iterator[subprocess.Popen[str]]:
    """A consumer left running (for kill tests); its stdout and trace go to files."""
    out = (tmp_path / "consumer.out").open("w")
    err = (tmp_path / "consumer.trace.jsonl").open("w")
    process = subprocess.Popen(
        [*prefix, *consumer_command(target, *args)], cwd=ROOT, stdout=out, stderr=err, text=True
    )
    try:
        yield process
    finally:
        stop_process(process, signal.SIGKILL)
        out.close()
        err.close()


def concurrent_replies(
    targets: Sequence[str],
    recording: Recording,
    case_id: str,
    stream_ids: Sequence[str],
    *,
    deadline_s: float,
    interval_ms: Callable[[int], int] = lambda index: 0,
    **stream_options: Any,
) -> list[dict[str, Any]]:
    """One in-process consumer per stream id, all at once (spread over ``targets``), each
    streaming the recorded case one frame per chunk (the ``index``-th every
    ``interval_ms(index)``; ``stream_options`` go to its ``StreamOptions``); their result
    documents, in order. Their traces are dropped: the producers' traces are what these
    tests read."""
    log = structlog.wrap_logger(
        None, wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL)
    )
    case = recording.case(case_id)

    async def one(index: int, stream_id: str) -> dict[str, Any]:
        request = ReplyRequest(
            case_id=case.case_id,
            binding=case.binding,
            wire=WireFormat.LENGTH_PREFIXED,
            plan=ChunkPlan.parse("frame"),
            stream_id=stream_id,
            chunk_interval_ms=interval_ms(index),
        )
        options = StreamOptions(
            target=targets[index % len(targets)], deadline_s=deadline_s, **stream_options
        )
        result = await stream_reply(request, options, logger=log)
        return result.to_dict()

    async def all_of_them() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(one(i, sid) for i, sid in enumerate(stream_ids))))

    return asyncio.run(all_of_them())


def consumer_on_a_pty(
    argv: list[str], *, rows: int, columns: int, timeout: float = 60.0, module: str = "consumer"
) -> tuple[int, bytes]:
    """``python -m consumer ARGV`` (or ``python -m MODULE ARGV``: ``replywire``'s commands
    read what the consumer wrote) with stdin, stdout and stderr one pseudo-terminal of
    ``columns`` x ``rows``: its exit code and every byte it wrote to the terminal. Read until
    the process closes its side (or exits), bounded by ``timeout``; stopped by pid after."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": str(rows)}
    process = subprocess.Popen(
        [sys.executable, "-m", module, *argv],
        cwd=ROOT,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    written = bytearray()
    ends_at = time.monotonic() + timeout
    try:
        while (left := ends_at - time.monotonic()) > 0:
            ready, _, _ = select.select([leader], [], [], min(left, 0.5))
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: every writer closed its side
                break
            if not chunk:
                break
            written += chunk
        code = process.wait(timeout=max(ends_at - time.monotonic(), 1))
    finally:
        if process.poll() is None:
            stop_process(process)
        os.close(leader)
    return code, bytes(written)
