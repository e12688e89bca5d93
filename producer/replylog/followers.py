"""The readers of the Redis reply log on one replica: one follower per reply, shared.

Every delivery of a reply from the shared log (``producer.replylog.redis_log``) is a reader
of it. On one replica, all the readers of one reply (its ``ReplyKey``: identity and
stream id) are fed by one ``Follower``: one task that follows the reply's stream in
Redis into one in-memory list of the reply's frames, and wakes its readers when the list
grows or the reply ends. Each reader walks the list with its own cursor, from its
``resume_after``: a slow reader holds nobody back, and nothing is copied per reader. The
list holds at most the reply's own frames (the log's bounds: ``--reply-log-max-frames``,
``--reply-log-max-bytes``), read from the reply's first frame, so a reader that joins
late, or resumes from any point, finds every frame after its point there.

How a follower waits: it subscribes to the reply's ``notify`` channel on the replica's
one pub/sub connection (``producer.replylog.notify``; the write script publishes every
entry there) *before* its first read, then loops: read what follows its last entry with
one non-blocking ``XREAD`` (up to ``READ_COUNT`` entries, at once again when it got that
many), then wait for a notification or a quarter lease, whichever comes first. When no
notification came, its next read is a poll: the ``XREAD`` and the lease's ``EXISTS`` in
one script (``FOLLOW``), so a lost notification, or the pub/sub connection lost, costs a
quarter lease, never a frame. No follower holds a connection while it waits: the
pool's connections carry short commands only, so ``--reply-log-connections`` bounds the
Redis commands in flight at once, not the replies read.

A follower ends when it reads the reply's end entry, when the reply's lease is gone
with no end entry (``generator_lost``: within a quarter lease of the lapse), when Redis
fails (``reply_log_unavailable``) or when its last reader leaves; a follower that ended
in error is not reused (the next reader starts a new one: a reply generated again is
read afresh).

The bounds (``ReaderLimits``): a reply is *read here* from the first admission of one of
its readers until its last reader is gone (``hold``); at most ``replies``
(``--reply-log-replies-read``) are read here at once, and at most ``per_identity``
(``--reply-log-replies-read-per-identity``) of one caller's, so one caller can never
take the room another needs. A delivery that would start reading one more reply past
either bound is refused ``reply_log_busy`` before anything of the reply is claimed
(``producer.claims``); a reader of a reply read here already is never refused. A
follower's read that finds no connection of the pool free waits (redis-py's
``BlockingConnectionPool``, at most the log's timeout, then ``reply_log_unavailable``);
it never fails ``MaxConnectionsError``.

Its connections are named ``replywire-readers`` (``CLIENT SETNAME``), as the lookups'
(``replywire-lookups``), the generations' (``replywire-writers``) and the pub/sub one
(``replywire-notify``) are: ``CLIENT LIST`` tells them apart.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import redis.asyncio as aioredis
import structlog

from replywire.producer.redis_clients import through_failover
from replywire.producer.replylog.interface import Entry, LogEnded, LogLimits, ReaderLimits, ReplyKey
from replywire.producer.replylog.notify import Notifier
from replywire.producer.replylog.scripts import FOLLOW, Entries, entries_of
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason

#: The longest ``aclose`` waits for the followers to end when cancelled.
STOP_WAIT_S: Final = 2.0
#: Entries one read of a follower takes at most.
READ_COUNT: Final = 256
READERS_CLIENT_NAME: Final = "replywire-readers"


def _sequence(entry_id: bytes) -> int:
    return int(entry_id.decode().partition("-")[2])


class Follower:
    """The one reader of a reply's stream in Redis on this replica, and its frames so far."""

    def __init__(
        self,
        look: Any,
        client: Any,
        notifier: Notifier,
        keys: list[str],
        channel: str,
        limits: LogLimits,
    ) -> None:
        #: ``FOLLOW`` registered on the readers' client: a poll's read and lease, together.
        self._look = look
        self._client = client
        self._notifier = notifier
        self._lease, self._log_key = keys[0], keys[1]
        self._channel = channel
        #: The longest it waits for a notification before it looks itself (and at the lease).
        self._poll_s = limits.lease_s / 4
        #: How long a read rides a Cluster's failover: a lease, as the generator's writes.
        self._failover_s = limits.lease_s
        #: The reply's frames read so far, in order: ``entries[i].sequence == i + 1``.
        self.entries: list[Entry] = []
        self.ended = False
        #: How it ended: None (complete, or not yet), else the ending's reason code.
        self.error: str | None = None
        #: The readers walking ``entries`` now.
        self.readers = 0
        self._changed = asyncio.Event()
        #: Set by a notification on the reply's channel (or one that may have been missed).
        self._woken = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        #: Reads it made, and of them the ones that also looked at the lease (polls).
        self.reads = 0
        self.polls = 0

    def start(self, name: str) -> asyncio.Task[None]:
        self.task = asyncio.create_task(self._run(), name=name)
        return self.task

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _end(self, error: str | None) -> None:
        self.ended, self.error = True, error
        self._notify()

    async def _run(self) -> None:
        try:
            await self._notifier.subscribe(self._channel, self._woken.set)
            await self._follow()
        except LogEnded as ended:
            self._end(str(ended))
        except aioredis.RedisError as error:
            structlog.get_logger().warning("reply_log_read_failed", detail=type(error).__name__)
            self._end(Reason.REPLY_LOG_UNAVAILABLE.value)
        finally:
            self._notifier.unsubscribe(self._channel, self._woken.set)
            if not self.ended:  # stopped: its last reader left
                self._end(Reason.REPLY_LOG_UNAVAILABLE.value)

    async def _read(self, last: str, poll: bool) -> tuple[Entries, bool]:
        """What follows ``last`` (one non-blocking ``XREAD``), and whether the lease is
        held (looked at with it, atomically, in the ``FOLLOW`` script when ``poll``; else
        taken as held)."""
        self.reads += 1
        if not poll:
            batch = await through_failover(
                self._client,
                lambda: self._client.xread({self._log_key: last}, count=READ_COUNT),
                self._failover_s,
            )
            return (batch[0][1] if batch else []), True
        self.polls += 1
        keys = [self._lease, self._log_key]
        raw, leased = await through_failover(
            self._client, lambda: self._look(keys=keys, args=[last, READ_COUNT]), self._failover_s
        )
        return entries_of(raw), bool(leased)

    async def _follow(self) -> None:
        last, poll = "0-0", True
        while True:
            self._woken.clear()  # a write after this wakes the wait below
            entries, leased = await self._read(last, poll)
            for entry_id, fields in entries:
                if b"e" in fields:
                    self._end(fields[b"e"].decode() or None)
                    return
                sequence = _sequence(entry_id)
                if sequence != len(self.entries) + 1:  # never: the log is written in order
                    raise LogEnded(Reason.REPLY_LOG_UNAVAILABLE)
                last = entry_id.decode()
                self.entries.append(Entry(sequence, fields[b"d"]))
            if entries:
                self._notify()
            if not leased and len(entries) < READ_COUNT:
                # The lease is gone and, read with it, no end entry: the end entry is
                # written with the lease's removal, so the generator is lost.
                raise LogEnded(Reason.GENERATOR_LOST)
            if len(entries) >= READ_COUNT:
                poll = False  # more may be there already
                continue
            try:
                async with asyncio.timeout(self._poll_s):
                    await self._woken.wait()
                poll = False
            except TimeoutError:
                poll = True  # no word for a while: look, and at the lease

    async def after(self, after: int) -> AsyncIterator[Entry]:
        """The reply's frames with sequence > ``after`` as they come; ends as the reply
        ended (``LogEnded`` with its error; at once when ``after`` is at or past the end of
        an ended reply)."""
        index = max(after, 0)
        while True:
            changed = self._changed
            if index < len(self.entries):
                batch = self.entries[index:]
                index += len(batch)
                for entry in batch:
                    yield entry
                continue
            if self.ended:
                if self.error is not None:
                    raise LogEnded(self.error)
                return
            await changed.wait()


