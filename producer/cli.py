"""``python -m producer``: serve ``replywire.v1.ReplyStream`` until SIGINT / SIGTERM.

Every flag has an environment variable (``REPLYWIRE_<FLAG>``); a flag on the
command line wins. Exit codes: 0 after a clean shutdown, 2 for a usage or
configuration error (including a recording that fails its checks).

The flags are ``producer.flags``'; this module wires what they build: the exposure, the
stores, the source, the server, and its start and stop.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import structlog

from replywire.native import running
from replywire.producer.edge import conformance
from replywire.producer.edge.admission import default_per_identity
from replywire.producer.edge.security import TokenAuthenticator, is_loopback, server_credentials
from replywire.producer.edge.server import start_server, stop_server
from replywire.producer.event_loop import EventLoopUnavailable, run, running_loop
from replywire.producer.files import write_atomically
from replywire.producer.flags import build_parser
from replywire.producer.metrics import MetricsEndpoint, MetricsTls, ProducerMetrics, install
from replywire.producer.opening import ledger_durability, make_source, open_reply_log, store_of
from replywire.producer.replylog.interface import LogLimits
from replywire.producer.settings import (
    Exposure,
    ServerSettings,
)
from replywire.producer.worker_metrics import SocketEndpoint, serve_on_socket
from replywire.producer.workers import (
    ParentSettings,
    WorkerSlot,
    refuse_unshareable,
    reserve_port,
    run_parent,
)
from replywire.runtime.library_logs import (
    LibraryLogBounds,
    counts,
    flush_suppressed,
    route_stdlib_logging,
    set_library_log_bounds,
)
from replywire.runtime.logs import (
    configure_logging,
    flush_trace,
)
from replywire.runtime.output_paths import check_writable
from replywire.runtime.recording_file import (
    load_recording_or_explain,
)
from replywire.runtime.tracing import (
    TracingConfig,
    endpoint_from,
    start_tracing,
    stop_tracing,
)
from replywire.shared.errors import ConfigurationError
from replywire.shared.recording import Recording
from replywire.shared.status import EXIT_USAGE


def exposure_from(args: argparse.Namespace) -> Exposure:
    """TLS and tokens from the flags; refuses an exposed, unprotected producer."""
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ConfigurationError("--tls-cert and --tls-key go together")
    if args.tls_client_ca is not None and args.tls_cert is None:
        raise ConfigurationError("--tls-client-ca needs --tls-cert and --tls-key")
    protected = args.tls_cert is not None and args.auth_tokens is not None
    if not is_loopback(args.host) and not protected and not args.insecure:
        raise ConfigurationError(
            f"refusing to listen on {args.host} (not a loopback address) without TLS and "
            "tokens: give --tls-cert, --tls-key and --auth-tokens, or --insecure"
        )
    return Exposure(
        credentials=server_credentials(args.tls_cert, args.tls_key, args.tls_client_ca)
        if args.tls_cert is not None
        else None,
        authenticator=TokenAuthenticator.from_file(args.auth_tokens)
        if args.auth_tokens is not None
        else None,
    )


def metrics_tls_from(args: argparse.Namespace) -> MetricsTls | None:
    """The metrics endpoint's TLS: the producer's certificate when it has one. A
    non-loopback ``--metrics-host`` needs it, or ``--insecure`` (the gRPC port's rule; a
    scrape spends nothing, so no token: ``--tls-client-ca`` asks scrapers for a
    certificate)."""
    if args.tls_cert is None or args.tls_key is None:
        if (
            args.metrics_port is not None
            and not is_loopback(args.metrics_host)
            and not args.insecure
        ):
            raise ConfigurationError(
                f"refusing to serve metrics on {args.metrics_host} (not a loopback address) "
                "without TLS: give --tls-cert and --tls-key, or --insecure"
            )
        return None
    return MetricsTls(args.tls_cert, args.tls_key, args.tls_client_ca)


def insecure_warning(host: str, exposure: Exposure) -> str:
    missing = [
        what
        for what, given in (("TLS", exposure.credentials), ("tokens", exposure.authenticator))
        if given is None
    ]
    return (
        f"INSECURE: listening on {host} without {' and '.join(missing)}: "
        "anyone who reaches the port can use it"
    )


def announce_ready(path: Path | None, address: str) -> None:
    """Write ``HOST:PORT`` to the ready file, all at once: a reader never sees half of it."""
    if path is not None:
        write_atomically(path, address.encode())


async def serve(
    args: argparse.Namespace, recording: Recording, slot: WorkerSlot | None = None
) -> int:
    """One producer, or (``slot``) one worker of a parent's (``producer.workers``)."""
    log = structlog.get_logger()
    exposure = exposure_from(args)
    metrics_tls = metrics_tls_from(args)
    source = make_source(args, recording)
    metrics = ProducerMetrics()
    install(metrics)  # the ledger's spend goes to this producer's metrics
    limits = LogLimits(
        max_frames=args.reply_log_max_frames,
        max_bytes=args.reply_log_max_bytes,
        max_replies=args.reply_log_max_replies,
        ttl_s=args.reply_log_ttl_s,
        detach_grace_s=args.detach_grace_s,
        lease_s=args.reply_log_lease_s,
    )
    reply_log = await open_reply_log(args, limits, metrics)
    otlp_endpoint = endpoint_from(args.otlp_endpoint)
    if otlp_endpoint is not None:  # off: nothing of OpenTelemetry is even imported
        start_tracing(TracingConfig("replywire-producer", otlp_endpoint)).set_on_drop(
            metrics.spans_dropped
        )
        log.info("tracing_on", exporter="otlp-grpc")  # the endpoint may hold credentials
    settings = ServerSettings(
        host=args.host,
        port=args.port,
        allow_faults=args.allow_faults,
        max_connection_age_s=args.max_connection_age_s,
        max_connection_idle_s=args.max_connection_idle_s,
        keepalive_s=args.keepalive_s,
        keepalive_timeout_s=args.keepalive_timeout_s,
        min_ping_interval_s=args.min_ping_interval_s,
        exposure=exposure,
        max_streams=args.max_streams,
        max_streams_per_identity=args.max_streams_per_identity
        or default_per_identity(args.max_streams),
        max_pending=args.max_pending,
        metrics=metrics,
        log_limits=limits,
        reply_log=reply_log,
        max_health_watches=args.max_health_watches,
        max_metadata_bytes=args.max_metadata_bytes,
        share_port=slot is not None,
    )
    server, port, servicer = await start_server(source, settings)
    if not is_loopback(args.host) and (
        exposure.credentials is None or exposure.authenticator is None
    ):
        warning = insecure_warning(args.host, exposure)  # only reached with --insecure
        print(f"producer: {warning}", file=sys.stderr, flush=True)
        log.warning("producer_insecure", detail=warning)
    endpoint: MetricsEndpoint | None = None
    if args.metrics_port is not None:
        try:
            endpoint = metrics.serve(args.metrics_host, args.metrics_port, metrics_tls)
        except OSError as error:
            await server.stop(None)
            raise ConfigurationError(
                f"cannot serve metrics on {args.metrics_host}:{args.metrics_port}: "
                f"{error.strerror or error}"
            ) from error
        if metrics_tls is None and not is_loopback(args.metrics_host):
            warning = (  # only reached with --insecure
                f"INSECURE: serving metrics on {args.metrics_host} without TLS: "
                "anyone who reaches the port can read them"
            )
            print(f"producer: {warning}", file=sys.stderr, flush=True)
            log.warning("metrics_insecure", detail=warning)
        log.info(
            "metrics_listening",
            host=args.metrics_host,
            port=endpoint.port,
            tls=metrics_tls is not None,
            mutual_tls=metrics_tls is not None and metrics_tls.client_ca is not None,
        )
    worker_endpoint: SocketEndpoint | None = None
    if slot is not None:  # its figures go to the parent's one /metrics
        worker_endpoint = serve_on_socket(metrics.registry, slot.metrics_socket)
    stop, stop_now = asyncio.Event(), asyncio.Event()
    stop_on_signals(stop, stop_now, args.shutdown_grace_s)
    if slot is not None:
        stop_with_parent(stop)
    log.info(
        "producer_listening",
        **running().as_record(),
        **({} if slot is None else {"worker": slot.index, "workers": slot.workers}),
        host=args.host,
        port=port,
        source=args.source,
        allow_faults=args.allow_faults,
        event_loop=running_loop(),
        tls=exposure.credentials is not None,
        mutual_tls=args.tls_client_ca is not None,
        tokens=len(exposure.authenticator.names) if exposure.authenticator else 0,
        max_streams=args.max_streams,
        max_streams_per_identity=servicer.admission.max_per_identity,
        max_health_watches=args.max_health_watches,
        recording_sha256=recording.sha256,
        model=args.model if args.source == "gemini" else None,
        budget_usd=args.budget_usd if args.source == "gemini" else None,
        # Where state is kept, without a URL's password.
        ledger=store_of("--ledger", args.ledger).shown if args.source == "gemini" else None,
        reply_log=store_of("--reply-log", args.reply_log).shown,
    )
    # The one line a wrapper script (or a test) reads to find an ephemeral port.
    flush_trace()  # what the trace says so far is in it before anyone is told to look
    print(f"listening on {args.host}:{port}", flush=True)
    announce_ready(args.ready_file, f"{args.host}:{port}")
    await stop.wait()
    log.info("producer_stopping", grace_s=args.shutdown_grace_s, open_streams=servicer.open_streams)
    # NOT_SERVING before anything stops: a health watcher hears it while streams finish.
    await servicer.enter_shutdown()
    await stop_server(server, servicer, args.shutdown_grace_s, stop_now)
    await source.aclose()
    await reply_log.aclose()
    if endpoint is not None:
        endpoint.close()
    # Every library record not written is told before the last record, which counts them.
    flush_suppressed()
    # Logged after every stream's final record: opened = the sum of the final counts.
    log.info(
        "producer_stopped",
        open_streams=servicer.open_streams,
        health_watches_refused=servicer.health.refused,
        **servicer.counters.fields(),
        **counts(),
    )
    if worker_endpoint is not None:
        worker_endpoint.close()
    stop_tracing()  # what is held is exported, within runtime.otel.EXIT_FLUSH_S
    return 0


