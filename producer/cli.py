"""``python -m producer``: serve ``replywire.v1.ReplyStream`` until SIGINT / SIGTERM.

Every flag has an environment variable (``REPLYWIRE_<FLAG>``); a flag on the
command line wins. Exit codes: 0 after a clean shutdown, 2 for a usage or
configuration error (including a recording that fails its checks).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import redis
import structlog

from producer.admission import default_per_identity
from producer.files import write_atomically
from producer.gemini.capture import RunCapture
from producer.gemini.keeper import (
    DEFAULT_FINAL_TRY_S,
    DEFAULT_RECONCILE_S,
    DEFAULT_RETRY_CAP_S,
    DEFAULT_RETRY_JITTER,
    DEFAULT_RETRY_S,
    LedgerPolicy,
)
from producer.gemini.ledger import DEFAULT_LEASE_S as DEFAULT_LEDGER_LEASE_S
from producer.gemini.ledger import TIMEOUT_S as LEDGER_TIMEOUT_S
from producer.gemini.ledger import Ledger, Owner, Rates
from producer.gemini.ledgers import open_ledger
from producer.gemini.protocol import DEFAULT_BASE_URL, DEFAULT_MAX_OUTPUT_TOKENS, DEFAULT_MODEL
from producer.gemini.redis_ledger import DEFAULT_PREFIX, RedisOptions
from producer.gemini.redis_ledger import DEFAULT_TTL_S as DEFAULT_LEDGER_TTL_S
from producer.gemini.source import GeminiSettings, GeminiSource
from producer.health import DEFAULT_MAX_HEALTH_WATCHES
from producer.metrics import MetricsEndpoint, MetricsTls, ProducerMetrics, install
from producer.redis_replylog import RedisReplyLog
from producer.replylog import (
    DEFAULT_DETACH_GRACE_S,
    DEFAULT_LEASE_S,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_FRAMES,
    DEFAULT_MAX_REPLIES,
    LogLimits,
    MemoryReplyLog,
    ReplyLog,
)
from producer.replylog import DEFAULT_TTL_S as DEFAULT_REPLY_TTL_S
from producer.security import TokenAuthenticator, is_loopback, server_credentials
from producer.server import start_server, stop_server
from producer.settings import (
    DEFAULT_MAX_CONNECTION_AGE_S,
    DEFAULT_MAX_PENDING,
    DEFAULT_MAX_STREAMS,
    MIN_PING_INTERVAL_S,
    Exposure,
    ServerSettings,
)
from producer.sources import Source
from producer.sources.recording import RecordingSource
from producer.store_urls import Store, StoreError, StoreKind, parse_store, redacted
from runtime.help_format import DefaultsHelpFormatter
from runtime.logs import (
    DEFAULT_FLUSH_DELAY_S,
    LEVELS,
    TRACE_FLUSH_HELP,
    configure_logging,
    flush_delay_ms,
    flush_trace,
    register_secret,
    route_stdlib_logging,
)
from runtime.recording_file import DEFAULT_RECORDING_PATH, load_recording_or_explain
from shared.errors import EXIT_USAGE, ConfigurationError, RequestRefused
from shared.recording import RECORDING_SHA256, Recording

ENV_PREFIX: Final = "REPLYWIRE_"
SHUTDOWN_GRACE_S: Final = 5.0
MAX_PORT: Final = 65535
TRUE_WORDS: Final = frozenset({"1", "true", "yes", "on"})


def env(name: str, default: str) -> str:
    return os.environ.get(ENV_PREFIX + name, default)


def port_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from error
    if not 0 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"a port is 0..{MAX_PORT} (0 picks a free one): {value}")
    return value


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from error
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0: {text}")
    return value


def stream_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from error
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


def optional_count(text: str) -> int | None:
    return stream_count(text) if text else None


def optional_port(text: str) -> int | None:
    return port_number(text) if text else None


def shown_default(value: str) -> str:
    """A store flag's ``(default: ...)`` for ``--help``, without a password the environment
    put in it. ``%(default).0s`` formats the real default as nothing: argparse, seeing it,
    adds no ``(default: ...)`` of its own."""
    shown = redacted(value).replace("%", "%%")  # argparse formats help with %
    return f"(default: {shown})%(default).0s"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m producer",
        description="replywire producer: a grpc.aio server of replywire.v1.ReplyStream. "
        "Each flag may also be set as REPLYWIRE_<FLAG> (e.g. REPLYWIRE_PORT=0).",
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("--host", default=env("HOST", "127.0.0.1"), help="address to listen on")
    parser.add_argument(
        "--port", type=port_number, default=env("PORT", "50051"), help="0 picks a free port"
    )
    parser.add_argument(
        "--source",
        choices=("recording", "gemini"),
        default=env("SOURCE", "recording"),
        help="where replies come from",
    )
    parser.add_argument(
        "--recording",
        type=Path,
        default=Path(env("RECORDING", str(DEFAULT_RECORDING_PATH))),
        help="the hashed recording the replies and bindings come from",
    )
    parser.add_argument(
        "--recording-sha256",
        default=env("RECORDING_SHA256", RECORDING_SHA256),
        help="the pinned SHA-256 of --recording (a converted capture pins its own)",
    )
    gemini = parser.add_argument_group("gemini source (needs GEMINI_API_KEY)")
    gemini.add_argument("--model", default=env("MODEL", DEFAULT_MODEL), help="the model in the URL")
    gemini.add_argument(
        "--gemini-base-url",
        default=env("GEMINI_BASE_URL", DEFAULT_BASE_URL),
        help="where the API is (e.g. the fake server: python -m harness.fake_gemini)",
    )
    gemini.add_argument(
        "--max-output-tokens",
        type=int,
        default=env("MAX_OUTPUT_TOKENS", str(DEFAULT_MAX_OUTPUT_TOKENS)),
        help="sent as maxOutputTokens; the worst case the ledger reserves",
    )
    gemini.add_argument(
        "--ledger", default=(ledger := env("LEDGER", "runs/gemini-ledger.json")),
        help="budget ledger shared by every producer that spends on this key: a file path,"
        " or redis://HOST:PORT/DB (rediss://, unix://) for producers on several hosts;"
        " any other scheme:// is refused " + shown_default(ledger),
    )  # fmt: skip
    gemini.add_argument(
        "--ledger-prefix", default=env("LEDGER_PREFIX", DEFAULT_PREFIX),
        help="the Redis ledger's key prefix",
    )  # fmt: skip
    gemini.add_argument(
        "--ledger-ttl-s", type=int, default=env("LEDGER_TTL_S", str(DEFAULT_LEDGER_TTL_S)),
        help="a settled or released call stays in the Redis ledger this long (the sums stay)",
    )  # fmt: skip
    for flag, name, default, meaning in (
        ("--ledger-lease-s", "LEDGER_LEASE_S", DEFAULT_LEDGER_LEASE_S,
         "this producer's claim on its reservations lasts this long unrefreshed (refreshed "
         "every third of it); once it lapses another producer reconciles them"),
        ("--ledger-timeout-s", "LEDGER_TIMEOUT_S", LEDGER_TIMEOUT_S,
         "the longest one ledger operation waits (a Redis round trip, the file's lock); "
         "at most a third of --ledger-lease-s"),
        ("--ledger-reconcile-s", "LEDGER_RECONCILE_S", DEFAULT_RECONCILE_S,
         "how often (and once at start) reservations of a producer whose lease lapsed are "
         "reconciled: released if never sent, kept (failed) if they may have been"),
        ("--ledger-retry-s", "LEDGER_RETRY_S", DEFAULT_RETRY_S,
         "a settle the ledger did not take is tried again after this, doubling"),
        ("--ledger-retry-cap-s", "LEDGER_RETRY_CAP_S", DEFAULT_RETRY_CAP_S,
         "the longest wait between two tries of a settle"),
        ("--ledger-retry-jitter", "LEDGER_RETRY_JITTER", DEFAULT_RETRY_JITTER,
         "the share (0-1) of each wait taken off at random"),
        ("--ledger-final-try-s", "LEDGER_FINAL_TRY_S", DEFAULT_FINAL_TRY_S,
         "at shutdown, how long settles still pending may try; what cannot land is left "
         "reserved for the next producer to reconcile"),
    ):  # fmt: skip
        gemini.add_argument(flag, type=positive_seconds, default=env(name, str(default)),
                            help=meaning)  # fmt: skip
    gemini.add_argument(
        "--budget-usd",
        type=float,
        default=env("BUDGET_USD", "0.10"),
        help="a reservation that would take the ledger past this is refused",
    )
    gemini.add_argument(
        "--budget-per-identity-usd",
        type=float,
        default=env("BUDGET_PER_IDENTITY_USD", "") or None,
        help="each caller identity's own limit, within --budget-usd (default: --budget-usd)",
    )
    gemini.add_argument(
        "--input-usd-per-mtok",
        type=float,
        default=env("INPUT_USD_PER_MTOK", "0.25"),
        help="input rate the ledger charges",
    )
    gemini.add_argument(
        "--output-usd-per-mtok",
        type=float,
        default=env("OUTPUT_USD_PER_MTOK", "1.50"),
        help="output rate the ledger charges",
    )
    gemini.add_argument(
        "--record", type=Path, default=None, help="capture every live call into this new directory"
    )
    parser.add_argument(
        "--allow-faults",
        action="store_true",
        default=env("ALLOW_FAULTS", "").lower() in TRUE_WORDS,
        help="serve controlled fault requests",
    )
    parser.add_argument(
        "--max-connection-age-s",
        type=float,
        default=env("MAX_CONNECTION_AGE_S", str(DEFAULT_MAX_CONNECTION_AGE_S)),
        help="drain connections older than this; no stream outlives twice this",
    )
    parser.add_argument(
        "--min-ping-interval-s",
        type=float,
        default=env("MIN_PING_INTERVAL_S", str(MIN_PING_INTERVAL_S)),
        help="the most frequent keepalive pings a consumer may send (its --keepalive-s); "
        "a peer that pings faster is sent GOAWAY too_many_pings",
    )
    parser.add_argument(
        "--max-streams",
        type=stream_count,
        default=env("MAX_STREAMS", str(DEFAULT_MAX_STREAMS)),
        help="streams served at once; one more is refused RESOURCE_EXHAUSTED / stream_limit",
    )
    parser.add_argument(
        "--max-streams-per-identity",
        type=optional_count,
        default=env("MAX_STREAMS_PER_IDENTITY", ""),
        help="with --auth-tokens: streams one caller may hold at once (default: a quarter of "
        "--max-streams); one more is refused RESOURCE_EXHAUSTED / identity_stream_limit. "
        "Without tokens every caller is one identity and only --max-streams applies",
    )
    parser.add_argument(
        "--max-health-watches",
        type=stream_count,
        default=env("MAX_HEALTH_WATCHES", str(DEFAULT_MAX_HEALTH_WATCHES)),
        help="health Watch streams (unauthenticated) served at once; one more is refused "
        "RESOURCE_EXHAUSTED / health_watch_limit",
    )
    parser.add_argument(
        "--max-pending",
        type=stream_count,
        default=env("MAX_PENDING", str(DEFAULT_MAX_PENDING)),
        help="new streams gRPC holds until the servicer takes them (a burst); past it gRPC "
        "drops one (the consumer says producer_overloaded)",
    )
    for flag, name, default, kind, meaning in (
        ("--reply-log-max-frames", "REPLY_LOG_MAX_FRAMES", DEFAULT_MAX_FRAMES, stream_count,
         "frames logged per reply (over it the reply ends internal_error)"),
        ("--reply-log-max-bytes", "REPLY_LOG_MAX_BYTES", DEFAULT_MAX_BYTES, stream_count,
         "wire bytes logged per reply (over it the reply ends internal_error)"),
        ("--reply-log-max-replies", "REPLY_LOG_MAX_REPLIES", DEFAULT_MAX_REPLIES, stream_count,
         "replies kept for resumes (the oldest ended one goes first)"),
        ("--reply-log-ttl-s", "REPLY_LOG_TTL_S", DEFAULT_REPLY_TTL_S, positive_seconds,
         "how long an ended reply is kept for resumes"),
        ("--detach-grace-s", "DETACH_GRACE_S", DEFAULT_DETACH_GRACE_S, positive_seconds,
         "how long a reply is still generated after its consumer disconnected"),
        ("--reply-log-lease-s", "REPLY_LOG_LEASE_S", DEFAULT_LEASE_S, positive_seconds,
         "a shared log: how long a silent generator keeps its lease (then generator_lost)"),
    ):  # fmt: skip
        parser.add_argument(flag, type=kind, default=env(name, str(default)), help=meaning)
    parser.add_argument(
        "--reply-log",
        default=(reply_log := env("REPLY_LOG", "memory")),
        help="where replies are logged for resumes: memory (this process), or "
        "redis://HOST:PORT/DB (rediss://, unix://), shared by replicas " + shown_default(reply_log),
    )
    parser.add_argument(
        "--shutdown-grace-s",
        type=positive_seconds,
        default=env("SHUTDOWN_GRACE_S", str(SHUTDOWN_GRACE_S)),
        help="on SIGINT/SIGTERM, how long open streams may finish; the rest end UNAVAILABLE "
        "(a second signal ends the grace at once)",
    )
    parser.add_argument(
        "--metrics-port",
        type=optional_port,
        default=env("METRICS_PORT", ""),
        help="serve Prometheus metrics on this port (0 picks a free one; off by default)",
    )
    parser.add_argument(
        "--metrics-host",
        default=env("METRICS_HOST", "127.0.0.1"),
        help="address the metrics endpoint listens on; not a loopback one: needs "
        "--tls-cert and --tls-key (then HTTPS), or --insecure",
    )
    parser.add_argument(
        "--trace-file",
        type=Path,
        default=env_path("TRACE_FILE"),
        help="append the JSON trace to this file (whole lines, in batches: --trace-flush-ms); "
        "stderr keeps only one-line messages",
    )
    parser.add_argument(
        "--log-format",
        choices=("auto", "json", "console"),
        default=env("LOG_FORMAT", "auto"),
        help="trace format on stderr (auto: console on a TTY, JSON lines otherwise)",
    )
    parser.add_argument(
        "--log-level",
        choices=LEVELS,
        default=env("LOG_LEVEL", "info"),
        help="debug adds one record per chunk sent",
    )
    parser.add_argument(
        "--trace-flush-ms",
        type=flush_delay_ms,
        default=env("TRACE_FLUSH_MS", str(round(DEFAULT_FLUSH_DELAY_S * 1000))),
        help=TRACE_FLUSH_HELP,
    )
    parser.add_argument(
        "--ready-file",
        type=Path,
        default=env_path("READY_FILE"),
        help="once listening, write HOST:PORT to this file (atomically): a script waits for it",
    )
    security = parser.add_argument_group(
        "security",
        "a producer on a non-loopback address needs TLS and tokens, or --insecure",
    )
    security.add_argument(
        "--tls-cert", type=Path, default=env_path("TLS_CERT"), help="TLS: this server's certificate"
    )
    security.add_argument("--tls-key", type=Path, default=env_path("TLS_KEY"), help="TLS: its key")
    security.add_argument(
        "--tls-client-ca",
        type=Path,
        default=env_path("TLS_CLIENT_CA"),
        help="mutual TLS: require a client certificate signed by this CA",
    )
    security.add_argument(
        "--auth-tokens",
        type=Path,
        default=env_path("AUTH_TOKENS"),
        help="a file of 'NAME TOKEN' lines: every request must carry one of the tokens as "
        "'authorization: Bearer TOKEN'; NAME is the caller in the trace and the ledger",
    )
    security.add_argument(
        "--insecure",
        action="store_true",
        default=env("INSECURE", "").lower() in TRUE_WORDS,
        help="listen on a non-loopback address without TLS and tokens, and serve metrics "
        "on one without TLS (said at every start)",
    )
    return parser


def env_path(name: str) -> Path | None:
    value = env(name, "")
    return Path(value) if value else None


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


def store_of(flag: str, spec: str) -> Store:
    """``--ledger`` or ``--reply-log`` classified (``producer.store_urls``), its password
    registered with the trace scrubbers first; an unknown scheme is a ConfigurationError
    whose one line names the accepted ones and never the password."""
    try:
        store = parse_store(spec, memory=flag == "--reply-log", files=flag == "--ledger")
    except StoreError as error:
        raise ConfigurationError(f"{flag} {error}") from error
    for secret in store.secrets:
        register_secret(secret)
    return store


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


def make_ledger(
    args: argparse.Namespace, per_identity: float | None, policy: LedgerPolicy
) -> Ledger:
    """The ledger ``--ledger`` names, checked once: a broken one stops the producer. A Redis
    URL's password is a secret (scrubbed from the trace; never in a message). Its owner is
    this process, with a lease of ``--ledger-lease-s``."""
    store = store_of("--ledger", args.ledger)
    shown_ledger = store.shown
    try:
        ledger = open_ledger(
            store.target,
            budget_usd=args.budget_usd,
            budget_per_identity_usd=per_identity,
            rates=Rates(args.input_usd_per_mtok, args.output_usd_per_mtok),
            options=RedisOptions(
                prefix=args.ledger_prefix, ttl_s=args.ledger_ttl_s, timeout_s=policy.timeout_s
            ),
            owner=Owner.new(policy.lease_s),
        )
        ledger.check()
    except OSError as error:
        raise ConfigurationError(f"cannot use --ledger {shown_ledger}: {error.strerror}") from error
    except ValueError as error:  # a Redis URL or a Redis ledger setting it cannot take
        raise ConfigurationError(f"--ledger {shown_ledger}: {store.redact(str(error))}") from error
    except RequestRefused as error:
        raise ConfigurationError(
            f"--ledger {shown_ledger}: {store.redact(error.detail)}"
        ) from error
    return ledger


def make_source(args: argparse.Namespace, recording: Recording) -> Source:
    if args.source == "recording":
        return RecordingSource(recording)
    api_key = os.environ.get("GEMINI_API_KEY", "")
    if not api_key:
        raise ConfigurationError("the gemini source needs GEMINI_API_KEY in the environment")
    register_secret(api_key)
    per_identity = args.budget_per_identity_usd
    budgets = (args.budget_usd, args.budget_usd if per_identity is None else per_identity)
    if args.max_output_tokens < 1 or not all(budget > 0 for budget in budgets):
        raise ConfigurationError("--max-output-tokens and the budgets must be positive")
    try:
        policy = LedgerPolicy(
            lease_s=args.ledger_lease_s,
            timeout_s=args.ledger_timeout_s,
            reconcile_s=args.ledger_reconcile_s,
            retry_s=args.ledger_retry_s,
            retry_cap_s=args.ledger_retry_cap_s,
            retry_jitter=args.ledger_retry_jitter,
            final_try_s=args.ledger_final_try_s,
        )
    except ValueError as error:
        raise ConfigurationError(str(error)) from error
    ledger = make_ledger(args, per_identity, policy)
    try:
        capture = RunCapture(args.record, model=args.model) if args.record else None
    except FileExistsError as error:
        raise ConfigurationError(str(error)) from error
    settings = GeminiSettings(
        model=args.model,
        base_url=args.gemini_base_url,
        max_output_tokens=args.max_output_tokens,
    )
    source = GeminiSource(
        recording, settings, api_key=api_key, ledger=ledger, capture=capture, policy=policy
    )
    # The owner lease, reconciliation (now: what a stopped producer left) and retried settles.
    source.start()
    return source


async def open_reply_log(args: argparse.Namespace, limits: LogLimits) -> ReplyLog:
    """The log ``--reply-log`` names, checked once: a Redis that does not answer stops
    the producer (exit 2)."""
    store = store_of("--reply-log", args.reply_log)
    if store.kind is StoreKind.MEMORY:
        return MemoryReplyLog(limits)
    try:
        log = RedisReplyLog(store.target, limits)
    except ValueError as error:
        detail = store.redact(str(error))
        raise ConfigurationError(f"--reply-log {store.shown}: {detail}") from error
    try:
        await log.check()
    except redis.RedisError as error:
        await log.aclose()
        raise ConfigurationError(
            f"cannot use --reply-log {store.shown}: {store.redact(str(error))}"
        ) from error
    return log


async def serve(args: argparse.Namespace, recording: Recording) -> int:
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
    reply_log = await open_reply_log(args, limits)
    settings = ServerSettings(
        host=args.host,
        port=args.port,
        allow_faults=args.allow_faults,
        max_connection_age_s=args.max_connection_age_s,
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
    stop, stop_now = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        # The first signal starts a graceful stop; a second one ends the grace at once.
        (stop_now if stop.is_set() else stop).set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal)
    log.info(
        "producer_listening",
        host=args.host,
        port=port,
        source=args.source,
        allow_faults=args.allow_faults,
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
    # Logged after every stream's final record: opened = the sum of the final counts.
    log.info(
        "producer_stopped",
        open_streams=servicer.open_streams,
        health_watches_refused=servicer.health.refused,
        **servicer.counters.fields(),
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.max_connection_age_s > 0:
        parser.error("--max-connection-age-s must be > 0")
    if not 0.001 <= args.min_ping_interval_s < float("inf"):
        parser.error("--min-ping-interval-s must be at least 0.001 (one millisecond)")
    if not args.reply_log_lease_s > 0:
        parser.error("--reply-log-lease-s must be > 0")
    try:
        # Before anything is logged: a store URL's password is registered as a secret, and
        # an unknown scheme stops the producer before it opens anything.
        store_of("--ledger", args.ledger)
        store_of("--reply-log", args.reply_log)
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
    # grpc's Python loggers (grpc._cython.cygrpc, grpc.aio, ...) would print bare lines
    # into stderr; they become records of the trace with one fixed event name.
    route_stdlib_logging("grpc")
    if args.ready_file is not None:  # a stale file must not announce this producer early
        args.ready_file.unlink(missing_ok=True)
    try:
        recording = load_recording_or_explain(args.recording, expected_sha256=args.recording_sha256)
        return asyncio.run(serve(args, recording))
    except ConfigurationError as error:
        print(f"producer: {error}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:
        print(f"producer: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return EXIT_USAGE
