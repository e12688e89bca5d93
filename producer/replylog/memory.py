"""The in-process reply log (``--reply-log memory``, the default): replies in this
process's memory, by key, oldest first; readers wait on a condition for new entries.

Bounded as ``LogLimits`` says: frames and bytes per reply, ``max_replies`` kept (an ended
reply is dropped to make room, the oldest first; none ended: ``stream_limit``), and an
ended reply is kept ``ttl_s`` after its end. Its generator is this process: it holds no
lease, and relays no ``Cancel``. Each move of a reply is the table's (``states``): one the
table lacks is refused (``ReplyBusy``, a write to an ended reply, a second ``end`` that
changes nothing, ``stream_limit`` when no reply may be dropped to make room).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence

from replywire.producer.replylog.interface import (
    Entries,
    Entry,
    LogEnded,
    LogLimits,
    ReplyBusy,
    ReplyKey,
    ReplyLogFailed,
)
from replywire.producer.replylog.states import ReplyInput, ReplyState, allowed
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason


class MemoryReply:
    """A reply in this process's memory; readers wait on a condition for new entries."""

    def __init__(
        self,
        key: ReplyKey,
        binding_sha256: str,
        wire: str,
        limits: LogLimits,
        clock: Callable[[], float],
    ) -> None:
        self.key = key
        self.binding_sha256 = binding_sha256
        self.wire = wire
        self._limits = limits
        self._clock = clock
        self.entries: list[Entry] = []
        self.size = 0
        #: Claimed: the log's ``create`` made the table's move (from the key's state).
        self.state = ReplyState.GENERATING
        self.ended_at: float | None = None
        self.error: str | None = None
        self.first_span: str | None = None
        self._changed = asyncio.Condition()

    @property
    def ended(self) -> bool:
        """Ended (and still so once the log dropped it: its readers end as it did)."""
        return self.ended_at is not None

    def move(self, event: ReplyInput) -> bool:
        """Make the table's move on ``event``; False (nothing changed) when it has none."""
        target = allowed(self.state, event)
        if target is None:
            return False
        self.state = target
        return True

    @property
    def frames(self) -> int:
        return len(self.entries)

    async def append(self, entry: Entry) -> None:
        await self.extend((entry,))

    async def extend(self, entries: Sequence[Entry]) -> None:
        # One wake-up of the readers for all of them (a recorded reply: not one per frame).
        fitting, size, over = self._fitting(entries)
        if fitting:
            async with self._changed:
                self.entries.extend(fitting)
                self.size = size
                self._changed.notify_all()
        if over:
            # The table's append_over_bound: the log ends the reply, as end_in_error.
            await self.end(Reason.REPLY_LOG_LIMIT.value)
            raise ReplyLogFailed(Reason.REPLY_LOG_LIMIT, self._over_detail())

    def _over_detail(self) -> str:
        limits = self._limits
        return f"over {limits.max_frames} frames or {limits.max_bytes} bytes"

    def _fitting(self, entries: Sequence[Entry]) -> tuple[list[Entry], int, bool]:
        """The entries that fit the bounds, the size with them, and whether one did not."""
        if allowed(self.state, ReplyInput.APPEND) is None:
            raise RuntimeError(f"reply {self.key} already ended")
        count, size = len(self.entries), self.size
        max_frames, max_bytes = self._limits.max_frames, self._limits.max_bytes
        if (
            not count
            and type(entries) is Entries
            and entries.numbered
            and len(entries) <= max_frames
            and entries.size <= max_bytes
        ):  # all of a reply made in advance, within the bounds: nothing to look at again
            return list(entries), entries.size, False
        fitting: list[Entry] = []
        for entry in entries:
            if entry.sequence != count + 1:
                raise ValueError(f"sequence {entry.sequence}, expected {count + 1}")
            if count + 1 > max_frames or size + len(entry.data) > max_bytes:
                return fitting, size, True
            fitting.append(entry)
            count, size = count + 1, size + len(entry.data)
        return fitting, size, False

    async def end(self, error: str | None = None) -> None:
        event = ReplyInput.END if error is None else ReplyInput.END_IN_ERROR
        async with self._changed:
            if not self.move(event):
                return  # ended already: the first call wins
            self.error = error
            self.ended_at = self._clock()
            self._changed.notify_all()

    def log_now(self, entries: Sequence[Entry]) -> bool:
        # Nobody to wake: no reader has the reply yet, so no lock and no notification.
        if self.entries:
            raise RuntimeError(f"reply {self.key} is being logged already")
        fitting, size, over = self._fitting(entries)
        self.entries, self.size = fitting, size
        self.move(ReplyInput.OVERFLOW if over else ReplyInput.END)  # generating: _fitting saw
        self.error = Reason.REPLY_LOG_LIMIT.value if over else None
        self.ended_at = self._clock()
        return True

    def watch_cancel(self, on_cancel: Callable[[str, str | None], None]) -> None:
        return None  # every Cancel reaches this process itself

    async def read(self, after: int) -> AsyncIterator[Entry]:
        index = max(after, 0)
        while True:
            async with self._changed:
                while index >= len(self.entries) and not self.ended:
                    await self._changed.wait()
                batch = self.entries[index:]
                ended, error = self.ended, self.error
            for entry in batch:
                yield entry
            index += len(batch)
            if ended and index >= len(self.entries):
                if error is not None:
                    raise LogEnded(error)
                return


