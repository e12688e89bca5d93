"""``python -m consumer``: replay a case in-process, or run the demo table.

Exit codes (every consumer command): 0 complete, 3 incomplete, 4 cancelled,
5 error, 6 invalid, 7 refused, 2 usage or configuration error.

Why one file: it is the consumer's flag table (from which argparse, the help and the docs'
table are made) and the commands' thin entries; each command's work lives elsewhere
(``consumer.session``, ``traces``, ``harness``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO, cast

import structlog

from consumer.client import stream_reply
from consumer.explain import Facts
from consumer.interrupt import install_interrupt
from consumer.options import (
    DEFAULT_DEADLINE_S,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_KEEPALIVE_S,
    DEFAULT_KEEPALIVE_TIMEOUT_S,
    DEFAULT_QUEUE_SIZE,
    DEFAULT_RESUME_ATTEMPTS,
    DEFAULT_RESUME_BACKOFF_MAX_S,
    DEFAULT_RESUME_BACKOFF_S,
    DEFAULT_WINDOW_BYTES,
    MIN_KEEPALIVE_S,
    StreamOptions,
)
from consumer.results import EXIT_USAGE, exit_code, refused_result
from consumer.security import (
    GRPC_BUNDLED,
    GRPC_ROOTS_ENV,
    OPENSSL_ROOTS_ENV,
    TOKEN_ENV,
    SecurityFlags,
    load_security,
)
from harness.demo import run_demo
from native import version_line
from runtime.flags import Count, Flag, FlagGroup, FlagTable, positive_seconds, seconds_at_least
from runtime.help_format import DefaultsHelpFormatter
from runtime.logs import (
    DEFAULT_FLUSH_DELAY_S,
    LEVELS,
    LogFormat,
    configure_logging,
    flush_delay_ms,
)
from runtime.recording_file import DEFAULT_RECORDING_PATH, load_recording_or_explain
from runtime.tracing import (
    ENDPOINT_ENV,
    TRACEPARENT_ENV,
    TRACESTATE_ENV,
    TracingConfig,
    disabled,
    endpoint_from,
    start_tracing,
    stop_tracing,
)
from shared.consumer_limits import Limits
from shared.digest import bounded_json
from shared.errors import ConfigurationError, ReplywireError, RequestRefused
from shared.faults import (
    DEFAULT_STALL_MS,
    DEFAULT_TARGET_FRAME,
    DEFAULT_TRUNCATE_BYTES,
    Fault,
    FaultKind,
)
from shared.questions import build_question_binding, parse_passages
from shared.recording import DEVELOPMENT_CASES
from shared.replay import replay
from shared.requests import MAX_BINDING_BYTES, MAX_BINDING_DEPTH, ReplyRequest
from shared.result import StreamResult
from shared.terminal_text import shown_json, shown_line
from shared.wire import WireFormat
from shared.wire.chunking import ChunkPlan
from traces.commands import TraceRequest, UnknownStream, run_join, run_trace
from traces.svg import DEFAULT_MAX_MARKS

if TYPE_CHECKING:  # the view (and rich) is imported only when it is wanted
    from consumer.view import LiveView

#: The longest error message printed (it may carry text from a file or a peer: shown).
MESSAGE_CHARS = 2000


def new_stream_id() -> str:
    return uuid.uuid4().hex


def _chunk_plan(text: str) -> ChunkPlan:
    try:
        return ChunkPlan.parse(text)
    except RequestRefused as error:
        raise argparse.ArgumentTypeError(
            f"--chunks takes frame, whole, N or a,b,c: {error.detail}"
        ) from error


HELP_FORMAT: dict[str, Any] = {"formatter_class": DefaultsHelpFormatter}

LIMITS: Final = Limits()
FAULT_KINDS: Final = tuple(kind.value for kind in FaultKind)
#: The commands that consume one stream, and the one that consumes it from a producer.
ONE_STREAM: Final = ("replay", "stream")
STREAM: Final = ("stream",)

#: Every flag of ``python -m consumer``, by the commands that take it (no environment
#: variables: the consumer reads only ``REPLYWIRE_AUTH_TOKEN``, the token itself).
# fmt: off
FLAGS: Final = FlagTable((
    FlagGroup(commands=ONE_STREAM, flags=(
        Flag("--case", "development case: " + ", ".join(f"`{case}`" for case in DEVELOPMENT_CASES)
             + " (`stream` may ask `--question` instead)",
             required_in=("replay",), shown="— (`replay` needs it)"),
        Flag("--wire",
             "frame wire format: `lp` (length-prefixed) or `ndjson`, whose `done` carries "
             "the content digest (required and checked); `ndjson-lab` is the lab's NDJSON byte "
             "for byte, without it (`integrity: none`): only to reproduce the lab's published "
             "table",
             choices=tuple(wire.value for wire in WireFormat),
             default=WireFormat.LENGTH_PREFIXED.value),
        Flag("--chunks",
             "transport chunking: `frame` (one frame per chunk), `whole` (the whole body), "
             "`N` (fixed N bytes), or `a,b,c` (a cycled size pattern)", _chunk_plan,
             "frame"),
        Flag("--fault", "a controlled fault (see [Faults](protocol.md#faults); the producer needs "
             "`--allow-faults`)",
             choices=FAULT_KINDS, metavar="{" + ",".join(FAULT_KINDS) + "}"),
        Flag("--fault-frame",
             "the content frame `--fault` omit, repeat, corrupt, foreign-binding or stall "
             "targets: 1 to the reply's last (past it: refused `fault_parameter_out_of_range`)",
             Count("frames"), shown=f"`{DEFAULT_TARGET_FRAME}`"),
        Flag("--fault-bytes",
             "the bytes `--fault truncate-tail` drops: 1 to the done frame's length - 1, so "
             "the stream ends inside done (more: refused `fault_parameter_out_of_range`)",
             Count("bytes"), shown=f"`{DEFAULT_TRUNCATE_BYTES}`"),
        Flag("--stall-ms", "how long `--fault stall` sends nothing",
             Count("milliseconds"), shown=f"`{DEFAULT_STALL_MS}`"),
        Flag("--ignore-duplicates",
             "drop an exact replay of an applied frame instead of refusing it", action="switch"),
        Flag("--recording",
             "the recording the binding is loaded from (same checks as the producer)", Path,
             DEFAULT_RECORDING_PATH, shown="`fixtures/recording.json`"),
        Flag("--result", "write the result document to this file instead of stdout", Path,
             shown="stdout"),
        Flag("--stream-id", "the id that joins both sides' traces",
             shown="a random one"),
        Flag("--max-stream-bytes",
             "the core's bound on the bytes in one stream: every chunk byte, `lp` headers "
             "and NDJSON line feeds included (the lab's)", Count("bytes"),
             LIMITS.max_stream_bytes),
        Flag("--max-frame-bytes",
             "the core's bound on the bytes in one frame: the `lp` payload without its "
             "5-byte header, an NDJSON line without its line feed (the lab's)", Count("bytes"),
             LIMITS.max_frame_bytes),
        Flag("--max-content-chars",
             "the core's bound on the assembled content, in code points (not UTF-16 "
             "units; the lab's)", Count("characters"),
             LIMITS.max_content_chars),
        Flag("--max-frames", "the core's bound on the frames in one stream (the lab's)",
             Count("frames"), LIMITS.max_frames),
        Flag("--log-format",
             "`json`, `console`, or `auto` (console on a TTY), as the producer",
             choices=("auto", "json", "console"), default="auto"),
        Flag("--log-level", "`debug`, `info`, `warning`, `error` or `critical`, as the producer",
             choices=LEVELS, default="info"),
        Flag("--trace-flush-ms",
             "trace records are held at most this long and written together (0 to 1000), "
             "as the producer", flush_delay_ms,
             round(DEFAULT_FLUSH_DELAY_S * 1000)),
        Flag("--trace-file",
             "append the trace to this file as JSON lines instead of writing it to stderr", Path),
    )),
    FlagGroup(commands=STREAM, flags=(
        Flag("--target",
             "the producer `HOST:PORT`, or several in gRPC's own target syntax "
             "(`ipv4:127.0.0.1:A,127.0.0.1:B`, `dns:///NAME:PORT`), balanced by gRPC's "
             "`round_robin` policy (see [Resume](consumer.md#resume))",
             default="127.0.0.1:50051"),
        Flag("--queue-size", "bounded chunk queue between reader and processor", Count("chunks"),
             DEFAULT_QUEUE_SIZE),
        Flag("--process-delay-ms", "simulated work per chunk applied", Count("milliseconds", 0), 0),
        Flag("--mode", "`stream`: decode as chunks arrive; `buffered`: read the whole body first "
             "(still bounded by the stream byte limit)",
             choices=("stream", "buffered"), default="stream"),
        Flag("--window-bytes",
             "what a paused stream may hold in the consumer's transport (64 KiB): half "
             "announced as the HTTP/2 stream window (`grpc.http2.lookahead_bytes`, with "
             "`grpc.http2.bdp_probe` off), half for the one update gRPC returns after the "
             "reader's last read (see [Flow control](protocol.md#flow-control))",
             Count("bytes"), DEFAULT_WINDOW_BYTES),
        Flag("--deadline-s",
             "overall deadline: `incomplete` / `deadline_exceeded`, the RPC cancelled",
             positive_seconds, DEFAULT_DEADLINE_S),
        Flag("--idle-timeout-s",
             "longest wait for one chunk: `incomplete` / `idle_timeout`, the RPC "
             "cancelled", positive_seconds,
             DEFAULT_IDLE_TIMEOUT_S),
        Flag("--keepalive-s",
             f"gRPC keepalive: a ping after this much silence on the connection (at least "
             f"{MIN_KEEPALIVE_S:g}, gRPC's own floor, and not below the producer's "
             "`--min-ping-interval-s`)",
             seconds_at_least(MIN_KEEPALIVE_S, "gRPC pings no faster"), DEFAULT_KEEPALIVE_S),
        Flag("--keepalive-timeout-s",
             "a ping unanswered this long closes the connection: a producer cut off "
             "without a reset is found in about `--keepalive-s` plus this, and the call ends "
             "`UNAVAILABLE` (resumed)",
             positive_seconds, DEFAULT_KEEPALIVE_TIMEOUT_S),
        Flag("--resume-attempts",
             "resumes after a transport failure mid-stream (`0`: none, today's outcomes "
             "exactly; see [Resume](consumer.md#resume))",
             Count("attempts", 0), DEFAULT_RESUME_ATTEMPTS),
        Flag("--resume-backoff-s",
             "the first wait before a resume, doubled per attempt up to 2 s, times a "
             "jitter of 0.5 to 1",
             positive_seconds, DEFAULT_RESUME_BACKOFF_S),
        Flag("--chunk-interval-ms", "ask the producer to pause this long between chunks",
             Count("milliseconds", 0), 0),
        Flag("--view",
             "the live view: the provisional text and a status line while it streams, then "
             "the verdict in words; with it the result document goes only to `--result FILE`",
             action="toggle", shown="on when stdout is a terminal"),
        Flag("--question",
             "ask your own question (gemini source), with `--context`; replaces `--case`"),
        Flag("--context",
             "with `--question`: the passages, a JSON list or JSON Lines of "
             "`{id, text, url}`", Path),
        Flag("--binding",
             "send this binding (a JSON file) instead of the recording's (to see the "
             f"producer refuse it); at most {MAX_BINDING_BYTES // 1024} KiB and "
             f"{MAX_BINDING_DEPTH} levels deep",
             Path),
    )),
    FlagGroup(
        title="tracing",
        description="OpenTelemetry: the stream's span, its W3C trace context sent to the "
        "producer, its ids in every record (docs/traces.md). Off unless one of these is set",
        commands=STREAM,
        flags=(
            Flag("--traceparent",
                 f"continue this W3C trace context (unset: `${TRACEPARENT_ENV}`, with "
                 f"`${TRACESTATE_ENV}`; else a new trace); a malformed or oversized value is "
                 "ignored with a `trace_context_ignored` record, never an error",
                 metavar="TRACEPARENT", shown=f"`${TRACEPARENT_ENV}`"),
            Flag("--otlp-endpoint",
                 f"export the stream's span over OTLP/gRPC to this collector (unset: "
                 f"`${ENDPOINT_ENV}`; the other standard `OTEL_*` variables are honoured)",
                 metavar="URL",
                 shown=f"`${ENDPOINT_ENV}`"),
        ),
    ),
    FlagGroup(
        title="security",
        description="TLS and a bearer token (the producer's --tls-* and --auth-tokens). The "
        "token goes only over TLS, or to a loopback target or a Unix socket, unless --insecure",
        commands=STREAM,
        flags=(
            Flag("--tls",
                 "TLS, the producer's certificate checked against the system's trust store "
                 f"(`{GRPC_ROOTS_ENV}`, else `{OPENSSL_ROOTS_ENV}`, else the system's CA "
                 "bundle: see [Security](security.md)); plaintext without it or `--tls-ca`",
                 action="switch"),
            Flag("--tls-ca", "TLS trusting this one CA (the one that signed the producer's "
                 "certificate), with or without `--tls`",
                 Path),
            Flag("--tls-cert",
                 "mutual TLS: this consumer's certificate (with `--tls` or `--tls-ca`)", Path),
            Flag("--tls-key", "mutual TLS: the key of `--tls-cert`", Path),
            Flag("--tls-server-name",
                 "the name the producer's certificate must carry, with `--tls` or "
                 "`--tls-ca`",
                 shown="the target's host"),
            Flag("--auth-token-file",
                 f"the bearer token, alone in a file (or `{TOKEN_ENV}`); sent as gRPC call "
                 "credentials, over TLS or to a loopback target or a Unix socket only (see "
                 "Security); never logged",
                 Path),
            Flag("--insecure",
                 "let the token go in clear, as metadata, over a plaintext channel to a "
                 "target that is not a loopback address or a Unix socket (without it: exit 2 "
                 "before any connection); said on stderr and in the trace at every start",
                 action="switch"),
        ),
    ),
    FlagGroup(commands=("demo",), flags=(
        Flag("--recording", "the recording the producer serves", Path, DEFAULT_RECORDING_PATH,
             shown="`fixtures/recording.json`"),
        Flag("--log-level",
             "the level of both kept traces (`debug`: every chunk, for the timelines)",
             choices=LEVELS, default="debug"),
    )),
    FlagGroup(commands=("join-traces",), flags=(
        Flag("paths", "trace files, or directories of `*.jsonl` files", Path, nargs="+",
             shown="—"),
        Flag("--stream-id", "only this stream's records", shown="every stream"),
        Flag("--trace-id",
             "only the records that carry this OpenTelemetry trace id (32 hex digits; "
             "with tracing on: [Traces](traces.md#opentelemetry)), both sides",
             shown="every trace"),
        Flag("--event", "only records of this event", shown="every event"),
    )),
    FlagGroup(commands=("trace",), flags=(
        Flag("paths",
             "`PRODUCER.jsonl CONSUMER.jsonl` (any order), or a directory of `*.jsonl` "
             "files", Path,
             nargs="+", metavar="TRACE", shown="—"),
        Flag("--stream",
             "the stream to show: its id, or the beginning of one (a short id); without "
             "it, the streams found",
             aliases=("--stream-id",), dest="stream_id", metavar="ID", shown="every stream"),
        Flag("--trace-id",
             "the stream whose records carry this OpenTelemetry trace id, instead of "
             "`--stream` (with tracing on: [Traces](traces.md#opentelemetry))",
             metavar="TRACE_ID", shown="—"),
        Flag("--out",
             "with `--stream`: also write its timeline here (`FILE.html`), one "
             "self-contained HTML page (an SVG); without: a directory, for every stream's page "
             "and an index (`timelines.html`)",
             Path, metavar="FILE.html|DIR"),
        Flag("--all",
             "one row per record (default: runs of per-chunk and per-pause records, one row)",
             action="switch", dest="every"),
        Flag("--max-marks",
             "marks a row of the picture draws one by one; past it, one bin per pixel column",
             Count("marks"), DEFAULT_MAX_MARKS, metavar="N"),
    )),
))
# fmt: on


def limits_from(args: argparse.Namespace) -> Limits:
    return Limits(
        max_stream_bytes=args.max_stream_bytes,
        max_frame_bytes=args.max_frame_bytes,
        max_content_chars=args.max_content_chars,
        max_frames=args.max_frames,
    )


def fault_from(args: argparse.Namespace) -> Fault | None:
    if args.fault is None:
        if args.fault_frame is not None or args.fault_bytes is not None:
            raise ConfigurationError("--fault-frame and --fault-bytes need --fault")
        if args.stall_ms is not None:
            raise ConfigurationError("--stall-ms needs --fault stall")
        return None
    if args.stall_ms is not None and args.fault != FaultKind.STALL.value:
        raise ConfigurationError("--stall-ms needs --fault stall")
    return Fault(
        kind=FaultKind(args.fault),
        target_frame=args.fault_frame,
        byte_count=args.fault_bytes,
        stall_ms=args.stall_ms,
    )


def emit_result(result: StreamResult, path: Path | None, out: TextIO) -> None:
    """The result document to ``path``, or to ``out`` (on a terminal, with the characters
    a terminal would obey as JSON escapes: the same document, shared.terminal_text)."""
    text = result.to_json()
    if path is None:
        out.write(shown_json(text) if out.isatty() else text)
    else:
        path.write_text(text, encoding="utf-8")


def load_binding(args: argparse.Namespace) -> tuple[str, Any]:
    """The case id and binding to send: the recording's, a new question's, or (to test
    refusals) a file's."""
    recording = load_recording_or_explain(args.recording)
    if (args.question is None) != (args.context is None):
        raise ConfigurationError("--question and --context go together")
    if args.question is not None:
        if args.case is not None or args.binding is not None:
            raise ConfigurationError("--question binds its own case: drop --case and --binding")
        try:
            passages = parse_passages(args.context.read_text(encoding="utf-8"))
            binding = build_question_binding(args.question, passages)
        except OSError as error:
            raise ConfigurationError(f"cannot read the context {args.context}: {error}") from error
        except RequestRefused as error:
            raise ConfigurationError(f"--question / --context: {error.detail}") from error
        return binding["case_id"], binding
    if args.case is None:
        raise ConfigurationError("--case or --question is required")
    if args.binding is not None:
        try:
            text = args.binding.read_text(encoding="utf-8")
            return args.case, bounded_json(
                text, max_bytes=MAX_BINDING_BYTES, max_depth=MAX_BINDING_DEPTH
            )
        except (OSError, ValueError) as error:
            raise ConfigurationError(f"cannot read the binding {args.binding}: {error}") from error
    return args.case, recording.case(args.case).binding


