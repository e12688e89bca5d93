"""Paced streams on a producer with ``--workers``: 1 and 2 worker processes on one port.

``bench.paced``'s workload (its copy of the recording, its client, ``bench.paced_client``):
N streams at once, each a reply paced one 13-character frame a chunk, ``interval_ms``
apart, against a producer with a Redis reply log (a private server, ``tests.redis_server``:
workers need one), started ``--workers W`` (W = 1: the one process, with the same log). SO_REUSEPORT
spreads connections, not streams, so the client opens its streams over ``CHANNELS``
connections (every row alike). Worker i is pinned to CPU (i - 1) mod the CPUs, the client
to the last CPU (on two cores, the second worker shares the client's); Redis and the
parent are not pinned. Per row, medians over the rounds: the added inter-chunk latency's
p50 / p99 / max at the consumer (``bench.paced_client`` says how it is measured), the CPU
per chunk of the workers (summed) and of the client, Redis commands per chunk (the
server's ``total_commands_processed`` over the round, divided by the chunks read: every
write, read and lease refresh of the log) and Redis' own CPU per chunk (its ``INFO``
``used_cpu_user`` + ``used_cpu_sys`` over the round), and whether the pace held (every stream
complete, p99 < 20 ms).

    BENCH_SIZE=tiny|full .venv/bin/python -m bench.workers [--streams 100,400]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import redis

from bench.common import Size, bench_size, can_pin, median, pin, start_server
from bench.paced import CASE_ID, HELD_MS, paced_recording, summary
from replywire.children import stop_producer
from tests.processes import read_trace, wait_for
from tests.redis_server import redis_server

#: Connections the client spreads its streams over.
CHANNELS: Final = 16


@dataclass(frozen=True)
class WorkersPlan:
    workers: tuple[int, ...]
    streams: tuple[int, ...]
    content_frames: int
    interval_ms: int
    rounds: int
    ramp_s: float

    @property
    def stream_s(self) -> float:
        return self.content_frames * self.interval_ms / 1000


PLANS: Final[dict[Size, WorkersPlan]] = {
    "tiny": WorkersPlan((1, 2), (4,), 40, 20, 1, 0.2),
    # bench.paced's pace: 300 frames 40 ms apart, opened over 3 s.
    "full": WorkersPlan((1, 2), (100, 500, 1_000), 300, 40, 1, 3.0),
}


def client_cpu() -> int:
    return (os.cpu_count() or 1) - 1


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    port: int
    pids: list[int]


@contextmanager
def producer(
    workers: int, workdir: Path, recording: Path, sha256: str, reply_log: str
) -> Iterator[Running]:
    """A fresh producer, ``--workers workers``, its worker processes pinned."""
    trace = workdir / f"workers-{workers}.jsonl"
    trace.unlink(missing_ok=True)
    spread = ["--workers", str(workers)] if workers > 1 else []
    command = [
        sys.executable, "-m", "replywire.producer", "--port", "0", *spread,
        "--reply-log", reply_log, "--recording", str(recording), "--recording-sha256", sha256,
        "--log-format", "json", "--trace-file", str(trace),
    ]  # fmt: skip
    process, port = start_server(command, f"the producer (--workers {workers})", 60)
    try:
        pids = [process.pid]
        if workers > 1:
            wait_for(lambda: read_trace(trace) != [])
            pids = [r["pid"] for r in read_trace(trace) if r["event"] == "worker_started"]
        if can_pin():
            for index, pid in enumerate(pids):
                pin(pid, index % (client_cpu() + 1))
        yield Running(process, port, pids)
    finally:
        stop_producer(process)
        if process.stdout is not None:
            process.stdout.close()


def redis_figures(url: str) -> tuple[int, float]:
    """The server's commands processed so far and its CPU seconds (user + system)."""
    with redis.Redis.from_url(url) as client:
        stats, cpu = client.info("stats"), client.info("cpu")
    return int(stats["total_commands_processed"]), float(cpu["used_cpu_user"]) + float(
        cpu["used_cpu_sys"]
    )


