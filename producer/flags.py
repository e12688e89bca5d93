"""The producer's flags: one table (``FLAGS``), from which argparse, the ``REPLYWIRE_<FLAG>``
environment defaults, ``--help`` and the docs' flag table are made, and the parser built
from it. ``producer.cli`` wires what the parsed flags build."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Final

from replywire.native import version_line
from replywire.producer.budget.keeper import (
    DEFAULT_FINAL_TRY_S,
    DEFAULT_RECONCILE_S,
    DEFAULT_RETRY_CAP_S,
    DEFAULT_RETRY_JITTER,
    DEFAULT_RETRY_S,
)
from replywire.producer.budget.ledger import DEFAULT_LEASE_S as DEFAULT_LEDGER_LEASE_S
from replywire.producer.budget.ledger import TIMEOUT_S as LEDGER_TIMEOUT_S
from replywire.producer.budget.options import DEFAULT_PREFIX
from replywire.producer.budget.options import DEFAULT_TTL_S as DEFAULT_LEDGER_TTL_S
from replywire.producer.edge.health import DEFAULT_MAX_HEALTH_WATCHES
from replywire.producer.event_loop import ASYNCIO, EVENT_LOOPS
from replywire.producer.replylog.durability import DEFAULT_TIMEOUT_S as DEFAULT_DURABILITY_TIMEOUT_S
from replywire.producer.replylog.interface import (
    DEFAULT_DETACH_GRACE_S,
    DEFAULT_LEASE_S,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_FRAMES,
    DEFAULT_MAX_REPLIES,
    DEFAULT_READER_CONNECTIONS,
    DEFAULT_REPLIES_READ,
    DEFAULT_REPLIES_READ_PER_IDENTITY,
    DEFAULT_WRITER_CONNECTIONS,
)
from replywire.producer.replylog.interface import DEFAULT_TTL_S as DEFAULT_REPLY_TTL_S
from replywire.producer.settings import (
    DEFAULT_KEEPALIVE_S,
    DEFAULT_KEEPALIVE_TIMEOUT_S,
    DEFAULT_MAX_CONNECTION_AGE_S,
    DEFAULT_MAX_CONNECTION_IDLE_S,
    DEFAULT_MAX_PENDING,
    DEFAULT_MAX_STREAMS,
    MIN_PING_INTERVAL_S,
)
from replywire.producer.sources.gemini.protocol import (
    DEFAULT_BASE_URL,
    DEFAULT_MAX_OUTPUT_TOKENS,
    DEFAULT_MODEL,
)
from replywire.producer.store_urls import redacted
from replywire.producer.workers import MAX_WORKERS
from replywire.runtime import invocation
from replywire.runtime.flags import (
    ENV_PREFIX,
    Count,
    Flag,
    FlagGroup,
    FlagTable,
    Number,
    OrNone,
    non_negative_number,
    port_number,
    positive_seconds,
    seconds_at_least,
    seconds_or_zero,
)
from replywire.runtime.help_format import DefaultsHelpFormatter
from replywire.runtime.library_logs import DEFAULT_BURST as DEFAULT_LIBRARY_LOG_BURST
from replywire.runtime.library_logs import DEFAULT_CHARS as DEFAULT_LIBRARY_LOG_CHARS
from replywire.runtime.library_logs import DEFAULT_INTERVAL_S as DEFAULT_LIBRARY_LOG_INTERVAL_S
from replywire.runtime.logs import (
    DEFAULT_FLUSH_DELAY_S,
    LEVELS,
    flush_delay_ms,
)
from replywire.runtime.recording_file import DEFAULT_RECORDING_PATH
from replywire.runtime.tracing import (
    ENDPOINT_ENV,
)
from replywire.runtime.usage import OneLineParser
from replywire.shared.recording import RECORDING_SHA256
from replywire.shared.requests import DEFAULT_MAX_METADATA_BYTES, MIN_MAX_METADATA_BYTES

SHUTDOWN_GRACE_S: Final = 5.0

#: The budget's and the rates' US dollars.
BUDGET_USD: Final = Number(0.0, inclusive=False, unit="US dollars")
RATE_USD: Final = Number(0.0, unit="US dollars")

#: Every flag of ``python -m producer``, each also ``REPLYWIRE_<FLAG>`` in the environment.
# fmt: off
FLAGS: Final = FlagTable(
    env_prefix=ENV_PREFIX,
    groups=(
        FlagGroup((
            Flag("--host", "address to listen on", default="127.0.0.1"),
            Flag("--port", "port, 0 to 65535; `0` picks a free one, which is logged and printed as "
                 "`listening on HOST:PORT`. A port that is taken is one line on stderr and "
                 "exit 2 (the producer sets `grpc.so_reuseport` to 0, so a second producer "
                 "never shares a port; only its own `--workers` do)", port_number, 50051),
            Flag("--workers",
                 f"producer processes serving the one port (1 to {MAX_WORKERS}). With more "
                 "than 1 this process checks the flags, starts that many workers of itself "
                 "sharing `--port` (`SO_REUSEPORT`), serves the one `--metrics-port` summing "
                 "theirs, writes `--ready-file` once all serve and drains them all on SIGINT / "
                 "SIGTERM; it needs `--reply-log redis://...` (see "
                 "[Workers](operations.md#workers))",
                 Count("workers", maximum=MAX_WORKERS), 1),
            Flag("--source", "where replies come from: `recording` or `gemini` (see [Live "
                 "Gemini](gemini.md))", choices=("recording", "gemini"),
                 default="recording"),
            Flag("--recording",
                 "the hashed recording the replies and bindings come from: it must have "
                 "the pinned SHA-256 and pass the consistency checks, or the producer refuses "
                 "to start (exit 2, one line on stderr)",
                 Path, DEFAULT_RECORDING_PATH, shown="`fixtures/recording.json`"),
            Flag("--recording-sha256",
                 "the pinned hash of `--recording` (a converted capture pins its own)",
                 default=RECORDING_SHA256, shown="the fixture's"),
            Flag("--conformance",
                 "serve the conformance vectors of this folder (`fixtures/conformance/"
                 "vectors`) and nothing else: an `Open` with a vector's stream id, case, binding "
                 "bytes and wire is answered with its exact chunks; any other request is "
                 "refused with a registered reason; no recording, no provider (see "
                 "[Conformance](conformance.md#the-wire-mode))",
                 Path),
            Flag("--allow-faults",
                 "serve fault requests; without it they are refused `PERMISSION_DENIED` / "
                 "`faults_not_allowed`", action="switch"),
            Flag("--max-connection-age-s",
                 "connections older than this are drained (GOAWAY) and closed after the "
                 "same again: no stream outlives twice this, even one blocked by a consumer "
                 "that stopped reading without cancelling; a stream cut so ends "
                 "`connection_aged_out`",
                 positive_seconds, DEFAULT_MAX_CONNECTION_AGE_S),
            Flag("--max-connection-idle-s",
                 "a connection without a stream this long is closed (GOAWAY; its "
                 "consumer reconnects at its next stream); a stream from the same client "
                 "address after that is known to be on a new connection (see "
                 "[Limits](operations.md#limits))",
                 positive_seconds, DEFAULT_MAX_CONNECTION_IDLE_S),
            Flag("--keepalive-s",
                 "a keepalive ping after this much silence from a consumer; with "
                 "`--keepalive-timeout-s`, how soon a consumer that vanished or stopped "
                 "is let go (see [Limits](operations.md#limits))",
                 positive_seconds, DEFAULT_KEEPALIVE_S),
            Flag("--keepalive-timeout-s",
                 "a keepalive ping unanswered this long closes the connection: its "
                 "streams end `cancelled_by_consumer` within `--keepalive-s` + this of the "
                 "consumer's silence",
                 positive_seconds, DEFAULT_KEEPALIVE_TIMEOUT_S),
            Flag("--max-streams",
                 "streams served at once, over all connections (at least 1); one more is "
                 "refused `RESOURCE_EXHAUSTED` / `stream_limit` (see "
                 "[Limits](operations.md#limits))",
                 Count("streams"), DEFAULT_MAX_STREAMS),
            Flag("--max-streams-per-identity",
                 "with `--auth-tokens`: streams one caller may hold at once (at least 1); "
                 "one more is refused `RESOURCE_EXHAUSTED` / `identity_stream_limit` while "
                 "other callers are still served. Without tokens every caller is the one "
                 "identity `anonymous` and only `--max-streams` applies (see "
                 "[Security](security.md#a-reply-belongs-to-its-caller))",
                 OrNone(Count("streams")), shown="a quarter of `--max-streams`"),
            Flag("--max-health-watches",
                 "health `Watch` streams (which need no token) served at once (at least "
                 "1); one more is refused `RESOURCE_EXHAUSTED` / `health_watch_limit` (see "
                 "Operations)",
                 Count("health watches"), DEFAULT_MAX_HEALTH_WATCHES),
            Flag("--max-pending",
                 "new streams gRPC holds until the servicer takes them (a burst; at least "
                 "1); past it gRPC drops one with a bare `CANCELLED`, which the consumer "
                 "reports `refused` / `producer_overloaded` (see [Limits](operations.md#limits))",
                 Count("streams"), DEFAULT_MAX_PENDING),
            Flag("--max-metadata-bytes",
                 "a request's metadata, as HTTP/2 counts a header list (name + value + 32 "
                 f"octets a header; at least {MIN_MAX_METADATA_BYTES}); past it the request is "
                 "refused `RESOURCE_EXHAUSTED` / `metadata_too_large` before any of it is "
                 "read, recorded and counted; gRPC itself refuses past twice this (see "
                 "[Security](security.md#request-metadata))",
                 Count("bytes", MIN_MAX_METADATA_BYTES), DEFAULT_MAX_METADATA_BYTES),
            Flag("--min-ping-interval-s",
                 "the most frequent keepalive pings a consumer may send (its "
                 "`--keepalive-s`; gRPC's own client sends at most one a second); a peer that "
                 "pings faster is sent GOAWAY `too_many_pings` after 2 strikes (at least "
                 "0.001)",
                 seconds_at_least(0.001, "one millisecond"), MIN_PING_INTERVAL_S),
            Flag("--shutdown-grace-s",
                 "on SIGINT / SIGTERM, how long open streams may still finish; the rest "
                 "end `UNAVAILABLE` / `producer_shutdown` (a second signal ends the grace at "
                 "once)",
                 seconds_or_zero, SHUTDOWN_GRACE_S),
            Flag("--event-loop",
                 "the event loop the producer runs on: asyncio's own or `uvloop` (needs the "
                 "uvloop package, which the producer does not install; see "
                 "[Operations](operations.md#the-event-loop))",
                 choices=EVENT_LOOPS, default=ASYNCIO),
            Flag("--metrics-port",
                 "serve Prometheus metrics on `http://HOST:PORT/metrics` (`https://` when "
                 "the producer has `--tls-cert` and `--tls-key`; `0` picks a free port, logged "
                 "as `metrics_listening`); a port that is taken is one line on stderr and "
                 "exit 2",
                 OrNone(port_number)),
            Flag("--metrics-host",
                 "address the metrics endpoint listens on; a non-loopback one follows the "
                 "gRPC port's rule: refused (one line, exit 2) unless the producer has TLS, or "
                 "`--insecure`, which is then said at every start (see "
                 "[Security](security.md#the-metrics-endpoint))",
                 default="127.0.0.1"),
            Flag("--otlp-endpoint",
                 "export spans over OTLP/gRPC to this collector, continuing the trace "
                 f"context each consumer sends (unset: `${ENDPOINT_ENV}`; the other standard "
                 "`OTEL_*` variables are honoured; off by default: see "
                 "[Traces](traces.md))", metavar="URL",
                 shown=f"`${ENDPOINT_ENV}`"),
            Flag("--trace-file",
                 "append the JSON trace to this file instead of stderr, which then keeps "
                 "only one-line messages; whole lines, written in batches (`--trace-flush-ms`)",
                 Path),
            Flag("--log-format",
                 "`json`, `console`, or `auto` (console on a TTY)",
                 choices=("auto", "json", "console"), default="auto"),
            Flag("--log-level",
                 "`debug`, `info`, `warning`, `error` or `critical`; `debug` adds one "
                 "record per chunk sent", choices=LEVELS,
                 default="info"),
            Flag("--trace-flush-ms",
                 "trace records are held at most this long and written together (0 to "
                 "1000; `0`: at the end of each event-loop pass); a clean stop writes what is "
                 "held, a `SIGKILL` loses it. The consumer takes the same flag", flush_delay_ms,
                 round(DEFAULT_FLUSH_DELAY_S * 1000)),
            Flag("--library-log-chars",
                 "the longest `message` (and `exception`) of a `library_log` record, the "
                 "trace record a library's own logging becomes (gRPC's, Redis', the HTTP "
                 "client's); past it the text is cut with `…` and its length given beside it "
                 "(see [Library records](security.md#library-records))",
                 Count("characters"), DEFAULT_LIBRARY_LOG_CHARS),
            Flag("--library-log-burst",
                 "`library_log` records of one kind (logger and message template) written "
                 "per `--library-log-interval-s`; the rest are counted, and told in a later "
                 "record's `suppressed` and in `producer_stopped`",
                 Count("records"), DEFAULT_LIBRARY_LOG_BURST),
            Flag("--library-log-interval-s",
                 "the window `--library-log-burst` counts in (more than 0)",
                 positive_seconds, DEFAULT_LIBRARY_LOG_INTERVAL_S),
            Flag("--ready-file",
                 "once listening, write `HOST:PORT` to this file (atomically; a stale one "
                 "is removed at start): a script waits for it",
                 Path),
            Flag("--detach-grace-s",
                 "how long a reply is still generated after its consumer disconnected, so "
                 "a resume finds it (see [Resume](consumer.md#resume))",
                 seconds_or_zero, DEFAULT_DETACH_GRACE_S),
            Flag("--reply-log-max-frames",
                 "frames logged per reply; over it the reply ends `reply_log_limit` (its "
                 "generation stops at once: a live provider call is closed and settled)",
                 Count("frames"), DEFAULT_MAX_FRAMES),
            Flag("--reply-log-max-bytes",
                 "wire bytes logged per reply; over it the reply ends `reply_log_limit` "
                 "(its generation stops at once: a live provider call is closed and settled)",
                 Count("bytes"), DEFAULT_MAX_BYTES),
            Flag("--reply-log-max-replies",
                 "replies kept for resumes (the oldest ended one goes first; with none "
                 "ended a new stream is refused `stream_limit`)",
                 Count("replies"), DEFAULT_MAX_REPLIES),
            Flag("--reply-log-ttl-s", "how long an ended reply is kept for resumes",
                 seconds_or_zero, DEFAULT_REPLY_TTL_S),
            Flag("--reply-log",
                 "where replies are logged: `memory` (this process) or "
                 "`redis://HOST:PORT/DB` (`rediss://` for TLS, `unix:///PATH?db=N` for a "
                 "socket; the scheme in any case), one Redis Streams log shared by replicas "
                 "(see [Replicas](consumer.md#replicas)), or a Redis Cluster, "
                 "`redis+cluster://HOST:PORT[,HOST:PORT...]` (`rediss+cluster://`; see "
                 "[Operations](operations.md#redis-cluster)); any other `scheme://` or word is a "
                 "usage error (one line, "
                 "exit 2), and a Redis that does not answer at start is one line on stderr and "
                 "exit 2. A URL's password is never shown (see [Security](security.md))",
                 default="memory", redact=redacted),
            Flag("--reply-log-lease-s",
                 "a shared log: a generating replica's lease (refreshed every third of "
                 "it); a reply whose lease lapses before its end ends `generator_lost` for its "
                 "readers",
                 positive_seconds, DEFAULT_LEASE_S),
            Flag("--reply-log-connections",
                 "a shared log: the connections its followers read with, one short "
                 "`XREAD` each at a time; it bounds the Redis commands in flight at once, not "
                 "the replies read (a follower waits for news on the one pub/sub connection, "
                 "holding none: see [Operations](operations.md#readers-of-the-shared-log)); "
                 "a read that finds none free waits at most 5 s, then its readers end "
                 "`reply_log_unavailable`",
                 Count("connections"), DEFAULT_READER_CONNECTIONS),
            Flag("--reply-log-writer-connections",
                 "a shared log: the connections the generations use (the claim, every "
                 "frame's write, the lease refreshes, taking a relayed `Cancel`), short "
                 "commands only; one that finds none free waits at most 5 s, then fails "
                 "`reply_log_unavailable`",
                 Count("connections"), DEFAULT_WRITER_CONNECTIONS),
            Flag("--reply-log-replies-read",
                 "a shared log: replies this producer reads from it at once (all the "
                 "readers of one reply here share one follower of it, which costs memory, "
                 "not a connection); a stream that would read one reply more is refused "
                 "`RESOURCE_EXHAUSTED` / `reply_log_busy` before anything is claimed or paid",
                 Count("replies"), DEFAULT_REPLIES_READ),
            Flag("--reply-log-durability",
                 "a shared log: what each write batch waits for: `none` (a failover may lose "
                 "the last frames written; the reply then ends `reply_log_behind`), `replica` "
                 "(`WAIT`: the frames are in the memory of `--reply-log-durability-replicas` "
                 "replicas before the next are written) or `aof` (`WAITAOF`: in the master's "
                 "and those replicas' append-only files); a wait answered by fewer replicas "
                 "within `--reply-log-durability-timeout-s` ends the reply "
                 "`reply_log_unavailable` (see [Operations](operations.md#redis-cluster))",
                 choices=("none", "replica", "aof"), default="none"),
            Flag("--reply-log-durability-replicas",
                 "a shared log with `--reply-log-durability`: the replicas each write batch "
                 "waits for",
                 Count("replicas"), 1),
            Flag("--reply-log-durability-timeout-s",
                 "a shared log with `--reply-log-durability`: how long a write batch waits "
                 "for its replicas",
                 positive_seconds, DEFAULT_DURABILITY_TIMEOUT_S),
            Flag("--reply-log-replies-read-per-identity",
                 "a shared log, with `--auth-tokens`: of `--reply-log-replies-read`, how "
                 "many of one caller's replies may be read here at once; one more is refused "
                 "`RESOURCE_EXHAUSTED` / `reply_log_busy` while other callers are still "
                 "served (without tokens every caller is one identity: only "
                 "`--reply-log-replies-read` applies)",
                 Count("replies"), DEFAULT_REPLIES_READ_PER_IDENTITY),
        )),
        FlagGroup(
            title="security",
            description="a producer on a non-loopback address needs TLS and tokens, or "
            "--insecure",
            flags=(
                Flag("--tls-cert", "serve TLS with this certificate (and `--tls-key`; see "
                     "[Security](security.md#tls))", Path),
                Flag("--tls-key", "the key of `--tls-cert`", Path),
                Flag("--tls-client-ca",
                     "mutual TLS: require a client certificate signed by this CA", Path),
                Flag("--auth-tokens",
                     "a file of `NAME TOKEN` lines; every request must carry one token as "
                     "`authorization: Bearer TOKEN`; `NAME` is the caller in the trace and the "
                     "ledger",
                     Path),
                Flag("--insecure",
                     "allow a non-loopback `--host` without TLS and tokens, and a "
                     "non-loopback `--metrics-host` without TLS (each said at every start, on "
                     "stderr and in the trace)",
                     action="switch"),
            ),
        ),
        FlagGroup(
            title="gemini source (needs GEMINI_API_KEY)",
            flags=(
                Flag("--model", "the model in the URL", default=DEFAULT_MODEL),
                Flag("--gemini-base-url",
                     "where the API is (tests point it at a local server); must be "
                     "`https://`, plain `http://` only to a loopback address (127.0.0.0/8, "
                     "`::1`, `localhost`), else the producer does not start (exit 2)",
                     default=DEFAULT_BASE_URL),
                Flag("--max-output-tokens",
                     "sent as `maxOutputTokens`, and the worst case the ledger reserves",
                     Count("tokens"), DEFAULT_MAX_OUTPUT_TOKENS),
                Flag("--ledger",
                     "the budget ledger, a file path or `redis://HOST:PORT/DB`; share it "
                     "between producers that spend on one key (a file on one host; Redis for "
                     "producers on several: `redis://`, `rediss://` or `unix://`, the scheme in "
                     "any case). Any other `scheme://` (say `valkey://`) is a usage error, one "
                     "line and exit 2, never a file named after the URL. A URL's password is "
                     "never shown",
                     default="runs/gemini-ledger.json", redact=redacted),
                Flag("--ledger-prefix",
                     "the Redis ledger's key prefix (several ledgers can share one Redis)",
                     default=DEFAULT_PREFIX),
                Flag("--ledger-ttl-s",
                     "how long a settled or released call stays in the Redis ledger (its "
                     "cost stays in the sums; `0`: for ever)",
                     Count("seconds", minimum=0), DEFAULT_LEDGER_TTL_S,
                     shown=f"`{DEFAULT_LEDGER_TTL_S}` (7 days)"),
                Flag("--ledger-lease-s",
                     "this producer's lease on its reservations, refreshed every third of "
                     "it while it holds any; once it lapses, another producer reconciles them "
                     "(more than 0)",
                     seconds_or_zero, DEFAULT_LEDGER_LEASE_S),
                Flag("--ledger-timeout-s",
                     "the longest one ledger operation waits (a Redis round trip, the file "
                     "ledger's lock); more than 0 and at most a third of `--ledger-lease-s`",
                     seconds_or_zero, LEDGER_TIMEOUT_S),
                Flag("--ledger-durability",
                     "a Redis ledger: what a call's reservation and its mark that it is "
                     "sending, each written before the request is sent, wait for: `none` (a "
                     "failover may lose the calls its master took alone: paid, not counted), "
                     "`replica` (`WAIT`: on `--ledger-durability-replicas` replicas) or `aof` "
                     "(`WAITAOF`: in the master's and those replicas' append-only files); a "
                     "wait answered short within `--ledger-durability-timeout-s` sends nothing: "
                     "`ledger_unavailable` (see [Operations](operations.md#redis-cluster))",
                     choices=("none", "replica", "aof"), default="none"),
                Flag("--ledger-durability-replicas",
                     "a Redis ledger with `--ledger-durability`: the replicas each write "
                     "before a call waits for",
                     Count("replicas"), 1),
                Flag("--ledger-durability-timeout-s",
                     "a Redis ledger with `--ledger-durability`: how long such a write waits "
                     "for its replicas; less than `--ledger-timeout-s`",
                     positive_seconds, DEFAULT_DURABILITY_TIMEOUT_S),
                Flag("--ledger-reconcile-s",
                     "how often (and once at start) a producer reconciles the reservations "
                     "of producers whose lease lapsed: released if never sent, kept (failed) "
                     "if they may have been",
                     seconds_or_zero, DEFAULT_RECONCILE_S),
                Flag("--ledger-retry-s",
                     "a settle the ledger did not take is tried again after this, "
                     "doubling up to `--ledger-retry-cap-s`, less a random share of each wait "
                     "(`--ledger-retry-jitter`)",
                     seconds_or_zero, DEFAULT_RETRY_S),
                Flag("--ledger-retry-cap-s",
                     "the longest wait between two tries of a settle (at least "
                     "`--ledger-retry-s`)",
                     seconds_or_zero, DEFAULT_RETRY_CAP_S),
                Flag("--ledger-retry-jitter",
                     "the share (0–1) of each wait between two tries taken off at random",
                     non_negative_number, DEFAULT_RETRY_JITTER),
                Flag("--ledger-final-try-s",
                     "at shutdown, how long settles still pending may try; what cannot "
                     "land is left to the next producer's reconciliation",
                     seconds_or_zero, DEFAULT_FINAL_TRY_S),
                Flag("--budget-usd",
                     "a reservation that would take the ledger past this is refused",
                     BUDGET_USD, "0.10"),
                Flag("--budget-per-identity-usd",
                     "each caller identity's own limit: a reservation that would take the "
                     "caller's committed amount past this is refused too",
                     OrNone(BUDGET_USD), shown="`--budget-usd`"),
                Flag("--input-usd-per-mtok",
                     "the input rate the ledger charges, US dollars per million tokens", RATE_USD,
                     "0.25"),
                Flag("--output-usd-per-mtok",
                     "the output rate the ledger charges, US dollars per million tokens", RATE_USD,
                     "1.50"),
                Flag("--record",
                     "capture every live call into this directory, which must not exist "
                     "yet (or be empty)", Path),
            ),
        ),
    ),
)
# fmt: on


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=invocation.command("producer"),
        description="replywire producer: a grpc.aio server of replywire.v1.ReplyStream. "
        f"Each flag may also be set as {ENV_PREFIX}<FLAG> (e.g. {ENV_PREFIX}PORT=0).",
        formatter_class=DefaultsHelpFormatter,
    )
    FLAGS.add_to(parser)
    parser.add_argument("--version", action="version", version=version_line())
    return parser
