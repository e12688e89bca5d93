"""Streams between two processes: replywire against bare grpc.aio, side by side in one run.

Three sides, alternated round by round, all on loopback with the consumer's
channel options (bounded window, no BDP probing, no retries):

* ``replywire``: the replywire consumer (``replywire_client`` below) asking the
  replywire producer (a child process): request checks, binding, framing, the
  reader/queue edge, the sans-IO core, the reply validation, both traces;
* ``bare client``: a bare grpc.aio client of the same producer, reading the
  same chunks without judging them (what the consumer side costs);
* ``bare pair``: the same bare client against ``bench.bare_server`` (a child
  process) writing the same pre-cut chunks (what gRPC alone costs);
* the floor sides: ``checks only`` (a bare client with the consumer's checks) and
  ``replywire → bare server`` (the replywire consumer) against the bare server, and
  ``records only`` (the bare server writing the producer's records) read by the bare client.

Both bare sides use the replywire side's channel policy: a new channel per
stream while ``replywire_client`` opens one per stream, one channel for the
round once it shares one. Sequential streams report streams per second, the
CPU of the client process and of the server process per stream; concurrency
reports streams per second, p50/p99 time to first chunk and failures by code.
The trace cost runs the replywire side against two producers, ``--log-level
info`` and ``--log-level warning``, and the replywire consumer at info and at
warning against the bare server. The replywire consumer writes its trace at info
into a file, as its CLI does (but in its own trace-cost rounds). The servers run
pinned to one CPU, this process (every client) to another (``bench.common.pin``).

    BENCH_SIZE=tiny|full .venv/bin/python -m bench.streams

Why one file: the sides are alternated in the same rounds with the same channel options,
and the round machinery, the sides and their rows are one measurement.

One file past 500 lines: the three sides run the same stream plan and are measured by the
same code; apart, they could drift.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableMapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, TextIO

import grpc
import structlog

from bench.common import (
    CHECKS_ONLY,
    CLIENT_CPU,
    CONSUMER_ALONE,
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
)
from replywire.children import start_producer, stop_producer
from replywire.consumer import client as consumer_client
from replywire.consumer.channels import channel_options
from replywire.consumer.options import StreamOptions
from replywire.runtime.logs import configure_logging
from replywire.runtime.recording_file import DEFAULT_RECORDING_PATH, load_recording
from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.errors import ProtocolFailure
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.requests import ReplyRequest
from replywire.shared.result import StreamResult
from replywire.shared.status import Status
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan

CASE_ID: Final = "utf8-write"
#: One frame per chunk, 64 bytes, 4 KiB, the lab's pattern.
CHUNKINGS: Final = ("frame", "64", "4096", "1,2,7,3,11")
_ids = itertools.count()


# --- the replywire client: the one place to switch when ReplyClient lands -----------------


class ReplySession(Protocol):
    """What the replywire side needs of a client: ``consumer.client.ReplyClient``'s shape."""

    async def __aenter__(self) -> Any: ...

    async def __aexit__(self, *exc_info: object) -> Any: ...


class PerStreamClient:
    """Today's consumer API in ReplyClient's shape: ``stream_reply`` opens a channel per call."""

    shares_channel: Final = False

    def __init__(self, options: StreamOptions) -> None:
        self.options = options

    async def __aenter__(self) -> PerStreamClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    async def stream(self, request: ReplyRequest) -> StreamResult:
        return await consumer_client.stream_reply(request, self.options)


def replywire_client(options: StreamOptions) -> ReplySession:
    # consumer.client.ReplyClient: one channel per target and options, shared by the runs
    # (the bare sides copy its policy: see shares_channel).
    return consumer_client.ReplyClient(options)


def shares_channel(client: object) -> bool:
    """The replywire side's channel policy, which the bare sides copy."""
    return bool(getattr(client, "shares_channel", True))


# --- time to first chunk, from the consumer's own reader state change ----------------------


