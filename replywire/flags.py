"""The flags of ``python -m replywire``: one table (``FLAGS``), by the commands that take
them, from which argparse, ``--help`` and the docs' flag table are made, and the parser
built from it. ``replywire.cli`` runs the commands."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Final

from replywire.native import version_line
from replywire.runtime import invocation
from replywire.runtime.flags import Count, Flag, FlagGroup, FlagTable, Number
from replywire.runtime.help_format import DefaultsHelpFormatter
from replywire.runtime.logs import LEVELS
from replywire.runtime.recording_file import DEFAULT_RECORDING_PATH
from replywire.runtime.usage import OneLineParser
from replywire.traces.svg import DEFAULT_MAX_MARKS

#: Every flag of ``python -m replywire``, by the commands that take it (no environment
#: variables).
# fmt: off
FLAGS: Final = FlagTable((
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
    FlagGroup(commands=("health", "services"), flags=(
        Flag("--target", "the producer's `HOST:PORT` (or a target in gRPC's own syntax)",
             default="127.0.0.1:50051"),
        Flag("--tls", "TLS, the producer's certificate checked against the system's trust "
             "store (as the consumer's `--tls`); plaintext without it or `--tls-ca`",
             action="switch"),
        Flag("--tls-ca", "TLS trusting this one CA's PEM certificate (the one that signed the "
             "producer's `--tls-cert`)", Path, metavar="PEM"),
        Flag("--tls-cert", "mutual TLS: this client's certificate (a producer started with "
             "`--tls-client-ca`), with `--tls` or `--tls-ca`", Path, metavar="PEM"),
        Flag("--tls-key", "mutual TLS: the key of `--tls-cert`", Path, metavar="PEM"),
        Flag("--tls-server-name", "the name the producer's certificate must carry, with "
             "`--tls` or `--tls-ca`", shown="the target's host"),
        Flag("--timeout-s", "how long an answer may take", Number(0, inclusive=False), 5.0),
    )),
    FlagGroup(commands=("health",), flags=(
        Flag("--service", "the service asked about: `\"\"` the whole producer, or "
             "`replywire.v1.ReplyStream`", default="", shown="`\"\"`"),
        Flag("--watch", "`Watch` instead of `Check`: one line per status the producer "
             "announces, until it ends the watch (it stops) or Ctrl-C", action="switch"),
    )),
))
# fmt: on

#: Each command: its one-line help, and the description its own --help opens with.
COMMANDS: Final = {
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
    "health": (
        "ask a running producer's health service: one line, SERVING (exit 0) or another "
        "status (exit 1)",
        "grpc.health.v1.Health's Check (or Watch), as a load balancer asks it. Exit codes: 0 "
        "SERVING, 1 another status, 2 usage error, 5 no answer.",
    ),
    "services": (
        "list a running producer's services through its server reflection, one a line",
        "Exit codes: 0 listed, 2 usage error, 5 no answer.",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=invocation.command("replywire"),
        description="replywire: the commands above both processes, the demo, both sides' "
        "traces read as one, and a running producer's health and services. Exit codes: 0 "
        "done, 2 usage error or trace files that cannot be read (health and services: see "
        "their --help).",
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_line())
    commands = parser.add_subparsers(dest="command", required=True)
    for command, (summary, description) in COMMANDS.items():
        command_parser = commands.add_parser(
            command, help=summary, description=description, formatter_class=DefaultsHelpFormatter
        )
        FLAGS.add_to(command_parser, command)
    return parser
