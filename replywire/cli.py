"""``python -m replywire``: the commands above both processes. ``demo`` (``make demo``)
starts a producer and streams the cases and the fault catalogue through it
(``replywire.demo``); ``join-traces`` and ``trace`` read both sides' traces as one
(``traces.commands``); ``health`` and ``services`` ask a running producer
(``replywire.probes``). The flags are ``replywire.flags``'.

Exit codes: 0 done; 2 a usage or configuration error, or trace files that cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from replywire.demo import run_demo
from replywire.flags import build_parser
from replywire.probes import run_probe
from replywire.runtime.closed_pipe import stdout_closed
from replywire.runtime.logs import configure_logging
from replywire.runtime.output_paths import check_writable
from replywire.shared.errors import ConfigurationError, ReplywireError
from replywire.shared.status import EXIT_USAGE
from replywire.shared.terminal_text import MAX_LINE_CHARS, shown_line
from replywire.traces.commands import TraceRequest, UnknownStream, run_join, run_trace


def complain(message: str) -> None:
    """One line on stderr, from this command (the message may carry text from a file)."""
    print(f"replywire: {shown_line(message, MAX_LINE_CHARS)}", file=sys.stderr)


def run_trace_files(args: argparse.Namespace, out: TextIO) -> int:
    """``join-traces`` or ``trace``: read files only; 2 when they cannot be read."""
    try:
        if args.command == "trace":  # the page (or the folder of pages) it will write
            one_stream = args.stream_id is not None or args.trace_id is not None
            check_writable("--out", args.out, directory=not one_stream)
    except ConfigurationError as error:
        complain(str(error))
        return EXIT_USAGE
    try:
        if args.command == "join-traces":
            skipped = run_join(args.paths, args.stream_id, args.event, out, args.trace_id)
        else:
            request = TraceRequest(
                args.paths, args.stream_id, args.out, args.every, args.max_marks, args.trace_id
            )
            skipped = run_trace(request, out)
    except BrokenPipeError:  # its reader has what it wanted (``| head``): done, quietly
        stdout_closed()
        return 0
    except (OSError, UnknownStream) as error:
        complain(str(error))
        return EXIT_USAGE
    if skipped:
        complain(f"skipped {skipped} lines that are not JSON records")
    return 0


def run_demo_command(args: argparse.Namespace, out: TextIO) -> int:
    """``demo``: the demo is the consumer side of its streams, and keeps its own trace in a
    file (consumer.jsonl); until that file is open, records go to stderr as JSON."""
    configure_logging("consumer", log_format="json", level=args.log_level, batched=True)
    try:
        return run_demo(args, out)
    except (ConfigurationError, ReplywireError) as error:
        complain(str(error))
        return EXIT_USAGE


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        return run_demo_command(args, out)
    if args.command in ("health", "services"):
        return run_probe(args, out)
    return run_trace_files(args, out)
