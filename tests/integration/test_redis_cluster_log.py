"""The reply log and the ledger on a real Redis Cluster (tests/redis_cluster.py: three
masters, three replicas, ``cluster-node-timeout`` 1 s), and what a failover does to a
reply being written.

Each failover test kills (SIGKILL, by pid) the master of the reply's slot while a
generation writes the reply and a reader on another log (another replica's) follows it,
and says which master, at which frame, what the generation did and what each reader got.
Every outcome is a complete reply or a registered reason, and every reader's frames are
the reply's first frames in order, each exactly as written: never a gap, a repeat or a
different continuation.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from replywire.producer.budget.ledger import AlreadyLeft
from replywire.producer.budget.options import RedisOptions
from replywire.producer.budget.redis_ledger import RedisLedger
from replywire.producer.replylog.durability import Durability, Mode
from replywire.producer.replylog.interface import (
    Entry,
    LogEnded,
    LogLimits,
    ReplyKey,
    ReplyLogFailed,
)
from replywire.producer.replylog.redis_log import RedisReplyLog
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason
from tests.redis_cluster import Cluster, redis_cluster
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.timeout(120)]

#: Longer than a failover here (1 s node timeout and an election, slower on a busy host)
#: and the third of a lease between refreshes: the generation can ride it.
LIMITS = LogLimits(lease_s=8.0)
FRAMES = 60
#: The frame whose write comes right after the master is killed.
KILL_AT = 20
PACE_S = 0.01
BINDING = "b" * 64


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with redis_cluster() as running:
        yield running


def frame(sequence: int) -> bytes:
    return f"frame {sequence}".encode()


@dataclass
class Read:
    """What one reader got: the sequences and bytes, then its ending."""

    frames: list[Entry] = field(default_factory=list)
    ending: str | None = None

    def in_order(self) -> bool:
        """Exactly the reply's first frames, each as written."""
        return [(e.sequence, e.data) for e in self.frames] == [
            (n, frame(n)) for n in range(1, len(self.frames) + 1)
        ]


async def read(log: RedisReplyLog, key: ReplyKey, after: int = 0) -> Read:
    got = Read()
    found = await log.find(key)
    assert found is not None
    try:
        async for entry in found.read(after):
            got.frames.append(entry)
    except LogEnded as ended:
        got.ending = str(ended)
    else:
        got.ending = "complete"
    return got


@dataclass
class Run:
    killed: RedisServer
    generation: str
    written: int
    reader: Read
    late: Read


def cut_replicas_off(cluster: Cluster, master: RedisServer) -> None:
    """The master drops its replicas' links (``CLIENT KILL TYPE replica``) and refuses
    their resync (``ACL SETUSER default -psync -sync``: every other command of its
    clients still runs): it takes writes alone, and they reach no replica."""
    with cluster.local(master) as client:
        client.execute_command("ACL", "SETUSER", "default", "-psync", "-sync")
        client.execute_command("CLIENT", "KILL", "TYPE", "replica")


async def failover_run(
    cluster: Cluster, key: ReplyKey, *, durability: Durability | None = None,
    lag: bool = False,
) -> Run:  # fmt: skip
    """Write the reply, the reader following from another log; kill the master of its
    slot before frame ``KILL_AT`` (with ``lag``: its replica cut off first for the five
    frames before, so that the old master acknowledged writes the replica never got);
    then a late reader on a third log reads the reply from the start."""
    writer = RedisReplyLog(cluster.url, LIMITS, durability=durability)
    follower = RedisReplyLog(cluster.url, LIMITS)
    late = RedisReplyLog(cluster.url, LIMITS)
    try:
        reply = await writer.create(key, BINDING, "lp")
        master = cluster.master_of(writer.keys(key)[1])
        reading = asyncio.create_task(read(follower, key))
        generation, written = "completed", 0
        try:
            for sequence in range(1, FRAMES + 1):
                if lag and sequence == KILL_AT - 5:
                    cut_replicas_off(cluster, master)
                if sequence == KILL_AT:
                    cluster.kill(master)
                await reply.append(Entry(sequence, frame(sequence)))
                written = sequence
                await asyncio.sleep(PACE_S)
            await reply.end()
        except ReplyLogFailed as failed:
            generation = failed.reason.value
            with contextlib.suppress(ReplyLogFailed):
                await reply.end(generation)  # as a generation ends its log, however it failed
        reader = await asyncio.wait_for(reading, 60)
        return Run(master, generation, written, reader, await read(late, key))
    finally:
        for log in (writer, follower, late):
            await log.aclose()


