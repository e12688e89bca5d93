"""A bare grpc.aio server of the same pre-cut chunks the producer sends: the bare side.

Same service and messages as the producer (``ReplyStream.Open``), no checks,
no binding, no framing work, no trace: for each request it looks up the chunks
of (case, wire, chunking), cut once at start-up by the same code the producer
uses, and writes them. Prints ``listening on 127.0.0.1:PORT`` like the producer.
A request's ``chunk_interval_ms`` paces it as the producer paces it (a sleep of the
interval before every chunk after the first: ``bench.paced``); ``--recording`` and
``--recording-sha256`` serve another hashed recording, as the producer's flags do.
``--producer-options`` runs it with the producer's gRPC server options (``producer.edge.server
.server_options``: the pending-RPC bound, the stream bound, the keepalive policy, the
connection age), so that only the work differs: with gRPC's defaults, a burst past 1,000
pending RPCs is dropped with a bare CANCELLED and a consumer's keepalive pings (every 10 s)
earn a GOAWAY, so long or many streams would fail for a setting, not for their cost.
``--event-loop uvloop`` runs it on uvloop (``producer.event_loop``), ``--option NAME=VALUE``
adds a gRPC server option: what ``bench.grpc_gap`` tries against gRPC's own cost.

With ``--trace-file PATH`` it also writes, per stream, the four transition records the
producer writes at info (``producer.states.ProducerStream``: received, verified,
streaming, completed; the same fields, the same batched JSON trace): what those records
alone cost a server, the producer's floor (``bench.streams``, "records only"). With
``--trace-level warning`` the same stream code runs and no record is written; with
``--least-records`` the same records are written as the least a JSON line costs
(``bench.least_records``): the parts of that floor (``bench.record_floor``).

    .venv/bin/python -m bench.bare_server [--port 0] [--trace-file PATH]
        [--trace-level info|warning] [--least-records]
        [--recording PATH --recording-sha256 HEX] [--producer-options]
        [--event-loop asyncio|uvloop] [--option NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import structlog

from bench.least_records import LeastLogger, LeastWriter
from replywire.producer.edge.security import ANONYMOUS
from replywire.producer.edge.server import server_options
from replywire.producer.event_loop import ASYNCIO, EVENT_LOOPS, run
from replywire.producer.states import ProducerStream, StreamInput
from replywire.runtime.logs import configure_logging
from replywire.runtime.recording_file import DEFAULT_RECORDING_PATH, load_recording
from replywire.shared.faults import transmit
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.reasons import Reason
from replywire.shared.recording import RECORDING_SHA256, Recording
from replywire.shared.requests import WIRE_CODES
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkMode, ChunkPlan

#: Every chunking the stream benchmarks ask for.
CHUNKINGS = ("frame", "64", "4096", "1,2,7,3,11", "whole", "1")

Key = tuple[str, int, tuple[int, ...], bool]


def key_of(request: pb.OpenRequest) -> Key:
    return (request.case_id, request.wire_format, tuple(request.chunk_sizes), request.whole_body)


def precut(recording: Recording | None = None) -> dict[Key, tuple[pb.Chunk, ...]]:
    recording = recording or load_recording()
    table: dict[Key, tuple[pb.Chunk, ...]] = {}
    for case_id in recording.case_ids:
        for wire in WireFormat:
            for text in CHUNKINGS:
                plan = ChunkPlan.parse(text)
                chunks = transmit(recording.case(case_id), wire=wire, plan=plan).chunks
                key = (case_id, WIRE_CODES[wire], plan.sizes, plan.mode is ChunkMode.WHOLE)
                table[key] = tuple(pb.Chunk(data=data) for data in chunks)
    return table


class Bare(pb_grpc.ReplyStreamServicer):
    def __init__(self, table: dict[Key, tuple[pb.Chunk, ...]]) -> None:
        self.table = table

    async def Open(  # noqa: N802
        self, request: pb.OpenRequest, context: Any
    ) -> AsyncIterator[pb.Chunk]:
        # Paced as the producer paces (``producer.delivery``): a sleep of the interval before
        # each chunk after the first; the same test per chunk at an interval of 0.
        interval_s = request.chunk_interval_ms / 1000
        for index, chunk in enumerate(self.table[key_of(request)]):
            if index and interval_s:
                await asyncio.sleep(interval_s)
            yield chunk

    async def Cancel(  # noqa: N802
        self, request: pb.CancelRequest, context: Any
    ) -> pb.CancelReply:
        return pb.CancelReply()


class Recorded(Bare):
    """The bare server and the producer's four transition records per stream, nothing else:
    no checks, no plan, no reply log. ``log``: the records' logger (the producer's trace by
    default; ``bench.least_records``' for the least a record costs)."""

    def __init__(self, table: dict[Key, tuple[pb.Chunk, ...]], log: Any = None) -> None:
        super().__init__(table)
        self._log = structlog.get_logger().bind() if log is None else log
        #: The least records have no stream context: their logger is bound the stream id.
        self._stream_id_bound = log is not None

    async def Open(  # noqa: N802
        self, request: pb.OpenRequest, context: Any
    ) -> AsyncIterator[pb.Chunk]:
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(stream_id=request.stream_id or None)
        log = self._log.bind(case_id=request.case_id, peer=context.peer(), caller=ANONYMOUS)
        if self._stream_id_bound:
            log = log.bind(stream_id=request.stream_id or None)
        stream = ProducerStream(log, ANONYMOUS)
        chunks = self.table[key_of(request)]
        stream.fire(
            StreamInput.VERIFY,
            source="recording",
            resume_after=request.resume_after,
            attempt=1,
            wire=WIRE_NAMES[request.wire_format],
            chunks=",".join(map(str, request.chunk_sizes))
            or ("whole" if request.whole_body else "frame"),
            fault=None,
            planned_chunks=len(chunks),
        )
        stream.fire(StreamInput.START)
        interval_s = request.chunk_interval_ms / 1000
        try:
            for index, chunk in enumerate(chunks):
                if index and interval_s:
                    await asyncio.sleep(interval_s)
                yield chunk
                stream.bytes_sent += len(chunk.data)
                stream.chunks_sent += 1
        except (asyncio.CancelledError, GeneratorExit):  # the consumer went away
            reason = Reason.CONSUMER_CANCELLED
            stream.fire(StreamInput.CONSUMER_CANCELLED, reason=reason, **stream.sent)
            raise
        stream.fire(StreamInput.COMPLETE, **stream.sent)


