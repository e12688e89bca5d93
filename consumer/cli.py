"""``python -m consumer``: replay a case in-process, or run the demo table.

Exit codes (every consumer command): 0 complete, 3 incomplete, 4 cancelled,
5 error, 6 invalid, 7 refused, 2 usage or configuration error.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

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
from runtime.help_format import DefaultsHelpFormatter
from runtime.logs import (
    DEFAULT_FLUSH_DELAY_S,
    LEVELS,
    TRACE_FLUSH_HELP,
    LogFormat,
    configure_logging,
    flush_delay_ms,
)
from runtime.recording_file import DEFAULT_RECORDING_PATH, load_recording_or_explain
from shared.consumer_core import Limits
from shared.digest import bounded_json
from shared.errors import ConfigurationError, ReplywireError, RequestRefused
from shared.faults import DEFAULT_STALL_MS, Fault, FaultKind
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


def _integer_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from error
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}: {value}")
        return value

    return parse


_positive = _integer_at_least(1)
_non_negative = _integer_at_least(0)


def _chunk_plan(text: str) -> ChunkPlan:
    try:
        return ChunkPlan.parse(text)
    except RequestRefused as error:
        raise argparse.ArgumentTypeError(
            f"--chunks takes frame, whole, N or a,b,c: {error.detail}"
        ) from error


HELP_FORMAT: dict[str, Any] = {"formatter_class": DefaultsHelpFormatter}


def add_logging_flags(parser: argparse.ArgumentParser, level: str = "info") -> None:
    parser.add_argument(
        "--log-format",
        choices=("auto", "json", "console"),
        default="auto",
        help="trace format on stderr (auto: console on a TTY, JSON lines otherwise)",
    )
    parser.add_argument("--log-level", choices=LEVELS, default=level, help="trace level")
    parser.add_argument(
        "--trace-flush-ms",
        type=flush_delay_ms,
        default=round(DEFAULT_FLUSH_DELAY_S * 1000),
        help=TRACE_FLUSH_HELP,
    )
    parser.add_argument(
        "--trace-file",
        type=Path,
        default=None,
        help="append the trace to this file as JSON lines instead of writing it to stderr",
    )


def add_stream_flags(parser: argparse.ArgumentParser, *, case_required: bool = True) -> None:
    """Flags shared by every command that consumes one stream."""
    parser.add_argument(
        "--case",
        required=case_required,
        help=f"development case id, one of: {', '.join(DEVELOPMENT_CASES)}",
    )
    parser.add_argument(
        "--wire",
        choices=[wire.value for wire in WireFormat],
        default=WireFormat.LENGTH_PREFIXED.value,
        help="frame wire format: lp (default, length-prefixed) or ndjson, whose done both "
        "carry the content's SHA-256 (required and checked); ndjson-lab is the lab's NDJSON "
        "byte for byte, whose done has no digest: the content is not integrity-checked "
        '(result "integrity": "none"); use it only to reproduce the lab\'s published table',
    )
    parser.add_argument(
        "--chunks",
        type=_chunk_plan,
        default="frame",  # argparse parses a string default with `type`
        help="transport chunking: frame | whole | N | a,b,c cycled",
    )
    parser.add_argument(
        "--fault",
        choices=[kind.value for kind in FaultKind],
        default=None,
        help="a controlled fault (the producer needs --allow-faults)",
    )
    parser.add_argument(
        "--fault-frame", type=_positive, default=None, help="frame K a fault targets (unset: 3)"
    )
    parser.add_argument(
        "--fault-bytes", type=_positive, default=None, help="bytes truncate-tail drops (unset: 3)"
    )
    parser.add_argument(
        "--stall-ms",
        type=_positive,
        default=None,
        help=f"how long --fault stall sends nothing (unset: {DEFAULT_STALL_MS})",
    )
    parser.add_argument(
        "--ignore-duplicates",
        action="store_true",
        help="drop an exact replay of an applied frame instead of refusing it",
    )
    parser.add_argument(
        "--recording",
        type=Path,
        default=DEFAULT_RECORDING_PATH,
        help="the recording the binding is loaded from",
    )
    parser.add_argument(
        "--result", type=Path, default=None, help="write the result here (unset: stdout)"
    )
    parser.add_argument(
        "--stream-id",
        default=None,
        help="id that joins this stream's traces (unset: a random one)",
    )
    limits = Limits()
    parser.add_argument(
        "--max-stream-bytes",
        type=_positive,
        default=limits.max_stream_bytes,
        help="bytes in one stream",
    )
    parser.add_argument(
        "--max-frame-bytes", type=_positive, default=limits.max_frame_bytes, help="bytes in a frame"
    )
    parser.add_argument(
        "--max-content-chars",
        type=_positive,
        default=limits.max_content_chars,
        help="characters of assembled content",
    )
    parser.add_argument(
        "--max-frames", type=_positive, default=limits.max_frames, help="frames in one stream"
    )
    add_logging_flags(parser)


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
    result = asyncio.run(stream_once(request, options, view))
    return finish_stream(result, args, out, view)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from error
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text}")
    return value


def _keepalive_seconds(text: str) -> float:
    value = _seconds(text)
    if value < MIN_KEEPALIVE_S:
        raise argparse.ArgumentTypeError(
            f"must be >= {MIN_KEEPALIVE_S:g} (gRPC pings no faster): {text}"
        )
    return value


def add_network_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        default="127.0.0.1:50051",
        help="the producer HOST:PORT, or several in gRPC's target syntax "
        "(ipv4:HOST:PORT,HOST:PORT or dns:///NAME:PORT), balanced round_robin",
    )
    parser.add_argument(
        "--queue-size", type=_positive, default=DEFAULT_QUEUE_SIZE, help="bounded chunk queue"
    )
    parser.add_argument(
        "--process-delay-ms", type=_non_negative, default=0, help="simulated work per chunk"
    )
    parser.add_argument(
        "--mode",
        choices=("stream", "buffered"),
        default="stream",
        help="stream: decode as chunks arrive; buffered: read the whole body first",
    )
    parser.add_argument(
        "--window-bytes",
        type=_positive,
        default=DEFAULT_WINDOW_BYTES,
        help="what a paused stream may hold in the consumer's transport: half announced as "
        "the HTTP/2 stream window (grpc.http2.lookahead_bytes, BDP probing off), half "
        "for the one update gRPC returns after the last read",
    )
    parser.add_argument(
        "--deadline-s", type=_seconds, default=DEFAULT_DEADLINE_S, help="overall deadline"
    )
    parser.add_argument(
        "--idle-timeout-s",
        type=_seconds,
        default=DEFAULT_IDLE_TIMEOUT_S,
        help="longest wait for one chunk",
    )
    parser.add_argument(
        "--keepalive-s",
        type=_keepalive_seconds,
        default=DEFAULT_KEEPALIVE_S,
        help=f"gRPC keepalive: ping the producer after this much silence (>= {MIN_KEEPALIVE_S:g}; "
        "not below the producer's --min-ping-interval-s)",
    )
    parser.add_argument(
        "--keepalive-timeout-s",
        type=_seconds,
        default=DEFAULT_KEEPALIVE_TIMEOUT_S,
        help="a ping unanswered this long closes the connection (UNAVAILABLE, resumed): a "
        "producer cut off is found within about --keepalive-s plus this",
    )
    parser.add_argument(
        "--resume-attempts",
        type=_non_negative,
        default=DEFAULT_RESUME_ATTEMPTS,
        help="resumes after a transport failure mid-stream (0: none)",
    )
    parser.add_argument(
        "--resume-backoff-s",
        type=_seconds,
        default=DEFAULT_RESUME_BACKOFF_S,
        help="the first wait before a resume; doubled per attempt up to 2 s, with jitter",
    )
    parser.add_argument(
        "--chunk-interval-ms",
        type=_non_negative,
        default=0,
        help="ask the producer to pause this long between chunks",
    )
    parser.add_argument(
        "--view",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the live view: the text as it arrives, a status line, then the verdict in words "
        "(unset: on when stdout is a terminal). With it, the result document goes only to "
        "--result; without it, to stdout (or --result)",
    )
    parser.add_argument(
        "--question", default=None, help="ask your own question (gemini source): the question"
    )
    parser.add_argument(
        "--context",
        type=Path,
        default=None,
        help="with --question: the passages, a JSON list or JSON Lines of {id, text, url}",
    )
    parser.add_argument(
        "--binding",
        type=Path,
        default=None,
        help="send this binding (a JSON file) instead of the recording's: for testing refusals",
    )
    security = parser.add_argument_group(
        "security",
        "TLS and a bearer token (the producer's --tls-* and --auth-tokens). The token goes "
        "only over TLS, or to a loopback target or a Unix socket, unless --insecure",
    )
    security.add_argument(
        "--tls",
        action="store_true",
        help=f"TLS, the producer's certificate checked against the system's trust store "
        f"(${GRPC_ROOTS_ENV}, else ${OPENSSL_ROOTS_ENV}, else the system's CA bundle)",
    )
    security.add_argument(
        "--tls-ca",
        type=Path,
        default=None,
        help="TLS trusting this CA alone (the producer's), with or without --tls",
    )
    security.add_argument(
        "--tls-cert", type=Path, default=None, help="mutual TLS: this consumer's certificate"
    )
    security.add_argument("--tls-key", type=Path, default=None, help="mutual TLS: its key")
    security.add_argument(
        "--tls-server-name",
        default=None,
        help="the name the producer's certificate must carry (default: the target's host)",
    )
    security.add_argument(
        "--auth-token-file",
        type=Path,
        default=None,
        help=f"a file holding the bearer token alone (or set {TOKEN_ENV}); sent as gRPC call "
        "credentials, over TLS or to a loopback target or a Unix socket",
    )
    security.add_argument(
        "--insecure",
        action="store_true",
        help="let the token go in clear, as metadata, over a plaintext channel to a target "
        "that is not a loopback address or a Unix socket (said at every start)",
    )


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m consumer",
        description="replywire consumer. Exit codes: 0 complete, 3 incomplete, 4 cancelled, "
        "5 error, 6 invalid, 7 refused, 2 usage or configuration error. "
        f"Development cases: {', '.join(DEVELOPMENT_CASES)}.",
        **HELP_FORMAT,
    )
    # Commands without the logging flags (demo, join-traces, trace) hold records as long.
    parser.set_defaults(trace_flush_ms=round(DEFAULT_FLUSH_DELAY_S * 1000))
    commands = parser.add_subparsers(dest="command", required=True)
    replay_parser = commands.add_parser(
        "replay", help="frame a recorded case and consume it in this process", **HELP_FORMAT
    )
    add_stream_flags(replay_parser)
    stream_parser = commands.add_parser(
        "stream", help="open a stream from a producer over gRPC and consume it", **HELP_FORMAT
    )
    add_stream_flags(stream_parser, case_required=False)
    add_network_flags(stream_parser)
    demo_parser = commands.add_parser(
        "demo",
        help="start a producer, stream the cases and the fault catalogue through it, "
        "print a table, stop the producer",
        description="Both traces are kept as JSON lines in the directory printed at the end: "
        "producer.jsonl and consumer.jsonl (this process), with each stream's timeline "
        "(timeline-ID.html, linked from timelines.html).",
        **HELP_FORMAT,
    )
    demo_parser.add_argument(
        "--recording",
        type=Path,
        default=DEFAULT_RECORDING_PATH,
        help="the recording the producer serves",
    )
    demo_parser.add_argument(
        "--log-level",
        choices=LEVELS,
        default="debug",
        help="level of both kept traces (debug: every chunk, for the timelines)",
    )
    join_parser = commands.add_parser(
        "join-traces",
        help="merge JSON-lines traces (both sides) in time order, one stream or all",
        **HELP_FORMAT,
    )
    join_parser.add_argument(
        "paths", type=Path, nargs="+", help="trace files, or directories of *.jsonl files"
    )
    join_parser.add_argument("--stream-id", default=None, help="only this stream's records")
    join_parser.add_argument("--event", default=None, help="only records of this event")
    trace_parser = commands.add_parser(
        "trace",
        help="one stream's timeline across both traces: a table, and a picture with --out",
        description="Joins the producer's and the consumer's JSON-lines traces (their "
        "--trace-file, or stderr as JSON) by stream id into one time-ordered timeline. "
        "Without --stream: the streams found. Per-chunk marks need both sides at "
        "--log-level debug.",
        **HELP_FORMAT,
    )
    trace_parser.add_argument(
        "paths",
        type=Path,
        nargs="+",
        metavar="TRACE",
        help="PRODUCER.jsonl CONSUMER.jsonl (any order), or a directory of *.jsonl files",
    )
    trace_parser.add_argument(
        "--stream",
        "--stream-id",
        dest="stream_id",
        metavar="ID",
        default=None,
        help="the stream to show: its id, or the beginning of one (a short id)",
    )
    trace_parser.add_argument(
        "--out",
        type=Path,
        metavar="FILE.html|DIR",
        default=None,
        help="with --stream: also write its timeline here, one self-contained HTML page (an "
        "SVG); without: a directory, for every stream's page and an index (timelines.html)",
    )
    trace_parser.add_argument(
        "--all",
        dest="every",
        action="store_true",
        help="one row per record (default: runs of per-chunk and per-pause records, one row)",
    )
    trace_parser.add_argument(
        "--max-marks",
        type=_positive,
        metavar="N",
        default=DEFAULT_MAX_MARKS,
        help="marks a row of the picture draws one by one; past it, one bin per pixel column",
    )
    return parser


def run_trace_files(args: argparse.Namespace, out: TextIO) -> int:
    """``join-traces`` or ``trace``: read files only; 2 when they cannot be read."""
    try:
        if args.command == "join-traces":
            skipped = run_join(args.paths, args.stream_id, args.event, out)
        else:
            request = TraceRequest(args.paths, args.stream_id, args.out, args.every, args.max_marks)
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