class FirstChunkClock:
    """A structlog processor: notes when each stream's reader took its first message."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}

    def __call__(self, logger: Any, name: str, event: MutableMapping[str, Any]) -> Any:
        if event.get("input") == "first_message" and "stream_id" in event:
            self.first.setdefault(event["stream_id"], time.perf_counter())
        return event


CLOCK: Final = FirstChunkClock()


def consumer_trace(path: Path) -> TextIO:
    """The replywire side's trace as the consumer CLI writes it (JSON lines at info, held
    and written in batches, into a file), with the first-chunk clock after the stream id."""
    trace = path.open("w", encoding="utf-8")
    consumer_level(trace, "info")
    return trace


def consumer_level(trace: TextIO, level: str) -> None:
    """The replywire side's trace into ``trace`` at ``level`` (the trace-cost rounds)."""
    configure_logging("consumer", log_format="json", level=level, stream=trace, batched=True)
    merge, *rest = structlog.get_config()["processors"]
    structlog.configure(processors=[merge, CLOCK, *rest])


@contextmanager
def consumer_at(trace: TextIO, level: str) -> Iterator[None]:
    """A round of the replywire consumer at ``level``; at info again after it."""
    consumer_level(trace, level)
    try:
        yield
    finally:
        consumer_level(trace, "info")


# --- the two servers, as child processes -----------------------------------------------------


@dataclass
class Server:
    name: str
    process: subprocess.Popen[bytes]
    port: int

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_s(self) -> float:
        return process_cpu_s(self.process.pid)


@contextmanager
def producer(workdir: Path, log_level: str = "info", *flags: str) -> Iterator[Server]:
    trace = workdir / f"producer-{log_level}{''.join(flags)}.trace.jsonl"
    process, port = start_producer(trace, DEFAULT_RECORDING_PATH, log_level, *flags)
    pin(process.pid, SERVER_CPU)
    try:
        yield Server(f"producer ({log_level})", process, port)
    finally:
        stop_producer(process)


@contextmanager
def bare_server(trace: Path | None = None, *more: str, name: str = "") -> Iterator[Server]:
    """``bench.bare_server``; with ``trace``, writing the producer's four records per stream
    there (the records-only server); ``more``: its other flags (``bench.record_floor``)."""
    flags = ([] if trace is None else ["--trace-file", str(trace)]) + list(more)
    command = [sys.executable, "-m", "bench.bare_server", "--port", "0", *flags]
    process, port = start_server(command, "bench.bare_server")
    try:
        pin(process.pid, SERVER_CPU)
        yield Server(name or ("bare server" if trace is None else "records only"), process, port)
    finally:
        stop_producer(process)


# --- one stream, each side -------------------------------------------------------------------


@dataclass
class Outcome:
    ok: bool
    code: str
    first_chunk_s: float | None


def request_for(plan: ChunkPlan) -> ReplyRequest:
    recording = load_recording()
    return ReplyRequest.for_case(
        recording, CASE_ID, wire=WireFormat.LENGTH_PREFIXED, plan=plan, stream_id="bench"
    )


def fresh(request: ReplyRequest) -> ReplyRequest:
    return dataclasses.replace(request, stream_id=f"bench-{os.getpid()}-{next(_ids)}")


async def replywire_once(client: Any, request: ReplyRequest) -> Outcome:
    request = fresh(request)
    started = time.perf_counter()
    result = await client.stream(request)
    first = CLOCK.first.pop(request.stream_id, None)
    ok = result.status.value == "complete"
    code = "ok" if ok else f"{result.status.value}:{result.reason}"
    return Outcome(ok, code, None if first is None else first - started)


