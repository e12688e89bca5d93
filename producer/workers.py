"""``--workers N``: one producer as N processes serving one port.

The process the operator started (the parent) checks the flags once, then starts N workers
of itself (the same command line and environment, and ``REPLYWIRE_WORKER_SLOT``, the
worker's :class:`WorkerSlot`), each a whole producer that binds the one port with
``SO_REUSEPORT``: the kernel spreads new connections over them. The parent serves no
stream; it

- picks the port (``--port 0``) or checks it is free, and holds it bound (``SO_REUSEPORT``,
  not listening) until every worker listens on it;
- writes ``--ready-file`` (and prints ``listening on HOST:PORT``) once every worker serves:
  each worker writes its own ready file in the parent's private folder first;
- serves the one ``--metrics-port``, every worker's figures summed
  (``producer.worker_metrics``);
- forwards SIGINT / SIGTERM to every worker, by pid, as SIGTERM (a second signal again: the
  grace ends at once), and exits once all have, 0 if every one stopped cleanly;
- stops all of them when one exits unasked (a ``worker_exited`` record, one line on stderr,
  exit 1): never a silent half-service. A supervisor (systemd, Kubernetes) starts the
  producer again; a resume lands on any worker through the shared reply log.

Each worker writes its trace to its own file (:func:`worker_trace_file`), and ends when the
parent does (its stdin is a pipe from the parent: end of file is a SIGTERM). What is
refused with several workers (:func:`refuse_unshareable`), and why: docs/operations.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog
from prometheus_client import CollectorRegistry, Gauge

from replywire.producer.files import write_atomically
from replywire.producer.metrics import MetricsEndpoint, MetricsTls, serve_registry
from replywire.producer.store_urls import StoreKind, parse_store
from replywire.producer.worker_metrics import SummedWorkers
from replywire.runtime.logs import flush_trace
from replywire.shared.errors import ConfigurationError
from replywire.shared.status import EXIT_USAGE

#: ``--workers``' bound: a host's cores, at most.
MAX_WORKERS: Final = 64
#: The environment variable that makes a producer one worker of a parent.
WORKER_ENV: Final = "REPLYWIRE_WORKER_SLOT"
#: How long every worker may take to listen.
START_TIMEOUT_S: Final = 60.0
#: How often the parent looks at its workers (exits, ready files).
POLL_S: Final = 0.05
#: Past the grace and the servicer's own abort, how long the parent still waits for a
#: worker to exit before it kills it (SIGKILL, by pid).
STOP_SLACK_S: Final = 15.0
#: Exit code of a parent whose worker failed (exited unasked, or did not stop cleanly).
EXIT_WORKER_FAILED: Final = 1


@dataclass(frozen=True, slots=True)
class WorkerSlot:
    """What makes a producer worker ``index`` (1 to ``workers``) of a parent."""

    index: int
    workers: int
    port: int
    folder: Path

    @property
    def ready_file(self) -> Path:
        return self.folder / f"worker-{self.index}.ready"

    @property
    def metrics_socket(self) -> Path:
        return self.folder / f"worker-{self.index}.metrics"

    def encoded(self) -> str:
        return json.dumps(
            {"index": self.index, "workers": self.workers, "port": self.port,
             "folder": str(self.folder)}
        )  # fmt: skip

    @classmethod
    def from_environment(cls) -> WorkerSlot | None:
        text = os.environ.get(WORKER_ENV)
        if not text:
            return None
        given = json.loads(text)
        return cls(int(given["index"]), int(given["workers"]), int(given["port"]),
                   Path(given["folder"]))  # fmt: skip

    def apply(self, args: argparse.Namespace) -> None:
        """The parent's flags, as this worker takes them: the parent's port, a ready file
        of its own, its own trace file, no metrics port (its figures go to the parent)."""
        args.port = self.port
        args.ready_file = self.ready_file
        if args.trace_file is not None:
            args.trace_file = worker_trace_file(args.trace_file, self.index)
        args.metrics_port = None


def worker_trace_file(trace_file: Path, index: int) -> Path:
    """Worker ``index``'s trace beside the one named: ``producer.jsonl`` ->
    ``producer.worker-1.jsonl`` (the parent writes its own records to the name given)."""
    return trace_file.with_name(f"{trace_file.stem}.worker-{index}{trace_file.suffix}")


def refuse_unshareable(args: argparse.Namespace) -> None:
    """What cannot be spread over several workers: a ConfigurationError, its one line."""
    workers = args.workers
    if parse_store(args.reply_log, memory=True).kind is StoreKind.MEMORY:
        raise ConfigurationError(
            f"--workers {workers} needs a shared reply log, --reply-log redis://HOST:PORT/DB: "
            "with the memory log a resume could land on another worker, which does not hold "
            "the reply"
        )
    if args.conformance is not None:
        raise ConfigurationError(f"--conformance is served by one process, not --workers {workers}")
    if args.source == "gemini" and args.record is not None:
        raise ConfigurationError(
            f"--record with --workers {workers}: every worker would capture into one directory"
        )


def reserve_port(host: str, port: int) -> tuple[socket.socket, int]:
    """The port the workers share, bound with ``SO_REUSEPORT`` (never listening) until they
    listen: ``0`` picks a free one. A given port must be free first (a bind without
    ``SO_REUSEPORT``), so the workers never join a group another producer listens in."""
    ((family, _, _, _, address),) = socket.getaddrinfo(
        host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[:1]
    if port != 0:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
            probe.bind(address)
    held = socket.socket(family, socket.SOCK_STREAM)
    try:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        held.bind(address)
    except OSError:
        held.close()
        raise
    return held, int(held.getsockname()[1])


@dataclass
class Worker:
    slot: WorkerSlot
    process: subprocess.Popen[bytes]
    #: Whether the parent asked it to stop (its exit is then expected).
    asked: bool = False
    reported: bool = False

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def signal(self) -> None:
        if self.running:
            os.kill(self.process.pid, signal.SIGTERM)
        self.asked = True


def start_worker(argv: Sequence[str], slot: WorkerSlot) -> Worker:
    """Worker ``slot.index``: this command again, in a process group of its own (a Ctrl-C on
    the terminal reaches the parent alone, which forwards it once), its stdout discarded
    (the parent says where it listens), its stderr the parent's, its stdin a pipe the parent
    holds (end of file: the parent is gone)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "replywire.producer", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env={**os.environ, WORKER_ENV: slot.encoded()},
        process_group=0,
    )
    return Worker(slot, process)


