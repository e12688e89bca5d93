"""A logged reply's lifecycle, one table (``producer.replylog.states``) obeyed by both logs:
every input driven from every state through the memory log and through the Redis log on a
real server; a move either log makes is the table's, a move the table lacks is refused as
the logs always refused it, with the reply left as it was, and the two logs agree wherever
both have the input (the memory log has no lease to refresh or lose and relays no
``Cancel``; the Redis log drops no reply to make room). Each Lua script, run alone from
every state, makes exactly the table's moves of its inputs, and reads a state only as the
table says the Redis log records it."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pytest

from replywire.producer.replylog import scripts
from replywire.producer.replylog.interface import (
    Entry,
    LogLimits,
    ReplyBusy,
    ReplyKey,
    ReplyLogFailed,
)
from replywire.producer.replylog.memory import MemoryReplyLog
from replywire.producer.replylog.redis_log import RedisReplyLog
from replywire.producer.replylog.scripts import BEHIND, MAX_CANCEL_REQUESTS, ms
from replywire.producer.replylog.states import (
    MEMORY_LOG_ONLY,
    REPLY,
    SHARED_LOG_ONLY,
    TRANSITIONS,
    ReplyInput,
    ReplyState,
)
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason
from tests.redis_server import RedisServer, redis_server

S, I = ReplyState, ReplyInput  # noqa: E741 - as in producer/replylog/states.py
KEY, OTHER = ReplyKey("alice", "s"), ReplyKey("alice", "t")
#: As the other reply log tests: refreshed every third of it, held on a busy machine. The TTL
#: is long: time passes in these tests only when an input says so (``elapse``).
LIMITS = LogLimits(max_bytes=64, max_replies=1, ttl_s=60.0, lease_s=1.2)
_prefixes = itertools.count()


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


@dataclass(frozen=True)
class Seen:
    """A reply as its log records it: its state, its frames, the ``Cancel`` requests queued."""

    state: ReplyState
    frames: int
    cancels: int


class Store(Protocol):
    """One log as the inputs reach it: ``a`` generates the reply (``reply``, its handle from
    the last ``create`` of the set-up); ``b`` is another delivery's log (another replica's,
    for the Redis log)."""

    a: Any
    b: Any
    reply: Any
    handles: list[Any]

    async def seen(self) -> Seen: ...

    async def elapse(self, seconds: float, *, lease_too: bool) -> None: ...

    async def close(self) -> None: ...


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class MemoryStore:
    def __init__(self) -> None:
        self.clock = Clock()
        self.a = self.b = MemoryReplyLog(LIMITS, clock=self.clock)
        self.reply: Any = None
        self.handles: list[Any] = []

    async def seen(self) -> Seen:
        """What the memory log records: a reply under the key or none, ended or not, with an
        error or not; the state it keeps is the same."""
        found = await self.a.find(KEY)
        if found is None:
            return Seen(S.ABSENT, 0, 0)
        if not found.ended:
            recorded = S.GENERATING
        else:
            recorded = S.COMPLETE if found.error is None else S.ENDED_IN_ERROR
        assert found.state is recorded
        return Seen(recorded, found.frames, 0)

    async def elapse(self, seconds: float, *, lease_too: bool) -> None:
        self.clock.now += seconds

    async def close(self) -> None:
        return None


class RedisStore:
    def __init__(self, server: RedisServer) -> None:
        prefix = f"lifecycle-{next(_prefixes)}:"
        self.a = RedisReplyLog(server.url, LIMITS, prefix=prefix)
        self.b = RedisReplyLog(server.url, LIMITS, prefix=prefix)
        self.reply: Any = None
        self.handles: list[Any] = []

    async def seen(self) -> Seen:
        """What the Redis log records, read here on its own: the ``meta`` hash, the lease,
        the log's last entry (an end entry ``e``, empty when complete), the cancel list."""
        lease, log_key, meta, cancel = self.a.keys(KEY)
        async with self.a.client.pipeline(transaction=True) as pipe:
            pipe.exists(meta).exists(lease).xrevrange(log_key, count=1).xlen(log_key)
            found, leased, tail, length, cancels = await pipe.llen(cancel).execute()
        last: dict[bytes, bytes] = tail[0][1] if tail else {}
        if not found:
            return Seen(S.ABSENT, length, cancels)
        if b"e" in last:
            return Seen(S.ENDED_IN_ERROR if last[b"e"] else S.COMPLETE, length - 1, cancels)
        return Seen(S.GENERATING if leased else S.LOST, length, cancels)

    async def elapse(self, seconds: float, *, lease_too: bool) -> None:
        """Time passes, as Redis sees it: every TTL of the reply's keys shorter by
        ``seconds`` (gone at none left); the lease's too when nobody refreshes it."""
        lease, log_key, meta, cancel = self.a.keys(KEY)
        client = self.a.client
        for name in (log_key, meta, cancel, *([lease] if lease_too else [])):
            left = await client.pttl(name)
            assert left != -1, f"{name} is kept for ever"
            if left == -2:  # no such key
                continue
            if left <= ms(seconds):
                await client.delete(name)
            else:
                await client.pexpire(name, left - ms(seconds))

    async def close(self) -> None:
        for handle in self.handles:
            if handle._refresher is not None:
                handle._refresher.cancel()
        for log in (self.a, self.b):
            await log.aclose()


