"""Backpressure memory: a paused consumer holds its stream to the window.

The replywire producer (a child process, its trace at debug for ``chunk_sent``)
sends ``utf8-write`` on the NDJSON wire cut into 1-byte chunks: 2,258 chunks,
each costing 8 bytes of HTTP/2 stream window (the 5-byte gRPC message header
and the 3-byte ``Chunk``), so the reply is ~18 KB of flow-controlled data,
larger than every bounded window below. The consumer (``stream_reply``, queue
of 1) takes its first chunk and then stops processing; after the hold time it
is interrupted. What the producer managed to send by then is what a paused
stream costs in memory between the two processes; the bound is the window's
chunks plus the queue, the chunk the reader holds and the one being applied. The consumer's default
window (64 KiB) is larger than this reply: it is the case that never blocks.

    BENCH_SIZE=tiny|full .venv/bin/python -m bench.memory
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any, Final

import structlog

from bench.common import Size, bench_size
from bench.streams import producer
from consumer.client import DEFAULT_WINDOW_BYTES, StreamOptions, stream_reply
from runtime.recording_file import load_recording
from shared.faults import transmit
from shared.pb import replywire_pb2 as pb
from shared.requests import ReplyRequest
from shared.wire import WireFormat
from shared.wire.chunking import ChunkPlan

CASE_ID: Final = "utf8-write"
WIRE: Final = WireFormat.NDJSON
PLAN: Final = ChunkPlan.parse("1")
QUEUE: Final = 1
WINDOWS: Final = (1024, 4096, 8192, 16384, DEFAULT_WINDOW_BYTES)
HOLD_S: Final[dict[Size, float]] = {"tiny": 0.5, "full": 2.0}
#: HTTP/2 window bytes one 1-byte chunk costs: gRPC's message header and the Chunk.
PER_CHUNK: Final = 5 + len(pb.Chunk(data=b"x").SerializeToString())


def sent_bytes(trace: Path, stream_id: str) -> tuple[int, int]:
    """Chunks and wire bytes the producer's trace says it sent on ``stream_id``."""
    chunks = sent = 0
    with trace.open() as lines:
        for line in lines:
            if '"chunk_sent"' not in line or stream_id not in line:
                continue
            record = json.loads(line)
            if record.get("event") == "chunk_sent" and record.get("stream_id") == stream_id:
                chunks += 1
                sent = max(sent, record["bytes_sent"])
    return chunks, sent


async def paused_stream(target: str, window: int, hold_s: float) -> dict[str, Any]:
    recording = load_recording()
    stream_id = f"paused-{window}"
    request = ReplyRequest.for_case(recording, CASE_ID, wire=WIRE, plan=PLAN, stream_id=stream_id)
    # Processing one chunk takes longer than the hold: the consumer is paused after one.
    options = StreamOptions(
        target=target, window_bytes=window, queue_size=QUEUE, process_delay_s=hold_s * 10
    )
    interrupted = asyncio.Event()
    asyncio.get_running_loop().call_later(hold_s, interrupted.set)
    result = await stream_reply(request, options, interrupted=interrupted)
    return {"status": result.status.value, "reason": result.reason, "stream_id": stream_id}


async def measure(hold_s: float, workdir: Path) -> list[dict[str, Any]]:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    recording = load_recording()
    reply_chunks = len(transmit(recording.case(CASE_ID), wire=WIRE, plan=PLAN).chunks)
    rows = []
    with producer(workdir, "debug") as server:
        trace = workdir / "producer-debug.trace.jsonl"
        for window in WINDOWS:
            ended = await paused_stream(server.target, window, hold_s)
            await asyncio.sleep(0.2)  # the producer logs its last writes
            chunks, _ = sent_bytes(trace, ended["stream_id"])
            bound = window // PER_CHUNK + QUEUE + 2
            rows.append(
                {
                    "window_bytes": window,
                    "reply_chunks": reply_chunks,
                    "reply_window_bytes": reply_chunks * PER_CHUNK,
                    "chunks_sent_while_paused": chunks,
                    "window_bytes_sent_while_paused": chunks * PER_CHUNK,
                    "bound_chunks": bound,
                    "chunks_over_bound": max(0, chunks - bound),
                    "stopped_before_the_end": chunks < reply_chunks,
                    "consumer_ended": f"{ended['status']}:{ended['reason']}",
                }
            )
    return rows


def run(size: Size) -> dict[str, Any]:
    hold_s = HOLD_S[size]
    with tempfile.TemporaryDirectory(prefix="replywire-bench-") as workdir:
        rows = asyncio.run(measure(hold_s, Path(workdir)))
    return {
        "case": CASE_ID,
        "wire": WIRE.value,
        "chunks": PLAN.describe(),
        "queue_size": QUEUE,
        "hold_s": hold_s,
        "per_chunk_window_bytes": PER_CHUNK,
        "rows": rows,
    }


def main() -> None:
    print(json.dumps(run(bench_size()), indent=2))


if __name__ == "__main__":
    main()
