"""One round of paced streams, as a process of its own: N streams of one client kind at once.

``bench.paced`` starts this for every round, next to a fresh server, so each round's CPU and
RSS are those of two fresh processes (a Python process keeps the memory a previous round
grew to: a second round in the same process would read almost nothing per stream). It
prints one JSON line: the chunks read, the failures by code, the client's and the server's
CPU over the streams, the RSS of both idle and with every stream open, and the added
inter-chunk latency at the consumer.

The added latency of chunk i (i >= 1) is its arrival minus chunk i-1's, minus the interval:
what the pace the producer asked for was stretched by, on the producer (its sleep woke
late, its write waited), on the wire and in the consumer (its reader and queue, for the
replywire side). The producer paces a stream from its previous write (``producer.delivery``
sleeps the interval before each chunk after the first; ``bench.bare_server`` the same), so
its schedule is "the previous chunk + the interval", and the arrivals are measured against
that; against "first chunk + i x interval" every sleep's wake-up delay would add up along
the stream, on the bare server as on the producer. "Arrival" is when the application gets
the chunk: the replywire session's processor taking it from its queue (before the core
judges it), the bare client's ``async for`` handing it over.

The streams open spread evenly over ``--ramp-s`` (stream i after i/N of it), as replies
to users who did not all ask in the same millisecond: opened at once, every stream would
sleep and wake in step, and each interval would begin with all N writes at once.

The ``sse`` kind reads ``bench.sse_server`` over HTTP with httpx and httpx-sse
(``bench.sse_client``: each event parsed and its sequence checked), its arrivals taken
when ``aiter_sse`` hands an event over; the rest of the round is the same for every kind.

    .venv/bin/python -m bench.paced_client --kind replywire|bare|checks|sse --target HOST:PORT
        --server-pid PID --streams N --interval-ms MS --ramp-s S --case ID
        --recording PATH --recording-sha256 HEX [--trace PATH] [--channels K]

``--server-pid`` given again (a producer's ``--workers``, ``bench.workers``): the server's CPU
and RSS are those processes' summed. ``--channels K`` (the replywire kind): its streams over
K clients, each its own connection (to spread them over the workers of one port).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import grpc

from bench.common import CLIENT_CPU, pin, process_cpu_s
from bench.paced_side import PacedSide, Stream
from replywire.consumer.channels import channel_options
from replywire.consumer.client import ReplyClient
from replywire.consumer.options import StreamOptions
from replywire.consumer.session import StreamSession
from replywire.runtime.logs import configure_logging
from replywire.runtime.recording_file import load_recording
from replywire.shared.errors import ProtocolFailure
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.requests import ReplyRequest
from replywire.shared.status import Status
from replywire.shared.wire import WireFormat

KINDS: Final = ("replywire", "bare", "checks", "sse")
#: How often the sampler looks whether every stream is open.
SAMPLE_EVERY_S: Final = 0.05


def rss_kib(pid: int) -> int:
    """Resident set size of a process, KiB (``VmRSS`` of ``/proc/PID/status``)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def servers_rss_kib(pids: list[int]) -> int:
    return sum(rss_kib(pid) for pid in pids)


def servers_cpu_s(pids: list[int]) -> float:
    return sum(process_cpu_s(pid) for pid in pids)


def timed(arrivals: list[float]) -> Callable[[StreamSession], None]:
    """A ``ReplyClient.stream`` observer: notes when the session's processor takes each
    chunk from its queue, then applies it as before."""

    def attach(session: StreamSession) -> None:
        apply = session._apply
        clock = time.perf_counter

        def apply_timed(data: bytes) -> bool:
            arrivals.append(clock())
            return apply(data)

        session.__dict__["_apply"] = apply_timed

    return attach


def open_side(kind: str, target: str, trace: Path, channels: int = 1) -> PacedSide:
    if kind == "sse":
        from bench.sse_client import SseSide  # noqa: PLC0415 - the gRPC kinds load no HTTP stack

        return SseSide(target)
    return Side(kind, target, trace, channels)


