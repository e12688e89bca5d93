"""``python -m consumer``: replay a case in-process, or stream one from a producer.

Exit codes (every consumer command): 0 complete, 3 incomplete, 4 cancelled,
5 error, 6 invalid, 7 refused, 2 usage or configuration error.

The flags are ``consumer.flags``'; this module turns what they say into a request and its
options, runs the command, and prints its result.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

import structlog

from replywire.consumer.binding_flags import load_binding
from replywire.consumer.client import stream_reply
from replywire.consumer.explain import Facts
from replywire.consumer.flags import build_parser
from replywire.consumer.interrupt import install_interrupt
from replywire.consumer.options import DEFAULT_RESUME_BACKOFF_MAX_S, StreamOptions
from replywire.consumer.results import EXIT_USAGE, exit_code, refused_result
from replywire.consumer.security import GRPC_BUNDLED, SecurityFlags, load_security
from replywire.consumer.targets import check_target
from replywire.runtime.closed_pipe import stdout_closed
from replywire.runtime.logs import configure_logging
from replywire.runtime.output_paths import check_writable
from replywire.runtime.recording_file import (
    load_recording_or_explain,
)
from replywire.runtime.tracing import (
    TRACEPARENT_ENV,
    TRACESTATE_ENV,
    TracingConfig,
    disabled,
    endpoint_from,
    start_tracing,
    stop_tracing,
)
from replywire.shared.consumer_limits import Limits
from replywire.shared.errors import ConfigurationError, ReplywireError, RequestRefused
from replywire.shared.faults import Fault, FaultKind
from replywire.shared.replay import replay
from replywire.shared.requests import (
    MAX_CASE_ID_CHARS,
    MAX_STREAM_ID_CHARS,
    ReplyRequest,
    id_problem,
)
from replywire.shared.result import StreamResult
from replywire.shared.terminal_text import MAX_LINE_CHARS, shown_json, shown_line
from replywire.shared.wire import WireFormat

if TYPE_CHECKING:  # the view (and rich) is imported only when it is wanted
    from replywire.consumer.view import LiveView


def new_stream_id() -> str:
    return uuid.uuid4().hex


def limits_from(args: argparse.Namespace) -> Limits:
    return Limits(
        max_stream_bytes=args.max_stream_bytes,
        max_frame_bytes=args.max_frame_bytes,
        max_content_chars=args.max_content_chars,
        max_frames=args.max_frames,
        max_tool_calls=args.max_tool_calls,
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
        try:
            out.write(shown_json(text) if out.isatty() else text)
            out.flush()
        except BrokenPipeError:  # its reader closed the pipe: the exit code still says
            stdout_closed()
    else:
        path.write_text(text, encoding="utf-8")


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

    from replywire.consumer.view import LiveView  # noqa: PLC0415

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


def check_flags(args: argparse.Namespace) -> None:
    """What the flags say, checked before anything is written or connected (a
    ``ConfigurationError``, a usage error): the files written can be, the target is one
    gRPC reads as meant, the stream id and the case keep the protocol's rule."""
    check_writable("--result", args.result)
    check_writable("--trace-file", args.trace_file)
    if args.command == "stream":
        check_target(args.target)
    ids = (
        ("--stream-id", args.stream_id, MAX_STREAM_ID_CHARS),
        ("--case", getattr(args, "case", None), MAX_CASE_ID_CHARS),
    )
    for flag, value, limit in ids:
        problem = None if value is None else id_problem(flag, value, limit)
        if problem is not None:
            rule = f"the protocol's rule: 0 to {limit} visible ASCII"
            raise ConfigurationError(f"{problem} ({rule})")


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_flags(args)
    except ConfigurationError as error:
        print(f"consumer: {shown_line(str(error), MAX_LINE_CHARS)}", file=sys.stderr)
        return EXIT_USAGE
    trace_file = args.trace_file
    try:
        # Line-buffered: a reader of the file sees every record as soon as it is written.
        trace = trace_file.open("a", encoding="utf-8", buffering=1) if trace_file else None
    except OSError as error:
        message = f"cannot open --trace-file {trace_file}: {error.strerror}"
        print(f"consumer: {shown_line(message, MAX_LINE_CHARS)}", file=sys.stderr)
        return EXIT_USAGE
    stream: TextIO | None = trace
    if trace is None and args.command == "stream" and view_wanted(args, out):
        from replywire.consumer.view import FollowStderr  # noqa: PLC0415 - only with a view

        stream = cast(TextIO, FollowStderr())  # the view prints records above its live area
    configure_logging(
        "consumer",
        log_format="json" if trace else args.log_format,
        level=args.log_level,
        stream=stream,
        batched=True,
        flush_delay_s=args.trace_flush_ms / 1000,
    )
    try:
        if args.command == "replay":
            return run_replay(args, out)
        return run_stream(args, out)
    except (ConfigurationError, ReplywireError) as error:
        print(f"consumer: {shown_line(str(error), MAX_LINE_CHARS)}", file=sys.stderr)
        return EXIT_USAGE
