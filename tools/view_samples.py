"""The README's "what you see on a terminal" samples, from real runs.

A producer process (faults allowed, its trace in the console format) and the consumer
command line, as the README shows them: a complete stream, a truncated one, one with no
producer, each as a terminal shows it once the stream has ended (the console trace
above, then the verdict; the live part in between is transient), and one frame of the
live part itself, drawn while the producer stalls on purpose. Ports are the README's;
``tests/test_view.py`` runs this again and compares it with the README, with the times
and the random stream ids masked.

    python -m tools.docs --update README.md --run     # rewrites the sections
"""

from __future__ import annotations

import asyncio
import functools
import io
import logging
import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import structlog
from rich.console import Console

from consumer.children import read_listening_port, stop_producer
from consumer.client import StreamOptions, stream_reply
from consumer.explain import Facts
from consumer.view import LiveView
from runtime.recording_file import load_recording
from shared.faults import Fault, FaultKind
from shared.requests import ReplyRequest

ROOT: Final = Path(__file__).resolve().parent.parent
#: The ports the README shows: the default producer's, and one where nothing listens.
SHOWN_PORT: Final = "50051"
NOBODY_PORT: Final = "50099"
COMPLETE: Final = "make run-consumer CASE=replace-file"
TRUNCATED: Final = ".venv/bin/python -m consumer stream --case replace-file --fault truncate-tail"
NO_PRODUCER: Final = (
    f".venv/bin/python -m consumer stream --case replace-file --target 127.0.0.1:{NOBODY_PORT}"
)
PRODUCER: Final = 'make run-producer ARGS="--allow-faults"'
NAMES: Final = ("view-live", "view-complete", "view-truncated", "view-no-producer", "view-producer")


@contextmanager
def console_producer(trace: Path) -> Iterator[str]:
    """A producer on a free port, faults allowed, tracing in the console format to ``trace``."""
    command = [
        sys.executable, "-m", "producer", "--port", "0", "--allow-faults",
        "--log-format", "console",
    ]  # fmt: skip
    with trace.open("w") as trace_file:
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=trace_file)
    try:
        port = read_listening_port(process)
        if port is None:
            raise RuntimeError(f"the producer did not start; see {trace}")
        yield f"127.0.0.1:{port}"
    finally:
        stop_producer(process)


def free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def consumer_screen(target: str, *args: str) -> str:
    """``consumer stream`` as a terminal shows it at the end: the console trace, then the
    view's verdict (``--view``: the live part is transient, so it leaves nothing)."""
    run = subprocess.run(
        [sys.executable, "-m", "consumer", "stream", "--case", "replace-file", "--target", target,
         "--view", "--log-format", "console", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    return run.stdout


def live_frame(target: str) -> str:
    """The last frame the live view drew while the producer stalled after two frames."""
    request = ReplyRequest.for_case(
        load_recording(),
        "replace-file",
        fault=Fault(kind=FaultKind.STALL, stall_ms=3000),
        stream_id="live-frame",
    )
    silent = structlog.wrap_logger(
        None, wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL)
    )
    options = StreamOptions(target=target, idle_timeout_s=1.0)
    console = Console(
        record=True, file=io.StringIO(), force_terminal=True, width=80, color_system=None
    )
    view = LiveView(console, Facts(target=target))

    async def run() -> None:
        async with view.showing():
            await stream_reply(request, options, logger=silent, observer=view.attach)

    asyncio.run(run())
    drawn = console.export_text()
    frame = drawn[drawn.rindex("╭─ provisional") :]
    return frame[: frame.index("\n", frame.index("● ")) + 1]


def with_ports(text: str, served: str, nobody: str) -> str:
    text = text.replace(served, f"127.0.0.1:{SHOWN_PORT}")
    text = text.replace(f"port={served.rsplit(':', 1)[1]} ", f"port={SHOWN_PORT} ")
    text = text.replace(f"127.0.0.1:{nobody}", f"127.0.0.1:{NOBODY_PORT}")
    return text.replace(f"PORT={nobody}", f"PORT={NOBODY_PORT}")


def console_block(command: str, output: str) -> str:
    return f"```console\n$ {command}\n{output}```\n"


@functools.cache
def samples() -> dict[str, str]:
    """Every sample section, by name (``view-*``), from one producer run."""
    with tempfile.TemporaryDirectory() as directory:
        trace = Path(directory) / "producer.log"
        nobody = free_port()
        with console_producer(trace) as target:
            complete = consumer_screen(target)
            truncated = consumer_screen(target, "--fault", "truncate-tail")
            frame = live_frame(target)
        nothing = consumer_screen(f"127.0.0.1:{nobody}")
        served = trace.read_text(encoding="utf-8")
    # The producer's lines about the live frame's stream are left out: two streams show it.

    def fix(text: str) -> str:
        return with_ports(text, target, nobody)

    return {
        "view-live": "```text\n" + fix(frame) + "```\n",
        "view-complete": console_block(COMPLETE, fix(complete)),
        "view-truncated": console_block(TRUNCATED, fix(truncated)),
        "view-no-producer": console_block(NO_PRODUCER, fix(nothing)),
        "view-producer": console_block(PRODUCER, fix(_first_streams(served, 2))),
    }


def _first_streams(trace: str, count: int) -> str:
    """The producer's start and its lines about its first ``count`` streams."""
    kept: list[str] = []
    streams: list[str] = []
    for line in trace.splitlines(keepends=True):
        found = re.search(r"· (\S+)$", line)
        if found and found.group(1) not in streams:
            if len(streams) == count:
                continue
            streams.append(found.group(1))
        if not found or found.group(1) in streams:
            kept.append(line)
    kept = [line for line in kept if "producer_stopp" not in line]
    # On its terminal the producer's stdout says where it listens, after its first record.
    return "".join([*kept[:1], f"listening on 127.0.0.1:{SHOWN_PORT}\n", *kept[1:]])


def section(name: str) -> str:
    return samples()[name]