class Side:
    """One gRPC client kind's streams, all on one channel (``ReplyClient``'s policy)."""

    def __init__(self, kind: str, target: str, trace: Path, channels: int = 1) -> None:
        self.kind = kind
        options = StreamOptions(target=target)
        self.client = ReplyClient(options)
        #: The replywire kind's clients, each its own connection; streams taken in turn.
        self.clients = [self.client, *(ReplyClient(options) for _ in range(channels - 1))]
        self.opened = 0
        self.channel = grpc.aio.insecure_channel(target, options=channel_options(options))
        if kind == "replywire":  # its trace at info into a file, as the consumer CLI writes it
            self.trace = trace.open("a", encoding="utf-8")
            configure_logging(
                "consumer", log_format="json", level="info", stream=self.trace, batched=True
            )

    async def read(self, request: ReplyRequest, stream: Stream, after_s: float = 0.0) -> None:
        if after_s:
            await asyncio.sleep(after_s)
        if self.kind == "replywire":
            client = self.clients[self.opened % len(self.clients)]
            self.opened += 1
            result = await client.stream(request, observer=timed(stream.arrivals))
            if result.status is not Status.COMPLETE:
                stream.code = f"{result.status.value}:{result.reason}"
            return
        message = request.open_request()
        core = request.consumer(sent=message) if self.kind == "checks" else None
        arrivals, clock = stream.arrivals, time.perf_counter
        try:
            async for chunk in pb_grpc.ReplyStreamStub(self.channel).Open(message):
                arrivals.append(clock())
                if core is not None:
                    core.receive_data(chunk.data)
        except grpc.aio.AioRpcError as error:
            stream.code = error.code().name
            return
        except ProtocolFailure as failure:
            stream.code = f"invalid:{failure.reason.value}"
            return
        if core is not None:
            result = core.end_of_stream()
            if result.status is not Status.COMPLETE:
                stream.code = f"{result.status.value}:{result.reason}"

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
        await self.channel.close(None)


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


async def one_round(args: argparse.Namespace) -> dict[str, Any]:
    recording = load_recording(args.recording, expected_sha256=args.recording_sha256)
    base = ReplyRequest.for_case(recording, args.case, wire=WireFormat.LENGTH_PREFIXED)
    side = open_side(args.kind, args.target, args.trace, args.channels)
    me, server = os.getpid(), args.server_pid
    try:
        # One stream unpaced first: connection, caches, lazy imports, on both sides.
        warm = Stream()
        await side.read(dataclasses.replace(base, stream_id=f"paced-warm-{me}"), warm)
        gc.collect()
        idle = {"client": rss_kib(me), "server": servers_rss_kib(server)}
        paced = dataclasses.replace(base, chunk_interval_ms=args.interval_ms)
        n = args.streams
        streams = [Stream() for _ in range(n)]
        cpu, server_cpu, started = time.process_time(), servers_cpu_s(server), time.perf_counter()
        readers = asyncio.gather(
            *(
                side.read(
                    dataclasses.replace(paced, stream_id=f"paced-{me}-{i}"),
                    stream,
                    args.ramp_s * i / n,
                )
                for i, stream in enumerate(streams)
            )
        )
        open_rss = await sample_when_open(streams, readers, me, server)
        await readers
        wall = time.perf_counter() - started
        cpu_s, server_cpu_s = time.process_time() - cpu, servers_cpu_s(server) - server_cpu
    finally:
        await side.close()
    interval = args.interval_ms / 1000
    added = [
        (later - earlier - interval) * 1e3
        for stream in streams
        for earlier, later in zip(stream.arrivals, stream.arrivals[1:], strict=False)
    ]
    p50, p99 = percentile(added, 0.5), percentile(added, 0.99)
    return {
        "kind": args.kind,
        "streams": args.streams,
        "chunks": sum(len(stream.arrivals) for stream in streams),
        "warm_up": warm.code,
        "failures": dict(Counter(s.code for s in streams if s.code != "ok")),
        "wall_s": round(wall, 3),
        "client_cpu_s": cpu_s,
        "server_cpu_s": server_cpu_s,
        "rss_idle_kib": idle,
        "rss_open_kib": open_rss,
        "added_ms_p50": None if p50 is None else round(p50, 3),
        "added_ms_p99": None if p99 is None else round(p99, 3),
        "added_ms_max": round(max(added), 3) if added else None,
    }


async def sample_when_open(
    streams: list[Stream], readers: asyncio.Future[Any], me: int, server: list[int]
) -> dict[str, int] | None:
    """The RSS of both processes once every stream has its first chunk and none has ended
    (None if that moment never came: a stream ended or failed before the last opened)."""
    while not readers.done():
        if all(stream.arrivals for stream in streams):
            return {"client": rss_kib(me), "server": servers_rss_kib(server)}
        await asyncio.sleep(SAMPLE_EVERY_S)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--server-pid", type=int, action="append", required=True)
    parser.add_argument("--channels", type=int, default=1)
    parser.add_argument("--streams", type=int, required=True)
    parser.add_argument("--interval-ms", type=int, required=True)
    parser.add_argument("--ramp-s", type=float, default=0.0)
    parser.add_argument("--case", required=True)
    parser.add_argument("--recording", type=Path, required=True)
    parser.add_argument("--recording-sha256", required=True)
    parser.add_argument("--trace", type=Path, default=Path(os.devnull))
    args = parser.parse_args()
    pin(os.getpid(), CLIENT_CPU)
    print(json.dumps(asyncio.run(one_round(args))), flush=True)


if __name__ == "__main__":
    main()
