"""``make demo`` (``python -m replywire demo``): a producer process, the cases and the fault
catalogue through a consumer in this process.

Starts ``python -m producer --port 0 --allow-faults`` as a child process, streams
every development case and every fault over gRPC (wire, chunking and timeouts
as listed), prints one table of what was accepted and what was refused, and
stops the producer (SIGTERM to its pid). Both traces are kept as JSON lines in
a directory whose path is printed at the end: ``producer.jsonl`` (the child's
stderr) and ``consumer.jsonl`` (this process). Each row's stream id is in the
table. From both traces the demo writes each stream's timeline
(``timeline-<stream id>.html``, linked from ``timelines.html``) into the same
directory, and prints the commands that show one stream's timeline and records.
The traces are kept at ``debug`` by default, so that the timelines have a mark
for every chunk sent, chunk received and frame applied.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any, TextIO

from replywire.children import start_producer, stop_producer
from replywire.consumer.client import ReplyClient
from replywire.consumer.options import StreamOptions
from replywire.runtime.invocation import shown_command
from replywire.runtime.logs import configure_logging
from replywire.runtime.recording_file import (
    load_chat_recording_or_explain,
    load_recording_or_explain,
)
from replywire.shared.chat_recording import ChatRecording
from replywire.shared.faults import Fault, FaultKind
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest
from replywire.shared.result import StreamResult
from replywire.shared.terminal_text import shown_line
from replywire.shared.texts import build_text_binding
from replywire.shared.wire import DEFAULT_WIRES, WireFormat
from replywire.shared.wire.chunking import LAB_PATTERN, ChunkMode, ChunkPlan
from replywire.traces.commands import timeline_page_name, write_timelines

FAULT_CASE = "replace-file"
#: The demo's chat turns: the 002 lab's (two calls whose argument fragments interleave, and
#: usage), and one whose call's arguments are not JSON.
CHAT_CASE = "chat-interleaved-calls"
CHAT_MALFORMED = "chat-malformed-arguments"
#: The demo's text reply: free text, streamed back in six-code-point deltas.
DEMO_TEXT = "Free text, any length: naïve café, 日本語, 😀 and the empty text too."
COLUMNS = ("run", "stream id", "wire", "status", "reason", "frames", "bytes", "accepted")
#: The row whose joined trace the demo suggests looking at.
SHOWN_RUN = f"{FAULT_CASE} + {FaultKind.TRUNCATE_TAIL}"
LAB_PLAN = ChunkPlan(ChunkMode.SIZES, LAB_PATTERN)
#: The widest cell drawn.
CELL_CHARS = 64


@dataclass(frozen=True)
class DemoRun:
    label: str
    case_id: str
    wire: WireFormat = WireFormat.LENGTH_PREFIXED
    plan: ChunkPlan = LAB_PLAN
    fault: Fault | None = None
    ignore_duplicates: bool = False
    idle_timeout_s: float | None = None
    binding_edit: dict[str, Any] = field(default_factory=dict)
    #: A text reply (``--kind text --text``): the development text source streams it back.
    text: str | None = None
    #: A recorded chat turn (``--kind chat --case``) of ``fixtures/chat-recording.json``.
    chat_case: str | None = None


def demo_runs(recording: Recording) -> list[DemoRun]:
    runs = [
        DemoRun(case_id, case_id, wire) for wire in DEFAULT_WIRES for case_id in recording.case_ids
    ]
    for kind in FaultKind:
        runs.append(
            DemoRun(
                f"{FAULT_CASE} + {kind}",
                FAULT_CASE,
                fault=Fault(kind=kind, stall_ms=5_000 if kind is FaultKind.STALL else None),
                idle_timeout_s=0.5 if kind is FaultKind.STALL else None,
            )
        )
    runs += [
        DemoRun(
            f"{FAULT_CASE} + repeat, --ignore-duplicates",
            FAULT_CASE,
            fault=Fault(kind=FaultKind.REPEAT),
            ignore_duplicates=True,
        ),
        DemoRun(
            f"{FAULT_CASE}, tampered binding",
            FAULT_CASE,
            binding_edit={"schema": {"type": "object"}},
        ),
        DemoRun("held-out-case (not on the allowlist)", "held-out-case"),
        DemoRun("a text reply (--kind text)", "", text=DEMO_TEXT),
        DemoRun(
            "a text reply + omit event 3",
            "",
            fault=Fault(kind=FaultKind.OMIT, target_frame=3),
            text=DEMO_TEXT,
        ),
        DemoRun("the 002 lab's chat turn (--kind chat)", CHAT_CASE, chat_case=CHAT_CASE),
        DemoRun(
            "a chat turn + omit frame 3 (a call's)",
            CHAT_CASE,
            fault=Fault(kind=FaultKind.OMIT, target_frame=3),
            chat_case=CHAT_CASE,
        ),
        DemoRun("a chat turn, malformed arguments", CHAT_MALFORMED, chat_case=CHAT_MALFORMED),
    ]
    return runs


@cache
def chat_recording() -> ChatRecording:
    """The chat recording the producer serves (``make run-producer``'s, the default)."""
    return load_chat_recording_or_explain()


def binding_for(run: DemoRun, recording: Recording) -> dict[str, Any]:
    if run.text is not None:
        return build_text_binding(run.text)
    if run.chat_case is not None:
        return dict(chat_recording().case(run.chat_case).binding)
    if run.case_id not in recording.case_ids:
        # Borrow a real binding under another case id: the producer's allowlist refuses it.
        return {**recording.case(FAULT_CASE).binding, "case_id": run.case_id}
    return {**recording.case(run.case_id).binding, **run.binding_edit}


def stream_id_of(index: int) -> str:
    """Stable ids (one producer per demo, so they are unique within its traces)."""
    return f"demo-{index:02d}"


async def stream(
    client: ReplyClient, run: DemoRun, recording: Recording, stream_id: str
) -> StreamResult:
    binding = binding_for(run, recording)
    request = ReplyRequest(
        case_id=binding["case_id"] if run.text is not None else run.case_id,
        binding=binding,
        wire=run.wire,
        plan=run.plan,
        fault=run.fault,
        stream_id=stream_id,
        ignore_duplicates=run.ignore_duplicates,
    )
    options = replace(client.options, idle_timeout_s=run.idle_timeout_s)
    return await client.stream(request, options)


async def stream_all(
    runs: list[DemoRun], recording: Recording, target: str
) -> list[tuple[DemoRun, str, StreamResult]]:
    """Every run in turn, on one kept channel (the runs share the target and its options)."""
    done = []
    async with ReplyClient(StreamOptions(target=target, deadline_s=30.0)) as client:
        for index, run in enumerate(runs, start=1):
            stream_id = stream_id_of(index)
            done.append((run, stream_id, await stream(client, run, recording, stream_id)))
    return done


def row(run: DemoRun, stream_id: str, result: StreamResult) -> tuple[str, ...]:
    return (
        run.label,
        stream_id,
        run.wire.value,
        result.status.value,
        result.reason or "-",
        str(result.stats.application_frames),
        str(result.stats.bytes_received),
        "yes" if result.accepted else "no",
    )


def render(rows: list[tuple[str, ...]]) -> str:
    """The table; each cell shown by ``shared.terminal_text`` (a reason or detail a peer
    chose is drawn, never obeyed)."""
    rows = [tuple(shown_line(cell, CELL_CHARS) for cell in line) for line in rows]
    widths = [max(len(line[i]) for line in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        for line in [COLUMNS, *rows]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines) + "\n"


def run_demo(args: argparse.Namespace, out: TextIO) -> int:
    recording = load_recording_or_explain(args.recording)
    traces = Path(tempfile.mkdtemp(prefix="replywire-demo-"))
    producer, port = start_producer(traces / "producer.jsonl", args.recording, args.log_level)
    target = f"127.0.0.1:{port}"
    out.write(f"replywire demo: producer pid {producer.pid} on {target} (faults allowed)\n")
    out.write(f"chunks cut {','.join(map(str, LAB_PATTERN))} unless a fault says otherwise\n\n")
    out.flush()
    rows = []
    shown = None
    try:
        with (traces / "consumer.jsonl").open("w", encoding="utf-8") as consumer_trace:
            configure_logging(
                "consumer", log_format="json", level=args.log_level, stream=consumer_trace
            )
            for run, stream_id, result in asyncio.run(
                stream_all(demo_runs(recording), recording, target)
            ):
                shown = stream_id if run.label == SHOWN_RUN else shown
                rows.append(row(run, stream_id, result))
    finally:
        stop_producer(producer)
    out.write(render(rows))
    accepted = sum(1 for line in rows if line[-1] == "yes")
    out.write(f"\n{accepted} accepted, {len(rows) - accepted} refused or not accepted.\n")
    timelines = write_timelines(traces, {line[1]: line[0] for line in rows})
    out.write(
        f"producer stopped. Traces (JSON lines): {traces}/producer.jsonl (producer), "
        f"{traces}/consumer.jsonl (consumer)\n"
        f"Timelines (HTML, open offline): one per stream, {traces}/"
        f"{timeline_page_name(shown or '')} ..., all linked from {timelines}\n"
        f"One stream's timeline here ({SHOWN_RUN}):\n"
        f"  {shown_command('replywire')} trace {traces}/producer.jsonl {traces}/consumer.jsonl "
        f"--stream {shown}\n"
        f"Its records, both sides in time order, as JSON lines:\n"
        f"  {shown_command('replywire')} join-traces {traces} --stream-id {shown}\n"
    )
    return 0
