"""Paced streams: the workload a model's reply is, replywire against bare gRPC and both floors.

N streams at once (100, 1,000, 3,000 at the full size), each a recorded reply delivered at a
model's pace: one frame of a few tokens (the recording's 13-character deltas) per chunk,
``chunk_interval_ms`` apart, a few hundred chunks, over ten seconds a stream. Six sides,
alternated round by round, each round two fresh processes (``bench.paced_client`` next to a
fresh server: a Python process keeps the memory an earlier round grew to):

* ``replywire``: the replywire consumer (``ReplyClient``, one shared channel, its trace at
  info into a file) → the replywire producer (its trace at info), which paces the stream;
* ``bare pair``: a bare grpc.aio client → ``bench.bare_server``, pacing the same way, with
  the producer's gRPC server options (``--producer-options``);
* ``checks only``: the bare client running each chunk through the consumer's sans-IO core →
  the bare server (the consumer's floor);
* ``records only``: the bare client → the bare server writing the producer's four records
  per stream (the producer's floor);
* ``replywire, producer on uvloop``: the replywire pair, its producer run with
  ``--event-loop uvloop`` (bench/README.md, "gRPC's own gap");
* ``sse stack``: the same deltas as server-sent events over HTTP/1.1, the stack a reply is
  often served with: httpx and httpx-sse (``bench.sse_client``: each event parsed, its
  sequence checked) → uvicorn, one worker, its defaults (uvloop, httptools), Starlette and
  sse-starlette (``bench.sse_server``), pacing the same way; its versions pinned in
  bench/requirements.txt, never in the product's.

The reply: the recording's ``utf8-write`` reply with its answer repeated until the reply has
the plan's number of content frames, in a hashed copy of the recording (same bindings, the
producer's ``--recording`` / ``--recording-sha256``, the bare server's too), so both servers
serve the same bytes. Reported per side: CPU per chunk of the client and of the server
(each process's CPU clock over the streams, divided by the chunks read), p50/p99 of the
added inter-chunk latency at the consumer (``bench.paced_client`` says how it is measured),
RSS per open stream of each process ((RSS with every stream open - RSS idle) / N), and the
largest N the replywire pair, the bare pair and the SSE pair hold with p99 added latency
under 20 ms (a bounded bisection between the table's largest N that held and its smallest
that did not, the pairs' probes alternated).
The servers run pinned to one CPU, the clients to the other (``bench.common.pin``).

    BENCH_SIZE=tiny|full .venv/bin/python -m bench.paced
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench.common import (
    CHECKS_ONLY,
    RECORDS_ONLY,
    SERVER_CPU,
    Size,
    bench_size,
    median,
    middle,
    pin,
    pinning,
    process_cpu_s,
    ratio,
    start_server,
    threads_cpu_s,
)
from replywire.children import start_producer, stop_producer
from replywire.runtime.recording_file import DEFAULT_RECORDING_PATH
from replywire.shared.frames import DELTA_CHARS

CASE_ID: Final = "utf8-write"
#: The added latency a pace is held to: p99 under this many milliseconds.
HELD_MS: Final = 20.0
#: The SSE pair: httpx and httpx-sse → uvicorn, Starlette, sse-starlette.
SSE_STACK: Final = "sse stack"
#: The replywire pair with its producer on uvloop (``--event-loop uvloop``).
ON_UVLOOP: Final = "replywire, producer on uvloop"
#: Each side: (its client kind, its server kind).
SIDES: Final = {
    "replywire": ("replywire", "producer"),
    ON_UVLOOP: ("replywire", "producer"),
    "bare pair": ("bare", "bare"),
    CHECKS_ONLY: ("checks", "bare"),
    RECORDS_ONLY: ("bare", "records"),
    SSE_STACK: ("sse", "sse"),
}
#: A side's server flags beyond its kind's.
SIDE_FLAGS: Final = {ON_UVLOOP: ("--event-loop", "uvloop")}
#: The pairs whose largest paced N is searched for.
SEARCHED: Final = ("replywire", "bare pair", SSE_STACK)
#: The CPU an SSE event may take its client, for a round's bound (``one_round``).
SSE_CPU_BOUND_S: Final = 0.001
#: The sides the pure pass runs again (``pure_pass``): the SSE stack is the same code in
#: either build, and the producer on uvloop differs from ours by its loop alone.
PURE_SIDES: Final = tuple(side for side in SIDES if side not in {SSE_STACK, ON_UVLOOP})


@dataclass(frozen=True)
class PacedPlan:
    streams: tuple[int, ...]
    content_frames: int
    interval_ms: int
    rounds: int
    search_steps: int
    #: The streams open spread over this long (``bench.paced_client``: not all in step).
    ramp_s: float

    @property
    def stream_s(self) -> float:
        return self.content_frames * self.interval_ms / 1000


PLANS: Final[dict[Size, PacedPlan]] = {
    "tiny": PacedPlan((4,), 40, 20, 1, 1, 0.2),
    # 300 frames 40 ms apart (25 a second): 12 s a stream; opened over its first 3 s.
    "full": PacedPlan((100, 1_000, 3_000), 300, 40, 3, 4, 3.0),
}


def paced_recording(workdir: Path, content_frames: int) -> tuple[Path, str]:
    """A copy of the recording whose ``CASE_ID`` reply has ``content_frames`` content frames:
    its answer repeated (the same bindings: a reply is not part of one). Its path and hash."""
    document = json.loads(DEFAULT_RECORDING_PATH.read_text(encoding="utf-8"))
    message = document["responses"][CASE_ID][0]["metadata"]["raw_message"]
    reply = json.loads(message["content"])
    answer, repeated = reply["answer"], reply["answer"]
    while len(json.dumps({**reply, "answer": repeated})) < content_frames * DELTA_CHARS:
        repeated += " " + answer
    content = json.dumps({**reply, "answer": repeated})
    # Cut to exactly the frames asked for: shorten the answer by what is over.
    over = len(content) - content_frames * DELTA_CHARS
    message["content"] = json.dumps({**reply, "answer": repeated[: len(repeated) - over]})
    raw = json.dumps(document, indent=1).encode("utf-8")
    path = workdir / "paced-recording.json"
    path.write_bytes(raw)
    return path, hashlib.sha256(raw).hexdigest()


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int


@contextmanager
def server(
    kind: str, workdir: Path, recording: Path, sha256: str, extra: tuple[str, ...] = ()
) -> Iterator[Server]:
    """A fresh server of ``kind``: the producer, the bare server, the records-only one, or
    the SSE server; ``extra``: more of its flags (``bench.grpc_gap``'s variants)."""
    flags = ["--recording", str(recording), "--recording-sha256", sha256, *extra]
    module = "bench.sse_server" if kind == "sse" else "bench.bare_server"
    if kind in {"bare", "records"}:  # with the producer's gRPC options: only the work differs
        flags.append("--producer-options")
    if kind == "records":
        flags += ["--trace-file", str(workdir / "paced-records-only.trace.jsonl")]
    if kind == "producer":
        trace = workdir / "paced-producer.trace.jsonl"
        process, port = start_producer(
            trace, recording, "info", "--recording-sha256", sha256, *extra
        )
    else:
        process, port = start_server([sys.executable, "-m", module, "--port", "0", *flags], module)
    pin(process.pid, SERVER_CPU)
    try:
        yield Server(process, port)
    finally:
        stop_producer(process)


def one_round(  # noqa: PLR0913 - a round is all of these
    side: str,
    n: int,
    plan: PacedPlan,
    workdir: Path,
    recording: Path,
    sha256: str,
    *,
    kinds: tuple[str, str] | None = None,
    server_flags: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A round of ``n`` paced streams of ``side``: a fresh server and a fresh client process
    (``kinds``: the client's and the server's kind when ``side`` is not one of ``SIDES``;
    ``server_flags``: more flags of the server)."""
    client_kind, server_kind = kinds or SIDES[side]
    flags = server_flags or SIDE_FLAGS.get(side, ())
    with server(server_kind, workdir, recording, sha256, flags) as running:
        threads_before = threads_cpu_s(running.process.pid)
        command = [
            sys.executable, "-m", "bench.paced_client", "--kind", client_kind,
            "--target", f"127.0.0.1:{running.port}", "--server-pid", str(running.process.pid),
            "--streams", str(n), "--interval-ms", str(plan.interval_ms),
            "--ramp-s", str(plan.ramp_s), "--case", CASE_ID,
            "--recording", str(recording), "--recording-sha256", sha256,
            "--trace", str(workdir / "paced-consumer.trace.jsonl"),
        ]  # fmt: skip
        # Bounded: a stream's length three times over, and time to start and open them; the
        # SSE client, CPU-bound past a few hundred streams (about 0.35 ms of CPU an event on
        # this machine), its events' CPU as well, or 3,000 of its streams would time out
        # rather than be measured late.
        timeout = 3 * (plan.stream_s + plan.ramp_s) + 60 + n / 20
        if client_kind == "sse":
            timeout += n * (plan.content_frames + 1) * SSE_CPU_BOUND_S
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"bench.paced_client ({side}, {n}): {done.stderr[-2000:]}")
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        result["server_cpu_total_s"] = process_cpu_s(running.process.pid)
        result["server_threads_cpu_s"] = threads_delta(
            threads_before, threads_cpu_s(running.process.pid)
        )
        return result


def threads_delta(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
) -> dict[str, list[float]]:
    """The server's user and system CPU seconds by thread name over a round's streams."""
    out: dict[str, list[float]] = {}
    for name, (user, system) in after.items():
        was_user, was_system = before.get(name, (0.0, 0.0))
        out[name] = [round(user - was_user, 3), round(system - was_system, 3)]
    return out


def per_stream_kib(rounds: list[dict[str, Any]], process: str) -> float | None:
    values = [
        (r["rss_open_kib"][process] - r["rss_idle_kib"][process]) / r["streams"]
        for r in rounds
        if r["rss_open_kib"] is not None
    ]
    return round(median(values), 2) if values else None


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the rounds of one side at one N."""
    failures: dict[str, int] = {}
    for r in rounds:
        for code, count in r["failures"].items():
            failures[code] = failures.get(code, 0) + count
    chunks = [r["chunks"] for r in rounds]

    def us_per_chunk(key: str) -> float:
        return round(median([r[key] / r["chunks"] * 1e6 for r in rounds if r["chunks"]]), 2)

    def middle(key: str) -> float | None:
        values = [r[key] for r in rounds if r[key] is not None]
        return round(median(values), 3) if values else None

    return {
        "streams": rounds[0]["streams"],
        "chunks_per_round": int(median(chunks)),
        "client_cpu_us_per_chunk": us_per_chunk("client_cpu_s"),
        "server_cpu_us_per_chunk": us_per_chunk("server_cpu_s"),
        # How busy each process's core was over the streams: near 1, it set the pace.
        "client_core_busy": round(median([r["client_cpu_s"] / r["wall_s"] for r in rounds]), 2),
        "server_core_busy": round(median([r["server_cpu_s"] / r["wall_s"] for r in rounds]), 2),
        "added_ms_p50": middle("added_ms_p50"),
        "added_ms_p99": middle("added_ms_p99"),
        "added_ms_max": middle("added_ms_max"),
        "client_rss_kib_per_stream": per_stream_kib(rounds, "client"),
        "server_rss_kib_per_stream": per_stream_kib(rounds, "server"),
        "wall_s": round(median([r["wall_s"] for r in rounds]), 2),
        "failures": failures,
        "held": held(rounds),
    }


def held(rounds: list[dict[str, Any]]) -> bool:
    """The pace held: every stream complete and the median p99 added latency under 20 ms."""
    p99 = [r["added_ms_p99"] for r in rounds if r["added_ms_p99"] is not None]
    return (
        bool(p99)
        and all(not r["failures"] and r["warm_up"] == "ok" for r in rounds)
        and median(p99) < HELD_MS
    )


def with_ratios(sides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A paced row: every side and the issues' ratios (replywire against the floor sides
    for CPU, against the bare pair for memory; against the SSE pair for CPU, when it ran)."""
    ours, pair = sides["replywire"], sides["bare pair"]
    checks, records = sides[CHECKS_ONLY], sides[RECORDS_ONLY]
    uvloop = sides.get(ON_UVLOOP)
    return {
        **over_sse(ours, sides.get(SSE_STACK)),
        **(
            {}
            if uvloop is None
            else {
                "producer_on_uvloop_over_asyncio": ratio(
                    uvloop["server_cpu_us_per_chunk"], ours["server_cpu_us_per_chunk"]
                )
            }
        ),
        "sides": sides,
        "consumer_cpu_over_checks_only": ratio(
            ours["client_cpu_us_per_chunk"], checks["client_cpu_us_per_chunk"]
        ),
        "producer_cpu_over_records_only": ratio(
            ours["server_cpu_us_per_chunk"], records["server_cpu_us_per_chunk"]
        ),
        "consumer_cpu_over_bare_pair": ratio(
            ours["client_cpu_us_per_chunk"], pair["client_cpu_us_per_chunk"]
        ),
        "producer_cpu_over_bare_pair": ratio(
            ours["server_cpu_us_per_chunk"], pair["server_cpu_us_per_chunk"]
        ),
        "consumer_memory_over_bare_pair": memory_ratio(ours, pair, "client"),
        "producer_memory_over_bare_pair": memory_ratio(ours, pair, "server"),
    }


def over_sse(ours: dict[str, Any], sse: dict[str, Any] | None) -> dict[str, Any]:
    """Issue 37's CPU ratios: the replywire pair's CPU per chunk (consumer + producer) over
    the SSE pair's, and the replywire consumer's over the SSE client's (none without it)."""
    if sse is None:
        return {}
    client, server = "client_cpu_us_per_chunk", "server_cpu_us_per_chunk"
    return {
        "pair_cpu_over_sse_pair": ratio(ours[client] + ours[server], sse[client] + sse[server]),
        "consumer_cpu_over_sse_client": ratio(ours[client], sse[client]),
    }


def memory_ratio(ours: dict[str, Any], pair: dict[str, Any], process: str) -> float | None:
    key = f"{process}_rss_kib_per_stream"
    if ours[key] is None or pair[key] is None or pair[key] <= 0:
        return None
    return ratio(ours[key], pair[key])


class Search:
    """The largest N a side holds (``held``: p99 added latency under 20 ms, no failure): a
    bisection between the table's largest N that held and its smallest larger N that did
    not, at most ``steps`` probes, each N a multiple of ``grain``. Bounded by the table:
    when its largest N held, that is the answer. ``next_n`` says what to probe (None:
    done), ``record`` takes the probe's summary; so two sides' probes can alternate."""

    def __init__(self, table: dict[int, dict[str, Any]], steps: int, grain: int) -> None:
        self.low = max((n for n, row in table.items() if row["held"]), default=0)
        self.high = min(
            (n for n, row in table.items() if not row["held"] and n > self.low), default=None
        )
        self.steps, self.grain = steps, grain
        self.probes: list[dict[str, Any]] = []

    def next_n(self) -> int | None:
        if self.high is None or len(self.probes) >= self.steps:
            return None
        n = (self.low + self.high) // 2 // self.grain * self.grain
        return n if n > self.low else None

    def record(self, n: int, row: dict[str, Any]) -> None:
        self.probes.append({"streams": n, "added_ms_p99": row["added_ms_p99"], "held": row["held"]})
        if row["held"]:
            self.low = n
        else:
            self.high = n

    def result(self) -> dict[str, Any]:
        return {
            "largest_held": self.low,
            "smallest_not_held": self.high,
            "bounded_by_the_table": self.high is None,
            "probes": self.probes,
        }


def search(
    tables: dict[str, dict[int, dict[str, Any]]],
    steps: int,
    grain: int,
    probe: Callable[[str, int], dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Every side's ``Search``, their probes alternated (one of each side per turn, the
    order rotated each turn) until every search is done."""
    searches = {side: Search(table, steps, grain) for side, table in tables.items()}
    names = list(searches)
    turn = 0
    while any(found.next_n() is not None for found in searches.values()):
        shift = turn % len(names)
        for side in names[shift:] + names[:shift]:
            n = searches[side].next_n()
            if n is not None:
                searches[side].record(n, probe(side, n))
        turn += 1
    return {side: found.result() for side, found in searches.items()}


def run_plan(
    plan: PacedPlan,
    workdir: Path,
    *,
    search_n: bool = True,
    sides: tuple[str, ...] = tuple(SIDES),
) -> dict[str, Any]:
    """Every N of ``plan``, each of ``sides``; with ``search_n``, the largest N each pair
    holds."""
    recording, sha256 = paced_recording(workdir, plan.content_frames)
    out: dict[str, Any] = {
        "case": CASE_ID,
        "content_frames": plan.content_frames,
        "chunks_per_stream": plan.content_frames + 1,
        "interval_ms": plan.interval_ms,
        "stream_s": plan.stream_s,
        "ramp_s": plan.ramp_s,
        "rounds": plan.rounds,
        "held_ms": HELD_MS,
        "pinning": pinning(),
    }
    out["by_streams"] = {}
    tables: dict[str, dict[int, dict[str, Any]]] = {side: {} for side in sides}
    for n in plan.streams:
        runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
        names = list(sides)
        for index in range(plan.rounds):  # every side once a round, the order rotated
            shift = index % len(names)
            for side in names[shift:] + names[:shift]:
                runs[side].append(one_round(side, n, plan, workdir, recording, sha256))
        rows = {side: summary(rounds) for side, rounds in runs.items()}
        for side, row in rows.items():
            tables[side][n] = row
        out["by_streams"][str(n)] = with_ratios(rows)
    if not search_n:
        return out
    grain = 10 if max(plan.streams) >= 100 else 1

    def probe(side: str, n: int) -> dict[str, Any]:
        return summary([one_round(side, n, plan, workdir, recording, sha256)])

    found = search({side: tables[side] for side in SEARCHED}, plan.search_steps, grain, probe)
    out["largest_n_held"] = found
    ours, pair = found["replywire"]["largest_held"], found["bare pair"]["largest_held"]
    out["paced_n_over_bare_pair"] = ratio(ours, pair) if pair else None
    sse = found[SSE_STACK]["largest_held"]
    out["paced_n_over_sse_stack"] = ratio(ours, sse) if sse else None
    return out


def run(size: Size) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="replywire-paced-") as workdir:
        return run_plan(PLANS[size], Path(workdir))


def pure_pass(size: Size) -> dict[str, Any]:
    """The plan's middle N alone (1,000 at the full size), every side but the SSE stack, its
    rounds, no search (``make bench``'s pass of the pure build: ``bench.pure``)."""
    plan = PLANS[size]
    one_n = dataclasses.replace(plan, streams=(middle(plan.streams),))
    with tempfile.TemporaryDirectory(prefix="replywire-paced-") as workdir:
        return run_plan(one_n, Path(workdir), search_n=False, sides=PURE_SIDES)


def main() -> None:
    print(json.dumps(run(bench_size()), indent=2))


if __name__ == "__main__":
    main()
