"""What OpenTelemetry tracing costs: sequential replywire streams, tracing off against on.

Two sides, alternated round by round (the order rotated), at one chunking (one frame per
chunk), both sides' traces at info as in ``bench.streams``:

* ``replywire (tracing off)``: the consumer with no tracing (``runtime.tracing.active()``
  is None) → a producer started without ``--otlp-endpoint``: the default, nothing of
  OpenTelemetry imported in the producer;
* ``replywire (tracing on)``: the consumer with tracing on for the round
  (``start_tracing``, as ``--otlp-endpoint`` does) → a producer started with
  ``--otlp-endpoint``; both export their spans over OTLP/gRPC to a collector of its own
  process (``harness.otlp_collector``, unpinned), which counts them and keeps nothing.

Each process's CPU per stream (the consumer: this process; the producer: its child), and
the ratio on / off of each, after one warm-up stream a round. The exporters batch
(OpenTelemetry's ``BatchSpanProcessor`` with its defaults: a batch every 5 s or 512 spans):
so that a round's export is counted in that round, the consumer flushes its spans before
its CPU is read (before the wait below), and every round, on both sides, waits the
producer's schedule and a second (``Plan.settle_s``) before reading the producer's. At the
tiny size the producers batch every 200 ms (``OTEL_BSP_SCHEDULE_DELAY``), not every 5 s:
the tiny run checks the table, its figures are noise.

    BENCH_SIZE=tiny|full .venv/bin/python -m bench.tracing_cost
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench.common import CLIENT_CPU, SERVER_CPU, Size, bench_size, pin, pinning, ratio
from bench.streams import (
    Round,
    Server,
    alternate_rounds,
    consumer_trace,
    replywire_client,
    replywire_once,
    request_for,
    summary,
)
from replywire.children import start_producer, stop_process, stop_producer
from replywire.consumer.options import StreamOptions
from replywire.runtime.recording_file import DEFAULT_RECORDING_PATH
from replywire.runtime.tracing import TracingConfig, start_tracing, stop_tracing
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire.chunking import ChunkPlan

CHUNKING: Final = "frame"
OFF: Final = "replywire (tracing off)"
ON: Final = "replywire (tracing on)"
#: OpenTelemetry's default batch schedule (OTEL_BSP_SCHEDULE_DELAY): 5 s.
DEFAULT_SCHEDULE_MS: Final = 5000
SCHEDULE_ENV: Final = "OTEL_BSP_SCHEDULE_DELAY"
COLLECTOR_START_S: Final = 10.0


@dataclass(frozen=True)
class Plan:
    streams: int
    rounds: int
    #: The producers' batch schedule (their ``OTEL_BSP_SCHEDULE_DELAY``).
    schedule_ms: int = DEFAULT_SCHEDULE_MS

    @property
    def settle_s(self) -> float:
        """How long a round waits for the producer's batch: its schedule and a second."""
        return self.schedule_ms / 1000 + 1.0


PLANS: Final[dict[Size, Plan]] = {"tiny": Plan(3, 1, 200), "full": Plan(200, 3)}


@dataclass
class Collector:
    process: subprocess.Popen[bytes]
    port: int
    summary_file: Path

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def counts(self) -> dict[str, int]:
        """What it was sent (after it stopped)."""
        if not self.summary_file.exists():
            return {}
        found: dict[str, int] = json.loads(self.summary_file.read_text(encoding="utf-8"))
        return found


@contextmanager
def collector(workdir: Path) -> Iterator[Collector]:
    """``harness.otlp_collector`` as a child process, on a free loopback port."""
    ready, summary_file = workdir / "collector.port", workdir / "collector.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "harness.otlp_collector", "--port", "0",
         "--ready-file", str(ready), "--summary-file", str(summary_file)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    found = Collector(process, 0, summary_file)
    try:
        deadline = time.monotonic() + COLLECTOR_START_S
        while not ready.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("harness.otlp_collector did not start")
            time.sleep(0.05)
        found.port = int(ready.read_text(encoding="utf-8"))
        yield found
    finally:
        stop_process(process)


