"""Fan-out: K readers of one live reply, and what each reader costs the producers and Redis.

    BENCH_SIZE=tiny|full .venv/bin/python -m bench.fanout

K consumers of the same identity (``alice``) read one reply while it is generated, K = 1, 10,
100 and 1,000 at the full size (1 and 10 tiny), in each layout of ``bench.fanout_layouts``
(one producer; two replicas sharing one Redis server): the Gemini source against the fake
Gemini server (``harness.fake_gemini``, which counts the provider calls; its
``fake-fine-deltas`` answers the case's reply in deltas of two characters, an event and so a
chunk each, ``event_delay_s`` apart: 80 chunks, 16 s at the full size), the Redis reply log
on a private server (``tests.redis_server``). The first reader opens the reply on the first
producer; once its first chunk came (the reply is live), the other K - 1 open it too, spread
over the producers in turn (two replicas: half and half). Every reader is a raw gRPC client
of this process (``CHANNELS`` channels per producer), reads every chunk to the end and
digests them (SHA-256).

A row, per layout and K: how many readers completed, how many of them with the same bytes
(the digest most of them got), how the others ended (their reason codes), how many got
their first chunk before the reply ended (joined it live; the end: the first completed
reader's), the provider calls (exactly one when the readers share the reply), the
producers' CPU per reader-chunk (their processes' CPU clocks, before the first reader opens
and after the last one ended, over the chunks every reader read: K times the reply's
chunks), Redis commands (``INFO commandstats`` of the layout's servers: every command the
server ran, those inside scripts and transactions too, this benchmark's own ``INFO`` not
counted) per reader-chunk and per chunk of the reply, and of them the replicas' followers'
``XREAD`` per chunk. Beside them, what the readers beyond the first cost, against the same
round's row of one reader: the producers' CPU per added reader-chunk and the Redis commands
per added reader. A reply's frames are read once per replica, not once per reader: ``XREAD``
per chunk stays flat in K; what grows with K is each Open's own look-up of the reply
(``MULTI``, ``HGETALL``, ``EXISTS``, ``XREVRANGE``, ``EXEC``), the commands per added reader.

The producers' bounds on readers admit the run: ``--max-streams-per-identity`` (readers are
streams) is the largest K and a margin; the reply log's bounds (``--reply-log-replies-read``,
its per-identity share, ``--reply-log-connections``) count replies and connections, not
readers, and stay at their defaults, so a reader they refused would be a finding, in the
row's failures. Each layout is deployed once and warmed with two replies; the rows run
round by round (the layouts' order rotated each round), each a reply of its own; medians of
the rounds, and the worst round's completions. The producers run pinned to one CPU, this
process (every reader) to the other (``bench.common.pin``).
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import os
import secrets
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import grpc
import redis.asyncio as aioredis

from bench.common import CLIENT_CPU, Size, bench_size, pin, process_cpu_s, unpin
from bench.fanout_layouts import LAYOUTS, Deployed
from replywire.runtime.recording_file import load_recording
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire.chunking import ChunkPlan
from tests.gemini_runs import API_KEY
from tests.processes import FakeGeminiProcess, fake_gemini

CASE: Final = "backup-schedule"
#: The fake's script: the case's reply in deltas of two characters, an event (a chunk) each.
MODEL: Final = "fake-fine-deltas"
CHANNELS: Final = 4
#: The longest a reader may take, and the first reader's first chunk (bounds, never measures).
READ_TIMEOUT_S: Final = 180.0
#: After the last reader ended, before the producers' CPU is read: the generation settles.
SETTLE_S: Final = 0.5
#: Headroom over the largest K in ``--max-streams-per-identity``.
STREAM_MARGIN: Final = 10
#: This benchmark's own commands on the counted servers.
OWN_COMMANDS: Final = frozenset({"info"})


@dataclass(frozen=True)
class Plan:
    readers: tuple[int, ...]
    rounds: int
    #: Seconds between the fake's events (a chunk each): how long the reply is live.
    event_delay_s: str


PLANS: Final[dict[Size, Plan]] = {
    "tiny": Plan(readers=(1, 10), rounds=1, event_delay_s="0.01"),
    # 16 s: 1,000 readers opened from one process on a shared core get their first chunk
    # within it (at 8 s, 801 to 953 of them did before it ended).
    "full": Plan(readers=(1, 10, 100, 1000), rounds=3, event_delay_s="0.2"),
}


@dataclass
class Read:
    """One reader's stream: how it ended (``ok`` or the reason code), what it read, when."""

    status: str = "ok"
    digest: str = ""
    chunks: int = 0
    first_s: float | None = None
    end_s: float = 0.0


