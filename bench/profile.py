"""Where the time goes: cProfile of the decoders and of one process's replywire streams.

    .venv/bin/python -m bench.profile decoders [--frames 100000]
    .venv/bin/python -m bench.profile streams [--streams 200] [--chunks frame]

``decoders`` profiles each wire decoding the same frames in 4 KiB fragments;
``streams`` runs the producer's servicer and the consumer in this one process
(loopback gRPC, one channel per stream as ``stream_reply`` does, both traces
at info into /dev/null) so one profile holds both sides. Prints the functions
with the most time of their own.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TextIO

from bench.common import Size
from bench.decoders import cut, frames_of, ours
from bench.paced import PLANS as PACED_PLANS
from bench.paced import paced_recording
from replywire import producer
from replywire.consumer.client import stream_reply
from replywire.consumer.options import StreamOptions
from replywire.producer.edge.server import start_server
from replywire.producer.settings import ServerSettings
from replywire.runtime.logs import configure_logging
from replywire.runtime.recording_file import load_recording
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire import WireFormat, codec_for
from replywire.shared.wire.chunking import ChunkPlan


def top(profile: cProfile.Profile, lines: int = 18) -> str:
    text = io.StringIO()
    pstats.Stats(profile, stream=text).strip_dirs().sort_stats("tottime").print_stats(lines)
    return text.getvalue()


def decoders(frames: int) -> None:
    items = frames_of(frames)
    for wire in (WireFormat.LENGTH_PREFIXED, WireFormat.NDJSON):
        codec = codec_for(wire)
        pieces = cut(b"".join(codec.encode_frame(frame) for frame in items), 4096)
        profile = cProfile.Profile()
        profile.runcall(ours, wire, pieces)
        print(f"== {wire.value}: {frames:,} frames in 4 KiB fragments")
        print(top(profile))


async def streams_in_one_process(
    count: int, chunks: str, trace: TextIO, recording: Recording | None = None
) -> cProfile.Profile:
    # Both sides' traces at info, rendered as in production, into a file nobody reads.
    configure_logging("bench", log_format="json", level="info", stream=trace)
    recording = recording or load_recording()
    server, port, _ = await start_server(
        recording, ServerSettings(host="127.0.0.1", port=0, allow_faults=False)
    )
    options = StreamOptions(target=f"127.0.0.1:{port}")
    profile = cProfile.Profile()
    profile.enable()
    for index in range(count):
        request = ReplyRequest.for_case(
            recording, "utf8-write", plan=ChunkPlan.parse(chunks), stream_id=f"profile-{index}"
        )
        result = await stream_reply(request, options)
        assert result.status.value == "complete", result.reason
    profile.disable()
    await server.stop(0)
    return profile


def streams(count: int, chunks: str) -> None:
    with open(os.devnull, "w") as trace:
        profile = asyncio.run(streams_in_one_process(count, chunks, trace))
    print(f"== {count} streams of utf8-write, lp wire, chunks {chunks}, both sides in one process")
    print(top(profile, 25))


#: The producer package's folder: a function of the producer side is defined in it.
PRODUCER_DIR: Final = Path(producer.__file__).resolve().parent
#: Streams profiled for the reply log's share: the short streams (``bench.streams``' shape),
#: and the paced shape (``bench.paced``'s reply, unpaced), by size.
SHARE_STREAMS: Final[dict[Size, tuple[int, int]]] = {"tiny": (20, 2), "full": (200, 10)}


#: The reply log's package (the memory log, the one the bench's producer runs, is in it).
REPLY_LOG_DIR: Final = PRODUCER_DIR / "replylog"


def is_producer(path: str) -> bool:
    """A module of the producer package's own folder, or of its reply log's."""
    return Path(path).resolve().parent in (PRODUCER_DIR, REPLY_LOG_DIR)


def is_reply_log(path: str) -> bool:
    """A module of ``producer/replylog/``."""
    return Path(path).resolve().parent == REPLY_LOG_DIR


def entered(profile: cProfile.Profile, inside: Callable[[str], bool]) -> float:
    """Seconds spent in the functions defined in the files ``inside`` accepts, with what they
    call: each function's cumulative time over its calls from outside those files (its own
    when it has no caller, as a coroutine stepped by the event loop), so a call from one of
    them into another is not counted twice."""
    table: dict[Any, Any] = getattr(pstats.Stats(profile), "stats")  # noqa: B009 (untyped)
    total = 0.0
    for (path, _, _), (_, _, _, cumulative, callers) in table.items():
        if not inside(path):
            continue
        if not callers:
            total += cumulative
            continue
        total += sum(edge[3] for caller, edge in callers.items() if not inside(caller[0]))
    return total


def share_of(profile: cProfile.Profile, streams: int) -> dict[str, Any]:
    reply_log, producer_side = entered(profile, is_reply_log), entered(profile, is_producer)
    return {
        "streams": streams,
        "reply_log_s": round(reply_log, 6),
        "producer_s": round(producer_side, 6),
        "share": round(reply_log / producer_side, 4) if producer_side else None,
    }


def reply_log_share(size: Size, workdir: Path) -> dict[str, Any]:
    """The reply log's share of the producer side's profiled time (``bench.budget``'s reply
    log part): short streams of ``bench.streams``' case, one frame per chunk, and streams of
    ``bench.paced``' reply (one frame a chunk, unpaced), both sides in this one process."""
    short, long = SHARE_STREAMS[size]
    path, sha256 = paced_recording(workdir, PACED_PLANS[size].content_frames)
    shaped = load_recording(path, expected_sha256=sha256)
    with open(os.devnull, "w") as trace:
        per_stream = asyncio.run(streams_in_one_process(short, "frame", trace))
        per_chunk = asyncio.run(streams_in_one_process(long, "frame", trace, shaped))
    return {
        "method": "cProfile, both sides in one process; the reply log's functions entered "
        "from outside them, over the producer package's",
        "per_stream": share_of(per_stream, short),
        "per_chunk": share_of(per_chunk, long),
    }


def main(argv: Any = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("decoders", "streams"))
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--chunks", default="frame")
    args = parser.parse_args(argv)
    if args.what == "decoders":
        decoders(args.frames)
    else:
        streams(args.streams, args.chunks)


if __name__ == "__main__":
    main()
