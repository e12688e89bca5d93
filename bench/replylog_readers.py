"""The readers of one live reply on one replica, through the Redis reply log: the table.

python -m bench.replylog_readers                        # 50, 95, 105, 150 and 1,000 readers
python -m bench.replylog_readers --readers 20 --json readers.json
python -m bench.replylog_readers --distinct --readers 65,300   # as many distinct replies

For each number of readers: a private valkey/redis server (``tests.redis_server``), the
fake Gemini server (``harness.fake_gemini``, its slow drip slowed to ``DRIP_DELAY_S``)
and one producer (``--source gemini --reply-log redis://...``, tokens for ``alice`` and
``bob``) are started afresh. ``alice`` opens that many streams of one stream id at once
(raw gRPC, over ``CHANNELS`` channels of this process): one live reply, its readers;
once they are all open, ``bob`` opens a stream of his own (another reply). Every stream
is read to its end. With ``--distinct`` each of ``alice``'s streams has a stream id of
its own: that many distinct live replies read at once (``--reply-log-replies-read`` and
its per-identity share raised to fit them). A row: how many of ``alice``'s readers ended
OK (with the same bytes, one reply), how the others ended (their reason codes), ``bob``'s
ending, the provider calls the fake server counted, and the Redis connections the
producer held at most (``CLIENT LIST``, sampled every ``SAMPLE_S``; the sampler's own
connection not counted) and, of them, the readers' (named ``replywire-readers``), and
the most of each pool's name at once (``peak_by_name``).

The figures are measurements, never asserted by time; a test runs this at a small size.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import secrets
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import grpc
import redis.asyncio as aioredis

from replywire.runtime.recording_file import load_recording
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire.chunking import ChunkPlan
from tests.gemini_runs import API_KEY
from tests.processes import FakeGeminiProcess, Producer, fake_gemini, producer
from tests.redis_server import RedisServer, redis_server

SIZES: Final = (50, 95, 105, 150, 1000)
CASE: Final = "backup-schedule"
#: Seconds between the fake's 8-byte pieces: a reply of some 6 s, so readers join it live.
DRIP_DELAY_S: Final = "0.05"
CHANNELS: Final = 4
SAMPLE_S: Final = 0.05
#: The longest a reader may take (a bound, never a measure).
READ_TIMEOUT_S: Final = 120.0
SAMPLER: Final = "bench-sampler"
#: The client name the producer's followers' connections carry.
READERS_NAME: Final = "replywire-readers"


@dataclass
class Row:
    readers: int
    #: Each reader reads a reply of its own (else all of them one reply).
    distinct: bool = False
    complete: int = 0
    identical: bool = False
    failed: dict[str, int] = field(default_factory=dict)
    other_identity: str = ""
    provider_calls: int = 0
    peak_connections: int = 0
    peak_reader_connections: int = 0
    #: The most connections of each name at once (a pool's, the pub/sub one).
    peak_by_name: dict[str, int] = field(default_factory=dict)
    #: Once every stream ended: the connections the producer's pools hold open, by name
    #: (a pool keeps what it opened: the most it used at once).
    open_connections: dict[str, int] = field(default_factory=dict)


async def read_stream(stub: Any, request: pb.OpenRequest, token: str) -> tuple[str, bytes]:
    """(``ok`` or the reason code the stream ended with, every chunk's bytes)."""
    metadata = (("authorization", f"Bearer {token}"),)
    call = stub.Open(request, metadata=metadata, timeout=READ_TIMEOUT_S)
    data = bytearray()
    try:
        async for chunk in call:
            data += chunk.data
    except grpc.aio.AioRpcError as error:
        return error.details() or error.code().name, bytes(data)
    return "ok", bytes(data)


async def open_connections(url: str) -> dict[str, int]:
    """The server's clients by name (``CLIENT LIST``), this look's own not counted."""
    client: Any = aioredis.Redis.from_url(url, client_name=SAMPLER)
    try:
        clients = await client.client_list()
    finally:
        await client.aclose()
    named = collections.Counter(c.get("name") or "" for c in clients if c.get("name") != SAMPLER)
    return dict(sorted(named.items()))


async def _sample(url: str, peaks: list[int], by_name: dict[str, int], stop: asyncio.Event) -> None:
    client: Any = aioredis.Redis.from_url(url, client_name=SAMPLER)
    try:
        while not stop.is_set():
            clients = await client.client_list()
            others = [c for c in clients if c.get("name") != SAMPLER]
            peaks[0] = max(peaks[0], len(others))
            readers = sum(1 for c in others if c.get("name") == READERS_NAME)
            peaks[1] = max(peaks[1], readers)
            named = collections.Counter(c.get("name") or "" for c in others)
            for name, n in named.items():
                by_name[name] = max(by_name.get(name, 0), n)
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), SAMPLE_S)
    finally:
        await client.aclose()


