"""The reply log's interface: what names a reply, its entries, bounds, errors and shape.

A logged reply is named by its ``ReplyKey``, the caller's identity and the stream id:
the same stream id under another identity is another, unrelated reply, which never
learns that this one exists. It holds the binding hash, the wire format, each
application frame's encoded wire bytes with its sequence number, and how it ended
(``done`` / ``error`` / ``cancel`` when its terminal frame was logged, or an error ending
when generation stopped without one). A delivery reads it from ``resume_after + 1`` and
follows it until the end (a read from at or past the end of an ended reply ends at
once); chunking (transport fragments) and transport faults belong to the delivery,
never to the log.

The interface (``ReplyLog``, ``LoggedReply``) is small on purpose: the in-process
backend (``producer.replylog.memory``) and the Redis Streams one that replicas share
(``producer.replylog.redis_log``) are behind it; a reply's lifecycle in either is the
table of ``producer.replylog.states``. Everything is bounded (``LogLimits``):
frames and bytes per reply, replies kept, and how long an ended reply is kept (its
TTL). A write the log cannot take raises ``ReplyLogFailed`` with a registered reason:
over the frame or byte bound ``reply_log_limit`` (the log has ended the reply so), a
lost lease ``generator_lost``, a store that fails ``reply_log_unavailable``. Who writes
the log, and ends it however it fails, is ``producer.generation``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol
from urllib.parse import quote

from replywire.shared.errors import ReplywireError, scrubbed_detail
from replywire.shared.frames import Frame
from replywire.shared.reasons import Reason, registered

DEFAULT_MAX_FRAMES: Final = 10_000
DEFAULT_MAX_BYTES: Final = 4 << 20
DEFAULT_MAX_REPLIES: Final = 1000
DEFAULT_TTL_S: Final = 300.0
DEFAULT_DETACH_GRACE_S: Final = 30.0
DEFAULT_LEASE_S: Final = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class LogLimits:
    max_frames: int = DEFAULT_MAX_FRAMES
    max_bytes: int = DEFAULT_MAX_BYTES
    max_replies: int = DEFAULT_MAX_REPLIES
    ttl_s: float = DEFAULT_TTL_S
    detach_grace_s: float = DEFAULT_DETACH_GRACE_S
    #: A shared log only: how long a reply's generator may go silent before its readers
    #: take it as lost (it refreshes its lease three times as often).
    lease_s: float = DEFAULT_LEASE_S

    def __post_init__(self) -> None:
        for name in ("max_frames", "max_bytes", "max_replies"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not self.lease_s > 0:
            raise ValueError("lease_s must be > 0")
        for name in ("ttl_s", "detach_grace_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")


#: Connections of the followers' pool (their short reads), by default.
DEFAULT_READER_CONNECTIONS: Final = 64
#: Connections of the generations' pool (claims, writes, lease refreshes), by default.
DEFAULT_WRITER_CONNECTIONS: Final = 32
#: Replies one replica reads from a shared log at once (one follower each), by default:
#: as many as the streams it serves at once (``--max-streams``' default).
DEFAULT_REPLIES_READ: Final = 4000
#: Of them, one caller's.
DEFAULT_REPLIES_READ_PER_IDENTITY: Final = 256


@dataclass(frozen=True, slots=True, kw_only=True)
class ReaderLimits:
    """A shared log only (see ``producer.replylog.followers``): the connections of the
    followers' pool (``--reply-log-connections``: Redis commands in flight at once, not
    replies) and of the generations' (``--reply-log-writer-connections``); how many
    replies one replica reads from it at once (one follower each, which costs memory,
    not a connection: ``--reply-log-replies-read``), and of them one caller's
    (``--reply-log-replies-read-per-identity``)."""

    connections: int = DEFAULT_READER_CONNECTIONS
    writer_connections: int = DEFAULT_WRITER_CONNECTIONS
    replies: int = DEFAULT_REPLIES_READ
    per_identity: int = DEFAULT_REPLIES_READ_PER_IDENTITY

    def __post_init__(self) -> None:
        for name in ("connections", "writer_connections", "replies", "per_identity"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")


@dataclass(frozen=True, slots=True)
class ReplyKey:
    """What names a reply everywhere (the log, the generations, Redis keys, ``Cancel``):
    the authenticated caller and the stream id it chose."""

    identity: str
    stream_id: str

    @property
    def token(self) -> str:
        """The key as one string with no separator of its own inside either part (each
        part percent-encoded), for stores that name things by strings (Redis keys)."""
        return f"{quote(self.identity, safe='')}/{quote(self.stream_id, safe='')}"

    def __str__(self) -> str:
        return self.token


@dataclass(frozen=True, slots=True)
class Entry:
    """One application frame as it goes on the wire."""

    sequence: int
    data: bytes


class Entries(tuple[Entry, ...]):
    """A reply's entries made in advance, looked at once: their total ``size``, and
    whether they are numbered 1, 2, 3, ... (``numbered``), so a log that takes all of
    them at once checks its bounds on the totals, not entry by entry."""

    size: int
    numbered: bool

    @classmethod
    def of(cls, items: Sequence[Entry]) -> Entries:
        entries = cls(items)
        entries.size = sum(len(entry.data) for entry in entries)
        entries.numbered = all(entry.sequence == index for index, entry in enumerate(entries, 1))
        return entries


def log_entries(frames: Sequence[Frame], wire: Sequence[bytes]) -> Entries:
    """The frames as log entries, ``wire`` being their encoded bytes, one per frame."""
    items = []
    for frame, data in zip(frames, wire, strict=True):
        assert isinstance(frame.sequence, int)
        items.append(Entry(frame.sequence, data))
    return Entries.of(items)


class LogEnded(Exception):
    """Raised by a read when the reply ended without its terminal frame: ``reason``, always
    a registered code (an ending read from a store that is not one is ``internal_error``,
    its text kept, scrubbed, as ``detail``)."""

    def __init__(self, ending: Reason | str) -> None:
        reason = registered(ending)
        super().__init__(ending if reason is None else reason.value)
        self.reason: Reason = reason or Reason.INTERNAL_ERROR
        self.detail = "" if reason is not None else scrubbed_detail(str(ending))


class ReplyBusy(ValueError):
    """``create`` of a key whose reply is being generated, or complete, already."""


class ReplyLogFailed(ReplywireError):
    """The log could not do what was asked: ``reason`` is ``reply_log_limit`` (a write
    over a bound), ``generator_lost`` (a write by a generator that lost its lease) or
    ``reply_log_unavailable`` (the store failed). A generation stops at once."""


class LoggedReply(Protocol):
    key: ReplyKey
    binding_sha256: str
    wire: str
    #: The error ending (a reason code), once the reply ended without its terminal.
    error: str | None
    #: The ``traceparent`` of the delivery that created the reply, when its process traced
    #: (a resume on any process links to it); None otherwise.
    first_span: str | None

    @property
    def frames(self) -> int:
        """Frames logged (when found; a generator's own handle counts as it writes)."""
        ...

    async def append(self, entry: Entry) -> None:
        """Log the next frame (sequence = last + 1). Raises ``ReplyLogFailed`` when the log
        cannot take it (over a bound the reply has then ended ``reply_log_limit``)."""
        ...

    async def extend(self, entries: Sequence[Entry]) -> None:
        """Log frames known in advance (a recorded reply), as ``append`` would one by one."""
        ...

    async def end(self, error: str | None = None) -> None:
        """The reply is complete (``None``: its terminal frame was the last entry) or ended
        without it (``error``: a reason code). Idempotent: the first call wins. Raises
        ``ReplyLogFailed`` when the end could not be written."""
        ...

    def log_now(self, entries: Sequence[Entry]) -> bool:
        """A reply just created, that nobody reads yet: log all of its frames (known in
        advance) and end it, as ``extend`` then ``end`` would, without waiting for
        anything (over a bound it ends ``reply_log_limit``); False (nothing done) when
        this log cannot."""
        ...

    def read(self, after: int) -> AsyncIterator[Entry]:
        """Entries with sequence > ``after``, following the log until it ends; raises
        ``LogEnded`` after the last entry when the reply ended with an error, at once when
        ``after`` is at or past the end of an ended reply, and ``LogEnded``
        (``reply_log_unavailable``) when the log cannot be read."""
        ...

    def watch_cancel(self, on_cancel: Callable[[str, str | None], None]) -> None:
        """The generator's side: call ``on_cancel(caller, traceparent)`` for each ``Cancel``
        relayed through the log by another replica (a log of one process relays none);
        ``traceparent`` is the relaying replica's ``Cancel`` span (None: it traces not)."""
        ...


class ReplyLog(Protocol):
    limits: LogLimits

    async def find(self, key: ReplyKey) -> LoggedReply | None:
        """The reply as it is now (``error`` set if it ended without its terminal). Raises
        ``ReplyLogFailed`` (``reply_log_unavailable``) when the log cannot be read."""
        ...

    async def create(
        self, key: ReplyKey, binding_sha256: str, wire: str, first_span: str | None = None
    ) -> LoggedReply:
        """A new, empty reply, generated by this process (the claim: whoever creates it
        makes it), with the ``traceparent`` of the delivery creating it (``first_span``,
        when this process traces); it replaces one that ended in error (a regeneration). Raises
        ``ReplyBusy`` if the key's reply is being generated or complete, and
        ``ReplyLogFailed`` when the log cannot be written; the memory log refuses
        ``stream_limit`` when max replies are kept and none has ended (an ended one is
        dropped to make room, the oldest first)."""
        ...

    async def request_cancel(
        self, key: ReplyKey, wait_s: float, traceparent: str | None = None
    ) -> bool:
        """Relay the key's caller's ``Cancel`` to the replica generating the reply (a
        shared log), with this process's ``Cancel`` span's ``traceparent`` when it traces;
        True once the reply ended ``consumer_cancelled`` within ``wait_s``."""
        ...

    def hold_reader(self, key: ReplyKey) -> Callable[[], None]:
        """Admit a delivery that will read the key's reply from this log; its release
        (idempotent). A shared log bounds the replies it reads at once, all and per caller:
        past a bound ``RequestRefused`` (``reply_log_busy``), a reply read already never."""
        ...

    async def aclose(self) -> None: ...
