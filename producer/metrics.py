"""The producer's Prometheus metrics, in a registry of its own (never the global one).

One :class:`ProducerMetrics` per producer: the servicer updates it where its
counters change, and ``--metrics-port`` serves it over HTTP. A registry per
producer keeps several producers in one process (the tests) apart.

Names (all prefixed ``replywire_``; a counter's name says what it counts, and no counter
has a ``_created`` series: prometheus_client's ``Counter`` adds one per label set, a
timestamp gauge that counts nothing, so the counters here are :class:`Tally`):

- ``replywire_streams_ended_total{outcome,reason}``: streams ended, by final state and
  reason code (``reason=""`` for ``completed``; a reason that is not a registered code
  is counted as ``internal_error``, so the label stays in the registry and bounded)
- ``replywire_streams_open``: streams open now
- ``replywire_bytes_written_total``, ``replywire_chunks_written_total``: chunk
  bytes and chunks written to consumers
- ``replywire_chunk_write_wait_seconds``: how long each ``context.write`` waited
  (for the consumer's HTTP/2 window)
- ``replywire_ledger_spend_usd_total``: the cost the Gemini ledger settled
- ``replywire_reply_log_followers``: a shared reply log: followers running now (none
  holds a connection while it waits: they are told on one pub/sub connection)
- ``replywire_reply_log_replies_read``: a shared reply log: replies read here now (their
  readers admitted; at most ``--reply-log-replies-read``)
- ``replywire_requests_refused_total{reason}``: requests refused before a stream began
  (``invalid_token``, ``invalid_request``, ``metadata_too_large``): the trace's
  ``requests_unauthenticated``, ``requests_malformed``, ``requests_metadata_too_large``
- ``replywire_generations_ended_total{outcome}``: replies whose generation
  (``producer.generation``) ended, by outcome (``completed`` or a registered reason code)

The endpoint (``serve``): plain HTTP, or HTTPS with the producer's own certificate
(``MetricsTls``; with a client CA a scraper must present a certificate it signed). The
TLS handshake runs in the connection's own thread with a timeout, never in the accepting
one: prometheus_client's ``start_http_server(certfile=...)`` wraps the listening socket,
so one peer that connects and sends nothing holds every later scrape.

The ledger hook: the Gemini source, where it settles a call, calls
``record_ledger_spend(cost_usd)``, which adds to the metrics this process
installed (``install``), and does nothing in a process that installed none.
"""

from __future__ import annotations

import socket
import ssl
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any, Final
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, Gauge, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from replywire.shared.reasons import CODES, Reason

#: Seconds a write may wait for the window: sub-millisecond on a reading consumer,
#: up to the connection's age on one that stopped reading.
WRITE_WAIT_BUCKETS: Final = (
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0,
)  # fmt: skip
#: How long one scrape's connection may take for its TLS handshake, and between reads.
CONNECTION_TIMEOUT_S: Final = 10.0


class ProducerMetrics:
    """The metrics of one producer, in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.streams_ended = Tally(
            "replywire_streams_ended",
            "Streams ended, by final state (outcome) and reason code",
            ("outcome", "reason"),
        )
        r.register(self.streams_ended)
        self.streams_open = Gauge("replywire_streams_open", "Streams open now", registry=r)
        self.written = WrittenChunks()
        r.register(self.written)
        self.ledger_spend = Tally(
            "replywire_ledger_spend_usd", "US dollars the Gemini ledger settled"
        )
        r.register(self.ledger_spend)
        self.generations_ended = Tally(
            "replywire_generations_ended",
            "Replies whose generation ended, by outcome (completed or a reason code)",
            ("outcome",),
        )
        r.register(self.generations_ended)
        self.trace_spans_dropped = Tally(
            "replywire_trace_spans_dropped",
            "Spans not exported (the export queue full, the collector failing or not "
            "answering): with --otlp-endpoint only",
        )
        r.register(self.trace_spans_dropped)
        self.requests_refused = Tally(
            "replywire_requests_refused",
            "Requests refused before a stream began (no stream id is trusted), by reason code",
            ("reason",),
        )
        r.register(self.requests_refused)

    def stream_ended(self, outcome: str, reason: str) -> None:
        # Outcomes and reason codes are closed sets: a label is never free text.
        if reason and reason not in CODES:
            reason = Reason.INTERNAL_ERROR.value
        self.streams_ended.inc(outcome, reason)

    def generation_ended(self, outcome: str) -> None:
        if outcome != "completed" and outcome not in CODES:
            outcome = Reason.INTERNAL_ERROR.value
        self.generations_ended.inc(outcome)

    def watch_reply_log(self, followers: Callable[[], int], replies: Callable[[], int]) -> None:
        """A shared reply log's readers, read when scraped (registered only with one)."""
        r = self.registry
        Gauge(
            "replywire_reply_log_followers",
            "Followers of the shared reply log running now (none holds a connection waiting)",
            registry=r,
        ).set_function(followers)
        Gauge(
            "replywire_reply_log_replies_read",
            "Replies read from the shared reply log here now (at most --reply-log-replies-read)",
            registry=r,
        ).set_function(replies)

    def request_refused(self, reason: Reason) -> None:
        self.requests_refused.inc(reason.value)

    def spans_dropped(self, count: int) -> None:
        self.trace_spans_dropped.inc(amount=count)

    def chunk_written(self, size: int, waited_s: float) -> None:
        self.written.add(size, waited_s)

    def ledger_settled(self, cost_usd: float) -> None:
        if cost_usd > 0:
            self.ledger_spend.inc(amount=cost_usd)

    def serve(self, host: str, port: int, tls: MetricsTls | None = None) -> MetricsEndpoint:
        """Serve ``/metrics`` on ``host:port`` (0 picks a free port): HTTP, or HTTPS with
        ``tls``. A certificate or key that does not load is an ``OSError``."""
        return serve_registry(self.registry, host, port, tls)