async def _streams(
    target: str, url: str, readers: int, tokens: dict[str, str], distinct: bool = False
) -> Row:
    recording = load_recording()
    plan = ChunkPlan.parse("frame")
    own = ReplyRequest.for_case(recording, CASE, plan=plan, stream_id="own")
    channels = [grpc.aio.insecure_channel(target) for _ in range(CHANNELS)]
    peaks = [0, 0]
    by_name: dict[str, int] = {}
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sample(url, peaks, by_name, stop))
    try:
        stubs = [pb_grpc.ReplyStreamStub(channel) for channel in channels]
        ids = [f"shared-{i}" if distinct else "shared" for i in range(readers)]
        requests = {
            stream_id: ReplyRequest.for_case(
                recording, CASE, plan=plan, stream_id=stream_id
            ).open_request()
            for stream_id in dict.fromkeys(ids)
        }
        tasks = [
            asyncio.create_task(
                read_stream(stubs[i % CHANNELS], requests[stream_id], tokens["alice"])
            )
            for i, stream_id in enumerate(ids)
        ]
        await asyncio.sleep(0)  # every one of them started before bob's
        other = await read_stream(stubs[0], own.open_request(), tokens["bob"])
        ended = await asyncio.gather(*tasks)
        still_open = await open_connections(url)
    finally:
        stop.set()
        await sampler
        for channel in channels:
            await channel.close(None)
    complete = [data for status, data in ended if status == "ok"]
    failed = collections.Counter(status for status, _ in ended if status != "ok")
    return Row(
        readers=readers,
        distinct=distinct,
        complete=len(complete),
        identical=bool(complete) and all(data == complete[0] for data in complete),
        failed=dict(sorted(failed.items())),
        other_identity=other[0],
        peak_connections=peaks[0],
        peak_reader_connections=peaks[1],
        peak_by_name=dict(sorted(by_name.items())),
        open_connections=still_open,
    )


def tokens_in(workdir: Path) -> tuple[dict[str, str], Path]:
    """Tokens for alice and bob, and the ``--auth-tokens`` file that holds them."""
    tokens = {name: secrets.token_urlsafe(24) for name in ("alice", "bob")}
    token_file = workdir / "tokens"
    token_file.write_text("".join(f"{name} {token}\n" for name, token in tokens.items()))
    return tokens, token_file


@contextmanager
def deployment(
    workdir: Path, readers: int, *flags: str, drip_delay_s: str = DRIP_DELAY_S
) -> Iterator[tuple[Producer, RedisServer, FakeGeminiProcess, dict[str, str]]]:
    """A private Redis server, the fake Gemini server (``drip_delay_s`` between its
    pieces), and one producer of the Gemini source on the Redis reply log with tokens for
    alice and bob (``readers`` streams of a caller allowed at once, and more); the
    tokens."""
    tokens, token_file = tokens_in(workdir)
    with ExitStack() as stack:
        server = stack.enter_context(redis_server())
        fake = stack.enter_context(fake_gemini(API_KEY, "--drip-delay-s", drip_delay_s))
        args = (
            "--source", "gemini", "--gemini-base-url", fake.base_url,
            "--model", "fake-slow-drip", "--ledger", str(workdir / "ledger.json"),
            "--budget-usd", "10.0", "--auth-tokens", str(token_file),
            # 300 distinct calls reserve in the one file ledger at once, and 300 generations
            # refresh their leases on two cores: neither the ledger's lock nor the leases are
            # what this measures (loaded runs saw a lock wait past 10 s, ledger_unavailable,
            # and leases lapse, generator_lost). The ledger's wait is at most a third of its
            # lease; a reply log lease of 60 s is refreshed every 20 s.
            "--ledger-lease-s", "90", "--ledger-timeout-s", "30",
            "--reply-log-lease-s", "60",
            "--max-streams-per-identity", str(max(readers, 1) + 10),
            "--reply-log", server.url, "--log-level", "warning", *flags,
        )  # fmt: skip
        running = stack.enter_context(
            producer(workdir, *args, name=f"readers-{readers}", env={"GEMINI_API_KEY": API_KEY})
        )
        yield running, server, fake, tokens


def run_row(readers: int, workdir: Path, *flags: str, distinct: bool = False) -> Row:
    """One row: fresh servers and producer, ``readers`` readers of alice's one reply (or,
    ``distinct``, of a reply each)."""
    if distinct:  # every reply read at once fits the followers' bounds
        fit = str(readers + 10)
        flags = ("--reply-log-replies-read", fit,
                 "--reply-log-replies-read-per-identity", fit, *flags)  # fmt: skip
    with deployment(workdir, readers, *flags) as (running, server, fake, tokens):
        before = len(fake.log())
        row = asyncio.run(_streams(running.target, server.url, readers, tokens, distinct))
        row.provider_calls = len(fake.log()) - before
    return row


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| readers | complete (same bytes) | failed | other identity | provider calls "
        "| Redis connections (peak) | of them the readers' |",
        "|---:|---:|---|---|---:|---:|---:|",
    ]
    for r in rows:
        failed = ", ".join(f"{n} {reason}" for reason, n in r.failed.items()) or "none"
        same = "yes" if r.identical else "no"
        lines.append(
            f"| {r.readers:,} | {r.complete:,} ({same}) | {failed} | {r.other_identity} "
            f"| {r.provider_calls} | {r.peak_connections} | {r.peak_reader_connections} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument(
        "--readers", default=",".join(map(str, SIZES)), help="comma-separated reader counts"
    )
    parser.add_argument(
        "--distinct", action="store_true", help="a reply of its own for each reader"
    )
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("flags", nargs="*", help="more producer flags (after --)")
    args = parser.parse_args(argv)
    rows = []
    for readers in (int(n) for n in args.readers.split(",")):
        with tempfile.TemporaryDirectory(prefix="replylog-readers-") as workdir:
            rows.append(run_row(readers, Path(workdir), *args.flags, distinct=args.distinct))
        print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
