"""The replies this process serves from the reply log, and the generations it runs.

What an ``Open`` with a stream id asks of the log, in one place: attach to the caller's
reply of that id (``attach``), claim a new live reply and start the generation that
calls its provider (``claim_live``: claim, then pay), log a recorded reply
(``log_recorded``), generate again a reply whose generator was lost (``take_over``),
and stop a reply's generation (``cancel``: here, or relayed through a shared log to the
replica that runs it; ``watch`` makes this process hear the relays). The generations
this process runs are kept by reply key, bounded: ended ones beyond the log's reply
bound are forgotten, oldest first.

A reply is named by its key (``ReplyKey``: the caller's identity and the stream id):
another caller's Open of the same stream id finds nothing here and is answered as for
an unused id. ``Attached`` says which reply a delivery reads and which generation here,
if any, it holds (``Generation.attach``); the delivery detaches it when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Final

import structlog

from replywire.producer.generation import Generation, Opened, Opener, PlanUpstream, Upstream
from replywire.producer.replylog.interface import (
    Entry,
    LogEnded,
    LoggedReply,
    ReplyBusy,
    ReplyKey,
    ReplyLog,
    log_entries,
)
from replywire.producer.sources import Source, StreamPlan
from replywire.producer.spans import relayed_cancel_span
from replywire.runtime.tracing import active
from replywire.shared.errors import RequestRefused
from replywire.shared.reason_registry import REASONS, REPLY_ENDINGS
from replywire.shared.reasons import Reason
from replywire.shared.requests import CheckedRequest
from replywire.shared.status import Status
from replywire.shared.wire import codec_for

#: Tries to attach to or claim a live reply that keeps changing hands before giving up.
MAX_CLAIM_ATTEMPTS: Final = 3
#: How long a replica that relays a ``Cancel`` waits for the generator to confirm it (within
#: the consumer's own wait for the answer, ``consumer.session.CANCEL_TIMEOUT_S``).
RELAY_CANCEL_WAIT_S: Final = 1.5


@dataclass(frozen=True, slots=True)
class Attached:
    """A delivery's reply in the log, and this process's generation of it (attached by the
    delivery, which detaches it when it ends; None: another replica generates it)."""

    reply: LoggedReply
    generation: Generation | None
    #: This process's deliveries of the reply so far, this one included (1: another
    #: replica's reply).
    attempt: int
    #: Gives back the delivery's admission as a reader of the log (``ReplyLog.hold_reader``).
    release: Callable[[], None] = lambda: None

    def detach(self) -> None:
        try:
            if self.generation is not None:
                self.generation.detach()
        finally:
            self.release()


def refused_before_made(reply: LoggedReply) -> bool:
    """Whether a reply ended with a refusal before any of it was made (a budget, a
    provider's refusal): a new Open may claim it anew."""
    ending = reply.error
    return (
        reply.frames == 0
        and ending is not None
        and ending in REASONS
        and REASONS[Reason(ending)].status is Status.REFUSED
    )


def ended_reply_refusal(ending: str) -> RequestRefused:
    """Why a reply that ended without its terminal (and cannot be made again) is not
    delivered: its own ending when that names what happened, else ``resume_unavailable``."""
    if ending in REPLY_ENDINGS:
        return RequestRefused(Reason(ending), "the reply ended so")
    return RequestRefused(Reason.RESUME_UNAVAILABLE, f"the reply ended {ending}")


def _first_span() -> str | None:
    """The delivery creating a reply (its span is current), for a resume's link: None when
    this process does not trace."""
    tracing = active()
    return None if tracing is None else tracing.current_traceparent()


class _Claim:
    """A key's claim lock, and how many Opens use it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class Generations:
    """This process's view of the reply log: the replies it serves and generates."""

    def __init__(
        self,
        log: ReplyLog,
        source: Source,
        *,
        on_ended: Callable[[str], None] | None = None,
    ) -> None:
        self.log = log
        self.source = source
        self._on_ended = on_ended
        self._by_key: OrderedDict[ReplyKey, Generation] = OrderedDict()
        self._claims: dict[ReplyKey, _Claim] = {}
        self._log: structlog.typing.FilteringBoundLogger = structlog.get_logger()

    # --- the registry ---------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._by_key)

    def get(self, key: ReplyKey) -> Generation | None:
        return self._by_key.get(key)

    def _add(self, generation: Generation) -> None:
        key = generation.reply.key
        self._by_key[key] = generation
        self._by_key.move_to_end(key)
        excess = len(self._by_key) - self.log.limits.max_replies
        if excess > 0:
            ended = (k for k, g in self._by_key.items() if g.task.done())
            for old in list(itertools.islice(ended, excess)):
                del self._by_key[old]

    def stop_all(self, reason: Reason) -> list[asyncio.Future[None]]:
        """Stop every generation still running; their tasks, to wait for."""
        return [g.task for g in self._by_key.values() if g.stop(reason)]

    def _generation(self, reply: LoggedReply, source: tuple[Entry, ...] | Opener) -> Generation:
        generation = Generation(
            reply,
            source,
            grace_s=self.log.limits.detach_grace_s,
            on_ended=self._on_ended,
        )
        self._add(generation)
        self.watch(reply)
        return generation

    # --- attaching ------------------------------------------------------------------------

    async def attach(self, key: ReplyKey, checked: CheckedRequest) -> Attached | None:
        """Attach to the caller's logged reply of this stream id, if there is one (this
        process's, or another replica's in a shared log): never a second generation.
        Refuses a binding other than the logged one, and a reply that ended without its
        terminal (nothing more will come), unless the source regenerates it or it was
        refused before anything of it was made (None: a new Open claims it anew). The
        delivery is admitted as a reader of the log first (``ReplyLog.hold_reader``:
        ``reply_log_busy`` past its bounds), given back when it detaches."""
        release = self.log.hold_reader(key)
        try:
            attached = await self._attach(key, checked, release)
        except BaseException:
            release()
            raise
        if attached is None:
            release()
        return attached

    async def _attach(
        self,
        key: ReplyKey,
        checked: CheckedRequest,
        release: Callable[[], None],
    ) -> Attached | None:
        reply = await self.log.find(key)
        if reply is None:
            return None
        if checked.binding_sha256 != reply.binding_sha256:
            raise RequestRefused(Reason.RESUME_BINDING_MISMATCH, "not the logged binding")
        if checked.wire.value != reply.wire:
            raise RequestRefused(Reason.INVALID_REQUEST, "a resume in another wire format")
        if reply.error is not None:
            if reply.error == Reason.REPLY_LOG_BEHIND.value and checked.resume_after:
                # The log lost frames its readers may hold: a resume is refused, never
                # served from a reply made again (docs/protocol.md#resume).
                raise ended_reply_refusal(reply.error)
            if self.source.regenerates:
                return None  # generated again, from the start
            if not checked.resume_after and refused_before_made(reply):
                return None
            raise ended_reply_refusal(reply.error)
        tracing = active()
        if tracing is not None and checked.resume_after and reply.first_span is not None:
            # A resume (this delivery's span is current) links to the first delivery's,
            # whichever replica served it; one served here is linked already.
            tracing.link_current_to_first(reply.first_span)
        return self._attached(reply, release)

    def _attached(self, reply: LoggedReply, release: Callable[[], None]) -> Attached:
        generation = self.get(reply.key)
        if generation is not None and generation.reply is not reply:
            generation = None  # a shared log's reply this process no longer generates
        attempt = generation.attach() if generation is not None else 1
        return Attached(reply, generation, attempt, release)

    # --- claiming and generating ------------------------------------------------------------

    async def claim_live(
        self, key: ReplyKey, checked: CheckedRequest
    ) -> tuple[Attached, Opened | None]:
        """Attach to the caller's live reply of this stream id, or claim it and start its
        generation, which calls the provider; with how the call opened (None: attached to
        a reply someone else claimed). The free checks come before the claim: a request
        refused for its binding, or past the log's reader bounds (``reply_log_busy``),
        claims nothing. A refused call raises its refusal, with nothing held."""
        release = self.log.hold_reader(key)
        try:
            return await self._claim_live(key, checked, release)
        except BaseException:
            release()
            raise

    async def _claim_live(
        self,
        key: ReplyKey,
        checked: CheckedRequest,
        release: Callable[[], None],
    ) -> tuple[Attached, Opened | None]:
        for _ in range(MAX_CLAIM_ATTEMPTS):
            # One claimant of a key at a time here: the others attach to what it claimed
            # (a thousand Opens of one new reply make one claim, not a thousand).
            async with self._claiming(key):
                attached = await self._attach(key, checked, release)
                if attached is not None:
                    return attached, None
                if checked.resume_after:
                    raise RequestRefused(Reason.RESUME_UNAVAILABLE, "no logged reply")
                self.source.verify(checked)
                binding = checked.binding_sha256
                try:
                    reply = await self.log.create(key, binding, checked.wire.value, _first_span())
                except ReplyBusy:  # claimed by another delivery meanwhile: attach to it
                    continue
                generation = self._generation(reply, self._opener(reply, checked))
                attached = Attached(reply, generation, generation.attach(), release)
            try:
                # Shielded: a consumer that leaves now leaves the opening to the generation.
                opened = await asyncio.shield(generation.opened)
            except BaseException:
                attached.detach()
                raise
            if opened.refusal is not None:
                attached.detach()
                raise opened.refusal
            return attached, opened
        raise RequestRefused(Reason.REPLY_LOG_UNAVAILABLE, "the reply changed hands repeatedly")

    @contextlib.asynccontextmanager
    async def _claiming(self, key: ReplyKey) -> AsyncIterator[None]:
        """The key's claim lock here, held by one claimant at a time (kept while in use)."""
        claim = self._claims.get(key)
        if claim is None:
            claim = self._claims[key] = _Claim()
        claim.users += 1
        try:
            async with claim.lock:
                yield
        finally:
            claim.users -= 1
            if not claim.users:
                del self._claims[key]

    def _opener(self, reply: LoggedReply, checked: CheckedRequest) -> Opener:
        """How a claimed live reply's generation calls its provider."""
        codec = codec_for(checked.wire)
        source, identity = self.source, reply.key.identity

        async def open_upstream() -> Upstream:
            plan = await source.prepare(checked, identity=identity)
            return PlanUpstream(plan, codec)

        return open_upstream

    async def log_recorded(
        self, key: ReplyKey, checked: CheckedRequest, plan: StreamPlan
    ) -> tuple[Attached, bool] | None:
        """Log a recorded plan's reply under its key (None: the plan has none to log) and
        attach to it: generated here (True), or, when another delivery (here, or on
        another replica) generates it already, that one (False). A delivery that will
        read the log (a resume, or another's reply) is admitted as its reader
        (``reply_log_busy`` past the log's bounds); one from the plan reads nothing."""
        if plan.reply_frames is None:
            return None
        binding = checked.binding_sha256
        generation = await self._log_plan(key, binding, checked, plan)
        if generation is not None:
            attached = Attached(generation.reply, generation, generation.attach())
            if checked.resume_after:  # delivered from the log
                try:
                    release = self.log.hold_reader(key)
                except BaseException:
                    attached.detach()
                    raise
                attached = dataclasses.replace(attached, release=release)
            return attached, True
        release = self.log.hold_reader(key)
        try:
            found = await self.log.find(key)
            if found is None:  # generated and expired meanwhile: rare enough to refuse
                raise RequestRefused(Reason.STREAM_LIMIT, "the reply changed hands; retry")
        except BaseException:
            release()
            raise
        return self._attached(found, release), False

    async def _log_plan(
        self, key: ReplyKey, binding: str, checked: CheckedRequest, plan: StreamPlan
    ) -> Generation | None:
        """A generation logging the recorded plan's reply here; None when another delivery
        generates it already."""
        try:
            reply = await self.log.create(key, binding, checked.wire.value, _first_span())
        except ReplyBusy:
            return None
        assert plan.reply_frames is not None
        # A recording's fault-free plan carries its log entries, made once.
        entries = plan.reply_entries
        if entries is None:
            codec = codec_for(checked.wire)
            frames = plan.reply_frames
            entries = log_entries(frames, [codec.encode_frame(frame) for frame in frames])
        return self._generation(reply, entries)

    async def take_over(
        self, ended: LogEnded, attached: Attached, checked: CheckedRequest, plan: StreamPlan | None
    ) -> Attached | None:
        """The replica that generated ``attached``'s reply is lost: generate it here from
        ``plan`` (a source that regenerates: its reply is recorded, never live), or follow
        whoever did first. The reading goes on where it was, the regenerated frames being
        the same. None: it cannot be taken over (not lost, no plan, ended otherwise)."""
        reply = attached.reply
        if ended.reason is not Reason.GENERATOR_LOST or plan is None:
            return None
        self._log.info("generation_taken_over", stream_id=reply.key.stream_id)
        generation = await self._log_plan(reply.key, reply.binding_sha256, checked, plan)
        if generation is not None:
            return Attached(generation.reply, generation, generation.attach())
        found = await self.log.find(reply.key)
        if found is None or found.error is not None:
            return None
        return Attached(found, None, attached.attempt)

    # --- stopping ---------------------------------------------------------------------------

    async def cancel(self, key: ReplyKey, traceparent: str | None = None) -> tuple[bool, bool]:
        """Stop the generation of the key's reply: here, or relayed through a shared log to
        the replica that runs it, with ``traceparent`` (the ``Cancel``'s span, when this
        process traces). (Whether it was stopped, whether it was relayed.)"""
        generation = self.get(key)
        if generation is None or generation.task.done():
            return await self.log.request_cancel(key, RELAY_CANCEL_WAIT_S, traceparent), True
        return generation.stop(Reason.CONSUMER_CANCELLED), False

    def watch(self, reply: LoggedReply) -> None:
        """A ``Cancel`` another replica relays through the shared log stops the generation
        here as if it had come here (the log names the caller: it is the reply's own).
        When this process traces, the stop is a span (``replywire.cancel_relayed``) in the
        trace of the relaying replica's ``Cancel`` span, whose ``traceparent`` came with it."""

        def relayed(caller: str, traceparent: str | None) -> None:
            tracing = active()
            span = ids = None
            if tracing is not None:
                span = relayed_cancel_span(tracing, traceparent, reply.key.stream_id)
                ids = tracing.bind_ids(span)
            generation = self.get(reply.key)
            cancelled = (
                caller == reply.key.identity
                and generation is not None
                and generation.reply is reply
                and generation.stop(Reason.CONSUMER_CANCELLED)
            )
            self._log.info("stream_cancel_relayed", stream_id=reply.key.stream_id,
                           caller=caller, cancelled=cancelled)  # fmt: skip
            if tracing is not None and span is not None and ids is not None:
                tracing.unbind_ids(ids)
                tracing.end(span, error=None, attributes={"replywire.cancelled": cancelled})

        reply.watch_cancel(relayed)