class MemoryReplyLog:
    """The in-process backend: replies by key, oldest first."""

    def __init__(
        self, limits: LogLimits | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits or LogLimits()
        self._clock = clock
        self._replies: OrderedDict[ReplyKey, MemoryReply] = OrderedDict()
        #: No reply expires before this: a reply ended since the last look expires a TTL
        #: after it, so the replies are looked at once per expiry, not once per call.
        self._next_expiry = float("-inf")

    def __len__(self) -> int:
        self._expire()
        return len(self._replies)

    def _expire(self) -> None:
        now = self._clock()
        if now < self._next_expiry:
            return
        ttl = self.limits.ttl_s
        self._next_expiry = now + ttl
        for key, reply in list(self._replies.items()):
            if reply.ended_at is None:
                continue  # not ended: no TTL runs
            if now - reply.ended_at < ttl:
                self._next_expiry = min(self._next_expiry, reply.ended_at + ttl)
            elif reply.move(ReplyInput.EXPIRE):
                del self._replies[key]

    def state(self, key: ReplyKey) -> ReplyState:
        """The key's reply's state now (``absent``: none is kept)."""
        self._expire()
        reply = self._replies.get(key)
        return ReplyState.ABSENT if reply is None else reply.state

    async def find(self, key: ReplyKey) -> MemoryReply | None:
        self._expire()
        return self._replies.get(key)

    async def create(
        self, key: ReplyKey, binding_sha256: str, wire: str, first_span: str | None = None
    ) -> MemoryReply:
        if allowed(self.state(key), ReplyInput.CREATE) is None:
            raise ReplyBusy(f"reply {key} is already logged")
        self._replies.pop(key, None)
        while len(self._replies) >= self.limits.max_replies:
            evict = ReplyInput.EVICT
            oldest = next((k for k, r in self._replies.items() if allowed(r.state, evict)), None)
            if oldest is None:
                raise RequestRefused(
                    Reason.STREAM_LIMIT, f"{len(self._replies)} replies being generated"
                )
            self._replies.pop(oldest).move(evict)
        reply = MemoryReply(key, binding_sha256, wire, self.limits, self._clock)
        reply.first_span = first_span
        self._replies[key] = reply
        return reply

    async def request_cancel(
        self, key: ReplyKey, wait_s: float, traceparent: str | None = None
    ) -> bool:
        return False  # no other process generates a reply of this log

    def hold_reader(self, key: ReplyKey) -> Callable[[], None]:
        return _nothing_held  # readers wait on the reply in memory: nothing to bound

    async def aclose(self) -> None:
        return None


def _nothing_held() -> None:
    return None
