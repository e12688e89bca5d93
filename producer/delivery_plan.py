"""Where one ``Open``'s frames come from, decided by one pure function.

Theory of operation
-------------------
A delivery is decided in a few steps, some of which ask the reply log or the source
(claim a live reply, look for a logged one, prepare a plan, log it): I/O the servicer
does. The decision itself is here, with no I/O, in the manner of a sans-IO machine:
:func:`decide` takes what is known so far (:class:`Facts`) and returns the next
:class:`Step` — something to find out, a refusal, or the delivery (:class:`Deliver`:
from the plan or from the log, with the record that says so, ``verify`` or
``attach``). The servicer runs a step, adds what it found to the facts and asks again,
so every branch of the decision is in this one function and its table test
(``tests/unit/test_delivery_plan.py``) covers every case without gRPC.

The rules: a reply with no stream id is never logged (its plan's own chunks, a resume
refused unless the source can make it again); a live reply (a source that does not
regenerate: it is paid for) is claimed in the log before its provider is called, and
every delivery of it, the first too, reads the log; a recorded reply is looked for in
the log first (attached to, with a plan to take it over from should its generator be
lost on another replica), else prepared and logged under its key: delivered from its
plan when made here for a first delivery (its fault with it), from the log otherwise
(a resume, or another delivery generates it).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from replywire.shared.reasons import Reason


@dataclass(frozen=True, slots=True, kw_only=True)
class Facts:
    """What is known of one delivery so far; None: not asked (yet)."""

    #: The request names its reply (a stream id): it can be logged, found, resumed.
    has_stream_id: bool
    #: The source can make the same reply again (the recording); a live one cannot.
    regenerates: bool
    #: ``resume_after`` > 0: the consumer has frames of this reply already.
    resuming: bool
    #: A live reply claimed or attached to: whether this delivery's claim opened the call.
    opened_here: bool | None = None
    #: The log looked in: whether the reply was there.
    found: bool | None = None
    #: A found reply: whether this process generates it (else another replica does).
    generated_here: bool | None = None
    #: The source's plan prepared: whether it has a reply to log (a frame fault has not).
    loggable: bool | None = None
    #: The plan offered to the log: whether it was logged, and if so made here.
    logged: bool | None = None
    made_here: bool | None = None


class Origin(StrEnum):
    #: The plan's own chunks, its fault with them.
    PLAN = "plan"
    #: The log's frames from ``resume_after + 1``, cut afresh, never with a fault.
    LOG = "log"


class Record(StrEnum):
    """The stream's record of its delivery: ``verified`` (a plan or a call opened for it)
    or ``attached`` (to a reply someone else made, or makes)."""

    VERIFY = "verify"
    ATTACH = "attach"


@dataclass(frozen=True, slots=True)
class ClaimLive:
    """Claim the live reply in the log, or attach to the one claimed (``opened_here``)."""


@dataclass(frozen=True, slots=True)
class LookInLog:
    """Look for the reply in the log (``found``, ``generated_here``)."""


@dataclass(frozen=True, slots=True)
class Prepare:
    """Prepare the source's plan (``loggable``)."""


@dataclass(frozen=True, slots=True)
class LogPlan:
    """Log the plan's reply under its key (``logged``, ``made_here``)."""


@dataclass(frozen=True, slots=True)
class Refuse:
    """Refuse the stream (whatever was prepared is closed, nothing held)."""

    reason: Reason
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Deliver:
    """The decision: where the frames come from and the record that says so."""

    origin: Origin
    record: Record
    #: Prepare a plan beside a delivery from the log, to generate the reply here should
    #: its generator (another replica) be lost.
    takeover_plan: bool = False


Step = ClaimLive | LookInLog | Prepare | LogPlan | Refuse | Deliver


def decide(facts: Facts) -> Step:
    """The next step of one delivery's decision, from what is known so far."""
    if facts.has_stream_id and not facts.regenerates:
        # Claim, then pay: one call makes a live reply, whoever else opens or resumes it.
        if facts.opened_here is None:
            return ClaimLive()
        return Deliver(
            origin=Origin.LOG, record=Record.VERIFY if facts.opened_here else Record.ATTACH
        )
    if facts.has_stream_id and facts.found is None:
        return LookInLog()
    if facts.found:
        return Deliver(
            origin=Origin.LOG, record=Record.ATTACH, takeover_plan=not facts.generated_here
        )
    if facts.resuming and not facts.regenerates:
        return Refuse(Reason.RESUME_UNAVAILABLE, "no logged reply")
    if facts.loggable is None:
        return Prepare()
    if facts.resuming and not facts.loggable:
        return Refuse(Reason.RESUME_UNAVAILABLE, "this reply is not logged")
    if facts.has_stream_id and facts.loggable and facts.logged is None:
        return LogPlan()
    if facts.logged and not (facts.made_here and not facts.resuming):
        # A resume the producer had no log of (it restarted), or a reply another delivery
        # generates: from the log, from resume_after + 1, without the fault.
        return Deliver(origin=Origin.LOG, record=Record.VERIFY)
    return Deliver(origin=Origin.PLAN, record=Record.VERIFY)
