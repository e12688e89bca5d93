"""The compiled build against the pure one: µs per frame of each compiled hot path, in seconds.

Each round runs one child process per build (``REPLYWIRE_PURE=1`` for the pure one; a module
is one build per process), the order swapped every round; each child times every workload
and takes its best of a few repeats. Reported: each build's median µs per frame and the
median of the per-round ratios pure / compiled (the machine is shared: trust the ratios, not
the times).

Workloads, on a recorded reply cut into the lab's 13-character deltas:

* ``core lp`` / ``core ndjson``: the consumer core (``ReplyConsumer``: decoding, every check,
  the digest, the result) over the whole reply at one frame per chunk;
* ``decode lp`` / ``decode ndjson``: the wire decoder alone (framing, parsing, the frame's
  shape), one frame per chunk;
* ``encode lp``: the producer's framing of each frame.

    .venv/bin/python -m bench.native [--rounds 5] [--frames 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from itertools import cycle, islice
from typing import Final

from bench.common import median
from replywire.runtime.recording_file import load_recording
from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.frames import Frame, FrameKind, frames_from_deltas, split_content
from replywire.shared.wire import NEED_DATA, WireFormat, codec_for

CASE_ID: Final = "utf8-write"
REPEATS: Final = 5


def frames_of(count: int) -> tuple[dict[str, object], list[Frame]]:
    """The recorded reply's frames (``count`` 0), or its deltas cycled to ``count`` frames."""
    case = load_recording().case(CASE_ID)
    deltas = list(split_content(case.content))
    if count:
        deltas = list(islice(cycle(deltas), count - 1))
    return dict(case.binding), frames_from_deltas(case.binding_sha256, deltas, FrameKind.DONE)


def best_us_per_frame(run: Callable[[], None], frames: int) -> float:
    """The fastest of ``REPEATS`` runs, per frame."""
    best = float("inf")
    for _ in range(REPEATS):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best / frames * 1e6


def core_run(
    binding: dict[str, object], chunks: list[bytes], wire: WireFormat, replies: int
) -> Callable[[], None]:
    """The consumer core over a recorded reply's chunks, ``replies`` times."""

    def run() -> None:
        for _ in range(replies):
            consumer = ReplyConsumer(binding, wire=wire)
            for chunk in chunks:
                consumer.receive_data(chunk)
            consumer.end_of_stream()

    return run


def decode_run(chunks: list[bytes], wire: WireFormat) -> Callable[[], None]:
    """The wire's decoder alone over ``chunks``: every frame out, parsed and checked."""
    codec = codec_for(wire)

    def run() -> None:
        decoder = codec.decoder(8192)
        receive, next_event, parse = decoder.receive_data, decoder.next_event, codec.parse_frame
        for chunk in chunks:
            receive(chunk)
            while (payload := next_event()) is not NEED_DATA:
                parse(payload)
        decoder.end_of_input()

    return run


def encode_run(frames: list[Frame]) -> Callable[[], None]:
    encode_frame = codec_for(WireFormat.LENGTH_PREFIXED).encode_frame

    def run() -> None:
        for frame in frames:
            encode_frame(frame)

    return run


def encoded(frames: list[Frame], wire: WireFormat) -> list[bytes]:
    return [codec_for(wire).encode_frame(frame) for frame in frames]


def workloads(frame_count: int) -> dict[str, Callable[[], None]]:
    """Each workload, over ``frame_count`` frames (the core: the recorded reply, as often as
    makes that many)."""
    _, frames = frames_of(frame_count)
    binding, reply = frames_of(0)
    replies = max(1, frame_count // len(reply))
    lp, ndjson = WireFormat.LENGTH_PREFIXED, WireFormat.NDJSON
    return {
        "core lp": core_run(binding, encoded(reply, lp), lp, replies),
        "core ndjson": core_run(binding, encoded(reply, ndjson), ndjson, replies),
        "decode lp": decode_run(encoded(frames, lp), lp),
        "decode ndjson": decode_run(encoded(frames, ndjson), ndjson),
        "encode lp": encode_run(frames),
    }


def child(frame_count: int) -> dict[str, object]:
    from replywire.native import running  # noqa: PLC0415

    sides = workloads(frame_count)
    per_reply = len(frames_of(0)[1])
    core_frames = max(1, frame_count // per_reply) * per_reply
    times = {
        name: best_us_per_frame(run, core_frames if name.startswith("core") else frame_count)
        for name, run in sides.items()
    }
    return {"build": running().build, "us_per_frame": times}


def run_child(pure: bool, frame_count: int) -> dict[str, object]:
    env = {key: value for key, value in os.environ.items() if key != "REPLYWIRE_PURE"}
    if pure:
        env["REPLYWIRE_PURE"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "bench.native", "--child", "--frames", str(frame_count)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.native", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.frames)))
        return 0
    runs: dict[str, list[dict[str, float]]] = {"pure": [], "compiled": []}
    for index in range(args.rounds):
        order = (True, False) if index % 2 == 0 else (False, True)
        for pure in order:
            result = run_child(pure, args.frames)
            build = str(result["build"])
            if (build == "pure") != pure:  # "mixed" (some modules compiled) counts as compiled
                print(f"bench.native: the {build} build ran where another was asked for")
                return 1
            times = result["us_per_frame"]
            assert isinstance(times, dict)
            runs["pure" if pure else "compiled"].append(times)
    names = list(runs["pure"][0])
    print(f"{args.frames} frames, one per chunk, {args.rounds} alternated rounds")
    print(f"{'workload':<14} {'pure µs':>9} {'compiled µs':>12} {'pure/compiled':>14}")
    for name in names:
        pure_us = median([run[name] for run in runs["pure"]])
        compiled_us = median([run[name] for run in runs["compiled"]])
        ratios = median(
            [p[name] / c[name] for p, c in zip(runs["pure"], runs["compiled"], strict=True)]
        )
        print(f"{name:<14} {pure_us:>9.2f} {compiled_us:>12.2f} {ratios:>13.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
