"""A reply's generation: every way it ends closes its upstream, ends its log with a
registered reason and writes one ``generation_ended`` record; the claimant learns how
the opening went.

The upstream here is a scripted stand-in for a provider call (the real one, the Gemini
source against the fake server, runs in tests/system/test_tenancy.py and
tests/system/test_generation_ends.py): it records what the generation did to it, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, MutableMapping
from typing import Any

import pytest
import structlog

from replywire.producer.claims import Generations
from replywire.producer.generation import COMPLETED, Generation, Upstream
from replywire.producer.replylog.interface import Entry, LogEnded, LogLimits, ReplyKey
from replywire.producer.replylog.memory import MemoryReplyLog
from replywire.producer.sources.recording import RecordingSource
from replywire.shared.errors import RequestRefused
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import Reason
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest, check_request
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan

KEY = ReplyKey("alice", "s")


class ScriptedUpstream:
    """Yields ``frames`` entries, then waits on ``gate`` (a model still thinking) unless
    it is set; ``ending`` is raised after the last one (an error ending)."""

    def __init__(
        self,
        events: list[str],
        frames: int = 3,
        *,
        gate: asyncio.Event | None = None,
        ending: BaseException | None = None,
    ) -> None:
        self.description: dict[str, Any] = {"call_id": "c1"}
        self.events = events
        self.frames = frames
        self.gate = gate
        self.ending = ending

    async def entries(self) -> AsyncGenerator[Entry, None]:
        try:
            for sequence in range(1, self.frames + 1):
                yield Entry(sequence, b"x")
            if self.gate is not None:
                await self.gate.wait()
            if self.ending is not None:
                raise self.ending
        finally:
            self.events.append("entries_closed")

    async def close(self, outcome: str) -> None:
        self.events.append(f"closed:{outcome}")


async def _run(
    upstream_or_refusal: ScriptedUpstream | BaseException,
    *,
    limits: LogLimits | None = None,
    stop: Reason | None = None,
    grace_s: float = 60.0,
    detach: bool = False,
) -> tuple[Generation, list[str], list[MutableMapping[str, Any]]]:
    events: list[str] = []
    log = MemoryReplyLog(limits)
    reply = await log.create(KEY, "b" * 64, "lp")
    original_end = reply.end

    async def end(error: str | None = None) -> None:
        events.append(f"log_end:{error}")
        await original_end(error)

    reply.end = end  # type: ignore[method-assign]
    opening = asyncio.Event()

    async def opener() -> Upstream:
        opening.set()
        if isinstance(upstream_or_refusal, BaseException):
            raise upstream_or_refusal
        upstream_or_refusal.events = events
        return upstream_or_refusal

    with structlog.testing.capture_logs() as records:
        generation = Generation(reply, opener, grace_s=grace_s)
        generation.attach()
        await opening.wait()
        await asyncio.sleep(0.01)
        if detach:
            generation.detach()
        if stop is not None:
            assert generation.stop(stop)
        await asyncio.wait_for(asyncio.gather(generation.task, return_exceptions=True), 10)
    return generation, events, records


def _ended(records: list[MutableMapping[str, Any]]) -> list[tuple[str, int]]:
    return [(r["outcome"], r["frames"]) for r in records if r["event"] == "generation_ended"]


def test_a_completed_generation_ends_its_log_first_then_closes_its_upstream() -> None:
    async def scenario() -> None:
        generation, events, records = await _run(ScriptedUpstream([]))
        assert events == ["entries_closed", "log_end:None", f"closed:{COMPLETED}"]
        assert _ended(records) == [(COMPLETED, 3)]
        opened = generation.opened.result()
        assert opened.description == {"call_id": "c1"} and opened.refusal is None
        assert generation.reply.error is None and generation.reply.frames == 3

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("limits", "frames"), [(LogLimits(max_frames=2), 2), (LogLimits(max_bytes=1), 1)]
)
def test_a_log_write_that_fails_closes_the_upstream_at_once_then_ends_the_log(
    limits: LogLimits, frames: int
) -> None:
    """The upstream would go on for ever (its gate never opens): the bound stops it."""

    async def scenario() -> None:
        upstream = ScriptedUpstream([], frames=5, gate=asyncio.Event())
        generation, events, records = await _run(upstream, limits=limits)
        limit = Reason.REPLY_LOG_LIMIT.value
        # The log ended itself at the bound; the generation then closes the upstream's
        # entries and the upstream, and ends the log (a no-op: the first end stands).
        assert events == [f"log_end:{limit}", "entries_closed", f"closed:{limit}",
                          f"log_end:{limit}"]  # fmt: skip
        assert generation.reply.error == limit
        assert _ended(records) == [(limit, frames)]
        assert [r["reason"] for r in records if r["event"] == "reply_log_write_failed"] == [limit]

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "reason", [Reason.CONSUMER_CANCELLED, Reason.PRODUCER_SHUTDOWN, Reason.REPLY_ABANDONED]
)
def test_a_stopped_generation_closes_its_upstream_and_ends_the_log_with_the_reason(
    reason: Reason,
) -> None:
    async def scenario() -> None:
        upstream = ScriptedUpstream([], frames=1, gate=asyncio.Event())
        generation, events, records = await _run(upstream, stop=reason)
        assert events == ["entries_closed", f"closed:{reason.value}", f"log_end:{reason.value}"]
        assert generation.reply.error == reason.value
        assert _ended(records) == [(reason.value, 1)]
        assert not generation.stop(Reason.REPLY_ABANDONED)  # ended: nothing to stop

    asyncio.run(scenario())


def test_the_grace_after_the_last_detach_stops_the_generation_reply_abandoned() -> None:
    async def scenario() -> None:
        upstream = ScriptedUpstream([], frames=1, gate=asyncio.Event())
        generation, events, _ = await _run(upstream, grace_s=0.05, detach=True)
        abandoned = Reason.REPLY_ABANDONED.value
        assert events[-2:] == [f"closed:{abandoned}", f"log_end:{abandoned}"]
        assert generation.stopped is Reason.REPLY_ABANDONED

    asyncio.run(scenario())


def test_an_attach_within_the_grace_keeps_it_going() -> None:
    async def scenario() -> None:
        gate = asyncio.Event()
        log = MemoryReplyLog()
        reply = await log.create(KEY, "b", "lp")
        events: list[str] = []

        async def opener() -> Upstream:
            return ScriptedUpstream(events, frames=1, gate=gate)

        generation = Generation(reply, opener, grace_s=0.05)
        assert generation.attach() == 1
        generation.detach()
        assert generation.attach() == 2  # a resume within the grace
        await asyncio.sleep(0.2)
        assert not generation.task.done()
        gate.set()
        await asyncio.wait_for(generation.task, 5)
        assert reply.error is None and generation.stopped is None

    asyncio.run(scenario())


def test_an_upstream_that_ends_in_error_ends_the_log_with_its_reason() -> None:
    async def scenario() -> None:
        ending = LogEnded(Reason.PROVIDER_EVENT_AFTER_FINISH.value)
        _, events, records = await _run(ScriptedUpstream([], ending=ending))
        code = Reason.PROVIDER_EVENT_AFTER_FINISH.value
        assert events == ["entries_closed", f"closed:{code}", f"log_end:{code}"]
        assert _ended(records) == [(code, 3)]

    asyncio.run(scenario())


def test_an_unexpected_failure_of_the_upstream_ends_internal_error_and_is_logged() -> None:
    async def scenario() -> None:
        _, events, records = await _run(ScriptedUpstream([], ending=KeyError("x")))
        code = Reason.INTERNAL_ERROR.value
        assert events == ["entries_closed", f"closed:{code}", f"log_end:{code}"]
        assert [r["event"] for r in records if r["log_level"] == "error"] == ["generation_failed"]

    asyncio.run(scenario())


def test_a_refused_opening_tells_the_claimant_and_ends_the_log_with_its_code() -> None:
    async def scenario() -> None:
        refusal = RequestRefused(Reason.BUDGET_EXHAUSTED, "over budget")
        refusal.metadata["retry-delay"] = "3s"
        generation, events, records = await _run(refusal)
        opened = generation.opened.result()
        assert opened.refusal is refusal
        code = Reason.BUDGET_EXHAUSTED.value
        assert events == [f"log_end:{code}"]  # never opened: nothing to close
        assert generation.reply.error == code and generation.reply.frames == 0
        assert _ended(records) == [(code, 0)]

    asyncio.run(scenario())


def test_a_generation_stopped_while_opening_refuses_the_claimant_with_the_stop_reason() -> None:
    async def scenario() -> None:
        events: list[str] = []
        log = MemoryReplyLog()
        reply = await log.create(KEY, "b", "lp")
        started = asyncio.Event()

        async def opener() -> Upstream:
            started.set()
            try:
                await asyncio.Event().wait()  # the provider has not answered yet
            except asyncio.CancelledError:
                events.append("opening_cancelled")
                raise
            raise AssertionError("unreachable")

        generation = Generation(reply, opener, grace_s=60)
        await started.wait()
        generation.stop(Reason.CONSUMER_CANCELLED)
        await asyncio.gather(generation.task, return_exceptions=True)
        refusal = generation.opened.result().refusal
        assert refusal is not None and refusal.reason is Reason.CONSUMER_CANCELLED
        assert events == ["opening_cancelled"]
        assert reply.error == Reason.CONSUMER_CANCELLED.value

    asyncio.run(scenario())


def test_every_outcome_is_completed_or_a_registered_code() -> None:
    async def scenario() -> list[str]:
        outcomes = []
        for upstream in (
            ScriptedUpstream([]),
            ScriptedUpstream([], ending=KeyError("x")),
            ScriptedUpstream([], ending=LogEnded("provider_finish_SAFETY")),
            RequestRefused(Reason.LEDGER_UNAVAILABLE),
        ):
            _, _, records = await _run(upstream)
            outcomes += [outcome for outcome, _ in _ended(records)]
        return outcomes

    outcomes = asyncio.run(scenario())
    assert outcomes[0] == COMPLETED
    assert all(o == COMPLETED or o in REASONS or o.startswith("provider_finish_") for o in outcomes)


def test_the_registry_forgets_ended_generations_beyond_its_bound_oldest_first(
    recording: Recording,
) -> None:
    """Four recorded replies logged under --reply-log-max-replies 2: the registry keeps the
    newest two generations, each under its own key (another identity's is not there)."""

    async def scenario() -> None:
        source = RecordingSource(recording)
        registry = Generations(MemoryReplyLog(LogLimits(max_replies=2)), source)
        case = recording.case("replace-file")
        for index in range(4):
            request = ReplyRequest(
                case_id=case.case_id,
                binding=case.binding,
                wire=WireFormat.LENGTH_PREFIXED,
                plan=ChunkPlan.parse("frame"),
                stream_id=f"s{index}",
            ).open_request()
            checked = check_request(request, allow_faults=False)
            plan = await source.prepare(checked, identity="alice")
            key = ReplyKey("alice", f"s{index}")
            logged = await registry.log_recorded(key, checked, plan)
            assert logged is not None and logged[1]  # made here, ended at once
            logged[0].detach()
        assert len(registry) == 2
        assert registry.get(ReplyKey("alice", "s0")) is None
        newest = registry.get(ReplyKey("alice", "s3"))
        assert newest is not None and newest.task.done()
        assert registry.get(ReplyKey("bob", "s3")) is None  # another identity's name
        assert registry.stop_all(Reason.PRODUCER_SHUTDOWN) == []  # all ended

    asyncio.run(scenario())
