"""The demo table: every development case, then the fault catalogue, through the consumer core."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, TextIO

from consumer.config import load_recording
from consumer.results import refused_result
from shared.errors import RequestRefused
from shared.faults import TIMING_FAULTS, Fault, FaultKind
from shared.recording import Recording
from shared.replay import replay
from shared.wire import WireFormat
from shared.wire.chunking import LAB_PATTERN, ChunkMode, ChunkPlan

FAULT_CASE = "replace-file"
COLUMNS = ("run", "wire", "status", "reason", "frames", "bytes", "accepted")


@dataclass(frozen=True)
class DemoRun:
    label: str
    case_id: str
    fault: Fault | None = None
    ignore_duplicates: bool = False


def demo_runs(recording: Recording) -> list[DemoRun]:
    runs = [DemoRun(case_id, case_id) for case_id in recording.case_ids]
    runs += [
        DemoRun(f"{FAULT_CASE} + {kind}", FAULT_CASE, Fault(kind=kind))
        for kind in FaultKind
        if kind not in TIMING_FAULTS  # no clock in one process
    ]
    runs.append(
        DemoRun(
            f"{FAULT_CASE} + repeat, --ignore-duplicates",
            FAULT_CASE,
            Fault(kind=FaultKind.REPEAT),
            ignore_duplicates=True,
        )
    )
    runs.append(DemoRun("held-out-case (not on the allowlist)", "held-out-case"))
    return runs


def row(run: DemoRun, wire: WireFormat, result: dict[str, Any]) -> tuple[str, ...]:
    return (
        run.label,
        wire.value,
        result["status"],
        result["reason"] or "-",
        str(result["stats"]["application_frames"]),
        str(result["stats"]["bytes_received"]),
        "yes" if result["accepted_answer"] is not None else "no",
    )


def render(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(line[i]) for line in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        for line in [COLUMNS, *rows]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines) + "\n"


def run_demo(args: argparse.Namespace, out: TextIO) -> int:
    recording = load_recording(args.recording)
    wires = [WireFormat(args.wire)] if args.wire else list(WireFormat)
    plan = ChunkPlan(ChunkMode.SIZES, LAB_PATTERN)
    rows = []
    for wire in wires:
        for run in demo_runs(recording):
            try:
                result = replay(
                    recording,
                    run.case_id,
                    wire=wire,
                    plan=plan,
                    fault=run.fault,
                    ignore_duplicates=run.ignore_duplicates,
                )
            except RequestRefused as error:
                result = refused_result(error, case_id=run.case_id, wire_format=wire.value)
            rows.append(row(run, wire, result))
    out.write(
        "replywire demo: in-process replay (producer framing -> consumer core), "
        f"chunks cut {','.join(map(str, LAB_PATTERN))}\n\n"
    )
    out.write(render(rows))
    accepted = sum(1 for line in rows if line[-1] == "yes")
    out.write(f"\n{accepted} accepted, {len(rows) - accepted} refused or not accepted.\n")
    return 0