def request_from(args: argparse.Namespace, case_id: str, binding: Any) -> ReplyRequest:
    """The one request these flags describe (``ConfigurationError`` if they do not)."""
    return ReplyRequest(
        case_id=case_id,
        binding=binding,
        wire=WireFormat(args.wire),
        plan=args.chunks,
        fault=fault_from(args),
        stream_id=args.stream_id or new_stream_id(),
        chunk_interval_ms=args.chunk_interval_ms,
        limits=limits_from(args),
        ignore_duplicates=args.ignore_duplicates,
    )


def options_from(args: argparse.Namespace) -> StreamOptions:
    try:
        return StreamOptions(
            target=args.target,
            queue_size=args.queue_size,
            process_delay_s=args.process_delay_ms / 1000,
            mode=args.mode,
            window_bytes=args.window_bytes,
            deadline_s=args.deadline_s,
            idle_timeout_s=args.idle_timeout_s,
            resume_attempts=args.resume_attempts,
            resume_backoff_s=args.resume_backoff_s,
            resume_backoff_max_s=max(args.resume_backoff_s, DEFAULT_RESUME_BACKOFF_MAX_S),
            keepalive_s=args.keepalive_s,
            keepalive_timeout_s=args.keepalive_timeout_s,
            security=load_security(
                SecurityFlags(
                    tls=args.tls,
                    tls_ca=args.tls_ca,
                    tls_cert=args.tls_cert,
                    tls_key=args.tls_key,
                    tls_server_name=args.tls_server_name,
                    auth_token_file=args.auth_token_file,
                    insecure=args.insecure,
                )
            ),
        )
    except ValueError as error:
        raise ConfigurationError(str(error)) from error