def one_round(
    workers: int, n: int, plan: WorkersPlan, *, workdir: Path, recording: tuple[Path, str],
    url: str,
) -> dict[str, Any]:  # fmt: skip
    path, sha256 = recording
    with producer(workers, workdir, path, sha256, url) as running:
        commands, cpu_s = redis_figures(url)
        command = [
            sys.executable, "-m", "bench.paced_client", "--kind", "replywire",
            "--target", f"127.0.0.1:{running.port}",
            *(arg for pid in running.pids for arg in ("--server-pid", str(pid))),
            "--streams", str(n), "--interval-ms", str(plan.interval_ms),
            "--ramp-s", str(plan.ramp_s), "--case", CASE_ID, "--channels", str(CHANNELS),
            "--recording", str(path), "--recording-sha256", sha256,
            "--trace", str(workdir / "workers-consumer.trace.jsonl"),
        ]  # fmt: skip
        timeout = 3 * (plan.stream_s + plan.ramp_s) + 60 + n / 20
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(
                f"bench.paced_client (workers {workers}, {n}): {done.stderr[-2000:]}"
            )
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        commands_after, cpu_after_s = redis_figures(url)
        result["redis_commands"] = commands_after - commands - 2  # less the two INFO
        result["redis_cpu_s"] = cpu_after_s - cpu_s
    with redis.Redis.from_url(url) as client:
        client.flushdb()  # the next round starts from an empty log
    return result


def row(rounds: list[dict[str, Any]], workers: int) -> dict[str, Any]:
    figures = summary(rounds)
    per_chunk = [r["redis_commands"] / r["chunks"] for r in rounds if r["chunks"]]
    cpu = [r["redis_cpu_s"] / r["chunks"] * 1e6 for r in rounds if r["chunks"]]
    return {
        "workers": workers,
        **figures,
        "redis_commands_per_chunk": round(median(per_chunk), 2) if per_chunk else None,
        # Redis' own CPU (its INFO) per chunk read: the whole round's, warm-up included.
        "redis_cpu_us_per_chunk": round(median(cpu), 2) if cpu else None,
    }


def run_plan(plan: WorkersPlan, workdir: Path) -> dict[str, Any]:
    recording = paced_recording(workdir, plan.content_frames)
    rows: list[dict[str, Any]] = []
    with redis_server() as server:
        for n in plan.streams:
            rounds: dict[int, list[dict[str, Any]]] = {w: [] for w in plan.workers}
            for _ in range(plan.rounds):  # the worker counts alternated, round by round
                for workers in plan.workers:
                    rounds[workers].append(
                        one_round(
                            workers, n, plan, workdir=workdir, recording=recording, url=server.url
                        )
                    )
            rows += [row(rounds[w], w) for w in plan.workers]
    return {
        "case": CASE_ID,
        "content_frames": plan.content_frames,
        "interval_ms": plan.interval_ms,
        "rounds": plan.rounds,
        "channels": CHANNELS,
        "cpus": os.cpu_count(),
        "rows": rows,
    }


def run(size: Size) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="replywire-workers-bench-") as workdir:
        return run_plan(PLANS[size], Path(workdir))


def section(results: dict[str, Any]) -> list[str]:
    """The workers table of results.md."""
    head = [
        f"## Workers (paced streams on `--workers` 1 and 2, a Redis reply log; "
        f"{results['content_frames']} frames {results['interval_ms']} ms apart, over "
        f"{results['channels']} connections; median of {results['rounds']} rounds)",
        "",
        "Worker i on CPU (i - 1) mod the CPUs, the client on the last: on "
        f"{results['cpus']} CPUs the second worker shares the client's core. Held: every "
        f"stream complete and p99 added latency under {HELD_MS:g} ms (bench/workers.py).",
        "",
        "| workers | streams | p50 ms | p99 ms | max ms | workers µs/chunk | client µs/chunk "
        "| Redis commands/chunk | Redis µs/chunk | failures | held |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines = [
        f"| {r['workers']} | {r['streams']:,} | {r['added_ms_p50']} | {r['added_ms_p99']} | "
        f"{r['added_ms_max']} | {r['server_cpu_us_per_chunk']} | {r['client_cpu_us_per_chunk']} "
        f"| {r['redis_commands_per_chunk']} | {r['redis_cpu_us_per_chunk']} | "
        f"{', '.join(f'{k} {v}' for k, v in r['failures'].items()) or '-'} | "
        f"{'yes' if r['held'] else 'no'} |"
        for r in results["rows"]
    ]
    return [*head, *lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", help="the Ns, comma-separated (default: the size's plan)")
    args = parser.parse_args()
    plan = PLANS[bench_size()]
    if args.streams:
        plan = dataclasses.replace(plan, streams=tuple(int(n) for n in args.streams.split(",")))
    with tempfile.TemporaryDirectory(prefix="replywire-workers-bench-") as workdir:
        print(json.dumps(run_plan(plan, Path(workdir)), indent=2))


if __name__ == "__main__":
    main()