WIRE_NAMES = {code: wire.value for wire, code in WIRE_CODES.items()}


async def serve(  # noqa: PLR0913 - each of its variants a flag
    port: int,
    trace_file: str | None,
    recording: Recording,
    *,
    producer_options: bool = False,
    trace_level: str = "info",
    least_records: bool = False,
    extra_options: tuple[tuple[str, str | int], ...] = (),
) -> None:
    options = [*(server_options() if producer_options else []), *extra_options]
    server = grpc.aio.server(options=options or None)
    servicer = Bare(precut(recording))
    if trace_file is not None and least_records:
        least = open(trace_file, "ab")  # noqa: SIM115 - the process's life
        servicer = Recorded(servicer.table, LeastLogger(LeastWriter(least), {"side": "producer"}))
    elif trace_file is not None:
        trace = open(trace_file, "a", encoding="utf-8")  # noqa: SIM115 - the process's life
        configure_logging(
            "producer", log_format="json", level=trace_level, stream=trace, batched=True
        )
        servicer = Recorded(servicer.table)
    pb_grpc.add_ReplyStreamServicer_to_server(servicer, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"listening on 127.0.0.1:{bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await server.stop(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--trace-file", help="also write the producer's records per stream here")
    parser.add_argument("--recording", type=Path, default=DEFAULT_RECORDING_PATH)
    parser.add_argument("--recording-sha256", default=RECORDING_SHA256)
    parser.add_argument(
        "--producer-options", action="store_true", help="the producer's gRPC server options"
    )
    parser.add_argument(
        "--trace-level",
        choices=("info", "warning"),
        default="info",
        help="the records' trace level (warning: the stream's code runs, no record is written)",
    )
    parser.add_argument(
        "--least-records",
        action="store_true",
        help="write the records as the least a JSON line costs (bench.least_records)",
    )
    parser.add_argument(
        "--event-loop", choices=EVENT_LOOPS, default=ASYNCIO, help="the loop grpc.aio runs on"
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        type=grpc_option,
        metavar="NAME=VALUE",
        help="one more gRPC server option (an int value is passed as an int); repeatable",
    )
    args = parser.parse_args()
    recording = load_recording(args.recording, expected_sha256=args.recording_sha256)
    run(
        serve(
            args.port,
            args.trace_file,
            recording,
            producer_options=args.producer_options,
            trace_level=args.trace_level,
            least_records=args.least_records,
            extra_options=tuple(args.option),
        ),
        args.event_loop,
    )


def grpc_option(text: str) -> tuple[str, str | int]:
    """``NAME=VALUE``: a gRPC channel argument, its value an int when it reads as one."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"not NAME=VALUE: {text!r}")
    try:
        return name, int(value)
    except ValueError:
        return name, value


if __name__ == "__main__":
    main()