def announce_security(options: StreamOptions) -> None:
    """--insecure let the token go in clear: said on stderr and in the trace, every start.
    With TLS, the trace says which roots the producer's certificate is checked against."""
    security, log = options.security, structlog.get_logger()
    if security.tls:
        log.info("tls_roots", roots=security.roots_from or GRPC_BUNDLED)
    warning = security.insecure_warning(options.target)
    if warning is not None:
        print(f"consumer: {warning}", file=sys.stderr, flush=True)
        log.warning("consumer_insecure", detail=warning)


async def stream_once(
    request: ReplyRequest, options: StreamOptions, view: LiveView | None = None
) -> StreamResult:
    interrupted = asyncio.Event()
    remove_handlers = install_interrupt(interrupted)
    try:
        if view is None:
            return await stream_reply(request, options, interrupted=interrupted)
        async with view.showing():
            return await stream_reply(
                request, options, interrupted=interrupted, observer=view.attach
            )
    finally:
        remove_handlers()


def view_wanted(args: argparse.Namespace, out: TextIO) -> bool:
    """The live view: --view / --no-view, else whether stdout is a terminal."""
    return bool(out.isatty() if args.view is None else args.view)


def view_for(args: argparse.Namespace, out: TextIO) -> LiveView | None:
    if not view_wanted(args, out):
        return None
    facts = Facts(
        target=args.target,
        fault=args.fault,
        idle_timeout_s=args.idle_timeout_s,
        deadline_s=args.deadline_s,
    )
    from rich.console import Console  # noqa: PLC0415 - only with a view

    from consumer.view import LiveView  # noqa: PLC0415

    # Log records on the same terminal are printed above the live area, not through it.
    same_terminal = out.isatty() and sys.stderr.isatty() and args.trace_file is None
    return LiveView(Console(file=out, highlight=False), facts, redirect_stderr=same_terminal)


