"""Backpressure memory: a paused consumer holds its stream to the window.

The replywire producer (a child process, its trace at debug for ``chunk_sent``)
sends ``utf8-write`` on the NDJSON wire cut into 1-byte chunks: 2,258 chunks,
each costing 8 bytes of HTTP/2 stream window (the 5-byte gRPC message header
and the 3-byte ``Chunk``), so the reply is ~18 KB of flow-controlled data. The
consumer (``stream_reply``, queue of 1) takes its first chunk and then stops
processing: its reader holds one more chunk, the queue one, the processor one.
A counting proxy between them (bench/window_proxy.py) reads the HTTP/2 frames.

What the producer can send on the paused stream, by parts:

* the stream window the consumer announces: ``announced_window(window)``, half the
  window (the proxy reads it in the consumer's SETTINGS);
* one WINDOW_UPDATE of at most as much: gRPC returns the bytes that arrived after
  the reader's last ``read()`` once (consumer/client.py ``announced_window`` says
  why); being small it waits for the connection's next write, here the keepalive
  ping a second (the proxy counts it);
* the chunks the consumer has read: the queue, the one the reader holds and the one
  being applied.

So the bound is ``2 * announced // 8 + queue + 2`` chunks (= window // 8 + 3). The
pause lasts until the stream has been blocked (every byte of window the producer was
given used, on the wire) through a keepalive interval with no new window, so the
update gRPC queued has gone out (at most ``HOLD_S``); then the consumer is stopped,
and its ``Cancel`` is a write that would carry an update still queued: what the
producer sent by the end is measured too. Every window row is smaller than the reply,
so every row blocks.

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
from bench.window_proxy import StreamWindow, WindowProxy
from replywire.consumer.client import stream_reply
from replywire.consumer.options import MIN_KEEPALIVE_S, StreamOptions
from replywire.runtime.recording_file import load_recording
from replywire.shared.faults import transmit
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan

CASE_ID: Final = "utf8-write"
WIRE: Final = WireFormat.NDJSON
PLAN: Final = ChunkPlan.parse("1")
QUEUE: Final = 1
#: The chunks the consumer holds besides its queue: the reader's and the processor's.
HELD: Final = 2
#: Each at most what the reply (2,258 chunks) can fill: every row blocks.
WINDOWS: Final = (1024, 4096, 8192, 16384)
#: The longest pause (tiny: the suite's run, not the measure).
HOLD_S: Final[dict[Size, float]] = {"tiny": 0.5, "full": 15.0}
#: A ping a second: the write that carries a window update gRPC queued.
KEEPALIVE_S: Final = MIN_KEEPALIVE_S
#: Blocked with no new window for this long: a keepalive ping has gone out meanwhile.
QUIET_S: Final = 1.5 * KEEPALIVE_S
POLL_S: Final = 0.02
SETTLE_S: Final = 0.3
#: stream_reply's own connection: its first stream (RFC 9113 §5.1.1) is the reply's.
STREAM: Final = 1
#: HTTP/2 window bytes one 1-byte chunk costs: gRPC's message header and the Chunk.
PER_CHUNK: Final = 5 + len(pb.Chunk(data=b"x").SerializeToString())


def sent_chunks(trace: Path, stream_id: str) -> int:
    """Chunks the producer's trace says it sent on ``stream_id``."""
    chunks = 0
    with trace.open() as lines:
        for line in lines:
            if '"chunk_sent"' not in line or stream_id not in line:
                continue
            record = json.loads(line)
            if record.get("event") == "chunk_sent" and record.get("stream_id") == stream_id:
                chunks += 1
    return chunks


def bound(announced: int) -> dict[str, int]:
    """What a paused stream can cost, by parts; ``chunks`` is their sum in chunks."""
    return {
        "announced_window_bytes": announced,
        "one_update_at_most_bytes": announced,
        "queue_chunks": QUEUE,
        "reader_and_processor_chunks": HELD,
        "chunks": 2 * announced // PER_CHUNK + QUEUE + HELD,
    }


def blocked(proxy: WindowProxy, seen: StreamWindow) -> bool:
    """The producer has used every byte of window it was given on the stream."""
    announced = proxy.announced_window
    return announced is not None and seen.data_bytes == announced + seen.returned


