"""A reply of the Redis reply log as one process holds it: a reader's snapshot (what
``find`` saw), or the generator's handle (``create``'s), which holds the reply's lease.

The generator's handle refreshes the lease every third of ``lease_s`` (``REFRESH``) and
writes each entry, a frame or the end, by the ``WRITE`` script, which checks the lease is
still its own first (``producer.replylog.scripts``); it takes the ``Cancel`` requests
other replicas relay through the log as soon as the reply's cancels channel says one
came (``producer.replylog.notify``), and at each refresh. The keys and what each script
does to them: ``producer.replylog.redis_log``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

import redis.asyncio as aioredis
import structlog

from replywire.producer.redis_clients import through_failover
from replywire.producer.replylog.durability import Durability, Mode, WaitShort, eval_and_wait
from replywire.producer.replylog.followers import Followers
from replywire.producer.replylog.interface import Entry, LogLimits, ReplyKey, ReplyLogFailed
from replywire.producer.replylog.notify import Notifier
from replywire.producer.replylog.scripts import (
    BEHIND,
    MAX_CANCEL_REQUESTS,
    WRITE,
    Scripts,
    found_of,
    ms,
    relayed_cancel,
)
from replywire.shared.errors import scrubbed_detail
from replywire.shared.reasons import Reason


class ReplyStore(Protocol):
    """What a reply's handle uses of the log that made it (``redis_log.RedisReplyLog``)."""

    limits: LogLimits
    scripts: Scripts
    client: Any
    durability: Durability
    followers: Followers
    notifier: Notifier

    def keys(self, key: ReplyKey) -> list[str]: ...

    def channels(self, key: ReplyKey) -> tuple[str, str]: ...


