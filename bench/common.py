"""What the benchmarks share: the size knob, medians, alternation, CPU time of a process."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

import grpc
from google.protobuf import __version__ as protobuf_version

from replywire.children import START_TIMEOUT_S, read_listening_port, stop_producer

T = TypeVar("T")
Size = Literal["tiny", "full"]
SIZES: Final[tuple[Size, ...]] = ("tiny", "full")
#: The floor sides of the stream benchmarks: a bare client with the consumer's checks (the
#: sans-IO core, no records) and a bare server with the producer's four records per stream,
#: each against the bare other half: what the checks and the records alone cost.
CHECKS_ONLY: Final = "checks only"
RECORDS_ONLY: Final = "records only"
#: The replywire consumer reading the bare server, as the checks-only client does: the
#: consumer's own cost against the checks', with the server the same (the replywire pair's
#: streams/s also carries what its producer costs beyond a bare server's).
CONSUMER_ALONE: Final = "replywire → bare server"


def bench_size(default: Size = "full") -> Size:
    """``BENCH_SIZE`` = tiny | full (tiny: every benchmark once, in seconds, for the tests)."""
    value = os.environ.get("BENCH_SIZE", default)
    if value not in SIZES:
        raise SystemExit(f"BENCH_SIZE must be one of {', '.join(SIZES)}, not {value!r}")
    return value


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def middle(values: Sequence[int]) -> int:
    """A plan's middle value: 1,000 of (100, 1,000, 3,000); the only one of one."""
    return values[len(values) // 2]


def ratio(ours: float, theirs: float) -> float | None:
    return round(ours / theirs, 3) if theirs else None


def alternate(sides: dict[str, Callable[[], T]], rounds: int) -> dict[str, list[T]]:
    """Run every side once per round, the order rotated each round, so drift hits all sides."""
    names = list(sides)
    results: dict[str, list[T]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            results[name].append(sides[name]())
    return results


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process, to the nanosecond: Linux's CPU-time
    clock of another process (the clock id glibc's ``clock_getcpuclockid`` makes: the
    pid's complement shifted left 3, or 2 for the scheduler's clock). Elsewhere, or if the
    kernel refuses it, ``/proc/PID/stat`` in clock ticks (10 ms)."""
    try:
        return time.clock_gettime(((~pid) << 3) | _CPUCLOCK_SCHED)
    except (OSError, OverflowError):
        pass
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


#: Linux's per-process CPU clocks (posix-cpu-timers): the scheduler's run time.
_CPUCLOCK_SCHED = 2
#: The name ``threads_cpu_s`` gives a process's main thread (a server's event loop).
MAIN_THREAD: Final = "main"


def threads_cpu_s(pid: int) -> dict[str, tuple[float, float]]:
    """A running process's user and system CPU seconds by thread name (``/proc``, in clock
    ticks), its threads of one name summed, its main thread (``MAIN_THREAD``) apart: how a
    grpc.aio server's CPU splits between its event loop and gRPC's own threads (its
    completion queue's poller, ``event_engine``, timers). Empty where ``/proc`` is not."""
    ticks = os.sysconf("SC_CLK_TCK")
    found: dict[str, tuple[float, float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as stat:
                head, tail = stat.read().rsplit(")", 1)
        except OSError:  # the thread ended meanwhile
            continue
        name = MAIN_THREAD if int(tid) == pid else head.split("(", 1)[1]
        fields = tail.split()
        user, system = found.get(name, (0.0, 0.0))
        found[name] = (user + int(fields[11]) / ticks, system + int(fields[12]) / ticks)
    return found


@dataclass(frozen=True)
class Machine:
    python: str
    platform: str
    cpus: int
    cpu_model: str
    grpcio: str
    protobuf: str

    @classmethod
    def here(cls) -> Machine:
        model = platform.processor() or "unknown"
        try:
            with open("/proc/cpuinfo") as info:
                for line in info:
                    if line.startswith("model name"):
                        model = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        return cls(
            python=sys.version.split()[0],
            platform=platform.platform(),
            cpus=os.cpu_count() or 0,
            cpu_model=model,
            grpcio=grpc.__version__,
            protobuf=protobuf_version,
        )


#: The CPU the servers (producer, bare server) run on, and the one the clients run on: each
#: side of a stream on a core of its own, the same for every side compared, so a round is
#: not at the mercy of where the scheduler puts gRPC's threads (on two cores, pinning
#: halved the spread of alternated rounds).
SERVER_CPU: Final = 0
CLIENT_CPU: Final = 1


def can_pin() -> bool:
    return hasattr(os, "sched_setaffinity") and (os.cpu_count() or 0) >= 2


def pin(pid: int, cpu: int) -> None:
    """Pin every thread of ``pid`` (threads it starts later inherit it) to ``cpu``; nothing
    where pinning is not possible (fewer than two CPUs, not Linux)."""
    _set_affinity(pid, {cpu})


def unpin(pid: int) -> None:
    """Let every thread of ``pid`` run on any CPU (a child inherits its parent's pinning)."""
    _set_affinity(pid, set(range(os.cpu_count() or 1)))


def _set_affinity(pid: int, cpus: set[int]) -> None:
    if not can_pin():
        return
    try:
        threads = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        threads = [pid]
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:  # a thread that ended meanwhile
            continue


def pinning() -> str:
    if not can_pin():
        return "not pinned (fewer than two CPUs)"
    return f"servers pinned to CPU {SERVER_CPU}, clients to CPU {CLIENT_CPU}"


def load_average() -> str:
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


def stopwatch() -> Callable[[], float]:
    started = time.perf_counter()
    return lambda: time.perf_counter() - started


def start_server(
    command: Sequence[str], what: str, timeout_s: float = START_TIMEOUT_S, **popen: Any
) -> tuple[subprocess.Popen[bytes], int]:
    """Start a server the benchmark measures (``command`` prints ``listening on HOST:PORT``;
    its stderr is dropped unless ``popen`` says otherwise) and return it with its port; one
    that does not listen within ``timeout_s`` is stopped and named."""
    process = subprocess.Popen(
        list(command), stdout=subprocess.PIPE, **{"stderr": subprocess.DEVNULL, **popen}
    )
    port = read_listening_port(process, timeout_s)
    if port is None:
        stop_producer(process)
        raise RuntimeError(f"{what} did not start (exit code {process.poll()})")
    return process, port
