"""The one ``/metrics`` of a producer with ``--workers``: each worker's figures, summed.

prometheus_client's multiprocess mode does not fit the producer's metrics: its counters are
collectors of their own (``producer.metrics.Tally``, ``WrittenChunks``: plain numbers, no
lock and no ``_created`` series on the per-chunk path), and its reply-log gauges are read
when scraped (``set_function``), which multiprocess mode cannot carry. So the figures stay
in each worker, as one producer keeps them, and the parent asks every worker when it is
scraped:

- a worker answers its exposition (the text ``/metrics`` would serve) on a Unix socket in
  the parent's private folder (``serve_on_socket``): one connection, one answer, no HTTP,
  nothing on a TCP port;
- the parent's collector (:class:`SummedWorkers`) reads every worker's and adds them up,
  sample by sample (counters, gauges and histogram buckets alike: every figure of one
  producer is a count or a level that adds across workers). A worker that has exited counts
  with its last answer, so a sum never goes down while the others drain; a live worker that
  does not answer fails the scrape (an HTTP 500), never a smaller sum.
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

#: How long the parent waits for one worker's answer.
ANSWER_TIMEOUT_S: Final = 5.0
#: The longest answer read from a worker (an exposition is a few KiB).
MAX_ANSWER_BYTES: Final = 8 * 1024 * 1024


class WorkerSocketServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    registry: CollectorRegistry

    def handle_error(self, request: object, client_address: object) -> None:
        return  # the parent went away mid-answer: nothing to tell


class _Answer(socketserver.BaseRequestHandler):
    server: WorkerSocketServer

    def handle(self) -> None:
        self.request.sendall(generate_latest(self.server.registry))


class SocketEndpoint:
    """A worker's exposition on a Unix socket (a daemon thread), until ``close``."""

    def __init__(self, registry: CollectorRegistry, path: Path) -> None:
        self._server = WorkerSocketServer(str(path), _Answer)
        self._server.registry = registry
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="worker-metrics", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_on_socket(registry: CollectorRegistry, path: Path) -> SocketEndpoint:
    return SocketEndpoint(registry, path)


def ask(path: Path, timeout_s: float = ANSWER_TIMEOUT_S) -> str:
    """One worker's exposition; an ``OSError`` if it does not answer in time."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout_s)
        conn.connect(str(path))
        parts, size = [], 0
        while chunk := conn.recv(65536):
            parts.append(chunk)
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise OSError(f"a worker's metrics past {MAX_ANSWER_BYTES} bytes")
    return b"".join(parts).decode("utf-8")


def summed(expositions: list[str]) -> list[Metric]:
    """The families of every exposition, each sample the sum of its values (same name and
    labels) over them; in the order first seen."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for text in expositions:
        for family in text_string_to_metric_families(text):
            if family.name not in families:
                families[family.name] = Metric(family.name, family.documentation, family.type)
                values[family.name] = {}
            sums = values[family.name]
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                sums[key] = sums.get(key, 0.0) + sample.value
    for name, family in families.items():
        for (sample_name, labels), value in values[name].items():
            family.add_sample(sample_name, dict(labels), value)
    return list(families.values())


class SummedWorkers(Collector):
    """Every worker's figures, summed when scraped. ``workers()`` says, per worker, its
    socket and whether it still runs (one that exited counts with its last answer)."""

    def __init__(self, workers: Callable[[], list[tuple[Path, bool]]]) -> None:
        self._workers = workers
        self._last: dict[Path, str] = {}
        self._lock = threading.Lock()

    def describe(self) -> Iterator[Metric]:
        return iter(())  # nothing is asked of the workers when this is registered

    def collect(self) -> Iterator[Metric]:
        with self._lock:  # two scrapes at once ask each worker once each, in turn
            expositions = []
            for path, running in self._workers():
                try:
                    self._last[path] = ask(path)
                except OSError:
                    if running:
                        raise  # the scrape fails: a sum without a live worker would fall
                if path in self._last:
                    expositions.append(self._last[path])
        yield from summed(expositions)
