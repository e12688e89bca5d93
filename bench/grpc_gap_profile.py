"""What a grpc.aio server's CPU per paced chunk is made of: perf by library, syscalls, cProfile.

One round of ``bench.paced``'s workload (N streams of 300 chunks, 40 ms apart) from the bare
client against ``bench.bare_server`` (the producer's gRPC options; ``--event-loop``), or
with ``--server sse`` from the SSE client against ``bench.sse_server`` (uvicorn), the server
pinned to CPU 0 and the client to CPU 1, each way its own round; every way also prints
the server's context switches per chunk by thread (``/proc``):

* ``perf``: ``perf record`` of the server process over the streams (every thread, user and
  kernel), its samples by shared object: gRPC's library (``cygrpc``: C-core and the Cython
  aio layer), the interpreter (``libpython``: the servicer, asyncio's Python code), asyncio's
  C accelerator (``_asyncio``), protobuf (``_message``/upb), the kernel (the sockets,
  epoll, futexes, thread switches), libc; and the top symbols. Needs ``perf`` and a
  ``perf_event_paranoid`` that lets a user profile their own process (2 does).
* ``syscalls``: ``strace -f -c``: the server's system calls per chunk, every thread (strace
  slows the server; the counts, not the times, are what to read).
* ``cprofile``: the server's main thread under cProfile (the event loop's thread: the
  servicer, grpc.aio's Python and Cython calls, asyncio), its own time grouped by layer:
  ``grpc.aio`` and its Cython (``grpc._cython``), ``asyncio`` (the loop, selectors,
  futures, tasks), the servicer (``bench``), the rest. cProfile adds its own cost to every
  Python call, so read the shares, not the microseconds.

    [BENCH_SIZE=tiny] .venv/bin/python -m bench.grpc_gap_profile perf|syscalls|cprofile
        [--streams 300] [--event-loop asyncio|uvloop] [--server bare|sse]
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

from bench.common import SERVER_CPU, bench_size, pin, start_server
from bench.paced import CASE_ID, PLANS, paced_recording
from replywire.producer.event_loop import ASYNCIO, EVENT_LOOPS

#: The server's interpreter under a tool, pinned to the servers' CPU before it starts.
PINNED_PYTHON: Final = ("taskset", "-c", str(SERVER_CPU), sys.executable)
#: The layer whose time is not counted (``LAYERS``).
WAITING: Final = "waiting in epoll (not counted)"
#: cProfile's functions by layer: the first pattern a function's file or name holds.
LAYERS: Final = (
    # The loop's wait for events: its own time is the main thread asleep, not CPU.
    (WAITING, ("'poll' of 'select.epoll'",)),
    # A callback the loop runs: cProfile cannot see into Cython or C, so grpc.aio's
    # completion callbacks and _asyncio's task steps are this call's own time.
    (
        "callbacks in Cython and C (grpc.aio's completions, asyncio's task steps)",
        ("'run' of '_contextvars.Context'",),
    ),
    ("grpc (aio, cython)", ("grpc/", "cygrpc", "grpc._cython")),
    ("asyncio (loop, selectors, futures)", ("asyncio/", "selectors.py", "_asyncio", "uvloop")),
    ("the servicer (bench)", ("bench/",)),
    ("protobuf", ("protobuf", "_message")),
)


def layer_of(file: str, name: str) -> str:
    for layer, patterns in LAYERS:
        if any(p in file or p in name for p in patterns):
            return layer
    return "the rest (interpreter, builtins)"


def switches(pid: int) -> dict[str, tuple[int, int]]:
    """A process's voluntary and involuntary context switches by thread name (its main
    thread ``main``, its threads of one name summed)."""
    found: dict[str, tuple[int, int]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        name = "main" if int(tid) == pid else fields["Name"].strip()
        voluntary, involuntary = found.get(name, (0, 0))
        found[name] = (
            voluntary + int(fields["voluntary_ctxt_switches"]),
            involuntary + int(fields["nonvoluntary_ctxt_switches"]),
        )
    return found


def one_round(streams: int, workdir: Path, args: argparse.Namespace, wrap: list[str]) -> str:
    """A round against a server (``args.server``) started under ``wrap`` (a profiler's
    command line before ``-m bench.…_server``); the client's JSON line, and the server's
    context switches per chunk by thread."""
    plan = PLANS[bench_size()]
    recording, sha256 = paced_recording(workdir, plan.content_frames)
    flags = ["--port", "0", "--recording", str(recording), "--recording-sha256", sha256]
    if args.server == "bare":
        flags += ["--producer-options", "--event-loop", args.event_loop]
    module = f"bench.{args.server}_server"
    server, port = start_server([*wrap, "-m", module, *flags], module)
    # Under a tool the server is its child (taskset has pinned it, and become it).
    children = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()
    pid = int(children[0]) if wrap[0] != sys.executable else server.pid
    pin(pid, SERVER_CPU)
    before = switches(pid)
    try:
        client = subprocess.run(
            [
                sys.executable, "-m", "bench.paced_client", "--kind", args.server,
                "--target", f"127.0.0.1:{port}", "--server-pid", str(pid),
                "--streams", str(streams), "--interval-ms", str(plan.interval_ms),
                "--ramp-s", str(plan.ramp_s), "--case", CASE_ID,
                "--recording", str(recording), "--recording-sha256", sha256,
            ],
            capture_output=True, text=True, timeout=600, check=True,
        )  # fmt: skip
        after = switches(pid)
    finally:
        # A graceful stop: cProfile writes its file; perf and strace end with their workload.
        os.kill(pid, signal.SIGTERM)
        server.wait(timeout=60)
    line = client.stdout.strip().splitlines()[-1]
    chunks = max(1, json.loads(line)["chunks"])
    print(line)
    if wrap[0] != "strace":  # ptrace's stops are switches of their own
        print("== context switches per chunk by thread (voluntary, involuntary)")
        for name, (voluntary, involuntary) in sorted(after.items()):
            was = before.get(name, (0, 0))
            print(
                f"{name:16s} {(voluntary - was[0]) / chunks:6.2f} "
                f"{(involuntary - was[1]) / chunks:6.2f}"
            )
    return line


def perf(streams: int, workdir: Path, args: argparse.Namespace) -> None:
    data = workdir / "server.perf"
    # perf runs the server (and follows every thread it starts), sampling at 999 Hz.
    wrap = ["perf", "record", "-F", "999", "-o", str(data), "--"]
    one_round(streams, workdir, args, [*wrap, *PINNED_PYTHON])
    for keys, limit in (("dso", 12), ("dso,sym", 40)):
        report = subprocess.run(
            ["perf", "report", "-i", str(data), "--no-children", "--sort", keys, "--stdio"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        lines = [line for line in report.stdout.splitlines() if "%" in line[:12]]
        print(f"== samples by {keys}")
        print("\n".join(lines[:limit]))


def syscalls(streams: int, workdir: Path, args: argparse.Namespace) -> None:
    out = workdir / "server.strace"
    line = one_round(streams, workdir, args, ["strace", "-f", "-c", "-o", str(out), *PINNED_PYTHON])
    chunks = max(1, json.loads(line)["chunks"])
    print("== system calls per chunk (strace -c, every thread)")
    for row in out.read_text().splitlines():
        cells = row.split()
        if len(cells) >= 5 and cells[3].isdigit() and int(cells[3]) / chunks >= 0.01:
            print(f"{cells[-1]:16s} {int(cells[3]) / chunks:6.2f}")


def cprofile(streams: int, workdir: Path, args: argparse.Namespace) -> None:
    out = workdir / "server.prof"
    one_round(streams, workdir, args, [sys.executable, "-m", "cProfile", "-o", str(out)])
    stats = pstats.Stats(str(out))
    by_layer: dict[str, float] = {}
    for (file, _line, name), (_cc, _nc, own, _cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        by_layer[layer_of(file, name)] = by_layer.get(layer_of(file, name), 0.0) + own
    total = sum(own for layer, own in by_layer.items() if layer != WAITING)
    print("== the main thread's own time by layer (cProfile: wall time, its wait apart)")
    for layer, own in sorted(by_layer.items(), key=lambda item: -item[1]):
        share = "" if layer == WAITING else f"{own / total:6.1%}"
        print(f"{share:>6s}  {own:7.2f} s  {layer}")
    stats.sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("how", choices=tuple(HOWS))
    parser.add_argument("--streams", type=int, default=4 if bench_size() == "tiny" else 300)
    parser.add_argument("--event-loop", choices=EVENT_LOOPS, default=ASYNCIO)
    parser.add_argument("--server", choices=("bare", "sse"), default="bare")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="replywire-gap-profile-") as workdir:
        HOWS[args.how](args.streams, Path(workdir), args)


HOWS: Final = {"perf": perf, "syscalls": syscalls, "cprofile": cprofile}


if __name__ == "__main__":
    main()
