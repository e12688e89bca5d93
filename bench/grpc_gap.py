"""gRPC's own gap to the SSE server: what a grpc.aio server's CPU per paced chunk is made of.

``bench.paced``'s workload (each stream 300 chunks of one 13-character delta, 40 ms apart;
servers on CPU 0, clients on CPU 1), at one N, a few server variants alternated round by
round (``bench.common.alternate``), each round a fresh server and client process:

* ``bare``: the bare grpc.aio server (``bench.bare_server``, the producer's gRPC options)
  ← the bare client; ``bare uvloop``: the same on uvloop (``--event-loop uvloop``);
* ``bare +NAME``: the bare server with one more gRPC server option (``OPTIONS``);
* ``producer`` / ``producer uvloop``: the replywire producer on either loop ← the consumer;
* ``sse``: the SSE server (uvicorn on uvloop and httptools) ← the SSE client.

Per variant: the server's CPU µs per chunk (median of the rounds) and its ratio to the
bare server's and to the SSE server's; the client's; the p99 added latency; and the
server's CPU by thread over the streams (``bench.common.threads_cpu_s``: the main thread,
which runs the event loop, the servicer and grpc.aio's Cython layer; gRPC's completion
queue poller, a thread of its own that hands the loop each event; ``event_engine``:
gRPC's C-core I/O, HTTP/2 framing and the sockets), user and system, per chunk.

    [BENCH_SIZE=tiny] .venv/bin/python -m bench.grpc_gap [--streams 300] [--rounds 3]
        [--variants bare,bare uvloop,producer,producer uvloop,sse]

(``BENCH_SIZE=tiny``: ``bench.paced``'s tiny reply, 4 streams, one round, in seconds.)

bench/README.md ("gRPC's own gap") has the figures and what was kept.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any, Final

from bench.common import alternate, bench_size, median, ratio
from bench.paced import PLANS, PacedPlan, one_round, paced_recording, summary

#: Server options tried against the bare server's CPU per chunk, from gRPC's channel
#: arguments (include/grpc/impl/channel_arg_names.h): the ones that could change what many
#: small messages cost.
OPTIONS: Final = {
    "throughput": "grpc.optimization_target=throughput",
    "no channelz": "grpc.enable_channelz=0",
    "minimal stack": "grpc.minimal_stack=1",
    "no bdp probe": "grpc.http2.bdp_probe=0",
    "write buffer 64k": "grpc.http2.write_buffer_size=65536",
}
UVLOOP: Final = ("--event-loop", "uvloop")
#: Each variant: (its client kind, its server kind, the server's extra flags).
VARIANTS: Final[dict[str, tuple[str, str, tuple[str, ...]]]] = {
    "bare": ("bare", "bare", ()),
    "bare uvloop": ("bare", "bare", UVLOOP),
    **{f"bare +{name}": ("bare", "bare", ("--option", option)) for name, option in OPTIONS.items()},
    "producer": ("replywire", "producer", ()),
    "producer uvloop": ("replywire", "producer", UVLOOP),
    "sse": ("sse", "sse", ()),
}
DEFAULT_VARIANTS: Final = ("bare", "bare uvloop", "producer", "producer uvloop", "sse")


def threads_per_chunk(rounds: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """The server's CPU µs per chunk by thread (user, system), medians of the rounds."""
    names = {name for r in rounds for name in r["server_threads_cpu_s"]}
    out: dict[str, dict[str, float]] = {}
    for name in sorted(names):
        spent = [r["server_threads_cpu_s"].get(name, [0.0, 0.0]) for r in rounds]
        chunks = [r["chunks"] for r in rounds]
        user = median([u / c * 1e6 for (u, _), c in zip(spent, chunks, strict=True) if c])
        system = median([s / c * 1e6 for (_, s), c in zip(spent, chunks, strict=True) if c])
        if user + system >= 0.05:
            out[name] = {"user_us": round(user, 2), "system_us": round(system, 2)}
    return out


def run(plan: PacedPlan, streams: int, rounds: int, variants: tuple[str, ...]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="replywire-gap-") as workdir:
        folder = Path(workdir)
        recording, sha256 = paced_recording(folder, plan.content_frames)

        def side(name: str) -> Any:
            client, server, flags = VARIANTS[name]
            return lambda: one_round(
                name, streams, plan, folder, recording, sha256,
                kinds=(client, server), server_flags=flags,
            )  # fmt: skip

        runs = alternate({name: side(name) for name in variants}, rounds)
    rows: dict[str, Any] = {}
    for name, found in runs.items():
        row = summary(found)
        rows[name] = {
            "server_us_per_chunk": row["server_cpu_us_per_chunk"],
            "client_us_per_chunk": row["client_cpu_us_per_chunk"],
            "added_ms_p99": row["added_ms_p99"],
            "failures": row["failures"],
            "server_us_per_chunk_by_round": [
                round(r["server_cpu_s"] / r["chunks"] * 1e6, 2) for r in found if r["chunks"]
            ],
            "server_threads_us_per_chunk": threads_per_chunk(found),
        }
    for row in rows.values():
        for base in ("bare", "sse"):
            if base in rows:
                row[f"server_over_{base}"] = ratio(
                    row["server_us_per_chunk"], rows[base]["server_us_per_chunk"]
                )
    if "producer" in rows and "producer uvloop" in rows:
        rows["producer uvloop"]["server_over_producer"] = ratio(
            rows["producer uvloop"]["server_us_per_chunk"], rows["producer"]["server_us_per_chunk"]
        )
    return {
        "streams": streams,
        "rounds": rounds,
        "chunks_per_stream": plan.content_frames + 1,
        "interval_ms": plan.interval_ms,
        "variants": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = bench_size()
    tiny = size == "tiny"
    parser.add_argument("--streams", type=int, default=4 if tiny else 300)
    parser.add_argument("--rounds", type=int, default=1 if tiny else 3)
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    args = parser.parse_args()
    variants = tuple(name.strip() for name in args.variants.split(","))
    unknown = [name for name in variants if name not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}: one of {list(VARIANTS)}")
    print(json.dumps(run(PLANS[size], args.streams, args.rounds, variants), indent=2))


if __name__ == "__main__":
    main()