class Signals:
    """SIGINT and SIGTERM, counted; ``woken`` is set at each."""

    def __init__(self) -> None:
        self.received: list[signal.Signals] = []
        self.woken = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self._on, signum)

    def _on(self, signum: signal.Signals) -> None:
        self.received.append(signum)
        self.woken.set()

    async def sleep(self, seconds: float) -> None:
        """``seconds``, or less if a signal comes."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.woken.wait(), seconds)
        self.woken.clear()


@dataclass(frozen=True, slots=True)
class ParentSettings:
    """What the parent needs of the flags."""

    host: str
    workers: int
    ready_file: Path | None
    metrics_host: str
    metrics_port: int | None
    metrics_tls: MetricsTls | None
    shutdown_grace_s: float
    reply_log: str
    stopping_line: str


class Parent:
    """The workers, started, watched and stopped."""

    def __init__(self, settings: ParentSettings, argv: Sequence[str], port: int) -> None:
        self.settings = settings
        self.argv = list(argv)
        self.port = port
        self.folder = Path(tempfile.mkdtemp(prefix="replywire-workers-"))
        self.workers: list[Worker] = []
        self.log = structlog.get_logger()
        self.failed = False
        #: Whether every worker listened (the ready file written).
        self.listening = False

    def start(self, indexes: range) -> None:
        for index in indexes:
            slot = WorkerSlot(index, self.settings.workers, self.port, self.folder)
            worker = start_worker(self.argv, slot)
            self.workers.append(worker)
            self.log.info("worker_started", worker=index, pid=worker.process.pid)

    def metrics(self) -> CollectorRegistry:
        registry = CollectorRegistry(auto_describe=True)
        registry.register(
            SummedWorkers(lambda: [(w.slot.metrics_socket, w.running) for w in self.workers])
        )
        Gauge(
            "replywire_workers_running",
            "Worker processes of this producer running now (--workers)",
            registry=registry,
        ).set_function(lambda: sum(w.running for w in self.workers))
        return registry

    def exits(self) -> list[Worker]:
        """The workers that exited since last asked (each told once, in a record)."""
        found = []
        for worker in self.workers:
            if not worker.running and not worker.reported:
                worker.reported = True
                code = worker.process.returncode
                expected = worker.asked and code == 0
                (self.log.info if expected else self.log.error)(
                    "worker_exited", worker=worker.slot.index, pid=worker.process.pid,
                    exit_code=code, asked=worker.asked,
                )  # fmt: skip
                if not expected:
                    self.failed = True
                found.append(worker)
        return found

    def forward(self) -> None:
        """A stop to every worker still running (again at a second signal)."""
        for worker in self.workers:
            worker.signal()

    async def until_ready(self, signals: Signals) -> bool:
        """Whether every worker listens; False if one exited first or a signal came."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if signals.received or self.exits():
                return False
            if all(w.slot.ready_file.exists() for w in self.workers):
                return True
            await signals.sleep(POLL_S)
        self.failed = True
        print(
            f"producer: the workers did not all listen within {START_TIMEOUT_S:g} s",
            file=sys.stderr,
            flush=True,
        )
        return False

    async def serve(self, signals: Signals) -> None:
        """Until a signal, or a worker exits unasked (then the others are stopped too)."""
        while not signals.received:
            gone = self.exits()
            if gone:
                worker = gone[0]
                print(
                    f"producer: worker {worker.slot.index} (pid {worker.process.pid}) exited "
                    f"with {worker.process.returncode}; stopping the others",
                    file=sys.stderr,
                    flush=True,
                )
                return
            await signals.sleep(POLL_S)

    async def stop(self, signals: Signals) -> None:
        """Every worker asked to stop, and waited for: a later signal is forwarded again;
        one still running well past the grace is killed."""
        self.forward()
        handled = len(signals.received)
        deadline = time.monotonic() + self.settings.shutdown_grace_s + STOP_SLACK_S
        while any(w.running for w in self.workers):
            if len(signals.received) > handled:
                handled = len(signals.received)
                self.forward()
            if time.monotonic() > deadline:
                for worker in self.workers:
                    if worker.running:
                        self.log.error("worker_killed", worker=worker.slot.index,
                                       pid=worker.process.pid)  # fmt: skip
                        os.kill(worker.process.pid, signal.SIGKILL)
                        worker.process.wait(timeout=10)
            self.exits()
            await signals.sleep(POLL_S)
        self.exits()

    def close(self) -> None:
        for worker in self.workers:
            if worker.process.stdin is not None:
                worker.process.stdin.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def exit_code(self) -> int:
        """0 when every worker stopped cleanly; 2 when one refused its configuration at
        start (its one line said why: a Redis that does not answer, a port taken); else 1."""
        codes = [w.process.returncode for w in self.workers]
        if EXIT_USAGE in codes and not self.listening:
            return EXIT_USAGE
        return EXIT_WORKER_FAILED if self.failed or any(codes) else 0


