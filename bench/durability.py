"""What ``--reply-log-durability`` costs a shared log's writes, and ``--ledger-durability`` a
ledger's call, on a real Redis Cluster.

python -m bench.durability              # BENCH_SIZE=tiny|full; JSON on stdout

A private cluster of three masters and three replicas (tests/redis_cluster.py), every
node with ``appendonly yes`` (``appendfsync everysec``, the server's default: what
``aof``'s ``WAITAOF`` waits for). In this process, one generation at a time writes a
reply through ``RedisReplyLog`` as the producer's generation does: a live reply's frames
one by one (``append``: each waited for), and a recorded reply's frames as one batch
(``extend``: one wait after its last frame). Each of ``none``, ``replica`` and ``aof``,
alternated over the rounds (``bench.common.alternate``): the wall time and this process's
CPU time per frame, medians of the rounds, and each against ``none``. Every reply must
end complete (a short wait would end it ``reply_log_unavailable``: counted, never
hidden).

The ledger, on the same cluster: one provider call's moves as the source makes them
(``reserve``, ``mark_sending``, ``settle``; the first two wait with ``replica`` and
``aof``), one call after another, the wall and CPU time per call; every call must be
settled (a short wait is ``ledger_unavailable``: counted, never hidden).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass
from typing import Any, Final

from bench.common import Size, alternate, bench_size, median
from replywire.producer.budget.options import RedisOptions
from replywire.producer.budget.redis_ledger import RedisLedger
from replywire.producer.replylog.durability import Durability, Mode
from replywire.producer.replylog.interface import Entry, LogLimits, ReplyKey, ReplyLogFailed
from replywire.producer.replylog.redis_log import RedisReplyLog
from replywire.shared.errors import RequestRefused
from tests.redis_cluster import redis_cluster


@dataclass(frozen=True)
class Plan:
    frames: int
    #: A ledger's calls per round (``aof``: ``aof_frames`` of them, each waiting as long).
    calls: int
    #: ``aof``'s frames: each of a live reply's waits about a second for the replica's
    #: acknowledgement of its file (a cost per frame; fewer frames measure it as well).
    aof_frames: int
    rounds: int


PLANS: Final[dict[Size, Plan]] = {"tiny": Plan(10, 5, 3, 1), "full": Plan(200, 100, 10, 3)}
#: Each frame: a text delta of a paced reply's size on the lp wire (bytes).
FRAME: Final = b"x" * 40
MODES: Final = tuple(mode.value for mode in Mode)
SHAPES: Final = ("live", "recorded")


async def _one(url: str, mode: str, shape: str, frames: int, name: str) -> dict[str, Any]:
    log = RedisReplyLog(url, LogLimits(), durability=Durability(Mode(mode)))
    try:
        reply = await log.create(ReplyKey("bench", name), "b" * 64, "lp")
        entries = [Entry(n, FRAME) for n in range(1, frames + 1)]
        wall, cpu = time.perf_counter(), time.process_time()
        ended = "complete"
        try:
            if shape == "live":
                for entry in entries:
                    await reply.append(entry)
            else:
                await reply.extend(entries)
            await reply.end()
        except ReplyLogFailed as failed:
            ended = failed.reason.value
        return {
            "wall_us_per_frame": (time.perf_counter() - wall) / frames * 1e6,
            "cpu_us_per_frame": (time.process_time() - cpu) / frames * 1e6,
            "ended": ended,
        }
    finally:
        await log.aclose()


#: One call's request (the ledger reserves its prompt's estimate and its most output).
BODY: Final = {"contents": [{"role": "user", "parts": [{"text": "x" * 300}]}]}
USAGE: Final = {"promptTokenCount": 80, "candidatesTokenCount": 20, "totalTokenCount": 100}


def _ledger_calls(url: str, mode: str, calls: int, name: str) -> dict[str, Any]:
    options = RedisOptions(prefix=f"bench-{name}:", durability=Durability(Mode(mode)))
    ledger = RedisLedger(url, budget_usd=1_000.0, options=options)
    try:
        ledger.check()
        settled = 0
        wall, cpu = time.perf_counter(), time.process_time()
        for n in range(calls):
            call = f"call-{n}"
            try:
                ledger.reserve(call, body=BODY, max_output_tokens=100)
                ledger.mark_sending(call)
                ledger.settle(call, USAGE)
                settled += 1
            except RequestRefused:
                continue
        return {
            "wall_us_per_call": (time.perf_counter() - wall) / calls * 1e6,
            "cpu_us_per_call": (time.process_time() - cpu) / calls * 1e6,
            "settled": settled,
            "calls": calls,
        }
    finally:
        ledger.close()


def run(size: Size) -> dict[str, Any]:
    plan = PLANS[size]
    with redis_cluster(options=["--appendonly", "yes"]) as cluster:
        rows: dict[str, Any] = {}
        names = iter(range(1_000_000))
        for shape in SHAPES:

            def side(mode: str, shape: str = shape) -> Any:
                frames = plan.aof_frames if mode == Mode.AOF else plan.frames
                return lambda: asyncio.run(
                    _one(cluster.url, mode, shape, frames, f"{shape}-{mode}-{next(names)}")
                )

            rounds = alternate({mode: side(mode) for mode in MODES}, plan.rounds)
            rows[shape] = {mode: _summary(runs) for mode, runs in rounds.items()}
            base = rows[shape]["none"]["wall_us_per_frame"]
            for mode in MODES:
                rows[shape][mode]["wall_vs_none"] = rows[shape][mode]["wall_us_per_frame"] / base

        def ledger_side(mode: str) -> Any:
            calls = plan.aof_frames if mode == Mode.AOF else plan.calls
            return lambda: _ledger_calls(cluster.url, mode, calls, f"{mode}-{next(names)}")

        ledger_rounds = alternate({mode: ledger_side(mode) for mode in MODES}, plan.rounds)
        ledger = {mode: _ledger_summary(runs) for mode, runs in ledger_rounds.items()}
        for mode in MODES:
            ledger[mode]["wall_vs_none"] = (
                ledger[mode]["wall_us_per_call"] / ledger["none"]["wall_us_per_call"]
            )
    return {
        "frames": plan.frames,
        "aof_frames": plan.aof_frames,
        "rounds": plan.rounds,
        "cluster": "3 masters, 3 replicas, appendonly yes (appendfsync everysec)",
        "shapes": rows,
        "ledger_calls": plan.calls,
        "ledger": ledger,
        "ledger_measured_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
    }


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "wall_us_per_frame": median([r["wall_us_per_frame"] for r in runs]),
        "cpu_us_per_frame": median([r["cpu_us_per_frame"] for r in runs]),
        "ended": sorted({r["ended"] for r in runs}),
    }


def _ledger_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "wall_us_per_call": median([r["wall_us_per_call"] for r in runs]),
        "cpu_us_per_call": median([r["cpu_us_per_call"] for r in runs]),
        "settled": sum(r["settled"] for r in runs),
        "calls": sum(r["calls"] for r in runs),
    }


HEADER: Final = (
    "reply", "durability", "wall µs / frame", "× none", "CPU µs / frame (this process)",
    "ended",
)  # fmt: skip


def cells(results: dict[str, Any]) -> list[list[Any]]:
    return [
        [shape, mode, row["wall_us_per_frame"], row["wall_vs_none"], row["cpu_us_per_frame"],
         ", ".join(row["ended"])]
        for shape, modes in results["shapes"].items()
        for mode, row in modes.items()
    ]  # fmt: skip


LEDGER_HEADER: Final = (
    "ledger durability", "wall µs / call", "× none", "CPU µs / call (this process)",
    "calls settled",
)  # fmt: skip


def ledger_cells(results: dict[str, Any]) -> list[list[Any]]:
    return [
        [mode, row["wall_us_per_call"], row["wall_vs_none"], row["cpu_us_per_call"],
         f"{row['settled']} of {row['calls']}"]
        for mode, row in results["ledger"].items()
    ]  # fmt: skip


def main() -> int:
    json.dump(run(bench_size()), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
