"""The steps of a delivery's decision that ask the reply log or the source: what
``producer.delivery_plan.decide`` asks for, run one at a time until it decides, and what
they took given back if it refuses (or anything fails) on the way."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from replywire.producer.claims import Attached, Generations
from replywire.producer.delivery import Delivery, close_even_if_cancelled, delivery_of
from replywire.producer.delivery_plan import (
    ClaimLive,
    Deliver,
    Facts,
    LogPlan,
    LookInLog,
    Prepare,
    Record,
    Refuse,
    Step,
    decide,
)
from replywire.producer.replylog.interface import ReplyKey
from replywire.producer.sources import Source, StreamPlan
from replywire.producer.states import StreamState
from replywire.shared.errors import RequestRefused
from replywire.shared.requests import CheckedRequest


@dataclass(frozen=True, slots=True)
class Decided:
    """A delivery and its record, as data: ``verify`` with ``description`` (the plan's, or
    the opened call's), or ``attach``."""

    delivery: Delivery
    record: Record
    description: dict[str, Any]


class DeliverySteps:
    """One Open's decision: ``decide``'s steps run against the log and the source."""

    def __init__(
        self, source: Source, generations: Generations, checked: CheckedRequest, caller: str
    ) -> None:
        self.source = source
        self.generations = generations
        self.checked = checked
        self.caller = caller
        self.key = ReplyKey(caller, checked.stream_id) if checked.stream_id else None
        self.facts = Facts(
            has_stream_id=self.key is not None,
            regenerates=source.regenerates,
            resuming=checked.resume_after > 0,
        )
        self.plan: StreamPlan | None = None
        self.logged: Attached | None = None
        self.opened_description: dict[str, Any] = {}

    async def decided(self) -> Decided:
        """Run the steps until ``decide`` decides; nothing is held if this raises."""
        try:
            step: Step = decide(self.facts)
            while not isinstance(step, Deliver):
                if isinstance(step, Refuse):
                    raise RequestRefused(step.reason, step.detail)
                self.facts = await self._run(step)
                step = decide(self.facts)
            return await self._deliver(step)
        except BaseException:
            await self._give_back()
            raise

    async def _run(self, step: ClaimLive | LookInLog | Prepare | LogPlan) -> Facts:
        """One step that asks the log or the source; the facts with what it found."""
        checked, key = self.checked, self.key
        if isinstance(step, Prepare):
            self.plan = await self.source.prepare(checked, identity=self.caller)
            return replace(self.facts, loggable=self.plan.reply_frames is not None)
        assert key is not None  # the other steps name the reply
        if isinstance(step, ClaimLive):
            self.logged, opened = await self.generations.claim_live(key, checked)
            if opened is not None:
                self.opened_description = opened.description
            return replace(self.facts, opened_here=opened is not None)
        if isinstance(step, LookInLog):
            self.logged = await self.generations.attach(key, checked)
            here = self.logged is not None and self.logged.generation is not None
            return replace(self.facts, found=self.logged is not None, generated_here=here)
        assert self.plan is not None
        made = await self.generations.log_recorded(key, checked, self.plan)
        if made is None:
            return replace(self.facts, logged=False, made_here=False)
        self.logged, made_here = made
        return replace(self.facts, logged=True, made_here=made_here)

    async def _deliver(self, step: Deliver) -> Decided:
        if step.takeover_plan:
            self.plan = await self.source.prepare(self.checked, identity=self.caller)
        delivery = delivery_of(step.origin, self.checked.resume_after, self.plan, self.logged)
        description = self.opened_description or (
            self.plan.description if self.plan is not None else {}
        )
        return Decided(delivery, step.record, description)

    async def _give_back(self) -> None:
        """What the steps took, given back: the attachment, the plan (closed if it holds
        anything: a reservation, an upstream response)."""
        if self.logged is not None:
            self.logged.detach()
        if self.plan is not None and self.plan.needs_close:
            await close_even_if_cancelled(self.plan, StreamState.REFUSED.value)