def finish_stream(
    result: StreamResult, args: argparse.Namespace, out: TextIO, view: LiveView | None
) -> int:
    """The verdict on the view, the result document to --result (or, without a view, to
    stdout: piped output is the JSON document alone)."""
    if view is not None:
        view.show_verdict(result, args.result)
    if view is None or args.result is not None:
        emit_result(result, args.result, out)
    return exit_code(result)


def run_stream(args: argparse.Namespace, out: TextIO) -> int:
    view = view_for(args, out)
    try:
        case_id, binding = load_binding(args)
    except RequestRefused as error:  # e.g. a case that is not on the development allowlist
        structlog.get_logger().warning("request_refused", reason=error.code, detail=error.detail)
        result = refused_result(error, case_id=args.case, wire_format=args.wire)
        return finish_stream(result, args, out, view)
    # Everything is checked before anything runs: only these are usage errors.
    request, options = request_from(args, case_id, binding), options_from(args)
    announce_security(options)
    tracing = trace_from(args)
    try:
        result = asyncio.run(stream_once(request, options, view))
        return finish_stream(result, args, out, view)
    finally:
        if tracing:  # after the result is out: a slow collector delays nothing before it
            stop_tracing()


def trace_from(args: argparse.Namespace) -> bool:
    """Tracing on when a collector or a trace context is given (and ``OTEL_SDK_DISABLED`` is
    not true): the span's parent is the context given, if it is well formed."""
    traceparent = args.traceparent or os.environ.get(TRACEPARENT_ENV) or None
    endpoint = endpoint_from(args.otlp_endpoint)
    if disabled() or (endpoint is None and traceparent is None):
        return False
    tracing = start_tracing(TracingConfig("replywire-consumer", endpoint))
    tracestate = os.environ.get(TRACESTATE_ENV) if not args.traceparent else None
    tracing.parent, ignored = tracing.context_from(traceparent, tracestate)
    if ignored is not None:
        structlog.get_logger().warning(
            "trace_context_ignored", why=ignored, chars=len(traceparent or "")
        )
    return True