def stop_with_parent(stop: asyncio.Event) -> None:
    """A worker's stdin is a pipe its parent holds and never writes: end of file (the parent
    gone, even by SIGKILL) stops the worker as a SIGTERM would."""
    loop = asyncio.get_running_loop()

    def on_parent_gone() -> None:
        loop.remove_reader(sys.stdin.fileno())
        if not stop.is_set():
            structlog.get_logger().warning("producer_parent_lost")
            stop.set()

    loop.add_reader(sys.stdin.fileno(), on_parent_gone)


def stop_on_signals(stop: asyncio.Event, stop_now: asyncio.Event, grace_s: float) -> None:
    """SIGINT and SIGTERM: the first sets ``stop`` (a graceful stop), a second ``stop_now``
    (the grace ended at once). A first SIGINT, a Ctrl-C, is acknowledged on the terminal in
    one line, wherever the trace goes (with ``--trace-file`` it would say nothing else)."""

    def on_signal(signum: signal.Signals) -> None:
        if stop.is_set():
            stop_now.set()
            return
        stop.set()
        if signum is signal.SIGINT:
            print(stopping_line(grace_s), file=sys.stderr, flush=True)

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)


def stopping_line(grace_s: float) -> str:
    """The one line a first Ctrl-C gets on the producer's terminal (its stderr)."""
    return (
        f"producer: stopping: no new streams; open ones may finish within {grace_s:g} s "
        "(--shutdown-grace-s); Ctrl-C again stops them now"
    )


