"""The floor's own parts: what a trace record costs in a gRPC process, against the least a
JSON line can cost there.

Issue 22's targets put the replywire consumer at 0.9 times the checks-only client and the
records-only server within 1.15 times the bare server. This section takes those floors apart,
one layer per side, alternated round by round in one run (sequential streams, loopback,
servers pinned to one CPU and this process to the other, as in ``bench.streams``):

Servers, each read by the bare client (server CPU per stream):

* ``bare server``: gRPC alone;
* ``stream code only``: the records-only server with its trace at warning: the stream's
  machine and fields run, no record is written;
* ``least records``: the same four records written as the least a JSON line costs in
  CPython (``bench.least_records``: a dict, orjson, batched writes; no structlog, no
  redaction);
* ``records only``: the four records through the producer's trace.

Clients, each reading the bare server (client CPU per stream):

* ``bare client``; ``checks only`` (the sans-IO core, no records);
* ``checks and least records``: the same, and the consumer's seven records of a stream (the
  same fields, taken from a replywire stream's trace at start) written as least lines, at
  the points the consumer writes them (one at open, one at the first message, five at the
  end);
* ``replywire (consumer at warning)`` and ``replywire``: the consumer, its trace at warning
  (no record written) and at info.

    BENCH_SIZE=tiny|full .venv/bin/python -m bench.record_floor
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from bench.common import CHECKS_ONLY, CLIENT_CPU, RECORDS_ONLY, Size, bench_size, median, pin
from bench.least_records import LeastWriter
from bench.streams import (
    CLOCK,
    BareClient,
    Outcome,
    Round,
    Server,
    alternate_rounds,
    bare_read,
    bare_server,
    consumer_round_at,
    consumer_trace,
    fresh,
    replywire_client,
    replywire_once,
    request_for,
    sequential_round,
    shares_channel,
)
from replywire.consumer.options import StreamOptions
from replywire.runtime.logs import flush_trace
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire.chunking import ChunkPlan

STREAM_CODE: Final = "stream code only"
LEAST_RECORDS: Final = "least records"
CHECKS_AND_LEAST: Final = "checks and least records"
REPLYWIRE_AT_WARNING: Final = "replywire (consumer at warning)"
#: The records a producer stream writes (records only) and a consumer stream writes.
PRODUCER_RECORDS: Final = 4
CHUNKINGS: Final = ("frame", "4096")


@dataclass(frozen=True)
class Plan:
    streams: int
    rounds: int


PLANS: Final[dict[Size, Plan]] = {"tiny": Plan(3, 1), "full": Plan(400, 11)}


async def consumer_records(server: Server, trace_path: Path) -> list[dict[str, Any]]:
    """The records one replywire stream writes at info, the trace's first stream (the
    consumer's trace is at info), without what each record's own moment fills in."""
    async with replywire_client(StreamOptions(target=server.target)) as client:
        outcome = await replywire_once(client, request_for(ChunkPlan.parse("frame")))
    if not outcome.ok:
        raise RuntimeError(f"the replywire stream did not complete: {outcome.code}")
    flush_trace()
    records = [json.loads(line) for line in trace_path.read_text(encoding="utf-8").splitlines()]
    (stream_id,) = {record["stream_id"] for record in records if record.get("stream_id")}
    ours = [record for record in records if record.get("stream_id") == stream_id]
    for record in ours:
        del record["timestamp"], record["stream_id"]
    return ours


class LeastClient:
    """The checks-only client, and the consumer's records of each stream as least lines."""

    def __init__(self, bare: BareClient, records: list[dict[str, Any]], writer: LeastWriter):
        self._bare = bare
        self._records = records
        self._writer = writer

    def _write(self, stream_id: str, records: list[dict[str, Any]]) -> None:
        for record in records:
            line = record.copy()
            line["stream_id"] = stream_id
            line["timestamp"] = time.time()
            self._writer.keep(line)

    async def once(self, request: ReplyRequest) -> Outcome:
        request = fresh(request)
        stream_id = request.stream_id
        opening, first, *ending = self._records
        self._write(stream_id, [opening])
        message = request.open_request()
        channel = self._bare.shared
        assert channel is not None  # the replywire side shares one channel
        outcome = await bare_read(
            channel,
            message,
            request.consumer(sent=message),
            on_first=lambda: self._write(stream_id, [first]),
        )
        self._write(stream_id, ending)
        return outcome


async def least_round(
    server: Server, request: ReplyRequest, n: int, records: list[dict[str, Any]], out: Any
) -> Round:
    options = StreamOptions(target=server.target)
    async with replywire_client(options) as client:
        bare = BareClient(server.target, options, shares_channel(client), checks=True)
        least = LeastClient(bare, records, LeastWriter(out))
        try:
            cpu, started = time.process_time(), time.perf_counter()
            outcomes = [await least.once(request) for _ in range(n)]
            wall = time.perf_counter() - started
        finally:
            await bare.close()
        return Round(n, wall, time.process_time() - cpu, 0.0, outcomes)


def cpu_us(rounds: list[Round], side: str) -> float:
    """The median over rounds of a side's CPU µs per stream."""
    values = [(r.server_cpu_s if side == "server" else r.client_cpu_s) / r.streams for r in rounds]
    return round(median(values) * 1e6, 1)