def run_replay(args: argparse.Namespace, out: TextIO) -> int:
    recording = load_recording_or_explain(args.recording)
    fault = fault_from(args)  # a usage error before a refusal, as before
    wire = WireFormat(args.wire)
    stream_id = args.stream_id or new_stream_id()
    structlog.contextvars.bind_contextvars(stream_id=stream_id)
    log = structlog.get_logger().bind(case_id=args.case, wire=wire.value)
    try:
        request = ReplyRequest.for_case(
            recording,
            args.case,
            wire=wire,
            plan=args.chunks,
            fault=fault,
            stream_id=stream_id,
            limits=limits_from(args),
            ignore_duplicates=args.ignore_duplicates,
        )
        result = replay(recording, request, logger=log)
    except RequestRefused as error:
        log.warning("request_refused", reason=error.code, detail=error.detail)
        result = refused_result(error, case_id=args.case, wire_format=wire.value)
    log.info("stream_finished", status=result.status.value, reason=result.reason)
    emit_result(result, args.result, out)
    return exit_code(result)


#: Each command: its one-line help, and the description its own --help opens with.
COMMANDS: Final = {
    "replay": ("frame a recorded case and consume it in this process", None),
    "stream": ("open a stream from a producer over gRPC and consume it", None),
    "demo": (
        "start a producer, stream the cases and the fault catalogue through it, print a "
        "table, stop the producer",
        "Both traces are kept as JSON lines in the directory printed at the end: "
        "producer.jsonl and consumer.jsonl (this process), with each stream's timeline "
        "(timeline-ID.html, linked from timelines.html).",
    ),
    "join-traces": ("merge JSON-lines traces (both sides) in time order, one stream or all", None),
    "trace": (
        "one stream's timeline across both traces: a table, and a picture with --out",
        "Joins the producer's and the consumer's JSON-lines traces (their --trace-file, or "
        "stderr as JSON) by stream id into one time-ordered timeline. Without --stream: the "
        "streams found. Per-chunk marks need both sides at --log-level debug.",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m consumer",
        description="replywire consumer. Exit codes: 0 complete, 3 incomplete, 4 cancelled, "
        "5 error, 6 invalid, 7 refused, 2 usage or configuration error. "
        f"Development cases: {', '.join(DEVELOPMENT_CASES)}.",
        **HELP_FORMAT,
    )
    parser.add_argument("--version", action="version", version=version_line())
    # Commands without the logging flags (demo, join-traces, trace) hold records as long.
    parser.set_defaults(trace_flush_ms=round(DEFAULT_FLUSH_DELAY_S * 1000))
    commands = parser.add_subparsers(dest="command", required=True)
    for command, (summary, description) in COMMANDS.items():
        command_parser = commands.add_parser(
            command, help=summary, description=description, **HELP_FORMAT
        )
        FLAGS.add_to(command_parser, command)
    return parser


def run_trace_files(args: argparse.Namespace, out: TextIO) -> int:
    """``join-traces`` or ``trace``: read files only; 2 when they cannot be read."""
    try:
        if args.command == "join-traces":
            skipped = run_join(args.paths, args.stream_id, args.event, out, args.trace_id)
        else:
            request = TraceRequest(
                args.paths, args.stream_id, args.out, args.every, args.max_marks, args.trace_id
            )
            skipped = run_trace(request, out)
    except (OSError, UnknownStream) as error:
        print(f"consumer: {shown_line(str(error), MESSAGE_CHARS)}", file=sys.stderr)
        return EXIT_USAGE
    if skipped:
        print(f"consumer: skipped {skipped} lines that are not JSON records", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in ("join-traces", "trace"):
        return run_trace_files(args, out)
    # The demo keeps its own trace in a file (consumer.jsonl): nothing on stderr but errors.
    log_format: LogFormat = "json" if args.command == "demo" else args.log_format
    trace_file = getattr(args, "trace_file", None)
    try:
        # Line-buffered: a reader of the file sees every record as soon as it is written.
        trace = trace_file.open("a", encoding="utf-8", buffering=1) if trace_file else None
    except OSError as error:
        message = f"cannot open --trace-file {trace_file}: {error.strerror}"
        print(f"consumer: {shown_line(message, MESSAGE_CHARS)}", file=sys.stderr)
        return EXIT_USAGE
    stream: TextIO | None = trace
    if trace is None and args.command == "stream" and view_wanted(args, out):
        from consumer.view import FollowStderr  # noqa: PLC0415 - only with a view

        stream = cast(TextIO, FollowStderr())  # the view prints records above its live area
    configure_logging(
        "consumer",
        log_format="json" if trace else log_format,
        level=args.log_level,
        stream=stream,
        batched=True,
        flush_delay_s=args.trace_flush_ms / 1000,
    )
    try:
        if args.command == "replay":
            return run_replay(args, out)
        if args.command == "stream":
            return run_stream(args, out)
        return run_demo(args, out)
    except (ConfigurationError, ReplywireError) as error:
        print(f"consumer: {shown_line(str(error), MESSAGE_CHARS)}", file=sys.stderr)
        return EXIT_USAGE