def test_the_log_and_the_ledger_serve_from_a_cluster_with_keys_on_every_master(
    cluster: Cluster,
) -> None:
    async def scenario() -> tuple[set[int], Read]:
        writer, reader = RedisReplyLog(cluster.url, LIMITS), RedisReplyLog(cluster.url, LIMITS)
        try:
            await writer.check()
            ports = set()
            for n in range(12):
                key = ReplyKey("alice", f"spread-{n}")
                reply = await writer.create(key, BINDING, "lp")
                await reply.extend([Entry(s, frame(s)) for s in (1, 2, 3)])
                await reply.end()
                ports.add(cluster.master_of(writer.keys(key)[1]).port)
            return ports, await read(reader, ReplyKey("alice", "spread-0"))
        finally:
            await writer.aclose()
            await reader.aclose()

    ports, got = asyncio.run(scenario())
    assert len(ports) == 3  # the replies' hash tags spread them over every master
    assert got.in_order() and len(got.frames) == 3 and got.ending == "complete"
    ledger = RedisLedger(cluster.url, budget_usd=1.0)
    try:
        ledger.check()
        body = {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}
        reserved = ledger.reserve("call-1", body=body, max_output_tokens=100, identity="alice")
        usage = {"promptTokenCount": 3, "candidatesTokenCount": 5, "totalTokenCount": 8}
        settled = ledger.settle("call-1", usage, identity="alice")
        assert 0 < settled.cost_usd < reserved
        assert ledger.totals()["committed_usd"] == settled.cost_usd
        # Every ledger key shares its prefix's hash tag: one slot, one master.
        masters = {cluster.master_of(key).port for key in ledger.client.keys("*ledger*")}
        assert len(masters) == 1
    finally:
        ledger.close()


def test_a_master_killed_mid_reply_is_ridden_through_and_the_reply_completes_or_ends_named(
    cluster: Cluster,
) -> None:
    run = asyncio.run(failover_run(cluster, ReplyKey("alice", "ride")))
    print(f"killed master :{run.killed.port} before frame {KILL_AT}: generation "
          f"{run.generation} after {run.written} frames; reader {len(run.reader.frames)} "
          f"frames, {run.reader.ending}; late reader {len(run.late.frames)}, "
          f"{run.late.ending}")  # fmt: skip
    assert run.reader.in_order() and run.late.in_order()
    if run.generation == "completed":
        assert len(run.reader.frames) == len(run.late.frames) == FRAMES
        assert run.reader.ending == run.late.ending == "complete"
    else:  # a replica that had not yet received the last frames was promoted
        assert run.generation == Reason.REPLY_LOG_BEHIND.value
        assert run.reader.ending == run.late.ending == Reason.REPLY_LOG_BEHIND.value


def test_frames_the_old_master_acknowledged_and_lost_end_the_reply_reply_log_behind(
    cluster: Cluster,
) -> None:
    """The replica cut off for the five frames before the kill: the old master took them
    (the reader read them from it), the promoted replica never got them."""
    run = asyncio.run(failover_run(cluster, ReplyKey("alice", "lost"), lag=True))
    print(f"killed master :{run.killed.port} before frame {KILL_AT}, its replica cut off "
          f"from frame {KILL_AT - 5}: generation {run.generation} at frame {run.written + 1}; "
          f"reader {len(run.reader.frames)} frames, {run.reader.ending}; late reader "
          f"{len(run.late.frames)}, {run.late.ending}")  # fmt: skip
    assert run.generation == Reason.REPLY_LOG_BEHIND.value
    assert run.written == KILL_AT - 1  # the first write after the failover found the hole
    # The follower had read the lost frames from the old master: it keeps them, then the
    # ending; the late reader gets what the log kept, then the same ending.
    assert run.reader.in_order() and len(run.reader.frames) == KILL_AT - 1
    assert run.late.in_order() and len(run.late.frames) == KILL_AT - 6
    assert run.reader.ending == run.late.ending == Reason.REPLY_LOG_BEHIND.value