async def bare_read(
    channel: grpc.aio.Channel,
    request: pb.OpenRequest,
    core: ReplyConsumer | None = None,
    on_first: Callable[[], None] | None = None,
) -> Outcome:
    """One stream read by a bare client; with ``core``, with the consumer's checks and
    nothing else: each chunk into the sans-IO core (made with no logger: no records), then
    its verdict; no session, reader or queue. ``on_first``: called at the first chunk
    (``bench.record_floor``'s records)."""
    started = time.perf_counter()
    first: float | None = None
    try:
        async for chunk in pb_grpc.ReplyStreamStub(channel).Open(request):
            if first is None:
                first = time.perf_counter() - started
                if on_first is not None:
                    on_first()
            if core is not None:
                core.receive_data(chunk.data)
    except grpc.aio.AioRpcError as error:
        return Outcome(False, error.code().name, first)
    except ProtocolFailure as failure:
        return Outcome(False, f"invalid:{failure.reason.value}", first)
    if core is None:
        return Outcome(True, "ok", first)
    result = core.end_of_stream()
    ok = result.status is Status.COMPLETE
    return Outcome(ok, "ok" if ok else f"{result.status.value}:{result.reason}", first)


class BareClient:
    """A bare grpc.aio client with the replywire side's channel policy; ``checks``: with the
    consumer's checks (``bare_read`` with a core)."""

    def __init__(
        self, target: str, options: StreamOptions, shared: bool, *, checks: bool = False
    ) -> None:
        self.target = target
        self.options = channel_options(options)
        self.checks = checks
        self.shared: grpc.aio.Channel | None = None
        if shared:
            self.shared = grpc.aio.insecure_channel(target, options=self.options)

    async def once(self, request: ReplyRequest) -> Outcome:
        if self.shared is not None:
            return await self._read(self.shared, fresh(request))
        async with grpc.aio.insecure_channel(self.target, options=self.options) as channel:
            return await self._read(channel, fresh(request))

    async def _read(self, channel: grpc.aio.Channel, request: ReplyRequest) -> Outcome:
        message = request.open_request()
        core = request.consumer(sent=message) if self.checks else None
        return await bare_read(channel, message, core)

    async def close(self) -> None:
        if self.shared is not None:
            await self.shared.close(None)


@asynccontextmanager
async def side(
    kind: str, server: Server, options: StreamOptions
) -> AsyncIterator[Callable[[ReplyRequest], Awaitable[Outcome]]]:
    """One stream function for a round: the replywire client, or a bare one (same policy;
    ``checks``: with the consumer's checks)."""
    async with replywire_client(options) as client:
        if kind == "replywire":
            yield lambda request: replywire_once(client, request)
            return
        bare = BareClient(server.target, options, shares_channel(client), checks=kind == "checks")
        try:
            yield bare.once
        finally:
            await bare.close()


# --- rounds ----------------------------------------------------------------------------------


@dataclass
class Round:
    streams: int
    wall_s: float
    client_cpu_s: float
    server_cpu_s: float
    outcomes: list[Outcome]

    def per_s(self) -> float:
        return self.streams / self.wall_s


async def sequential_round(kind: str, server: Server, request: ReplyRequest, n: int) -> Round:
    options = StreamOptions(target=server.target)
    async with side(kind, server, options) as once:
        cpu, server_cpu, started = time.process_time(), server.cpu_s(), time.perf_counter()
        outcomes = [await once(request) for _ in range(n)]
        wall = time.perf_counter() - started
        return Round(n, wall, time.process_time() - cpu, server.cpu_s() - server_cpu, outcomes)


async def concurrent_round(kind: str, server: Server, request: ReplyRequest, n: int) -> Round:
    options = StreamOptions(target=server.target)
    async with side(kind, server, options) as once:
        cpu, server_cpu, started = time.process_time(), server.cpu_s(), time.perf_counter()
        outcomes = list(await asyncio.gather(*(once(request) for _ in range(n))))
        wall = time.perf_counter() - started
        return Round(n, wall, time.process_time() - cpu, server.cpu_s() - server_cpu, outcomes)


RoundFn = Callable[[str, Server, ReplyRequest, int], Awaitable[Round]]


async def compare(
    run: RoundFn, sides: dict[str, Server], request: ReplyRequest, n: int, rounds: int
) -> dict[str, list[Round]]:
    """Every side once per round, the order rotated each round."""

    def side_round(name: str) -> Callable[[], Awaitable[Round]]:
        return lambda: run(client_kind(name), sides[name], request, n)

    return await alternate_rounds({name: side_round(name) for name in sides}, rounds)


