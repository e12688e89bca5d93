"""The tour's samples (docs/tour.md), from real runs.

The tour's two terminals, as docs/tour.md shows them: a producer keeping its JSON trace in
a file, and the consumer command line (its trace in a file too, so the terminal shows the
view alone): a complete stream, a truncated one, a slow one whose producer is stopped
(Ctrl-C twice: two SIGINTs) and started again on the same port, and the same with no
restart; each as a terminal shows it once the stream has ended (the live part is
transient), and each stream's timeline, as ``make trace`` prints it from both traces.
Then, with the trace on the terminals (the console format): a producer's terminal, a
consumer with no producer to talk to, and one frame of the live part itself, drawn while
the producer stalls on purpose. Ports and trace paths are the tour's;
``tests/system/test_view_processes.py`` runs this again and compares it with docs/tour.md,
with the times,
the random stream ids and what depends on timing masked.

    python -m tools.docs --update docs/tour.md --run     # rewrites the sections
"""

from __future__ import annotations

import asyncio
import functools
import io
import logging
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import structlog
from rich.console import Console

from replywire.children import read_listening_port, stop_process, stop_producer
from replywire.consumer.client import stream_reply
from replywire.consumer.explain import Facts
from replywire.consumer.options import StreamOptions
from replywire.consumer.view import LiveView
from replywire.runtime.recording_file import load_recording
from replywire.shared.faults import Fault, FaultKind
from replywire.shared.requests import ReplyRequest

ROOT: Final = Path(__file__).resolve().parent.parent
#: The ports the tour shows: the default producer's, and one where nothing listens.
SHOWN_PORT: Final = "50051"
NOBODY_PORT: Final = "50099"
#: Where the tour's terminals keep their JSON traces (the paths it shows).
PRODUCER_TRACE: Final = "/tmp/producer.jsonl"
CONSUMER_TRACE: Final = "/tmp/consumer.jsonl"
#: Both traces at debug: every chunk sent, received and applied is on the timeline.
TRACED: Final = ("--log-level", "debug", "--trace-file")
TOUR_PRODUCER: Final = (
    f'make run-producer ARGS="--allow-faults {" ".join(TRACED)} {PRODUCER_TRACE}"'
)
SLOW_FLAGS: Final = ("--chunk-interval-ms", "1000", "--resume-attempts", "6")


def tour_consumer(*flags: str) -> str:
    """The tour's terminal-2 command with these consumer flags."""
    return (
        f'make run-consumer CASE=replace-file ARGS="{" ".join([*flags, *TRACED])} {CONSUMER_TRACE}"'
    )


COMPLETE: Final = tour_consumer()
TRUNCATED: Final = tour_consumer("--fault", "truncate-tail")
SLOW: Final = tour_consumer(*SLOW_FLAGS)
#: ``make trace`` for one of the tour's streams: this, then the short stream id.
TRACE: Final = f"make trace P={PRODUCER_TRACE} C={CONSUMER_TRACE} STREAM="
NO_PRODUCER: Final = (
    f".venv/bin/python -m consumer stream --case replace-file --target 127.0.0.1:{NOBODY_PORT}"
)
PRODUCER: Final = 'make run-producer ARGS="--allow-faults"'
#: The tour's streams: the view's verdict (``view-NAME``) and the timeline (``trace-NAME``).
TOUR: Final = ("complete", "truncated", "resumed", "killed")
NAMES: Final = (
    "view-live",
    *(f"view-{name}" for name in TOUR),
    *(f"trace-{name}" for name in TOUR),
    "view-no-producer",
    "view-producer",
)