def test_with_replica_durability_a_write_is_never_lost_and_a_shard_left_without_replica_ends_named(
    cluster: Cluster,
) -> None:
    """``--reply-log-durability replica``: every frame written was on the replica first,
    so the promoted replica lacks none; it has no replica of its own then, so the next
    wait falls short and the reply ends ``reply_log_unavailable``."""
    durable = Durability(Mode.REPLICA, 1, 1.0)
    run = asyncio.run(failover_run(cluster, ReplyKey("alice", "durable"), durability=durable))
    print(f"killed master :{run.killed.port} before frame {KILL_AT}: generation "
          f"{run.generation} after {run.written} frames; reader {len(run.reader.frames)}, "
          f"{run.reader.ending}; late reader {len(run.late.frames)}, "
          f"{run.late.ending}")  # fmt: skip
    # The wait fell short (no replica left); on a host too busy for the lease to outlast
    # the failover and the waits, the lease lapsed first: named either way.
    assert run.generation in {Reason.REPLY_LOG_UNAVAILABLE.value, Reason.GENERATOR_LOST.value}
    assert run.written == KILL_AT - 1
    assert run.reader.in_order() and run.late.in_order()
    # Nothing the generation counted as written was lost: the late reader has it all.
    assert len(run.late.frames) >= run.written
    assert run.reader.ending == run.late.ending == run.generation


# --- the ledger at a failover ----------------------------------------------------------

LEDGER_CALLS = 30
#: The ledger's master is cut off from its replica before this call, killed before the
#: next five's.
LEDGER_CUT_AT = 15
BODY = {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}
USAGE = {"promptTokenCount": 3, "candidatesTokenCount": 5, "totalTokenCount": 8}


@dataclass
class LedgerRun:
    master: RedisServer
    #: call id -> the last step the ledger answered (reserved, marked, settled)
    told: dict[str, str]
    #: call id -> the reason a step of it was refused ("missing": no entry to mark)
    refused: dict[str, str]
    entries: dict[str, dict[str, Any]]
    totals: dict[str, Any]


def ledger_failover_run(cluster: Cluster, options: RedisOptions | None = None) -> LedgerRun:
    """``LEDGER_CALLS`` calls reserved, marked and settled one after another, the ledger's
    master cut off from its replica before call ``LEDGER_CUT_AT`` and killed five calls
    later; a call refused at a step is released as the source does (if it can be). What
    each call was told, and what the ledger holds afterwards."""
    ledger = RedisLedger(cluster.url, budget_usd=1.0, options=options)
    ledger.check()
    master = cluster.master_of(ledger.call_key("call-0", "alice"))
    told: dict[str, str] = {}
    refused: dict[str, str] = {}
    try:
        for n in range(LEDGER_CALLS):
            if n == LEDGER_CUT_AT:
                cut_replicas_off(cluster, master)
            if n == LEDGER_CUT_AT + 5:
                cluster.kill(master)
                cluster.wait_promoted(master)
            call = f"call-{n}"
            try:
                ledger.reserve(call, body=BODY, max_output_tokens=100, identity="alice")
                told[call] = "reserved"
                ledger.mark_sending(call, identity="alice")
                told[call] = "marked"
                ledger.settle(call, USAGE, identity="alice")
                told[call] = "settled"
            except (RequestRefused, KeyError) as error:
                refused[call] = getattr(getattr(error, "reason", None), "value", "missing")
                with contextlib.suppress(RequestRefused, KeyError, AlreadyLeft):
                    ledger.release(call, "refused", identity="alice")
        entries = {e["call_id"]: e for e in ledger.entries()}
        return LedgerRun(master, told, refused, entries, ledger.totals())
    finally:
        ledger.close()