class _Read:
    """A reply read here: its holders (deliveries and readers) and its current follower."""

    __slots__ = ("follower", "holders")

    def __init__(self) -> None:
        self.holders = 0
        self.follower: Follower | None = None


class Followers:
    """The replies this replica reads from the shared log, bounded (``ReaderLimits``)."""

    def __init__(
        self,
        client: Any,
        notifier: Notifier,
        limits: ReaderLimits,
        log_limits: LogLimits,
        keys_of: Callable[[ReplyKey], list[str]],
        channel_of: Callable[[ReplyKey], str],
    ) -> None:
        self.limits = limits
        self._client = client
        self._look = client.register_script(FOLLOW)
        self._notifier = notifier
        self._channel_of = channel_of
        self._log_limits = log_limits
        self._keys_of = keys_of
        self._reads: dict[ReplyKey, _Read] = {}
        self._by_identity: collections.Counter[str] = collections.Counter()
        #: Follower tasks not finished (each holds a connection only while it reads).
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def replies(self) -> int:
        """Replies read here now."""
        return len(self._reads)

    @property
    def active(self) -> int:
        """Followers running now (none holds a connection while it waits)."""
        return len(self._tasks)

    def hold(self, key: ReplyKey) -> Callable[[], None]:
        """Admit a reader of the key's reply (a delivery that will read it): at once when it
        is read here already, else within the bounds, else ``RequestRefused``
        (``reply_log_busy``). Returns its release (idempotent)."""
        read = self._reads.get(key)
        if read is None:
            limits = self.limits
            if len(self._reads) >= limits.replies:
                raise RequestRefused(
                    Reason.REPLY_LOG_BUSY, f"{len(self._reads)} replies read from the log"
                )
            if self._by_identity[key.identity] >= limits.per_identity:
                raise RequestRefused(
                    Reason.REPLY_LOG_BUSY, f"{limits.per_identity} of the caller's replies read"
                )
            read = self._reads[key] = _Read()
            self._by_identity[key.identity] += 1
        read.holders += 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            read.holders -= 1
            if read.holders == 0:
                del self._reads[key]
                self._by_identity[key.identity] -= 1
                if not self._by_identity[key.identity]:
                    del self._by_identity[key.identity]
                if read.follower is not None:
                    read.follower.stop()

        return release

    def _follower(self, key: ReplyKey, read: _Read) -> Follower:
        follower = read.follower
        if follower is None or (follower.ended and follower.error is not None):
            follower = read.follower = Follower(
                self._look,
                self._client,
                self._notifier,
                self._keys_of(key),
                self._channel_of(key),
                self._log_limits,
            )
            task = follower.start(f"follow-{key}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return follower

    async def read(self, key: ReplyKey, after: int) -> AsyncIterator[Entry]:
        """The key's reply's frames after ``after``, from its one follower here; a reader
        past the bounds ends ``LogEnded`` (``reply_log_busy``) before anything is read."""
        try:
            release = self.hold(key)
        except RequestRefused as refused:
            raise LogEnded(refused.reason) from refused
        try:
            read = self._reads[key]
            follower = self._follower(key, read)
            follower.readers += 1
            try:
                async for entry in follower.after(after):
                    yield entry
            finally:
                follower.readers -= 1
                if not follower.readers:
                    follower.stop()
                    if read.follower is follower:
                        read.follower = None
        finally:
            release()

    async def aclose(self) -> None:
        """Stop every follower: bounded, whatever a task does with its cancellation (a read
        under redis-py's timeout was seen to swallow one: ``producer.replylog.notify``)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_WAIT_S)