def per_s(rounds: list[Round]) -> float:
    return round(median([r.per_s() for r in rounds]), 1)


def failures(runs: dict[str, list[Round]]) -> dict[str, int]:
    """Streams of each side that did not complete (every one should)."""
    return {
        name: sum(not o.ok for r in rounds for o in r.outcomes) for name, rounds in runs.items()
    }


def server_row(runs: dict[str, list[Round]]) -> dict[str, Any]:
    us = {name: cpu_us(rounds, "server") for name, rounds in runs.items()}
    bare, code = us["bare server"], us[STREAM_CODE]
    records, least = us[RECORDS_ONLY] - code, us[LEAST_RECORDS] - code
    return {
        "server_cpu_us_per_stream": us,
        "failures": failures(runs),
        "stream_code_us": round(code - bare, 1),
        "records_us": round(records, 1),
        "least_records_us": round(least, 1),
        "us_per_record": round(records / PRODUCER_RECORDS, 1),
        "least_us_per_record": round(least / PRODUCER_RECORDS, 1),
        "records_only_over_bare_server": round(us[RECORDS_ONLY] / bare, 3),
        "least_records_over_bare_server": round(us[LEAST_RECORDS] / bare, 3),
        "stream_code_over_bare_server": round(code / bare, 3),
    }


def client_row(runs: dict[str, list[Round]], consumer_records: int) -> dict[str, Any]:
    us = {name: cpu_us(rounds, "client") for name, rounds in runs.items()}
    rate = {name: per_s(rounds) for name, rounds in runs.items()}
    checks = us[CHECKS_ONLY]
    least = us[CHECKS_AND_LEAST] - checks
    records = us["replywire"] - us[REPLYWIRE_AT_WARNING]
    return {
        "client_cpu_us_per_stream": us,
        "failures": failures(runs),
        "streams_per_s": rate,
        "records": consumer_records,
        "records_us": round(records, 1),
        "least_records_us": round(least, 1),
        "us_per_record": round(records / consumer_records, 1),
        "least_us_per_record": round(least / consumer_records, 1),
        "session_us": round(us[REPLYWIRE_AT_WARNING] - checks, 1),
        "checks_and_least_over_checks_only": round(rate[CHECKS_AND_LEAST] / rate[CHECKS_ONLY], 3),
        "replywire_over_checks_only": round(rate["replywire"] / rate[CHECKS_ONLY], 3),
    }


async def run_all(plan: Plan, workdir: Path) -> dict[str, Any]:
    pin(os.getpid(), CLIENT_CPU)
    trace_path = workdir / "consumer.trace.jsonl"
    trace = consumer_trace(trace_path)
    least_out = (workdir / "least-consumer.jsonl").open("ab")
    try:
        with ExitStack() as servers:

            def start(name: str, *flags: str) -> Server:
                return servers.enter_context(bare_server(None, *flags, name=name))

            bare = start("bare server")
            sides = {
                "bare server": bare,
                STREAM_CODE: start(STREAM_CODE, "--trace-file", str(workdir / "code.jsonl"),
                                   "--trace-level", "warning"),
                LEAST_RECORDS: start(LEAST_RECORDS, "--trace-file", str(workdir / "least.jsonl"),
                                     "--least-records"),
                RECORDS_ONLY: start(RECORDS_ONLY, "--trace-file", str(workdir / "records.jsonl")),
            }  # fmt: skip
            records = await consumer_records(bare, trace_path)
            out: dict[str, Any] = {"streams": plan.streams, "rounds": plan.rounds}
            out["consumer_records"] = [record.get("event") for record in records]
            out["server"], out["client"] = {}, {}
            for chunking in CHUNKINGS:
                request = request_for(ChunkPlan.parse(chunking))
                server_sides = {
                    name: _round("bare", server, request, plan.streams)
                    for name, server in sides.items()
                }
                runs = await alternate_rounds(server_sides, plan.rounds)
                out["server"][chunking] = server_row(runs)
                client_sides: dict[str, Callable[[], Awaitable[Round]]] = {
                    "bare client": _round("bare", bare, request, plan.streams),
                    CHECKS_ONLY: _round("checks", bare, request, plan.streams),
                    CHECKS_AND_LEAST: _least(bare, request, plan.streams, records, least_out),
                    REPLYWIRE_AT_WARNING: consumer_round_at(
                        trace, "warning", bare, request, plan.streams
                    ),
                    "replywire": _round("replywire", bare, request, plan.streams),
                }
                runs = await alternate_rounds(client_sides, plan.rounds)
                out["client"][chunking] = client_row(runs, len(records))
            return out
    finally:
        least_out.close()
        trace.close()
        CLOCK.first.clear()


def _round(
    kind: str, server: Server, request: ReplyRequest, n: int
) -> Callable[[], Awaitable[Round]]:
    return lambda: sequential_round(kind, server, request, n)


def _least(
    server: Server, request: ReplyRequest, n: int, records: list[dict[str, Any]], out: Any
) -> Callable[[], Awaitable[Round]]:
    return lambda: least_round(server, request, n, records, out)


def run(size: Size) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="replywire-floor-") as workdir:
        return asyncio.run(run_all(PLANS[size], Path(workdir)))


def main() -> None:
    print(orjson.dumps(run(bench_size()), option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