async def _claim(store: Store) -> None:
    """The set-up's create: ``a``'s, whose handle the other inputs use."""
    store.reply = await store.a.create(KEY, "b" * 64, "lp")
    store.handles.append(store.reply)


async def _create(store: Store) -> None:
    store.handles.append(await store.b.create(KEY, "b" * 64, "lp"))


async def _append(store: Store, size: int) -> None:
    await store.reply.append(Entry(store.reply.frames + 1, b"x" * size))


async def _behind(store: Store) -> None:
    """The log loses the generator's last write (as a failover that promotes a replica
    which had not received it): the handle believes it wrote one frame more, then writes
    the next."""
    store.reply._last += 1
    await _append(store, 1)


async def _lapse(store: Store) -> None:
    """The generator goes silent (its refresher stopped) for a lease."""
    refresher = store.reply._refresher
    if refresher is not None:
        refresher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await refresher
    await store.elapse(LIMITS.lease_s, lease_too=True)


#: Each input, as a log's callers make it (``a``'s handle writes; ``b`` claims, relays).
DRIVE: dict[ReplyInput, Callable[[Store], Awaitable[object]]] = {
    I.CREATE: _create,
    I.APPEND: lambda store: _append(store, 1),
    I.OVERFLOW: lambda store: _append(store, LIMITS.max_bytes + 1),
    I.BEHIND: _behind,
    I.END: lambda store: store.reply.end(),
    I.END_IN_ERROR: lambda store: store.reply.end(Reason.REPLY_ABANDONED.value),
    I.REFRESH: lambda store: store.reply._refreshed(False),
    I.LAPSE: _lapse,
    I.REQUEST_CANCEL: lambda store: store.b.request_cancel(KEY, 0),
    I.EXPIRE: lambda store: store.elapse(LIMITS.ttl_s, lease_too=False),
    I.EVICT: lambda store: store.a.create(OTHER, "b" * 64, "lp"),
}
#: How ``a`` puts the reply in each state: the table's moves that lead there (an absent one
#: was there once: ``a``'s handle outlives it).
SET_UP: dict[ReplyState, tuple[ReplyInput, ...]] = {
    S.ABSENT: (I.CREATE, I.END, I.EXPIRE),
    S.GENERATING: (I.CREATE,),
    S.COMPLETE: (I.CREATE, I.APPEND, I.END),
    S.ENDED_IN_ERROR: (I.CREATE, I.APPEND, I.END_IN_ERROR),
    S.LOST: (I.CREATE, I.APPEND, I.LAPSE),
}


async def set_up(store: Store, state: ReplyState) -> Seen:
    for move in SET_UP[state]:
        await (_claim(store) if move is I.CREATE else DRIVE[move](store))
    seen = await store.seen()
    assert seen.state is state
    return seen


@dataclass(frozen=True)
class Outcome:
    before: Seen
    after: Seen
    answer: object
    #: What the input raised: the exception's name, and its reason when it has one.
    raised: str | None


async def drive(store: Store, state: ReplyState, event: ReplyInput) -> Outcome:
    before = await set_up(store, state)
    answer: object = None
    raised = None
    try:
        answer = await DRIVE[event](store)
    except (ReplyBusy, RuntimeError) as refused:
        raised = type(refused).__name__
    except (ReplyLogFailed, RequestRefused) as failed:
        raised = f"{type(failed).__name__}:{failed.reason.value}"
    return Outcome(before, await store.seen(), answer, raised)