def serve_registry(
    registry: CollectorRegistry, host: str, port: int, tls: MetricsTls | None = None
) -> MetricsEndpoint:
    """``registry`` on ``http(s)://host:port/metrics`` (a producer's, or the sum of its
    workers': ``producer.worker_metrics``)."""
    context = tls.context() if tls is not None else None
    host = host.strip("[]")  # "[::1]", as the gRPC port takes it
    ((family, *_),) = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[:1]
    server_class = MetricsServer6 if family == socket.AF_INET6 else MetricsServer
    server = server_class((host, port), QuietHandler)
    server.set_app(make_wsgi_app(registry))
    server.tls_context = context
    thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
    thread.start()
    return MetricsEndpoint(server, thread)


@dataclass(frozen=True, slots=True)
class MetricsTls:
    """The producer's certificate and key; with ``client_ca``, scrapers need a certificate
    that CA signed (mutual TLS, as ``--tls-client-ca`` asks of gRPC clients)."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(certfile=self.cert, keyfile=self.key)
        if self.client_ca is not None:
            context.load_verify_locations(cafile=self.client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
        return context


class QuietHandler(WSGIRequestHandler):
    """Logs nothing (wsgiref writes a line per request to stderr); bounded in time."""

    timeout = CONNECTION_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        return


class MetricsServer(ThreadingMixIn, WSGIServer):
    """A thread per scrape; with a TLS context, its handshake runs in that thread."""

    daemon_threads = True
    tls_context: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls_context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(CONNECTION_TIMEOUT_S)
        with self.tls_context.wrap_socket(request, server_side=True) as wrapped:
            super().finish_request(wrapped, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A scraper that fails its handshake, or goes silent, is its own problem: not a
        traceback on the producer's stderr."""
        return


class MetricsServer6(MetricsServer):
    address_family = socket.AF_INET6


class Tally(Collector):
    """A counter, by the values of ``labels``, rendered when scraped: prometheus_client's
    ``Counter`` without its ``_created`` series (``disable_created_metrics()`` would do that
    for every registry in the process; this is this producer's registry alone). A counter
    without labels is 0 from the start, as a ``Counter``'s is. Safe from any thread (the
    ledger settles from its own)."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...] = ()) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = labels
        self._lock = threading.Lock()
        self._values: dict[tuple[str, ...], float] = {} if labels else {(): 0.0}

    def inc(self, *values: str, amount: float = 1.0) -> None:
        assert len(values) == len(self.labels), (self.name, values)
        with self._lock:
            self._values[values] = self._values.get(values, 0.0) + amount

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, labels=self.labels)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            values = list(self._values.items())
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labels)
        for labels, value in values:
            family.add_metric(labels, value)
        yield family


class WrittenChunks(Collector):
    """Chunks and bytes written, and each write's wait, as plain numbers kept by the one
    event-loop thread that writes, rendered as a counter pair and a histogram when scraped.

    prometheus_client's own ``Counter.inc`` and ``Histogram.observe`` take a lock each:
    three per chunk, a large share of a small chunk's cost. A scrape reads a snapshot of
    the buckets (the ``+Inf`` bucket is their count, always)."""

    def __init__(self) -> None:
        self.chunks = 0
        self.bytes = 0
        self.wait_sum = 0.0
        #: Writes per bucket, not cumulative; the last is beyond every bound.
        self.wait_counts = [0] * (len(WRITE_WAIT_BUCKETS) + 1)

    def add(self, size: int, waited_s: float) -> None:
        self.chunks += 1
        self.bytes += size
        self.wait_sum += waited_s
        self.wait_counts[bisect_left(WRITE_WAIT_BUCKETS, waited_s)] += 1

    def collect(self) -> Iterator[Metric]:
        counts = list(self.wait_counts)
        yield CounterMetricFamily(
            "replywire_bytes_written", "Chunk bytes written to consumers", value=self.bytes
        )
        yield CounterMetricFamily(
            "replywire_chunks_written", "Chunks written to consumers", value=self.chunks
        )
        cumulative, buckets = 0, []
        for bound, count in zip((*map(repr, WRITE_WAIT_BUCKETS), "+Inf"), counts, strict=True):
            cumulative += count
            buckets.append((bound, float(cumulative)))
        yield HistogramMetricFamily(
            "replywire_chunk_write_wait_seconds",
            "Seconds one context.write waited (for the consumer's HTTP/2 window)",
            buckets=buckets,
            sum_value=self.wait_sum,
        )


class MetricsEndpoint:
    """A running ``/metrics`` HTTP server (a daemon thread) and its bound port."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


_installed: ProducerMetrics | None = None


def install(metrics: ProducerMetrics | None) -> None:
    """Make ``metrics`` the one ``record_ledger_spend`` adds to (the CLI's producer)."""
    global _installed  # noqa: PLW0603 - one producer per process; the hook needs no plumbing
    _installed = metrics


def record_ledger_spend(cost_usd: float) -> None:
    """The ledger hook: a call settled at ``cost_usd``. A no-op when nothing is installed."""
    if _installed is not None:
        _installed.ledger_settled(cost_usd)
