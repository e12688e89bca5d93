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
from typing import Any, TextIO

from bench.decoders import cut, frames_of, ours
from consumer.client import stream_reply
from consumer.options import StreamOptions
from producer.server import start_server
from producer.settings import ServerSettings
from runtime.logs import configure_logging
from runtime.recording_file import load_recording
from shared.requests import ReplyRequest
from shared.wire import WireFormat, codec_for
from shared.wire.chunking import ChunkPlan


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


async def streams_in_one_process(count: int, chunks: str, trace: TextIO) -> cProfile.Profile:
    # Both sides' traces at info, rendered as in production, into a file nobody reads.
    configure_logging("bench", log_format="json", level="info", stream=trace)
    recording = load_recording()
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