def moved(event: ReplyInput, out: Outcome) -> bool:
    """Whether the input made a move: the state changed, or the move that keeps it did its
    work (a frame logged, a ``Cancel`` queued, the lease refreshed)."""
    if out.after.state is not out.before.state:
        return True
    if event is I.APPEND:
        return out.after.frames == out.before.frames + 1
    if event is I.REQUEST_CANCEL:
        return out.after.cancels == out.before.cancels + 1
    return event is I.REFRESH and out.answer is True


def raised(state: ReplyState, event: ReplyInput) -> str | None:
    """What a log raises, as it always has, for an input the table moves by (past a bound:
    the log has ended the reply) or refuses."""
    if REPLY.target(state, event) is not None:
        ended = {I.OVERFLOW: "reply_log_limit", I.BEHIND: "reply_log_behind"}.get(event)
        return f"ReplyLogFailed:{ended}" if ended else None
    if event is I.CREATE:
        return "ReplyBusy"
    writes = (I.APPEND, I.OVERFLOW, I.BEHIND, I.END, I.END_IN_ERROR)
    if event in writes and state is S.LOST:
        return "ReplyLogFailed:generator_lost"  # its lease lapsed: its writes land nowhere
    if event in (I.APPEND, I.OVERFLOW, I.BEHIND):
        return "RuntimeError"  # a write to an ended reply
    if event is I.EVICT and state is S.GENERATING:
        return "RequestRefused:stream_limit"
    return None  # ended already (the first end wins), or no lease, relay or TTL to act on


def logs_of(state: ReplyState, event: ReplyInput) -> list[str]:
    """The logs that have the state and the input."""
    found = []
    if state is not S.LOST and event not in SHARED_LOG_ONLY:
        found.append("memory")
    if event not in MEMORY_LOG_ONLY:
        found.append("redis")
    return found


CASES = [(state, event) for state in S for event in I if logs_of(state, event)]


def test_every_input_has_a_way_to_drive_it_and_each_log_lacks_what_the_table_says() -> None:
    assert set(SET_UP) == set(S) and set(DRIVE) == set(I)
    # A reply is lost only when its lease lapses: never in the memory log, which has none.
    assert [pair for pair, target in TRANSITIONS.items() if target is S.LOST] == [
        (S.GENERATING, I.LAPSE)
    ]
    assert SHARED_LOG_ONLY.isdisjoint(MEMORY_LOG_ONLY)
    assert len(CASES) == len(S) * len(I) - 1  # lost, evict: neither log has both


@pytest.mark.parametrize(("state", "event"), CASES, ids=[f"{s}-{e}" for s, e in CASES])
def test_each_log_moves_a_reply_as_the_table_says(
    request: pytest.FixtureRequest, state: ReplyState, event: ReplyInput
) -> None:
    outcomes: dict[str, Outcome] = {}
    for name in logs_of(state, event):
        store: Store = (
            MemoryStore() if name == "memory" else RedisStore(request.getfixturevalue("redis"))
        )

        async def scenario(store: Store = store) -> Outcome:
            try:
                return await drive(store, state, event)
            finally:
                await store.close()

        out = outcomes[name] = asyncio.run(asyncio.wait_for(scenario(), 30))
        target = REPLY.target(state, event)
        if target is None:
            assert not moved(event, out) and out.after == out.before, (name, out)
        else:
            assert moved(event, out) and out.after.state is target, (name, out)
        assert out.raised == raised(state, event), (name, out)
    verdicts = {(o.after.state, moved(event, o), o.raised) for o in outcomes.values()}
    assert len(verdicts) == 1, outcomes  # the two logs agree


#: The table's inputs each Lua script makes (``scripts``' comments say which).
SCRIPT_INPUTS: dict[str, tuple[ReplyInput, ...]] = {
    "CREATE": (I.CREATE,),
    "WRITE": (I.APPEND, I.OVERFLOW, I.BEHIND, I.END, I.END_IN_ERROR),
    "REFRESH": (I.REFRESH,),
    "CANCEL": (I.REQUEST_CANCEL,),
}
#: The scripts that only read (a lookup's ``FIND``, a follower's ``FOLLOW``): no input.
READ_ONLY = ("FIND", "FOLLOW")
#: The commands a read-only script may call.
READING_COMMANDS = {"HGETALL", "EXISTS", "XREVRANGE", "XRANGE"}


def test_the_read_only_scripts_call_only_reading_commands() -> None:
    for name in READ_ONLY:
        called = set(re.findall(r"redis\.call\('([A-Z]+)'", lua_scripts()[name]))
        assert called and called <= READING_COMMANDS, (name, called)