def client_kind(side: str) -> str:
    """The client a side's name says: the replywire consumer, the checks-only client, or
    the bare one."""
    if side.startswith("replywire"):
        return "replywire"
    return "checks" if side == CHECKS_ONLY else "bare"


async def alternate_rounds(
    sides: dict[str, Callable[[], Awaitable[Round]]], rounds: int
) -> dict[str, list[Round]]:
    """``bench.common.alternate`` for rounds that are awaited: every side once per round,
    the order rotated each round, so drift hits all sides."""
    names = list(sides)
    results: dict[str, list[Round]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            results[name].append(await sides[name]())
    return results


def info_against_warning(table: dict[str, dict[str, Any]], side: str) -> dict[str, Any]:
    """A trace-cost row: the two sides (at info, then at warning) and their ratios, of the
    CPU per stream of ``side`` (the producer: the server's; the consumer: the client's)."""
    at_info, at_warning = table.values()
    cpu = "server_cpu_ms_per_stream" if side == "producer" else "client_cpu_ms_per_stream"
    return {
        "sides": table,
        f"info_over_warning_{side}_cpu": ratio(at_info[cpu], at_warning[cpu]),
        "info_over_warning_streams_per_s": ratio(
            at_info["streams_per_s"], at_warning["streams_per_s"]
        ),
    }


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def ms_per_stream(seconds: list[float]) -> float:
    return round(median(seconds) * 1e3, 3)


def summary(rounds: list[Round]) -> dict[str, Any]:
    streams = sum(r.streams for r in rounds)
    firsts = [o.first_chunk_s for r in rounds for o in r.outcomes if o.first_chunk_s is not None]
    codes = Counter(o.code for r in rounds for o in r.outcomes if not o.ok)
    p50, p99 = percentile(firsts, 0.5), percentile(firsts, 0.99)
    return {
        "streams_per_s": round(median([r.per_s() for r in rounds]), 1),
        "client_cpu_ms_per_stream": ms_per_stream([r.client_cpu_s / r.streams for r in rounds]),
        "server_cpu_ms_per_stream": ms_per_stream([r.server_cpu_s / r.streams for r in rounds]),
        "first_chunk_ms_p50": None if p50 is None else round(p50 * 1e3, 2),
        "first_chunk_ms_p99": None if p99 is None else round(p99 * 1e3, 2),
        "streams": streams,
        "failures": dict(codes),
    }  # fmt: skip


def with_ratios(sides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    ours, pair = sides["replywire"], sides["bare pair"]
    row: dict[str, Any] = {"sides": sides}
    row["replywire_over_bare_pair"] = ratio(ours["streams_per_s"], pair["streams_per_s"])
    row["producer_cpu_over_bare_server"] = ratio(
        ours["server_cpu_ms_per_stream"], pair["server_cpu_ms_per_stream"]
    )
    if "bare client" in sides:
        row["replywire_over_bare_client"] = ratio(
            ours["streams_per_s"], sides["bare client"]["streams_per_s"]
        )
    if CHECKS_ONLY in sides:  # the ceiling of any consumer that checks what it reads
        checks = sides[CHECKS_ONLY]
        row["checks_only_over_bare_pair"] = ratio(checks["streams_per_s"], pair["streams_per_s"])
        row["checks_only_client_cpu_over_bare_pair"] = ratio(
            checks["client_cpu_ms_per_stream"], pair["client_cpu_ms_per_stream"]
        )
        # The pair against the checks-only client and the bare server: the consumer's and the
        # producer's costs together.
        row["replywire_over_checks_only"] = ratio(ours["streams_per_s"], checks["streams_per_s"])
        if CONSUMER_ALONE in sides:  # issue 22's consumer target: the same server, both
            row["consumer_over_checks_only"] = ratio(
                sides[CONSUMER_ALONE]["streams_per_s"], checks["streams_per_s"]
            )
            row["consumer_cpu_over_checks_only"] = ratio(
                sides[CONSUMER_ALONE]["client_cpu_ms_per_stream"],
                checks["client_cpu_ms_per_stream"],
            )
    if RECORDS_ONLY in sides:  # the floor of a producer that records every transition
        row["records_only_server_cpu_over_bare_server"] = ratio(
            sides[RECORDS_ONLY]["server_cpu_ms_per_stream"], pair["server_cpu_ms_per_stream"]
        )
        # The producer's target: against what the records alone cost.
        row["producer_cpu_over_records_only"] = ratio(
            ours["server_cpu_ms_per_stream"], sides[RECORDS_ONLY]["server_cpu_ms_per_stream"]
        )
    return row


@dataclass(frozen=True)
class Plan:
    sequential_streams: int
    lab_pattern_streams: int
    concurrency: tuple[int, ...]
    rounds: int
    trace_streams: int


PLANS: Final[dict[Size, Plan]] = {
    "tiny": Plan(3, 2, (10,), 1, 3),
    "full": Plan(200, 40, (100, 1_000, 3_000), 3, 200),
}


async def run_all(plan: Plan, workdir: Path, *, floors_only: bool = False) -> dict[str, Any]:
    """Every section; with ``floors_only``, the sequential section and the middle concurrency
    row alone (``pure_pass``)."""
    pin(os.getpid(), CLIENT_CPU)
    trace = consumer_trace(workdir / "consumer.trace.jsonl")
    try:
        return await _run_all(plan, workdir, trace, floors_only)
    finally:
        trace.close()


async def _run_all(plan: Plan, workdir: Path, trace: TextIO, floors_only: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"case": CASE_ID, "wire": "lp", "rounds": plan.rounds}
    out["pinning"] = pinning()
    if floors_only:
        return {**out, **await sides_and_floors(plan, workdir, (middle(plan.concurrency),))}
    out.update(await sides_and_floors(plan, workdir, plan.concurrency))
    out["over_limit"] = await over_limit(plan, workdir)
    out["trace_cost"] = await trace_cost(plan, workdir)
    out["consumer_trace_cost"] = await consumer_trace_cost(plan, trace)
    return out


async def sides_and_floors(
    plan: Plan, workdir: Path, concurrency: tuple[int, ...]
) -> dict[str, Any]:
    """The sequential section (every chunking, all five sides) and the concurrency rows at
    ``concurrency``: what ``make bench``'s pure pass runs again (``pure_pass``)."""
    out: dict[str, Any] = {}
    records_trace = workdir / "records-only.trace.jsonl"
    with producer(workdir) as ours, bare_server() as bare, bare_server(records_trace) as records:
        sides = {
            "replywire": ours,
            "bare client": ours,
            "bare pair": bare,
            CHECKS_ONLY: bare,
            CONSUMER_ALONE: bare,
            RECORDS_ONLY: records,
        }
        policy = shares_channel(replywire_client(StreamOptions(target=ours.target)))
        out["channel_policy"] = "one channel, shared" if policy else "a new channel per stream"
        out["sequential"] = {}
        for chunking in CHUNKINGS:
            n = plan.lab_pattern_streams if "," in chunking else plan.sequential_streams
            runs = await compare(
                sequential_round, sides, request_for(ChunkPlan.parse(chunking)), n, plan.rounds
            )
            out["sequential"][chunking] = with_ratios({k: summary(v) for k, v in runs.items()})
        out["concurrency"] = {}
        pair = {"replywire": ours, "bare pair": bare, CHECKS_ONLY: bare, CONSUMER_ALONE: bare}
        for n in concurrency:
            runs = await compare(
                concurrent_round, pair, request_for(ChunkPlan.parse("frame")), n, plan.rounds
            )
            out["concurrency"][str(n)] = with_ratios({k: summary(v) for k, v in runs.items()})
    return out


#: Connections the over-limit burst is spread over: one connection queues its streams past
#: the producer's HTTP/2 bound in the client; many reach the servicer's own limit.
OVER_LIMIT_CONNECTIONS: Final = 10
#: The burst's streams pause this long between chunks, so that they are open at once (a
#: stream that ends in a millisecond frees its place before the next arrives).
OVER_LIMIT_INTERVAL_MS: Final = 500


async def over_limit(plan: Plan, workdir: Path) -> dict[str, Any]:
    """The largest burst, over several connections, against a producer whose
    ``--max-streams`` is a third of it: what is past the limit is refused by name
    (RESOURCE_EXHAUSTED / stream_limit), never a bare CANCELLED; the rest completes."""
    n = plan.concurrency[-1]
    limit = max(1, n // 3)
    request = dataclasses.replace(
        request_for(ChunkPlan.parse("frame")), chunk_interval_ms=OVER_LIMIT_INTERVAL_MS
    )
    with producer(workdir, "info", "--max-streams", str(limit)) as limited:
        options = StreamOptions(target=limited.target)
        rounds = []
        for _ in range(plan.rounds):
            clients = [consumer_client.ReplyClient(options) for _ in range(OVER_LIMIT_CONNECTIONS)]
            try:
                started = time.perf_counter()
                outcomes = await asyncio.gather(
                    *(replywire_once(clients[i % len(clients)], request) for i in range(n))
                )
                wall = time.perf_counter() - started
            finally:
                for client in clients:
                    await client.close()
            rounds.append(Round(n, wall, 0.0, 0.0, list(outcomes)))
    return {
        "streams": n,
        "max_streams": limit,
        "connections": OVER_LIMIT_CONNECTIONS,
        "replywire": summary(rounds),
    }


async def trace_cost(plan: Plan, workdir: Path) -> dict[str, Any]:
    """The same replywire streams against a producer at info and one at warning."""
    with producer(workdir, "info") as info, producer(workdir, "warning") as warning:
        sides = {"replywire (producer at info)": info, "replywire (producer at warning)": warning}
        rows: dict[str, Any] = {}
        for chunking in ("frame", "64"):
            request = request_for(ChunkPlan.parse(chunking))
            runs = await compare(sequential_round, sides, request, plan.trace_streams, plan.rounds)
            rows[chunking] = info_against_warning(
                {k: summary(v) for k, v in runs.items()}, "producer"
            )
        return rows


async def consumer_trace_cost(plan: Plan, trace: TextIO) -> dict[str, Any]:
    """The same replywire streams against the bare server (no producer of ours to vary),
    the consumer's trace at info and at warning, alternated round by round."""
    rows: dict[str, Any] = {}
    with bare_server() as bare:
        for chunking in ("frame", "4096"):
            request = request_for(ChunkPlan.parse(chunking))
            sides = {
                f"replywire (consumer at {level})": consumer_round_at(
                    trace, level, bare, request, plan.trace_streams
                )
                for level in ("info", "warning")
            }
            runs = await alternate_rounds(sides, plan.rounds)
            rows[chunking] = info_against_warning(
                {k: summary(v) for k, v in runs.items()}, "consumer"
            )
    return rows


def consumer_round_at(
    trace: TextIO, level: str, server: Server, request: ReplyRequest, n: int
) -> Callable[[], Awaitable[Round]]:
    """A sequential round of the replywire consumer with its trace at ``level``."""

    async def round_at_level() -> Round:
        with consumer_at(trace, level):
            return await sequential_round("replywire", server, request, n)

    return round_at_level


def run(size: Size) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="replywire-bench-") as workdir:
        return asyncio.run(run_all(PLANS[size], Path(workdir)))


def pure_pass(size: Size) -> dict[str, Any]:
    """The short-stream sequential section and the middle concurrency row alone (``make
    bench``'s pass of the pure build: ``bench.pure``)."""
    with tempfile.TemporaryDirectory(prefix="replywire-bench-") as workdir:
        return asyncio.run(run_all(PLANS[size], Path(workdir), floors_only=True))


def main() -> None:
    print(json.dumps(run(bench_size()), indent=2))


if __name__ == "__main__":
    main()