def test_the_ledger_at_a_failover_loses_only_what_its_master_took_alone_and_doubles_nothing(
    cluster: Cluster,
) -> None:
    """Calls reserved, marked and settled one after another; the ledger's master cut off
    from its replica before call ``LEDGER_CUT_AT`` and killed five calls later. What the
    ledger holds afterwards, against what each call was told: a call whose every step was
    answered before the cut is there, settled; what the master took alone is lost (its
    entry and its share of the sums alike: they are written together, in one slot);
    nothing is counted twice; a step refused meanwhile is ``ledger_unavailable``."""
    run = ledger_failover_run(cluster)
    held = {call: entry["state"] for call, entry in run.entries.items()}
    lost = sorted(c for c, step in run.told.items() if c not in held or (step == "settled")
                  != (held[c] == "settled"))  # fmt: skip
    print(f"ledger master :{run.master.port} cut off before call {LEDGER_CUT_AT}, killed "
          f"before call {LEDGER_CUT_AT + 5}: {len(run.told)} calls answered, "
          f"{len(run.refused)} refused {sorted(set(run.refused.values()))}, {len(lost)} lost "
          f"{lost}; ledger holds {len(held)} entries, committed "
          f"{run.totals['committed_usd']:.8f} USD")  # fmt: skip
    # Before the cut, everything answered is there; what was lost was taken alone.
    assert all(held.get(f"call-{n}") == "settled" for n in range(LEDGER_CUT_AT))
    assert all(LEDGER_CUT_AT <= int(c.split("-")[1]) < LEDGER_CUT_AT + 5 for c in lost)
    assert run.totals["committed_usd"] == pytest.approx(settled_costs(run), abs=1e-12)
    assert set(run.refused.values()) <= {Reason.LEDGER_UNAVAILABLE.value, "missing"}


def settled_costs(run: LedgerRun) -> float:
    """What the settled entries cost: the committed sum must be exactly this (nothing
    doubled, nothing held for a call that left ``reserved``)."""
    return sum(float(e["cost_usd"]) for e in run.entries.values() if e["state"] == "settled")


def test_with_ledger_durability_a_failover_loses_no_call_that_was_let_through(
    cluster: Cluster,
) -> None:
    """``--ledger-durability replica``: the same calls, the ledger's master cut off from its
    replica before call ``LEDGER_CUT_AT`` and killed five calls later. A call's reserve
    and its mark that it is sending wait for the replica: while the master is alone every
    reserve is answered short and refused ``ledger_unavailable`` (its reservation, taken
    alone, is released, or lost with the master); after the kill the promoted replica has
    no replica of its own, so the calls are refused still. Every call that was marked
    sending, so would have been sent, is in the ledger after the failover: none paid and
    not counted."""
    run = ledger_failover_run(cluster, RedisOptions(durability=Durability(Mode.REPLICA, 1, 0.5)))
    let_through = sorted(c for c, step in run.told.items() if step in {"marked", "settled"})
    lost = [c for c in let_through if c not in run.entries]
    print(f"ledger master :{run.master.port} cut off before call {LEDGER_CUT_AT}, killed "
          f"before call {LEDGER_CUT_AT + 5}, --ledger-durability replica: {len(let_through)} "
          f"calls let through, {len(lost)} of them lost; {len(run.refused)} refused "
          f"{sorted(set(run.refused.values()))}; ledger holds {len(run.entries)} entries, "
          f"committed {run.totals['committed_usd']:.8f} USD")  # fmt: skip
    assert lost == []
    assert all(run.entries[f"call-{n}"]["state"] == "settled" for n in range(LEDGER_CUT_AT))
    # From the cut on, nothing was let through: every reserve was refused.
    assert sorted(run.refused, key=lambda c: int(c.split("-")[1])) == [
        f"call-{n}" for n in range(LEDGER_CUT_AT, LEDGER_CALLS)
    ]
    assert set(run.refused.values()) == {Reason.LEDGER_UNAVAILABLE.value}
    assert all(run.told.get(c) is None for c in run.refused)
    assert run.totals["committed_usd"] == pytest.approx(settled_costs(run), abs=1e-12)