#: The script's field and value of each input that writes an entry.
WRITTEN = {
    I.APPEND: ("d", "x"),
    I.OVERFLOW: ("e", Reason.REPLY_LOG_LIMIT.value),
    I.BEHIND: ("d", "x"),
    I.END: ("e", ""),
    I.END_IN_ERROR: ("e", Reason.REPLY_ABANDONED.value),
}


def lua_scripts() -> dict[str, str]:
    return {
        name: value
        for name, value in vars(scripts).items()
        if name.isupper() and isinstance(value, str) and "redis.call" in value
    }


async def run_script(store: RedisStore, event: ReplyInput) -> object:
    """The script of ``event``, run alone with the arguments the log gives it (``a``'s
    token and its next entry for a write; a new token for a create)."""
    log, reply = store.a, store.reply
    keys, (notify, cancels) = log.keys(KEY), log.channels(KEY)
    lease_ms, expire_ms = ms(LIMITS.lease_s), ms(LIMITS.lease_s + LIMITS.ttl_s)
    if event is I.CREATE:
        return await log.scripts.create(
            keys=keys, args=["another-token", lease_ms, expire_ms, "b" * 64, "lp", ""]
        )
    if event is I.REFRESH:
        answer = await log.scripts.refresh(keys=keys, args=[reply._token, lease_ms, expire_ms, 0])
        return answer[0] == 1
    if event is I.REQUEST_CANCEL:
        args = ["alice", expire_ms, MAX_CANCEL_REQUESTS, cancels]
        return await log.cancel_script(keys=[keys[0], keys[3]], args=args)
    field, value = WRITTEN[event]
    # A write found behind: its generator wrote one frame more than the log holds.
    sequence = reply.frames + (2 if event is I.BEHIND else 1)
    args = [reply._token, f"0-{sequence}", field, value, LIMITS.max_frames + 1, expire_ms]
    behind = Reason.REPLY_LOG_BEHIND.value
    answer = await log.scripts.write(keys=keys, args=[*args, notify, f"0-{sequence - 1}", behind])
    return answer == BEHIND if event is I.BEHIND else answer


def test_every_script_is_checked_and_the_inputs_no_script_makes_are_redis_s_own() -> None:
    assert set(SCRIPT_INPUTS) | set(READ_ONLY) == set(lua_scripts())
    scripted = {event for inputs in SCRIPT_INPUTS.values() for event in inputs}
    # A lease lapses and keys expire by their TTLs (PX, PEXPIRE); the Redis log evicts none.
    assert set(I) - scripted == {I.LAPSE, I.EXPIRE, I.EVICT}


@pytest.mark.parametrize("script", list(SCRIPT_INPUTS))
def test_each_script_makes_exactly_the_table_s_moves_of_its_inputs(
    redis: RedisServer, script: str
) -> None:
    """From every state, each of the script's inputs: the moves it made, (state, input) ->
    state, are the table's for those inputs, no more and no fewer; where it made none,
    nothing of the reply changed (a write whose entry is the last one already answers done,
    as a retry: it writes nothing)."""

    async def one(state: ReplyState, event: ReplyInput) -> Outcome:
        store = RedisStore(redis)
        try:
            before = await set_up(store, state)
            answer = await run_script(store, event)
            return Outcome(before, await store.seen(), answer == 1 or answer is True, None)
        finally:
            await store.close()

    made = set()
    for state in S:
        for event in SCRIPT_INPUTS[script]:
            out = asyncio.run(asyncio.wait_for(one(state, event), 30))
            if moved(event, out):
                assert out.answer is True, (state, event, out)
                made.add((state, event, out.after.state))
            else:
                assert out.after == out.before, (state, event, out)
    expected = {
        (state, event, target)
        for (state, event), target in TRANSITIONS.items()
        if event in SCRIPT_INPUTS[script]
    }
    assert made == expected


def test_the_scripts_read_a_state_only_as_the_table_records_it() -> None:
    """The states, as the Redis log records them: the lease held or not (``EXISTS``,
    ``GET``: generating, lost), the log's last entry an end entry ``e`` or not, and that
    entry empty (complete) or not (ended in error). The scripts compare nothing else."""
    source = "\n".join(lua_scripts().values())
    compared = set(re.findall(r"(?:==|~=)\s*'([^']*)'", source))
    assert compared == {"e", ""}
    assert set(re.findall(r"redis\.call\('(EXISTS|GET)', KEYS\[(\d)\]\)", source)) == {
        ("EXISTS", "1"),
        ("GET", "1"),
    }
