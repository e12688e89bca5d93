"""What ``--reply-log-durability`` costs a shared log's writes, on a real Redis Cluster.

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
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass
from typing import Any, Final

from bench.common import Size, alternate, bench_size, median
from replywire.producer.replylog.durability import Durability, Mode
from replywire.producer.replylog.interface import Entry, LogLimits, ReplyKey, ReplyLogFailed
from replywire.producer.replylog.redis_log import RedisReplyLog
from tests.redis_cluster import redis_cluster


@dataclass(frozen=True)
class Plan:
    frames: int
    #: ``aof``'s frames: each of a live reply's waits about a second for the replica's
    #: acknowledgement of its file (a cost per frame; fewer frames measure it as well).
    aof_frames: int
    rounds: int


PLANS: Final[dict[Size, Plan]] = {"tiny": Plan(10, 3, 1), "full": Plan(200, 10, 3)}
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
    return {
        "frames": plan.frames,
        "aof_frames": plan.aof_frames,
        "rounds": plan.rounds,
        "cluster": "3 masters, 3 replicas, appendonly yes (appendfsync everysec)",
        "shapes": rows,
    }


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "wall_us_per_frame": median([r["wall_us_per_frame"] for r in runs]),
        "cpu_us_per_frame": median([r["cpu_us_per_frame"] for r in runs]),
        "ended": sorted({r["ended"] for r in runs}),
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


def main() -> int:
    json.dump(run(bench_size()), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