class RedisReply:
    """A reply in Redis: the generator's handle (``token`` set) or a reader's snapshot."""

    def __init__(
        self,
        log: ReplyStore,
        key: ReplyKey,
        binding_sha256: str,
        wire: str,
        error: str | None = None,
        frames: int = 0,
    ) -> None:
        self.key = key
        #: The creating delivery's span (``interface.LoggedReply.first_span``).
        self.first_span: str | None = None
        self.binding_sha256 = binding_sha256
        self.wire = wire
        self.error = error
        self._log = log
        self._keys = log.keys(key)
        self._token: str | None = None
        #: Frames logged: found so (a reader's snapshot), or written (the generator's).
        self._last = frames
        self._size = 0
        self._ended = False
        #: A frame whose write failed with no answer (it may be in the log or not): the end
        #: entry goes after it if it is (``end``).
        self._unsure: int | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._on_cancel: Callable[[str, str | None], None] | None = None

    @property
    def frames(self) -> int:
        return self._last

    def watch_cancel(self, on_cancel: Callable[[str, str | None], None]) -> None:
        """While this process generates the reply, call ``on_cancel(caller, traceparent)``
        for each ``Cancel`` another replica relays (see ``RedisReplyLog.request_cancel``)."""
        self._on_cancel = on_cancel

    def generate(self, token: str) -> None:
        """This process generates the reply: refresh its lease until it ends."""
        self._token = token
        self._refresher = asyncio.create_task(self._refresh(), name=f"lease-{self.key}")

    async def _refresh(self) -> None:
        """Refresh the lease every third of ``lease_s`` (taking the relayed ``Cancel``
        requests queued meanwhile with it); between refreshes, take them as soon as the
        reply's cancels channel says one came (no connection held while waiting)."""
        log, limits = self._log, self._log.limits
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()
        channel = log.channels(self.key)[1]
        watching = False
        try:
            while True:
                if self._on_cancel is not None and not watching:
                    watching = True  # left in ``finally`` even if stopped while subscribing
                    await log.notifier.subscribe(channel, woken.set)
                    await self._take_cancels()  # any relayed before the subscription
                until = loop.time() + limits.lease_s / 3
                while watching and (left := until - loop.time()) > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(left):
                            await woken.wait()
                    if woken.is_set():
                        woken.clear()
                        await self._take_cancels()
                if not watching:
                    await asyncio.sleep(limits.lease_s / 3)
                if not await self._refreshed(watching):
                    return
        finally:
            if watching:
                log.notifier.unsubscribe(channel, woken.set)

    async def _refreshed(self, take_cancels: bool) -> bool:
        """Refresh the lease (and take the relayed ``Cancel`` requests): False once it is
        not this process's any more."""
        limits = self._log.limits
        args = [
            self._token,
            ms(limits.lease_s),
            ms(limits.lease_s + limits.ttl_s),
            MAX_CANCEL_REQUESTS if take_cancels else 0,
        ]
        try:
            # Through a Cluster's failover for a third of a lease: the next refresh's turn.
            answer = await through_failover(
                self._log.client,
                lambda: self._log.scripts.refresh(keys=self._keys, args=args),
                limits.lease_s / 3,
            )
        except aioredis.RedisError as error:  # the next refresh may still make it
            structlog.get_logger().warning(
                "lease_refresh_failed", detail=scrubbed_detail(str(error))
            )
            return True
        if not answer or not answer[0]:
            return False
        self._relay(answer[1:])
        return True

    async def _take_cancels(self) -> None:
        """Take the relayed ``Cancel`` requests queued now (one ``LPOP``, never blocking)."""
        try:
            popped = await self._log.client.lpop(self._keys[3], MAX_CANCEL_REQUESTS)
        except aioredis.RedisError as error:  # the next refresh takes them
            structlog.get_logger().warning(
                "cancel_watch_failed", detail=scrubbed_detail(str(error))
            )
            return
        self._relay(popped or [])

    def _relay(self, requests: Sequence[bytes]) -> None:
        if self._on_cancel is None:
            return
        for value in requests:
            self._on_cancel(*relayed_cancel(value))

    async def _write(
        self, sequence: int, field: str, value: bytes | str, expire_s: float, *, wait: bool = True
    ) -> bool:
        """Write entry ``sequence`` (the lease's token first): True once written (or found
        written: a retry), False when the lease is not this process's; ``ReplyLogFailed``
        (``reply_log_behind``) when the log lost entries this process wrote (the script has
        ended the reply there). With ``--reply-log-durability`` (``wait``) it is done once
        the replicas asked for have it (``producer.replylog.durability``; fewer within
        the timeout: ``ReplyLogFailed``, ``reply_log_unavailable``)."""
        limits = self._log.limits
        args = [
            self._token,
            f"0-{sequence}",
            field,
            value,
            limits.max_frames + 1,
            ms(expire_s),
            self._log.channels(self.key)[0],
            f"0-{sequence - 1}",
            Reason.REPLY_LOG_BEHIND.value,
        ]
        durability = self._log.durability
        waits = durability.mode is not Mode.NONE and wait

        def write() -> Any:  # an awaitable of the script's answer
            if waits:
                return eval_and_wait(self._log.client, WRITE, self._keys, args, durability)
            return self._log.scripts.write(keys=self._keys, args=args)

        # Ridden through a Cluster's failover while the lease can still hold (the write is
        # idempotent: one found written already is done, and waited for again).
        try:
            written = await through_failover(self._log.client, write, limits.lease_s)
        except WaitShort as short:
            structlog.get_logger().warning(
                "reply_log_wait_short",
                stream_id=self.key.stream_id,
                sequence=sequence,
                confirmed=short.confirmed,
                wanted=durability.replicas,
            )
            raise ReplyLogFailed(
                Reason.REPLY_LOG_UNAVAILABLE,
                f"{short.confirmed} of {durability.replicas} replicas confirmed frame {sequence}",
            ) from short
        if written == BEHIND:
            self._ended = True
            self.error = Reason.REPLY_LOG_BEHIND.value
            if self._refresher is not None:
                self._refresher.cancel()
            raise ReplyLogFailed(
                Reason.REPLY_LOG_BEHIND,
                f"the log lost frames it had acknowledged: frame {sequence} found it behind",
            )
        return bool(written)

    async def append(self, entry: Entry, *, wait: bool = True) -> None:
        """Log the next frame (``wait``: with the durability's wait, when one is set)."""
        if self._ended or self._token is None:
            raise RuntimeError(f"reply {self.key} is not generated here")
        if entry.sequence != self._last + 1:
            raise ValueError(f"sequence {entry.sequence}, expected {self._last + 1}")
        limits = self._log.limits
        if entry.sequence > limits.max_frames or self._size + len(entry.data) > limits.max_bytes:
            await self.end(Reason.REPLY_LOG_LIMIT.value)
            raise ReplyLogFailed(
                Reason.REPLY_LOG_LIMIT,
                f"over {limits.max_frames} frames or {limits.max_bytes} bytes",
            )
        try:
            written = await self._write(entry.sequence, "d", entry.data, self._expire_s, wait=wait)
        except ReplyLogFailed as failed:
            if isinstance(failed.__cause__, WaitShort):  # logged; its replicas fell short
                self._last = entry.sequence
                self._size += len(entry.data)
            raise
        except aioredis.RedisError as error:
            self._unsure = entry.sequence
            raise ReplyLogFailed(Reason.REPLY_LOG_UNAVAILABLE, type(error).__name__) from error
        if not written:
            raise ReplyLogFailed(Reason.GENERATOR_LOST, "the lease is no longer this process's")
        self._last = entry.sequence
        self._size += len(entry.data)

    def log_now(self, entries: Sequence[Entry]) -> bool:
        return False  # every entry is a command to Redis: logged by extend and end

    async def extend(self, entries: Sequence[Entry]) -> None:
        # One batch, one wait: after its last entry (a replica that has it has every entry
        # written before it: replication keeps the master's order).
        for index, entry in enumerate(entries, 1):
            await self.append(entry, wait=index == len(entries))

    @property
    def _expire_s(self) -> float:
        return self._log.limits.lease_s + self._log.limits.ttl_s

    async def end(self, error: str | None = None) -> None:
        if self._ended or self._token is None:
            return
        self._ended = True
        self.error = error
        if self._refresher is not None:
            self._refresher.cancel()
        # Not written: its readers see the lease lapse (generator_lost) within a lease.
        try:
            await self._settle_unsure()
            # An ending in error is written without a wait: it stops the reply either way.
            written = await self._write(
                self._last + 1, "e", error or "", self._log.limits.ttl_s, wait=error is None
            )
        except ReplyLogFailed as failure:
            if failure.reason is not Reason.REPLY_LOG_UNAVAILABLE or error is not None:
                raise
            return  # complete in the log, its wait short (the record says so)
        except aioredis.RedisError as failure:
            raise ReplyLogFailed(Reason.REPLY_LOG_UNAVAILABLE, type(failure).__name__) from failure
        if not written:
            raise ReplyLogFailed(Reason.GENERATOR_LOST, "the lease is no longer this process's")

    async def _settle_unsure(self) -> None:
        """A frame whose write went unanswered: if the log has it as its last entry, the end
        entry goes after it (an end at its id would be taken for the frame's retry)."""
        if self._unsure is None:
            return
        unsure, self._unsure = self._unsure, None
        _, _, tail = found_of(
            await through_failover(
                self._log.client,
                lambda: self._log.scripts.find(keys=self._keys[:3]),
                self._log.limits.lease_s,
            )
        )
        if tail and tail[0][0] == f"0-{unsure}".encode():
            self._last = unsure

    def read(self, after: int) -> AsyncIterator[Entry]:
        """The reply's frames after ``after``, from this replica's one follower of it
        (``producer.replylog.followers``), shared with its other readers here."""
        return self._log.followers.read(self.key, max(after, 0))
