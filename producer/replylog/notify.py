"""One replica's pub/sub connection to the Redis reply log: who is told a reply changed.

The shared log's scripts (``producer.replylog.redis_log``) ``PUBLISH`` a short message on a
channel named for the reply whenever its log grows or ends (``PREFIX{TOKEN}:notify``) or a
``Cancel`` is relayed to its generator (``PREFIX{TOKEN}:cancels``), each inside the
reply's hash tag (Redis Cluster's sharded pub/sub, ``SPUBLISH`` / ``SSUBSCRIBE``, could
carry them later; plain ``PUBLISH`` / ``SUBSCRIBE`` for now). Per replica, one
``Notifier`` holds **one** connection (``replywire-notify``) subscribed to the channel of
every reply something here waits on (a follower of a reply read here, a generation
here waiting for a relayed ``Cancel``), and one listener task that reads it and wakes
whoever waits on a channel. One connection carries any number of subscriptions; nobody
holds a connection of a pool while waiting.

A notification only hastens what a waiter would do anyway: each waiter also looks on
its own every so often (a follower every quarter lease, a generation at each lease
refresh), so a lost message, or the connection lost, costs time, never a frame. When the
connection fails the listener wakes every waiter (a message may have been missed), logs
``reply_log_notify_lost`` once for the outage, reconnects after a bounded backoff
(``RECONNECT_MIN_S`` doubling to ``RECONNECT_MAX_S``), subscribes again to every channel
still waited on, wakes every waiter again and logs ``reply_log_notify_restored``.
``subscribe`` waits (at most ``CONFIRM_WAIT_S``) for the server's confirmation, so a
waiter that reads after it misses nothing written after its read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Final

import redis.asyncio as aioredis
import structlog

from replywire.producer.redis_clients import open_pubsub

NOTIFY_CLIENT_NAME: Final = "replywire-notify"
#: The longest ``aclose`` waits for each of the notifier's tasks to end when cancelled.
STOP_WAIT_S: Final = 2.0
#: The longest ``subscribe`` waits for the server's confirmation (then the waiter's own
#: looks cover what it might miss).
CONFIRM_WAIT_S: Final = 1.0
RECONNECT_MIN_S: Final = 0.05
RECONNECT_MAX_S: Final = 2.0

Wake = Callable[[], None]


class Notifier:
    """Channels waited on here, on one pub/sub connection, and their waiters."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._waiters: dict[str, set[Wake]] = {}
        #: Channels subscribed on the current connection: set once confirmed.
        self._confirmed: dict[str, asyncio.Event] = {}
        #: Channels nobody waits on any more, to unsubscribe from.
        self._leaving: set[str] = set()
        self._pubsub: Any = None
        self._task: asyncio.Task[None] | None = None
        #: Set when a channel is to be left: the leaver task unsubscribes.
        self._leave_wanted = asyncio.Event()
        self._leaver: asyncio.Task[None] | None = None
        #: Closed for good: nothing reconnects.
        self._closed = False
        #: Outages of the connection since the start (each logged once).
        self.outages = 0

    @property
    def channels(self) -> int:
        """Channels waited on now."""
        return len(self._waiters)

    @property
    def live(self) -> bool:
        """Whether the connection is up now (subscriptions take effect)."""
        return self._pubsub is not None

    def _start(self) -> None:
        if self._closed:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._listen(), name="reply-log-notify")
        if self._leaver is None or self._leaver.done():
            self._leaver = asyncio.create_task(self._leave_when_wanted(), name="reply-log-leave")

    async def subscribe(self, channel: str, wake: Wake) -> None:
        """Call ``wake()`` at each message on ``channel`` (and whenever one may have been
        missed) until ``unsubscribe``; returns once the server confirmed the subscription
        (or ``CONFIRM_WAIT_S`` passed, or the connection is down)."""
        self._start()
        waiters = self._waiters.get(channel)
        if waiters is None:
            waiters = self._waiters[channel] = set()
        waiters.add(wake)
        self._leaving.discard(channel)
        pubsub = self._pubsub
        if pubsub is None:
            return  # the listener subscribes once it is connected
        confirmed = self._confirmed.get(channel)
        if confirmed is None:
            confirmed = self._confirmed[channel] = asyncio.Event()
            try:
                await pubsub.subscribe(channel)
            except aioredis.RedisError:
                return  # the listener sees the connection fail, and subscribes again
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CONFIRM_WAIT_S):
                await confirmed.wait()

    def unsubscribe(self, channel: str, wake: Wake) -> None:
        """Stop waking ``wake`` for ``channel``; the last waiter's leaving unsubscribes
        (by the leaver task, at once)."""
        waiters = self._waiters.get(channel)
        if waiters is None:
            return
        waiters.discard(wake)
        if not waiters:
            del self._waiters[channel]
            self._leaving.add(channel)
            self._leave_wanted.set()

    def _wake_all(self) -> None:
        for waiters in list(self._waiters.values()):
            for wake in list(waiters):
                wake()

    def _on_message(self, message: dict[str, Any]) -> None:
        kind, channel = message.get("type"), message.get("channel")
        if not isinstance(channel, bytes):
            return
        name = channel.decode(errors="replace")
        if kind == "message":
            for wake in list(self._waiters.get(name, ())):
                wake()
        elif kind == "subscribe":
            confirmed = self._confirmed.get(name)
            if confirmed is not None:
                confirmed.set()

    async def _leave_when_wanted(self) -> None:
        """Unsubscribe from the channels nobody waits on any more, as they come. Apart
        from the listener, whose read waits with no timeout (see ``_listen``)."""
        while not self._closed:
            await self._leave_wanted.wait()
            self._leave_wanted.clear()
            pubsub = self._pubsub
            if pubsub is None:
                continue  # a new connection subscribes only the channels still wanted
            with contextlib.suppress(aioredis.RedisError, OSError):
                await self._leave(pubsub)  # a failed connection: the listener reconnects

    async def _leave(self, pubsub: Any) -> None:
        leaving = [c for c in self._leaving if c not in self._waiters]
        self._leaving.clear()
        for channel in leaving:
            self._confirmed.pop(channel, None)
        if leaving:
            await pubsub.unsubscribe(*leaving)

    async def _connect(self) -> Any:
        pubsub = await open_pubsub(self._client)
        try:
            await pubsub.connect()
            self._confirmed = {}
            self._leaving.clear()
            # From now on a new waiter's channel is subscribed by ``subscribe`` itself.
            self._pubsub = pubsub
            wanted = list(self._waiters)
            for channel in wanted:
                self._confirmed[channel] = asyncio.Event()
            if wanted:
                await pubsub.subscribe(*wanted)
        except BaseException:
            self._pubsub = None
            with contextlib.suppress(aioredis.RedisError, OSError):
                await pubsub.aclose()
            raise
        return pubsub

    async def _listen(self) -> None:
        log = structlog.get_logger()
        backoff, lost = RECONNECT_MIN_S, False
        while not self._closed:
            pubsub = None
            try:
                pubsub = await self._connect()
                if lost:
                    log.info("reply_log_notify_restored", channels=len(self._waiters))
                    lost = False
                backoff = RECONNECT_MIN_S
                self._wake_all()  # what was written while nobody listened
                while True:
                    # No timeout: a read under redis-py's own timeout was seen to swallow
                    # this task's cancellation (aclose then waited for good); one with
                    # none ends at once when cancelled, and at the connection's end.
                    message = await pubsub.get_message(timeout=None)
                    if message is not None:
                        self._on_message(message)
            except (aioredis.RedisError, OSError) as error:
                self._pubsub = None
                if self._closed:  # closed under it (a cancellation redis-py turned into this)
                    return
                for confirmed in self._confirmed.values():
                    confirmed.set()  # nobody waits on a subscription that is gone
                if not lost:
                    lost = True
                    self.outages += 1
                    log.warning("reply_log_notify_lost", detail=type(error).__name__,
                                channels=len(self._waiters), outages=self.outages)  # fmt: skip
                self._wake_all()
                if pubsub is not None:
                    with contextlib.suppress(aioredis.RedisError, OSError):
                        await pubsub.aclose()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RECONNECT_MAX_S)

    async def aclose(self) -> None:
        """Stop the listener and the leaver, then close the connection: bounded, whatever
        the tasks do with their cancellation."""
        self._closed = True
        self._leave_wanted.set()  # the leaver sees it is closed and ends on its own
        tasks = [task for task in (self._task, self._leaver) if task is not None]
        self._task = self._leaver = None
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_WAIT_S)
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            # Ends a read still waiting (its cancellation lost): it fails, and the listener,
            # closed, does not reconnect.
            with contextlib.suppress(aioredis.RedisError, OSError):
                await pubsub.aclose()
        left = [task for task in tasks if not task.done()]
        if left:
            await asyncio.wait(left, timeout=STOP_WAIT_S)