@contextmanager
def console_producer(trace: Path) -> Iterator[str]:
    """A producer on a free port, faults allowed, tracing in the console format to ``trace``."""
    command = [
        sys.executable, "-m", "replywire.producer", "--port", "0", "--allow-faults",
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


@contextmanager
def refusing_port() -> Iterator[str]:
    """A port where connections are refused for as long as this holds it: bound, never
    listening, so no other process can take it meanwhile."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield str(sock.getsockname()[1])


def quiet_port() -> str:
    """A free port below the range the system picks outgoing connections' ports from, so
    none of those takes it while the tour's producer is stopped and started again."""
    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return str(port)
    raise RuntimeError("no free port between 20000 and 32000")


def consumer_screen(target: str, *args: str) -> str:
    """``consumer stream`` as a terminal shows it at the end: the console trace, then the
    view's verdict (``--view``: the live part is transient, so it leaves nothing)."""
    run = subprocess.run(
        [sys.executable, "-m", "replywire.consumer", "stream", "--case", "replace-file",
         "--target", target, "--view", "--log-format", "console", *args],
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
    port = served.rsplit(":", 1)[1]
    text = text.replace(f"port={port} ", f"port={SHOWN_PORT} ")
    text = text.replace(f"PORT={port}", f"PORT={SHOWN_PORT}".ljust(len(f"PORT={port}")))
    text = text.replace(f"127.0.0.1:{nobody}", f"127.0.0.1:{NOBODY_PORT}")
    return text.replace(f"PORT={nobody}", f"PORT={NOBODY_PORT}")


def console_block(command: str, output: str) -> str:
    return f"```console\n$ {command}\n{output}```\n"


class TourProducer:
    """Terminal 1 of the tour: ``python -m producer`` on a fixed port, faults allowed, its
    JSON trace appended to one file; stopped with Ctrl-C twice and started again there."""

    def __init__(self, port: str, trace: Path) -> None:
        self.command = [
            sys.executable, "-m", "replywire.producer", "--port", port, "--allow-faults",
            *TRACED, str(trace),
        ]  # fmt: skip
        self.target = f"127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        if read_listening_port(self.process) is None:
            raise RuntimeError("the tour's producer did not start")

    def interrupt_twice(self) -> None:
        """Ctrl-C twice, as a person stops it: stop accepting, then stop at once."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGINT)
        time.sleep(0.2)
        stop_process(process, signal.SIGINT)
        if process.stdout:
            process.stdout.close()


def tour_screen(target: str, trace: Path, *flags: str) -> str:
    """The tour's terminal 2 once the stream has ended: the view alone (trace in a file)."""
    return finished(start_tour_consumer(target, trace, *flags))


def start_tour_consumer(target: str, trace: Path, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "replywire.consumer", "stream", "--case", "replace-file",
         "--target", target, "--view", *flags, *TRACED, str(trace)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def finished(consumer: subprocess.Popen[str]) -> str:
    try:
        out, _ = consumer.communicate(timeout=90)
    finally:
        stop_process(consumer, signal.SIGKILL)
    return out


def wait_for_frames(trace: Path, streams_before: int) -> None:
    """Until the new stream's first message is in the consumer's trace (bounded), then two
    chunk intervals more: the producer has sent a few frames when it is stopped."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if trace.read_text(encoding="utf-8").count('"first_message"') > streams_before:
            time.sleep(1.5)
            return
        time.sleep(0.05)
    raise RuntimeError("the slow stream never started")


def stopped_mid_stream(producer: TourProducer, trace: Path, restart: bool) -> str:
    """The slow stream; its producer stopped after a few frames (started again if asked)."""
    before = trace.read_text(encoding="utf-8").count('"first_message"')
    consumer = start_tour_consumer(producer.target, trace, *SLOW_FLAGS)
    try:
        wait_for_frames(trace, before)
        producer.interrupt_twice()
        if restart:
            producer.start()
    finally:
        screen = finished(consumer)
    return screen


def short_id(screen: str) -> str:
    # The final line's id, cut with "…" (consumer/view.py): its first 8 digits name it.
    found = re.search(r"  stream ([0-9a-f]{8})[0-9a-f]*…?\n", screen)
    if found is None:
        raise RuntimeError(f"no stream id on the screen:\n{screen}")
    return found.group(1)


def made_trace(traces: tuple[Path, Path], stream: str) -> str:
    """``make trace P=... C=... STREAM=...`` as printed (piped: whole rows)."""
    run = subprocess.run(
        ["make", "--no-print-directory", "trace", f"P={traces[0]}", f"C={traces[1]}",
         f"STREAM={stream}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return run.stdout


def tour(directory: Path) -> dict[str, str]:
    """The tour's four streams through one producer (stopped twice, restarted once)."""
    traces = (directory / "producer.jsonl", directory / "consumer.jsonl")
    traces[1].touch()
    producer = TourProducer(quiet_port(), traces[0])
    producer.start()
    try:
        screens = {
            "complete": tour_screen(producer.target, traces[1]),
            "truncated": tour_screen(producer.target, traces[1], "--fault", "truncate-tail"),
            "resumed": stopped_mid_stream(producer, traces[1], restart=True),
            "killed": stopped_mid_stream(producer, traces[1], restart=False),
        }
    finally:
        producer.interrupt_twice()
    commands = {"complete": COMPLETE, "truncated": TRUNCATED, "resumed": SLOW, "killed": SLOW}
    found: dict[str, str] = {}
    for name, screen in screens.items():
        stream = short_id(screen)
        table = with_ports(made_trace(traces, stream), producer.target, NOBODY_PORT)
        found[f"view-{name}"] = console_block(
            commands[name], with_ports(screen, producer.target, NOBODY_PORT)
        )
        if name == "killed":
            table = alike_attempts_left_out(table)
        found[f"trace-{name}"] = console_block(TRACE + stream, table)
    return found


def alike_attempts_left_out(table: str) -> str:
    """The table without the rows of resume attempts 2 onwards (each like the first), one
    ``...`` row where they were."""
    kept: list[str] = []
    for line in table.splitlines(keepends=True):
        if re.search(r"\battempt=([2-9]|\d\d)\b", line) and "-> error" not in line:
            if kept[-1] != "    ...\n":
                kept.append("    ...\n")
            continue
        kept.append(line)
    return "".join(kept)


@functools.cache
def samples() -> dict[str, str]:
    """Every sample section, by name (``view-*``, ``trace-*``), from real runs."""
    with tempfile.TemporaryDirectory() as directory:
        trace = Path(directory) / "producer.log"
        with console_producer(trace) as target:
            consumer_screen(target)
            consumer_screen(target, "--fault", "truncate-tail")
            frame = live_frame(target)
        with refusing_port() as nobody:
            nothing = consumer_screen(f"127.0.0.1:{nobody}")
        served = trace.read_text(encoding="utf-8")
        toured = tour(Path(directory))
    # The producer's lines about the live frame's stream are left out: two streams show it.

    def fix(text: str) -> str:
        return with_ports(text, target, nobody)

    return {
        "view-live": "```text\n" + fix(frame) + "```\n",
        **toured,
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