@dataclass
class Measured:
    """One row of one round: the readers' reads, and the counters' differences."""

    reads: list[Read]
    provider_calls: int
    cpu_s: float
    #: Calls of each command on the counted servers over the row (this benchmark's own not).
    commands: dict[str, int] = field(default_factory=dict)


def command_calls(stats: Mapping[str, Any]) -> dict[str, int]:
    """``INFO commandstats`` (redis-py's parse: ``cmdstat_NAME`` → its fields) as calls by
    command name, this benchmark's own left out."""
    calls = {}
    for key, fields in stats.items():
        name = key.removeprefix("cmdstat_")
        if name not in OWN_COMMANDS:
            calls[name] = int(fields["calls"])
    return calls


def difference(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """The calls of each command between two looks (commands that ran), largest first."""
    moved = {name: n - before.get(name, 0) for name, n in after.items()}
    return dict(sorted(((k, v) for k, v in moved.items() if v), key=lambda kv: (-kv[1], kv[0])))


def figures(measured: Measured) -> dict[str, Any]:
    """A round's row: completions, digests, live joins, and the costs per reader-chunk and
    per chunk of the reply (the chunks the readers of the common digest read)."""
    reads = measured.reads
    complete = [r for r in reads if r.status == "ok"]
    digests = collections.Counter(r.digest for r in complete)
    common, same = digests.most_common(1)[0] if digests else ("", 0)
    chunks = next((r.chunks for r in complete if r.digest == common), 0)
    ended = min((r.end_s for r in complete), default=None)
    live = sum(
        1 for r in reads if ended is not None and r.first_s is not None and r.first_s < ended
    )
    reader_chunks = sum(r.chunks for r in reads)
    commands = sum(measured.commands.values())
    failed = collections.Counter(r.status for r in reads if r.status != "ok")
    return {
        "readers": len(reads),
        "complete": len(complete),
        "same_bytes": same,
        "digests": len(digests),
        "failed": dict(sorted(failed.items())),
        "joined_live": live,
        # From the first reader's first chunk: the last reader's first chunk, the reply's end.
        "last_joined_s": since(reads[0].first_s, [r.first_s for r in reads]),
        "reply_s": since(reads[0].first_s, [ended]),
        "provider_calls": measured.provider_calls,
        "chunks": chunks,
        "reader_chunks": reader_chunks,
        "producer_cpu_s": round(measured.cpu_s, 4),
        "producer_cpu_us_per_reader_chunk": per(measured.cpu_s * 1e6, reader_chunks),
        "redis_commands": commands,
        "redis_commands_per_reader_chunk": per(commands, reader_chunks),
        "redis_commands_per_chunk": per(commands, chunks),
        "xread_per_chunk": per(measured.commands.get("xread", 0), chunks),
        "commands": measured.commands,
    }


def since(start: float | None, times: Sequence[float | None]) -> float | None:
    """Seconds from ``start`` to the latest of ``times`` (None: nothing to measure)."""
    known = [t for t in times if t is not None]
    return round(max(known) - start, 3) if start is not None and known else None


def per(amount: float, count: int) -> float | None:
    return round(amount / count, 3) if count else None


#: The figures a row's median is taken of (the others: the worst round's).
MEDIANS: Final = (
    "producer_cpu_s",
    "producer_cpu_us_per_reader_chunk",
    "redis_commands",
    "redis_commands_per_reader_chunk",
    "redis_commands_per_chunk",
    "xread_per_chunk",
)


def added(base: Mapping[str, Any], row: Mapping[str, Any]) -> dict[str, float | None]:
    """What the readers beyond one cost, from a round's row and the same round's row of one
    reader (``base``): the producers' CPU per added reader-chunk, and Redis commands per
    added reader (each reader's own: its Open's look-up of the reply)."""
    readers = row["readers"] - base["readers"]
    reader_chunks = row["reader_chunks"] - base["reader_chunks"]
    cpu_us = (row["producer_cpu_s"] - base["producer_cpu_s"]) * 1e6
    return {
        "producer_cpu_us_per_added_reader_chunk": per(cpu_us, reader_chunks),
        "redis_commands_per_added_reader": per(
            row["redis_commands"] - base["redis_commands"], readers
        ),
    }


def summary(
    rounds: Sequence[dict[str, Any]], base: Sequence[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A row over its rounds: the medians of the costs; of the rest, the round with the
    fewest readers complete with the same bytes (the worst), and every round's figures.
    With ``base`` (the rounds of one reader, in the same order) and more readers than it
    had, the medians of what the added readers cost (``added``)."""
    worst = min(rounds, key=lambda r: (r["same_bytes"], r["joined_live"], -r["provider_calls"]))
    row = {k: v for k, v in worst.items() if k not in MEDIANS and k != "commands"}
    for key in MEDIANS:
        row[key] = median_of([r[key] for r in rounds])
    if base and rounds[0]["readers"] > base[0]["readers"]:
        costs = [added(one, r) for one, r in zip(base, rounds, strict=True)]
        for key in costs[0]:
            row[key] = median_of([c[key] for c in costs])
    row["provider_calls_by_round"] = [r["provider_calls"] for r in rounds]
    row["rounds"] = list(rounds)
    return row


def median_of(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 4) if known else None


async def read(stub: Any, request: pb.OpenRequest, token: str, first: asyncio.Event) -> Read:
    """One reader to the end of its stream (``first`` set at its first chunk)."""
    got = Read()
    digest = hashlib.sha256()
    call = stub.Open(request, metadata=(("authorization", f"Bearer {token}"),),
                     timeout=READ_TIMEOUT_S)  # fmt: skip
    try:
        async for chunk in call:
            if got.first_s is None:
                got.first_s = time.perf_counter()
                first.set()
            digest.update(chunk.data)
            got.chunks += 1
    except grpc.aio.AioRpcError as error:
        got.status = error.details() or error.code().name
    got.end_s = time.perf_counter()
    got.digest = digest.hexdigest()
    first.set()
    return got


class Counters:
    """The commands the layout's Redis servers ran, through one connection each (opened
    before the first look, so that its own handshake is not in a row)."""

    def __init__(self, urls: Sequence[str]) -> None:
        self._clients: list[Any] = [aioredis.Redis.from_url(url) for url in urls]

    async def look(self) -> dict[str, int]:
        total: collections.Counter[str] = collections.Counter()
        for client in self._clients:
            total.update(command_calls(await client.info("commandstats")))
        return dict(total)

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()


class Readers:
    """The readers' channels to one deployment, and its replies read K at a time."""

    def __init__(self, deployed: Deployed, token: str) -> None:
        self.deployed = deployed
        self._token = token
        # Per target: CHANNELS channels; reader i reads from target i mod n.
        self._channels = [
            [grpc.aio.insecure_channel(target) for _ in range(CHANNELS)]
            for target in deployed.targets
        ]
        self._stubs = [[pb_grpc.ReplyStreamStub(c) for c in chans] for chans in self._channels]
        self._recording = load_recording()

    def request(self, stream_id: str) -> pb.OpenRequest:
        plan = ChunkPlan.parse("frame")
        return ReplyRequest.for_case(
            self._recording, CASE, plan=plan, stream_id=stream_id
        ).open_request()

    def _stub(self, index: int) -> Any:
        targets = len(self._stubs)
        return self._stubs[index % targets][(index // targets) % CHANNELS]

    async def reply(self, stream_id: str, readers: int) -> list[Read]:
        """``readers`` readers of one reply: the first opens it; the others once it is
        live (the first's first chunk came), spread over the targets."""
        request = self.request(stream_id)
        live = asyncio.Event()
        first = asyncio.create_task(read(self._stub(0), request, self._token, live))
        async with asyncio.timeout(READ_TIMEOUT_S):
            await live.wait()
        others = [
            asyncio.create_task(read(self._stub(i), request, self._token, asyncio.Event()))
            for i in range(1, readers)
        ]
        return [await first, *await asyncio.gather(*others)]

    async def aclose(self) -> None:
        for chans in self._channels:
            for channel in chans:
                await channel.close(None)


async def measure(
    readers: Readers, counters: Counters, fake: FakeGeminiProcess, stream_id: str, k: int
) -> Measured:
    pids = readers.deployed.pids
    calls = len(await asyncio.to_thread(fake.log))
    commands = await counters.look()
    cpu = sum(process_cpu_s(pid) for pid in pids)
    reads = await readers.reply(stream_id, k)
    await asyncio.sleep(SETTLE_S)
    cpu = sum(process_cpu_s(pid) for pid in pids) - cpu
    moved = difference(commands, await counters.look())
    provider_calls = len(await asyncio.to_thread(fake.log)) - calls
    return Measured(reads, provider_calls, cpu, moved)


def producer_flags(fake: FakeGeminiProcess, token_file: Path, plan: Plan) -> list[str]:
    """The flags every producer runs with (each layout adds its ledger and reply log)."""
    return [
        "--source", "gemini", "--gemini-base-url", fake.base_url, "--model", MODEL,
        "--budget-usd", "10.0", "--auth-tokens", str(token_file),
        # As bench.replylog_readers: the ledger's lock and the leases are not measured here.
        "--ledger-lease-s", "90", "--ledger-timeout-s", "30", "--reply-log-lease-s", "60",
        "--max-streams-per-identity", str(max(plan.readers) + STREAM_MARGIN),
        "--log-level", "warning",
    ]  # fmt: skip


async def rounds(
    deployed: Mapping[str, Deployed], fake: FakeGeminiProcess, token: str, plan: Plan
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    pin(os.getpid(), CLIENT_CPU)
    names = list(deployed)
    sides = {name: Readers(deployed[name], token) for name in names}
    counters = {name: Counters(deployed[name].counted) for name in names}
    found: dict[str, dict[str, list[dict[str, Any]]]] = {
        name: {str(k): [] for k in plan.readers} for name in names
    }
    try:
        for name in names:  # warm-up: a reply of one reader, then one of two a producer
            for index, readers in enumerate((1, 2 * len(deployed[name].targets))):
                await sides[name].reply(f"warm-{names.index(name)}-{index}", readers)
        for index in range(plan.rounds):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                for k in plan.readers:
                    stream_id = f"fanout-{names.index(name)}-{k}-{index}"
                    measured = await measure(sides[name], counters[name], fake, stream_id, k)
                    found[name][str(k)].append(figures(measured))
    finally:
        for name in names:
            await sides[name].aclose()
            await counters[name].aclose()
    return found


def run(size: Size) -> dict[str, Any]:
    plan = PLANS[size]
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="replywire-fanout-") as folder, ExitStack() as stack:
        workdir = Path(folder)
        token_file = workdir / "tokens"
        token_file.write_text(f"alice {token}\n")
        fake = stack.enter_context(fake_gemini(API_KEY, "--event-delay-s", plan.event_delay_s))
        unpin(fake.process.pid)
        flags = producer_flags(fake, token_file, plan)
        env = {"GEMINI_API_KEY": API_KEY}
        deployed = {
            name: stack.enter_context(layout(workdir / f"layout-{i}", flags, env))
            for i, (name, layout) in enumerate(LAYOUTS.items())
        }
        found = asyncio.run(rounds(deployed, fake, token, plan))
    return {
        "case": CASE,
        "readers": list(plan.readers),
        "rounds": plan.rounds,
        "event_delay_s": float(plan.event_delay_s),
        "channels_per_producer": CHANNELS,
        "max_streams_per_identity": max(plan.readers) + STREAM_MARGIN,
        "layouts": {
            name: {
                "producers": len(deployed[name].targets),
                "rows": {k: summary(rs, by_k.get("1")) for k, rs in by_k.items()},
            }
            for name, by_k in found.items()
        },
    }


#: The table's columns (bench/report.py draws it from ``cells``).
HEADER: Final = (
    "layout", "readers (K)", "complete", "same bytes", "failed (by reason)", "joined live",
    "provider calls", "chunks", "producer CPU µs / reader-chunk",
    "producer CPU µs / added reader-chunk", "Redis commands / reader-chunk",
    "Redis commands / chunk", "of them XREAD / chunk", "Redis commands / added reader",
)  # fmt: skip


def cells(fanout: Mapping[str, Any]) -> list[list[Any]]:
    out = []
    for name, layout in fanout["layouts"].items():
        for k, row in layout["rows"].items():
            calls = sorted(set(row["provider_calls_by_round"]))
            out.append([
                name, int(k), row["complete"], row["same_bytes"], row["failed"],
                joined(row), ", ".join(map(str, calls)), row["chunks"],
                row["producer_cpu_us_per_reader_chunk"],
                row.get("producer_cpu_us_per_added_reader_chunk"),
                row["redis_commands_per_reader_chunk"], row["redis_commands_per_chunk"],
                row["xread_per_chunk"], row.get("redis_commands_per_added_reader"),
            ])  # fmt: skip
    return out


def joined(row: Mapping[str, Any]) -> str:
    """The readers that joined live, and when the last one's first chunk came against the
    reply's end (seconds after the first reader's first chunk)."""
    last, reply = row.get("last_joined_s"), row.get("reply_s")
    if last is None or reply is None:
        return f"{row['joined_live']:,}"
    return f"{row['joined_live']:,} (last at {last:.1f} s of {reply:.1f})"


def main() -> None:
    print(json.dumps(run(bench_size()), indent=2))


if __name__ == "__main__":
    main()