async def hold(proxy: WindowProxy, hold_s: float) -> None:
    """Until the stream has stayed blocked, with no new window, for ``QUIET_S``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + hold_s
    last, since = proxy.stream(STREAM), loop.time()
    while loop.time() < deadline:
        await asyncio.sleep(POLL_S)
        seen = proxy.stream(STREAM)
        if seen != last:
            last, since = seen, loop.time()
        elif blocked(proxy, seen) and loop.time() - since >= QUIET_S:
            return


async def paused_stream(
    upstream_port: int, window: int, hold_s: float, trace: Path
) -> dict[str, Any]:
    recording = load_recording()
    stream_id = f"paused-{window}"
    request = ReplyRequest.for_case(recording, CASE_ID, wire=WIRE, plan=PLAN, stream_id=stream_id)
    with WindowProxy(upstream_port) as proxy:
        # Processing one chunk takes longer than any pause: the consumer stops after one.
        options = StreamOptions(
            target=proxy.target,
            window_bytes=window,
            queue_size=QUEUE,
            process_delay_s=hold_s * 10,
            keepalive_s=KEEPALIVE_S,
        )
        interrupted = asyncio.Event()
        snapshot: dict[str, Any] = {}

        async def pause_then_stop() -> None:
            await hold(proxy, hold_s)
            seen = proxy.stream(STREAM)
            snapshot.update(
                chunks=sent_chunks(trace, stream_id), wire=seen, blocked=blocked(proxy, seen)
            )
            interrupted.set()

        pausing = asyncio.create_task(pause_then_stop())
        result = await stream_reply(request, options, interrupted=interrupted)
        await pausing
        await asyncio.sleep(SETTLE_S)  # the producer logs its last writes
        return {
            "announced": proxy.announced_window or 0,
            "paused": snapshot,
            "end": {"chunks": sent_chunks(trace, stream_id), "wire": proxy.stream(STREAM)},
            "consumer_ended": f"{result.status.value}:{result.reason}",
        }


def row(window: int, reply_chunks: int, measured: dict[str, Any]) -> dict[str, Any]:
    paused, end = measured["paused"], measured["end"]
    limit = bound(measured["announced"])
    return {
        "window_bytes": window,
        "reply_chunks": reply_chunks,
        "reply_window_bytes": reply_chunks * PER_CHUNK,
        "announced_window_bytes": measured["announced"],
        "window_returned_while_paused_bytes": paused["wire"].returned,
        "window_updates_while_paused": len(paused["wire"].updates),
        "wire_bytes_while_paused": paused["wire"].data_bytes,
        "blocked_while_paused": paused["blocked"],
        "chunks_sent_while_paused": paused["chunks"],
        "window_returned_by_the_end_bytes": end["wire"].returned,
        "wire_bytes_by_the_end": end["wire"].data_bytes,
        "chunks_sent_by_the_end": end["chunks"],
        "bound": limit,
        "bound_chunks": limit["chunks"],
        "chunks_over_bound": max(
            0, paused["chunks"] - limit["chunks"], end["chunks"] - limit["chunks"]
        ),
        "stopped_before_the_end": end["chunks"] < reply_chunks,
        "consumer_ended": measured["consumer_ended"],
    }


async def measure(hold_s: float, workdir: Path) -> list[dict[str, Any]]:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    recording = load_recording()
    reply_chunks = len(transmit(recording.case(CASE_ID), wire=WIRE, plan=PLAN).chunks)
    rows = []
    with producer(workdir, "debug") as server:
        trace = workdir / "producer-debug.trace.jsonl"
        for window in WINDOWS:
            measured = await paused_stream(server.port, window, hold_s, trace)
            rows.append(row(window, reply_chunks, measured))
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
        "hold_s_at_most": hold_s,
        "keepalive_s": KEEPALIVE_S,
        "per_chunk_window_bytes": PER_CHUNK,
        "announced_window": "window // 2 (consumer.channels.announced_window)",
        "rows": rows,
    }


def main() -> None:
    print(json.dumps(run(bench_size()), indent=2))


if __name__ == "__main__":
    main()