def check_before_start(args: argparse.Namespace, *, parent: bool) -> MetricsTls | None:
    """What is checked before anything is logged: a store URL's password is registered as a
    secret, and an unknown scheme stops the producer before it opens anything. A parent of
    workers checks here, once, what its workers are started with; its metrics' TLS."""
    store_of("--ledger", args.ledger)
    store_of("--reply-log", args.reply_log)
    if args.source == "gemini":
        ledger_durability(args)
    check_writable("--trace-file", args.trace_file)
    check_writable("--ready-file", args.ready_file)  # written once it listens
    if not parent:
        return None
    refuse_unshareable(args)
    exposure_from(args)
    return metrics_tls_from(args)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    slot = WorkerSlot.from_environment()
    if slot is not None:  # one of a parent's --workers: its port, its own files
        slot.apply(args)
    parent = slot is None and args.workers > 1
    try:
        metrics_tls = check_before_start(args, parent=parent)
    except ConfigurationError as error:
        print(f"producer: {error}", file=sys.stderr)
        return EXIT_USAGE
    trace = None
    if args.trace_file is not None:
        try:
            # Appending, and each batch written and flushed whole (TraceWriter): every record
            # reaches the file as whole lines, at most --trace-flush-ms after it was made.
            trace = args.trace_file.open("a", encoding="utf-8", buffering=1)
        except OSError as error:
            parser.error(f"--trace-file: {error.strerror}: {args.trace_file}")
    configure_logging(
        "producer",
        log_format=args.log_format,
        level=args.log_level,
        stream=trace,
        batched=True,
        flush_delay_s=args.trace_flush_ms / 1000,
    )
    # grpc's Python loggers (grpc._cython.cygrpc, grpc.aio, ...), Redis' and the HTTP
    # client's would print bare lines into stderr; they become records of the trace with one
    # fixed event name, bounded: gRPC's can hold a peer's header, whole, before any token.
    # The root logger too (""): every other library's (asyncio's, for one) the same way.
    set_library_log_bounds(
        LibraryLogBounds(
            args.library_log_chars, args.library_log_burst, args.library_log_interval_s
        )
    )
    route_stdlib_logging("", "grpc", "redis", "httpx", "httpcore")
    if args.ready_file is not None:  # a stale file must not announce this producer early
        args.ready_file.unlink(missing_ok=True)
    if parent:
        return run_workers(args, list(sys.argv[1:] if argv is None else argv), metrics_tls)
    if args.conformance is not None:
        return conformance.run(
            args.conformance, args.host, args.port, args.ready_file, insecure=args.insecure
        )
    try:
        recording = load_recording_or_explain(args.recording, expected_sha256=args.recording_sha256)
        return run(serve(args, recording, slot), args.event_loop)
    except (ConfigurationError, EventLoopUnavailable) as error:
        print(f"producer: {error}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:
        print(f"producer: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return EXIT_USAGE


def run_workers(args: argparse.Namespace, argv: list[str], metrics_tls: MetricsTls | None) -> int:
    """``--workers N``: the parent (``producer.workers``), on the port it holds for them."""
    try:
        held, _ = reserve_port(args.host, args.port)
    except OSError as error:
        print(f"producer: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return EXIT_USAGE
    settings = ParentSettings(
        host=args.host,
        workers=args.workers,
        ready_file=args.ready_file,
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
        metrics_tls=metrics_tls,
        shutdown_grace_s=args.shutdown_grace_s,
        reply_log=store_of("--reply-log", args.reply_log).shown,
        stopping_line=stopping_line(args.shutdown_grace_s),
    )
    return asyncio.run(run_parent(settings, argv, held))
