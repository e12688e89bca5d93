"""Decoder cost per frame: both wires, 1 B / 64 B / 4 KiB / whole-body fragments, 1k to 1M frames.

What is timed is the wire's whole job: bytes in, every frame out as a checked
``Frame`` (``receive_data``, ``next_event``, ``parse_frame``, ``end_of_input``;
the header, length, UTF-8, JSON or protobuf and shape checks). The lab's
algorithm (``bench.lab_baseline.LabDecoder``: the same checks, its way) runs
on the same frames in the lab's own NDJSON, alternated with ours in the same
run. Frames are the lab's 13-character deltas of a recorded reply (non-ASCII
included), repeated to the frame count, then ``done``.

    BENCH_SIZE=tiny|full .venv/bin/python -m bench.decoders
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import cycle, islice
from typing import Any, Final

from bench.common import Size, alternate, bench_size, median, ratio
from bench.lab_baseline import LabDecoder
from replywire.runtime.recording_file import load_recording
from replywire.shared.frames import Frame, FrameKind, frames_from_deltas, split_content
from replywire.shared.wire import NEED_DATA, WireFormat, codec_for
from replywire.shared.wire.chunking import cut_sizes

CASE_ID: Final = "utf8-write"
MAX_FRAME_BYTES: Final = 8192
WHOLE: Final = 0
FRAGMENTS: Final = {1: "1 B", 64: "64 B", 4096: "4 KiB", WHOLE: "whole body"}


@dataclass(frozen=True)
class Plan:
    frame_counts: tuple[int, ...]
    rounds: int
    #: 1-byte fragments stop here: at 1M frames that is 10^8 Python calls per side.
    max_frames_bytewise: int
    #: The lab's whole-body split is quadratic (a new rest string per line).
    max_frames_lab_whole: int


PLANS: Final[dict[Size, Plan]] = {
    "tiny": Plan((1_000,), 1, 1_000, 1_000),
    "full": Plan((1_000, 10_000, 100_000, 1_000_000), 3, 100_000, 10_000),
}


def frames_of(count: int) -> list[Frame]:
    recording = load_recording()
    case = recording.case(CASE_ID)
    deltas = list(islice(cycle(split_content(case.content)), count - 1))
    frames = frames_from_deltas(case.binding_sha256, deltas, FrameKind.DONE)
    assert len(frames) == count
    return frames


def ours(wire: WireFormat, fragments: list[bytes]) -> int:
    codec = codec_for(wire)
    decoder = codec.decoder(MAX_FRAME_BYTES)
    receive, next_event, parse = decoder.receive_data, decoder.next_event, codec.parse_frame
    count = 0
    for fragment in fragments:
        receive(fragment)
        while (payload := next_event()) is not NEED_DATA:
            parse(payload)
            count += 1
    decoder.end_of_input()
    return count


def lab(fragments: list[bytes]) -> int:
    decoder = LabDecoder(MAX_FRAME_BYTES)
    for fragment in fragments:
        decoder.feed(fragment)
    decoder.finish()
    return decoder.frames


def timed(run: Callable[[], int], frames: int) -> float:
    """CPU microseconds per frame of one run (checked to have decoded every frame).

    The thread's CPU time, not the wall clock: decoding is CPU-bound in one thread,
    and on a shared machine the wall clock also counts the time others ran.
    """
    gc.collect()
    started = time.thread_time()
    decoded = run()
    elapsed = time.thread_time() - started
    assert decoded == frames, (decoded, frames)
    return elapsed / frames * 1e6


def cut(body: bytes, size: int) -> list[bytes]:
    return [body] if size == WHOLE else list(cut_sizes(body, (size,)))


def measure_cell(frames: list[Frame], size: int, plan: Plan) -> dict[str, Any]:
    count = len(frames)
    bodies = {
        wire: b"".join(codec_for(wire).encode_frame(frame) for frame in frames)
        for wire in (WireFormat.LENGTH_PREFIXED, WireFormat.NDJSON, WireFormat.NDJSON_LAB)
    }
    pieces = {wire: cut(body, size) for wire, body in bodies.items()}
    lp, nd, lab_wire = WireFormat.LENGTH_PREFIXED, WireFormat.NDJSON, WireFormat.NDJSON_LAB
    sides: dict[str, Callable[[], float]] = {
        "lp": lambda: timed(lambda: ours(lp, pieces[lp]), count),
        "ndjson": lambda: timed(lambda: ours(nd, pieces[nd]), count),
    }
    lab_skipped = size == WHOLE and count > plan.max_frames_lab_whole
    if not lab_skipped:
        sides["lab"] = lambda: timed(lambda: lab(pieces[lab_wire]), count)
    alternate(sides, 1)  # warm-up, not counted
    runs = alternate(sides, plan.rounds)
    cell: dict[str, Any] = {
        "fragment": FRAGMENTS[size],
        "frames": count,
        "us_per_frame": {name: round(median(values), 3) for name, values in runs.items()},
        "runs_us_per_frame": {name: [round(v, 3) for v in values] for name, values in runs.items()},
        "bytes": {wire.value: len(body) for wire, body in bodies.items()},
    }
    if lab_skipped:
        cell["lab_not_run"] = f"quadratic: whole bodies over {plan.max_frames_lab_whole:,} frames"
    else:
        cell["ndjson_over_lab"] = ratio(cell["us_per_frame"]["ndjson"], cell["us_per_frame"]["lab"])
        cell["lp_over_lab"] = ratio(cell["us_per_frame"]["lp"], cell["us_per_frame"]["lab"])
    return cell


def flatness(cells: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per fragment size and decoder: the cost per frame at each count over the cost at 1,000."""
    out: dict[str, dict[str, float | None]] = {}
    for cell in cells:
        first = next(
            c
            for c in cells
            if c["fragment"] == cell["fragment"] and c["frames"] == cells[0]["frames"]
        )
        for name, value in cell["us_per_frame"].items():
            base = first["us_per_frame"].get(name)
            key = f"{cell['fragment']} {name}"
            out.setdefault(key, {})[str(cell["frames"])] = ratio(value, base) if base else None
    return out


def run(size: Size) -> dict[str, Any]:
    plan = PLANS[size]
    cells = []
    for count in plan.frame_counts:
        frames = frames_of(count)
        for fragment in FRAGMENTS:
            if fragment == 1 and count > plan.max_frames_bytewise:
                continue
            cells.append(measure_cell(frames, fragment, plan))
            gc.collect()
    return {
        "what": "decoder CPU µs per frame: bytes in, checked Frame out; median of rounds",
        "case": CASE_ID,
        "rounds": plan.rounds,
        "not_run": {
            "1 B": f"over {plan.max_frames_bytewise:,} frames (10^8 calls per side at 1M)",
            "lab whole body": f"over {plan.max_frames_lab_whole:,} frames (quadratic)",
        },
        "cells": cells,
        "flatness_vs_1k": flatness(cells),
    }


def main() -> None:
    print(json.dumps(run(bench_size()), indent=2))


if __name__ == "__main__":
    main()
