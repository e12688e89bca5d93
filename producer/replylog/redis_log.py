"""The reply log in Redis Streams (``--reply-log redis://HOST:PORT/DB``): replicas share it.

Key layout, under a prefix (default ``replywire:replies:``), per reply: its key
(``interface.ReplyKey``: the caller's identity and the stream id, each percent-encoded,
joined by ``/``) in braces, a Redis Cluster hash tag that keeps a reply's keys, which
every script touches together, in one slot::

    PREFIX{IDENTITY/ID}:meta   hash    binding (the binding hash), wire; first_span
                                       (the creating delivery's span as a W3C
                                       ``traceparent``, when its replica traced: a
                                       resume on any replica links to it)
    PREFIX{IDENTITY/ID}:log    stream  one entry per frame, id ``0-SEQUENCE``, field ``d``
                                       = its wire bytes; then one end entry, field ``e``
                                       = "" (the terminal frame was the last entry) or
                                       the error reason code
    PREFIX{IDENTITY/ID}:lease  string  the generating process's token, ``SET ... PX``
    PREFIX{IDENTITY/ID}:cancel list    ``Cancel`` requests that reached another replica:
                                       the generator pops them (``LPOP``) and stops;
                                       each the caller's name, or, from a replica that
                                       traces, a JSON object ``{"caller": NAME,
                                       "traceparent": ITS CANCEL SPAN}``

and two pub/sub channels (not keys; in the same hash tag, so that Redis Cluster's sharded
pub/sub could carry them later: plain ``PUBLISH`` / ``SUBSCRIBE`` now)::

    PREFIX{IDENTITY/ID}:notify         each entry written (its id), by the write script
    PREFIX{IDENTITY/ID}:cancels        each ``Cancel`` relayed, by the cancel script

Another identity's Open of the same stream id names other keys: it never attaches to,
reads, blocks or learns of this reply.

The generator holds the lease: it claims it in the create script (``EXISTS``, then
``SET ... PX``, one script: nothing comes between) when it creates the reply, and
refreshes it every third of ``lease_s``; every write (a frame, the end) is
one Lua script that first checks the lease is still its own, so a generator that lost
its lease writes nothing more (its write raises ``ReplyLogFailed``: ``generator_lost``;
a Redis error: ``reply_log_unavailable``), and publishes the entry on the reply's
``notify`` channel. The readers of a reply on one replica share one follower of its
stream (``producer.replylog.followers``: told by the replica's one pub/sub connection,
``producer.replylog.notify``, it reads what is new with one non-blocking ``XREAD``, whatever
the number of readers), which follows it to its end entry; a
read from at or past the end of an ended reply ends once the follower reached the end,
as the memory log's does; the readers of a reply whose lease is gone with no end entry
end with ``generator_lost`` (at most ``lease_s`` plus a quarter of it after the
generator's last refresh); readers whose follower cannot reach Redis end with
``reply_log_unavailable``. Another process may then create the reply anew (a source
that regenerates): the create claims the lease first, then empties the stream. These
moves, and every other of a reply, are the table of ``producer.replylog.states``, which
the scripts make (a found reply's state is read from its meta, lease and last entry).

A ``Cancel`` that lands on a replica that does not generate the reply is relayed through
the log (``request_cancel``): the caller's name is pushed on the cancel list while the
lease is held and published on the reply's ``cancels`` channel; the generator, whose
replica subscribes to it, pops the list (``LPOP``) at once, and at each lease refresh
too (inside the refresh script: a lost message costs a third of a lease at most); the
relaying replica waits (bounded, ``RELAY_CANCEL_WAIT_S``) for the reply's end entry. The
relay carries the W3C ``traceparent`` of the relaying replica's ``Cancel`` span when it
traces (at most ``MAX_RELAYED_TRACEPARENT_CHARS``; nothing when it does not), so the
generator's stop is in the caller's trace (``producer/spans.py``).

Connections: nothing waits in Redis (no ``BLPOP``, no ``XREAD BLOCK``): every pooled
command is short, and whoever waits for news waits on the replica's one pub/sub
connection (``replywire-notify``). Three pools, each a ``BlockingConnectionPool`` (a
command that finds none free waits at most ``TIMEOUT_S``, then fails, a ``RedisError``:
``reply_log_unavailable``, never ``MaxConnectionsError``), so that no reader makes a
generation wait: the generations' (``replywire-writers``,
``--reply-log-writer-connections``: the claim, the writes, the lease refreshes, taking a
relayed ``Cancel``), the lookups' (``replywire-lookups``: ``LOOKUP_CONNECTIONS``, every
Open's ``find`` and a relayed ``Cancel``), and the followers' (``replywire-readers``:
``--reply-log-connections``). Replies read here at once are bounded apart, a follower
costing memory, not a connection (``--reply-log-replies-read``, and
``--reply-log-replies-read-per-identity`` of one caller's; past either, a delivery that
would read one more is refused ``reply_log_busy``).

Bounds: frames and bytes per reply (over either the reply ends ``reply_log_limit``;
``MAXLEN`` as a backstop), and time: while a reply is generated its keys expire
``lease_s + ttl_s`` after the last refresh, once it ended ``ttl_s`` after its end
(``EXPIRE``). ``max_replies`` is the memory log's bound only: here the keys expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable
from typing import Any, Final

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisClusterException

from replywire.producer.redis_clients import async_client, through_failover
from replywire.producer.replylog.durability import Durability
from replywire.producer.replylog.followers import READERS_CLIENT_NAME, Followers
from replywire.producer.replylog.interface import (
    LogLimits,
    ReaderLimits,
    ReplyBusy,
    ReplyKey,
    ReplyLogFailed,
)
from replywire.producer.replylog.notify import NOTIFY_CLIENT_NAME, Notifier
from replywire.producer.replylog.redis_reply import RedisReply
from replywire.producer.replylog.scripts import (
    CANCEL,
    FIND,
    MAX_CANCEL_REQUESTS,
    Entries,
    Scripts,
    bounded,
    found_of,
    ms,
    relay_value,
)
from replywire.producer.replylog.states import ReplyInput, ReplyState, allowed
from replywire.producer.store_urls import (
    NOT_A_CLUSTER,
    ClusterNode,
    Store,
    parse_store,
    refuse_cluster,
)
from replywire.shared.reasons import Reason

DEFAULT_PREFIX: Final = "replywire:replies:"
TIMEOUT_S: Final = 5.0
#: Connections of the lookups' pool (every Open's ``find``, a relayed ``Cancel``).
LOOKUP_CONNECTIONS: Final = 8
WRITERS_NAME: Final = "replywire-writers"
LOOKUPS_NAME: Final = "replywire-lookups"
#: How often a replica that relayed a ``Cancel`` looks whether the reply ended.
CANCEL_POLL_S: Final = 0.05


class RedisReplyLog:
    """Replies in Redis Streams, shared by every producer given the same URL and prefix."""

    def __init__(
        self,
        url: str | Store,
        limits: LogLimits | None = None,
        *,
        prefix: str = DEFAULT_PREFIX,
        readers: ReaderLimits | None = None,
        durability: Durability | None = None,
    ) -> None:
        self.limits = limits or LogLimits()
        #: What each write waits for (``--reply-log-durability``).
        self.durability = durability or Durability()
        self.prefix = prefix
        self.store = url if isinstance(url, Store) else parse_store(url)
        # Every command is short (nothing blocks in Redis: waiters are told by pub/sub).
        # Typed Any: redis-py's command stubs answer bytes | str | Awaitable unions.
        # One retry at once, on a new connection (a pooled one may be stale after a Redis
        # restart); no backoff: a store that is gone fails the reply now, not in seconds
        # (a cluster's client backs off: it reads the slots again, producer.redis_clients).
        # Writes are idempotent (_WRITE), so a retried one never logs an entry twice.
        self.readers = readers or ReaderLimits()

        def pool(name: str, size: int, retries: int = 1) -> Any:
            """A pool of ``size`` connections named ``name``: a command that finds none free
            waits at most ``TIMEOUT_S``, then fails (a ``RedisError``: the caller's
            ``reply_log_unavailable``), never ``MaxConnectionsError``."""
            return async_client(
                self.store, name=name, size=size, timeout_s=TIMEOUT_S, retries=retries
            )

        #: The generations' commands (claim, writes, lease refreshes, taking relayed
        #: Cancels): a pool of their own, so that no reader ever makes them wait.
        self.client: Any = pool(WRITERS_NAME, self.readers.writer_connections)
        self.scripts = Scripts(self.client)
        #: What every Open asks (``find``) and a relayed ``Cancel``: a small pool.
        self.lookups: Any = pool(LOOKUPS_NAME, LOOKUP_CONNECTIONS)
        self.cancel_script: Any = self.lookups.register_script(CANCEL)
        #: ``FIND`` on the lookups' pool (the writers' has its own in ``scripts``).
        self.lookup_find: Any = self.lookups.register_script(FIND)
        #: The followers' reads (``--reply-log-connections``), each a short command.
        self.reader_client: Any = pool(READERS_CLIENT_NAME, self.readers.connections)
        #: The one pub/sub connection that tells followers and generations here that a
        #: reply changed (``producer.replylog.notify``).
        self.notify_client: Any = pool(NOTIFY_CLIENT_NAME, 1, retries=0)
        self.notifier = Notifier(self.notify_client)
        self.followers = Followers(
            self.reader_client,
            self.notifier,
            self.readers,
            self.limits,
            self.keys,
            lambda key: self.channels(key)[0],
        )

    def hold_reader(self, key: ReplyKey) -> Callable[[], None]:
        """Admit a delivery that will read the key's reply here (``Followers.hold``):
        ``RequestRefused`` (``reply_log_busy``) past ``--reply-log-replies-read`` replies
        read here, or the caller's ``--reply-log-replies-read-per-identity``."""
        return self.followers.hold(key)

    def keys(self, key: ReplyKey) -> list[str]:
        """The lease, log, meta and cancel keys of a reply."""
        base = f"{self.prefix}{{{key.token}}}:"
        return [base + "lease", base + "log", base + "meta", base + "cancel"]

    def channels(self, key: ReplyKey) -> tuple[str, str]:
        """The reply's pub/sub channels, in its hash tag: its log grew or ended
        (``notify``), a ``Cancel`` was relayed to its generator (``cancels``)."""
        base = f"{self.prefix}{{{key.token}}}:"
        return base + "notify", base + "cancels"

    async def check(self) -> None:
        """Raises ``redis.RedisError`` unless the server answers, ``ClusterNode`` if it is a
        Redis Cluster node named as a lone server (it would answer PING, then redirect
        most keys) or a lone server named as a cluster."""
        if self.store.cluster:
            try:
                await self.client.ping(target_nodes="all")  # every node the slots name
            except RedisClusterException as error:  # a lone server: "cluster mode is not enabled"
                raise ClusterNode(NOT_A_CLUSTER) from error
            return
        await self.client.ping()
        refuse_cluster(await self.client.info("cluster"))

    async def find(self, key: ReplyKey) -> RedisReply | None:
        return (await self._found(self.lookup_find, key))[1]

    async def _found(self, find: Any, key: ReplyKey) -> tuple[ReplyState, RedisReply | None]:
        """The key's reply's state (``states``: from its meta, its lease and its log's last
        entry, read together by ``FIND``) and a reader's snapshot of it (None: absent)."""
        keys = self.keys(key)[:3]
        try:
            # A read: safe to send again through a Cluster's failover (a lease's window).
            answer = await through_failover(
                self.client, lambda: find(keys=keys), self.limits.lease_s
            )
            fields, leased, tail = found_of(answer)
        except aioredis.RedisError as error:
            raise ReplyLogFailed(Reason.REPLY_LOG_UNAVAILABLE, type(error).__name__) from error
        if not fields:
            return ReplyState.ABSENT, None
        state = _state(leased, tail)
        reply = RedisReply(
            self,
            key,
            fields[b"binding"].decode(),
            fields[b"wire"].decode(),
            _ending(state, tail),
            _frames(tail),
        )
        reply.first_span = bounded(fields.get(b"first_span", b"").decode(errors="replace"))
        return state, reply

    async def create(
        self, key: ReplyKey, binding_sha256: str, wire: str, first_span: str | None = None
    ) -> RedisReply:
        state, _ = await self._found(self.scripts.find, key)
        if allowed(state, ReplyInput.CREATE) is None:  # the script refuses it too
            raise ReplyBusy(f"reply {key} is being generated or complete")
        token = secrets.token_hex(16)
        try:
            claimed = await self.scripts.create(
                keys=self.keys(key),
                args=[
                    token,
                    ms(self.limits.lease_s),
                    ms(self.limits.lease_s + self.limits.ttl_s),
                    binding_sha256,
                    wire,
                    bounded(first_span) or "",
                ],
            )
        except aioredis.RedisError as error:
            raise ReplyLogFailed(Reason.REPLY_LOG_UNAVAILABLE, type(error).__name__) from error
        if not claimed:
            raise ReplyBusy(f"reply {key} is being generated elsewhere")
        reply = RedisReply(self, key, binding_sha256, wire)
        reply.first_span = bounded(first_span)
        reply.generate(token)
        return reply

    async def request_cancel(
        self, key: ReplyKey, wait_s: float, traceparent: str | None = None
    ) -> bool:
        """Relay the key's caller's ``Cancel`` (with ``traceparent``, this process's
        ``Cancel`` span, when it traces) to the replica generating the reply; True once
        the reply ended ``consumer_cancelled`` within ``wait_s``. False when nobody
        generates it, the generator did not stop in time, or Redis fails."""
        lease, _, _, cancel = self.keys(key)
        expire_ms = ms(self.limits.lease_s + self.limits.ttl_s)
        try:
            args = [
                relay_value(key.identity, traceparent),
                expire_ms,
                MAX_CANCEL_REQUESTS,
                self.channels(key)[1],
            ]
            if not await self.cancel_script(keys=[lease, cancel], args=args):
                return False
            return await self._ended_cancelled(key, wait_s)
        except aioredis.RedisError as error:
            structlog.get_logger().warning("cancel_not_relayed", detail=type(error).__name__)
            return False

    async def _ended_cancelled(self, key: ReplyKey, wait_s: float) -> bool:
        """Whether the reply ends ``consumer_cancelled`` within ``wait_s`` (polled)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + wait_s
        while True:
            _, leased, tail = found_of(await self.lookup_find(keys=self.keys(key)[:3]))
            last: dict[bytes, bytes] = tail[0][1] if tail else {}
            if b"e" in last or not leased:
                return last.get(b"e") == Reason.CONSUMER_CANCELLED.value.encode()
            if loop.time() >= until:
                return False
            await asyncio.sleep(CANCEL_POLL_S)

    async def aclose(self) -> None:
        await self.followers.aclose()
        await self.notifier.aclose()
        for client in (self.client, self.lookups, self.reader_client, self.notify_client):
            with contextlib.suppress(aioredis.RedisError):
                await client.aclose()


Tail = Entries


def _frames(tail: Tail) -> int:
    """Frames logged, from the log's last entry (an end entry follows the last frame)."""
    if not tail:
        return 0
    entry_id, fields = tail[0]
    sequence = int(entry_id.decode().partition("-")[2])
    return sequence - 1 if b"e" in fields else sequence


def _state(leased: bool, tail: Tail) -> ReplyState:
    """A found reply's state, from its lease and its log's last entry: an end entry ``e``,
    empty once the terminal frame was the last entry; else the lease held or lapsed."""
    last: dict[bytes, bytes] = tail[0][1] if tail else {}
    if b"e" in last:
        return ReplyState.ENDED_IN_ERROR if last[b"e"] else ReplyState.COMPLETE
    return ReplyState.GENERATING if leased else ReplyState.LOST


def _ending(state: ReplyState, tail: Tail) -> str | None:
    """How a found reply ended: None while it is generated (or once it is complete), else
    the error reason code."""
    if state is ReplyState.ENDED_IN_ERROR:
        return tail[0][1][b"e"].decode()
    return Reason.GENERATOR_LOST.value if state is ReplyState.LOST else None