@contextmanager
def producer(workdir: Path, name: str, schedule_ms: int, *flags: str) -> Iterator[Server]:
    trace = workdir / f"producer-{name}.trace.jsonl"
    process, port = start_producer(
        trace, DEFAULT_RECORDING_PATH, "info", *flags, env={SCHEDULE_ENV: str(schedule_ms)}
    )
    pin(process.pid, SERVER_CPU)
    try:
        yield Server(f"producer ({name})", process, port)
    finally:
        stop_producer(process)


@dataclass
class Exported:
    """The consumer's own export counts, over its tracing-on rounds."""

    spans: int = 0
    dropped: int = 0


async def tracing_round(
    server: Server,
    request: ReplyRequest,
    plan: Plan,
    endpoint: str | None,
    exported: Exported,
) -> Round:
    """``plan.streams`` sequential replywire streams; with ``endpoint``, the consumer's
    tracing on for the round, its spans flushed to the collector before the CPU is read."""
    tracing = (
        None if endpoint is None else start_tracing(TracingConfig("replywire-consumer", endpoint))
    )
    try:
        async with replywire_client(StreamOptions(target=server.target)) as client:
            await replywire_once(client, request)  # warm-up: the channel, the first span
            cpu, server_cpu, started = time.process_time(), server.cpu_s(), time.perf_counter()
            n = plan.streams
            outcomes = [await replywire_once(client, request) for _ in range(n)]
            wall = time.perf_counter() - started
            if tracing is not None:
                tracing.provider.force_flush(int(plan.settle_s * 1000))
            client_cpu = time.process_time() - cpu  # its own export flushed: not the wait
            await asyncio.sleep(plan.settle_s)  # the producer's batch, on both sides
            return Round(n, wall, client_cpu, server.cpu_s() - server_cpu, outcomes)
    finally:
        if tracing is not None:
            exported.spans += tracing.counts.exported
            exported.dropped += tracing.counts.dropped
            stop_tracing()


def on_over_off(off: dict[str, Any], on: dict[str, Any]) -> dict[str, Any]:
    return {
        "sides": {OFF: off, ON: on},
        "tracing_on_over_off_consumer_cpu": ratio(
            on["client_cpu_ms_per_stream"], off["client_cpu_ms_per_stream"]
        ),
        "tracing_on_over_off_producer_cpu": ratio(
            on["server_cpu_ms_per_stream"], off["server_cpu_ms_per_stream"]
        ),
        "tracing_on_over_off_streams_per_s": ratio(on["streams_per_s"], off["streams_per_s"]),
    }


async def run_all(plan: Plan, workdir: Path) -> dict[str, Any]:
    pin(os.getpid(), CLIENT_CPU)
    trace = consumer_trace(workdir / "consumer.trace.jsonl")
    request = request_for(ChunkPlan.parse(CHUNKING))
    exported = Exported()
    try:
        with collector(workdir) as sink:
            flags = ("--otlp-endpoint", sink.endpoint)
            with (
                producer(workdir, "tracing off", plan.schedule_ms) as off,
                producer(workdir, "tracing on", plan.schedule_ms, *flags) as on,
            ):

                def side(server: Server, endpoint: str | None) -> Callable[[], Awaitable[Round]]:
                    return lambda: tracing_round(server, request, plan, endpoint, exported)

                sides = {OFF: side(off, None), ON: side(on, sink.endpoint)}
                runs = await alternate_rounds(sides, plan.rounds)
        counts = sink.counts()  # the collector stopped: its counts are written
    finally:
        trace.close()
    row = on_over_off(summary(runs[OFF]), summary(runs[ON]))
    return {
        "case": request.case_id,
        "wire": "lp",
        "chunking": CHUNKING,
        "rounds": plan.rounds,
        "pinning": pinning(),
        "export_settle_s": plan.settle_s,
        "producer_schedule_ms": plan.schedule_ms,
        **row,
        "consumer_spans_exported": exported.spans,
        "consumer_spans_dropped": exported.dropped,
        "collector_spans": counts.get("spans"),
        "collector_calls": counts.get("calls"),
    }


def run(size: Size) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="replywire-bench-tracing-") as workdir:
        return asyncio.run(run_all(PLANS[size], Path(workdir)))


def main() -> None:
    print(json.dumps(run(bench_size()), indent=2))


if __name__ == "__main__":
    main()