async def run_parent(settings: ParentSettings, argv: Sequence[str], held: socket.socket) -> int:
    """Start the workers on ``held``'s port, serve until a signal or a failed worker, stop
    them all; the exit code (0: every worker stopped cleanly)."""
    log = structlog.get_logger()
    port = int(held.getsockname()[1])
    parent = Parent(settings, argv, port)
    signals = Signals()
    endpoint: MetricsEndpoint | None = None
    try:
        # The first alone: a configuration only a start finds wrong (a Redis that does not
        # answer, a port taken) is said once, by it, and the others are never started.
        parent.start(range(1, 2))
        ready = await parent.until_ready(signals)
        if ready:
            parent.start(range(2, settings.workers + 1))
            ready = await parent.until_ready(signals)
        held.close()  # every worker listens on it now (or none will)
        if ready and settings.metrics_port is not None:
            try:
                endpoint = serve_registry(
                    parent.metrics(), settings.metrics_host, settings.metrics_port,
                    settings.metrics_tls,
                )  # fmt: skip
            except OSError as error:
                print(
                    f"producer: cannot serve metrics on {settings.metrics_host}:"
                    f"{settings.metrics_port}: {error.strerror or error}",
                    file=sys.stderr,
                    flush=True,
                )
                parent.failed, ready = True, False
            else:
                log.info(
                    "metrics_listening", host=settings.metrics_host, port=endpoint.port,
                    tls=settings.metrics_tls is not None, workers=settings.workers,
                )  # fmt: skip
        if ready:
            log.info(
                "producer_listening", host=settings.host, port=port, workers=settings.workers,
                pids=[w.process.pid for w in parent.workers], reply_log=settings.reply_log,
            )  # fmt: skip
            announce(settings, port)
            parent.listening = True
            await parent.serve(signals)
        if signals.received and signals.received[0] is signal.SIGINT:
            print(settings.stopping_line, file=sys.stderr, flush=True)
        log.info("producer_stopping", workers=settings.workers,
                 running=sum(w.running for w in parent.workers))  # fmt: skip
        await parent.stop(signals)
    finally:
        if endpoint is not None:
            endpoint.close()
        parent.close()
    code = parent.exit_code()
    log.info(
        "producer_stopped", workers=settings.workers, exit_code=code,
        worker_exit_codes=[w.process.returncode for w in parent.workers],
    )  # fmt: skip
    return code


def announce(settings: ParentSettings, port: int) -> None:
    """The one ``listening on`` line and the ready file, once every worker serves."""
    flush_trace()
    print(f"listening on {settings.host}:{port}", flush=True)
    if settings.ready_file is not None:
        write_atomically(settings.ready_file, f"{settings.host}:{port}".encode())
