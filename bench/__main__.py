"""``make bench``: every benchmark, side by side, into bench/results.md and bench/results.json.

    BENCH_SIZE=tiny|full .venv/bin/python -m bench [--out DIR]

``full`` (the default) is the published run; ``tiny`` runs every benchmark once
at a small size (``make test`` does, so the suite cannot rot). Figures are
medians of alternated rounds; ratios are the figures to read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import (
    decoders,
    durability,
    fanout,
    memory,
    paced,
    pure,
    record_floor,
    streams,
    tracing_cost,
    workers,
)
from bench.budget import budgets
from bench.common import Machine, Size, bench_size, load_average
from bench.flow_window import measure as flow_measure
from bench.profile import reply_log_share
from bench.report import markdown
from bench.targets import verdicts
from replywire.consumer.channels import channel_options
from replywire.consumer.options import StreamOptions
from replywire.native import running

FLOW_SECONDS: dict[Size, float] = {"tiny": 0.3, "full": 2.0}


async def flow_window(size: Size) -> dict[str, int]:
    seconds = FLOW_SECONDS[size]
    rows = {"grpc defaults": await flow_measure([], seconds, 1024)}
    for window in (64 * 1024, 16 * 1024):
        bounded = channel_options(StreamOptions(target="", window_bytes=window))
        rows[f"window {window // 1024} KiB, BDP off"] = await flow_measure(bounded, seconds, 1024)
    return rows


def run(size: Size) -> dict[str, Any]:
    started = time.time()
    results: dict[str, Any] = {
        "size": size,
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "machine": asdict(Machine.here()),
        # Which build of the hot modules ran (native/): compiled by mypyc, or pure.
        "build": running().describe(),
        "load_average_before": load_average(),
        "commands": [
            f"BENCH_SIZE={size} .venv/bin/python -m bench  # make bench",
            f"BENCH_SIZE={size} .venv/bin/python -m bench.paced",
            f"BENCH_SIZE={size} .venv/bin/python -m bench.workers",
            f"BENCH_SIZE={size} .venv/bin/python -m bench.decoders",
            f"BENCH_SIZE={size} .venv/bin/python -m bench.streams",
            f"BENCH_SIZE={size} .venv/bin/python -m bench.record_floor",
            f"BENCH_SIZE={size} .venv/bin/python -m bench.memory",
            f"BENCH_SIZE={size} .venv/bin/python -m bench.tracing_cost",
            f"BENCH_SIZE={size} .venv/bin/python -m bench.fanout",
            f"BENCH_SIZE={size} .venv/bin/python -m bench.durability",
            ".venv/bin/python -m bench.flow_window",
            f"REPLYWIRE_PURE=1 BENCH_SIZE={size} .venv/bin/python -m bench.pure --out FILE"
            "  # the pure pass, when the compiled build runs",
        ],
    }
    results["paced"] = paced.run(size)  # the headline: a model's reply, many at once
    results["workers"] = workers.run(size)  # the same pace on --workers 1 and 2
    results["decoders"] = decoders.run(size)
    results["streams"] = streams.run(size)
    results["record_floor"] = record_floor.run(size)  # the floors taken apart, layer by layer
    results["tracing"] = tracing_cost.run(size)  # OpenTelemetry off against on, exporting
    with tempfile.TemporaryDirectory(prefix="replywire-profile-") as workdir:
        # The reply log's share of the producer side, for the budget (a cProfile).
        results["reply_log_profile"] = reply_log_share(size, Path(workdir))
    results["budget"] = budgets(results)  # where the time goes, from this run's sides
    with tempfile.TemporaryDirectory(prefix="replywire-pure-") as workdir:
        # The same sides with the hot modules pure (a child process), beside the compiled.
        results["pure"] = pure.pure_pass(size, Path(workdir) / "pure.json")
    results["backpressure"] = memory.run(size)
    written = asyncio.run(flow_window(size))
    results["flow_window"] = {
        "seconds_unread": FLOW_SECONDS[size],
        "chunk_bytes": 1024,
        "bytes_written_before_blocking": written,
    }
    results["fanout"] = fanout.run(size)  # K readers of one live reply, one or two replicas
    results["durability"] = durability.run(size)  # what a write waits for, on a Cluster
    results["targets"] = verdicts(results)  # issue 22's, met or not, with their figures
    results["load_average_after"] = load_average()
    results["duration_s"] = round(time.time() - started, 1)
    results["python_implementation"] = platform.python_implementation()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    args = parser.parse_args()
    results = run(bench_size())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "results.md").write_text(markdown(results))
    print(f"wrote {args.out / 'results.md'} and {args.out / 'results.json'}")


if __name__ == "__main__":
    main()
