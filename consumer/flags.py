"""The consumer's flags: one table (``FLAGS``), by the commands that take them, from which
argparse, ``--help`` and the docs' flag table are made, and the parser built from it.
``consumer.cli`` runs the commands with what the parsed flags say."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Final

from replywire.consumer.options import (
    DEFAULT_DEADLINE_S,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_KEEPALIVE_S,
    DEFAULT_KEEPALIVE_TIMEOUT_S,
    DEFAULT_QUEUE_SIZE,
    DEFAULT_RESUME_ATTEMPTS,
    DEFAULT_RESUME_BACKOFF_S,
    DEFAULT_WINDOW_BYTES,
    MIN_KEEPALIVE_S,
)
from replywire.consumer.security import GRPC_ROOTS_ENV, OPENSSL_ROOTS_ENV, TOKEN_ENV
from replywire.native import version_line
from replywire.runtime import invocation
from replywire.runtime.flags import (
    Count,
    Flag,
    FlagGroup,
    FlagTable,
    positive_seconds,
    seconds_at_least,
)
from replywire.runtime.help_format import DefaultsHelpFormatter
from replywire.runtime.logs import DEFAULT_FLUSH_DELAY_S, LEVELS, flush_delay_ms
from replywire.runtime.recording_file import DEFAULT_RECORDING_PATH
from replywire.runtime.tracing import ENDPOINT_ENV, TRACEPARENT_ENV, TRACESTATE_ENV
from replywire.runtime.usage import OneLineParser
from replywire.shared.chats import DEFAULT_CHAT_MODEL
from replywire.shared.consumer_limits import Limits
from replywire.shared.errors import RequestRefused
from replywire.shared.faults import (
    DEFAULT_STALL_MS,
    DEFAULT_TARGET_FRAME,
    DEFAULT_TRUNCATE_BYTES,
    FaultKind,
)
from replywire.shared.recording import DEVELOPMENT_CASES
from replywire.shared.requests import MAX_BINDING_BYTES, MAX_BINDING_DEPTH
from replywire.shared.texts import MAX_ECHO_CHARS
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan


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
             + " (`stream` may ask `--question` instead; with `--kind text`, the case's "
             "recorded text reply; with `--kind chat`, a recorded chat turn `chat-…`)",
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
        Flag("--max-tool-calls", "the core's bound on the tool calls one chat turn begins",
             Count("calls"), LIMITS.max_tool_calls),
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
        Flag("--kind",
             "the kind of reply to ask for ([reply kinds](protocol.md#kinds)): `grounded` "
             "(an answer citing the bound passages), `text` (free text, with `--text`) or "
             "`chat` (a model turn: text, tool calls, thoughts, usage; with `--prompt`, or "
             "`--case` a recorded chat turn); a `--binding` file names its own",
             choices=("grounded", "text", "chat"), shown="`grounded`"),
        Flag("--text",
             "with `--kind text`: the message to send (the empty text too; at most "
             f"{MAX_ECHO_CHARS:,} code points): the development source streams it back in "
             "deltas of six code points, a model (`--source gemini`) answers it; replaces "
             "`--case`"),
        Flag("--prompt",
             "with `--kind chat`: the user's turn of a chat request (its binding is built "
             "and checked before any connection); replaces `--case`"),
        Flag("--tools",
             "with `--prompt`: the tools the model may call, a JSON array of "
             "`{name, description, parameters}` (`parameters` a JSON Schema of an object)",
             Path, shown="none"),
        Flag("--system", "with `--prompt`: the system instruction", shown="none"),
        Flag("--model", "with `--prompt`: the model the request names (the producer's "
             "Gemini source calls only its own)", shown=f"`{DEFAULT_CHAT_MODEL}`"),
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
))
# fmt: on

#: Each command: its one-line help, and the description its own --help opens with.
COMMANDS: Final = {
    "replay": ("frame a recorded case and consume it in this process", None),
    "stream": ("open a stream from a producer over gRPC and consume it", None),
}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=invocation.command("consumer"),
        description="replywire consumer. Exit codes: 0 complete, 3 incomplete, 4 cancelled, "
        "5 error, 6 invalid, 7 refused, 2 usage or configuration error. "
        f"Development cases: {', '.join(DEVELOPMENT_CASES)}.",
        **HELP_FORMAT,
    )
    parser.add_argument("--version", action="version", version=version_line())
    commands = parser.add_subparsers(dest="command", required=True)
    for command, (summary, description) in COMMANDS.items():
        command_parser = commands.add_parser(
            command, help=summary, description=description, **HELP_FORMAT
        )
        FLAGS.add_to(command_parser, command)
    return parser
