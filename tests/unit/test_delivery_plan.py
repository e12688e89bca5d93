"""The delivery's decision (``producer.delivery_plan.decide``) as a table, without gRPC,
a log or a source: each case's questions in order and its outcome; and over every
combination of answers, the decision ends, asks nothing twice, and asks the log about a
reply only when the request names one."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest

from replywire.producer.delivery_plan import (
    ClaimLive,
    Deliver,
    Facts,
    LogPlan,
    LookInLog,
    Origin,
    Prepare,
    Record,
    Refuse,
    Step,
    decide,
)
from replywire.shared.reasons import Reason

#: The facts each question adds, by the answer it gets.
ANSWER_FIELDS: dict[type[Any], tuple[str, ...]] = {
    ClaimLive: ("opened_here",),
    LookInLog: ("found", "generated_here"),
    Prepare: ("loggable",),
    LogPlan: ("logged", "made_here"),
}


def run(facts: Facts, answers: dict[str, bool]) -> tuple[list[str], Deliver | Refuse]:
    """Ask ``decide`` until it decides, answering each question from ``answers``."""
    asked: list[str] = []
    for _ in range(10):
        step: Step = decide(facts)
        if isinstance(step, Deliver | Refuse):
            return asked, step
        asked.append(type(step).__name__)
        # A field the case leaves out is False (not found: nothing generates it here).
        found = {field: answers.get(field, False) for field in ANSWER_FIELDS[type(step)]}
        facts = replace(facts, **found)
    raise AssertionError(f"no decision after {asked}")


PLAN_VERIFY = Deliver(origin=Origin.PLAN, record=Record.VERIFY)
LOG_VERIFY = Deliver(origin=Origin.LOG, record=Record.VERIFY)
LOG_ATTACH = Deliver(origin=Origin.LOG, record=Record.ATTACH)
TAKEOVER = Deliver(origin=Origin.LOG, record=Record.ATTACH, takeover_plan=True)
NO_LOG = Refuse(Reason.RESUME_UNAVAILABLE, "no logged reply")
NOT_LOGGED = Refuse(Reason.RESUME_UNAVAILABLE, "this reply is not logged")

# (case, stream id?, regenerates?, resuming?, answers, questions asked, outcome)
TABLE = [
    ("no id: the plan's own", False, True, False, {"loggable": True}, ["Prepare"], PLAN_VERIFY),
    ("no id, a frame fault", False, True, False, {"loggable": False}, ["Prepare"], PLAN_VERIFY),
    ("no id, a resume the source remakes", False, True, True, {"loggable": True}, ["Prepare"],
     PLAN_VERIFY),
    ("no id, a resume of a reply never logged", False, True, True, {"loggable": False},
     ["Prepare"], NOT_LOGGED),
    ("no id, live", False, False, False, {"loggable": False}, ["Prepare"], PLAN_VERIFY),
    ("no id, a live resume", False, False, True, {}, [], NO_LOG),
    ("live, claimed here: the call opened", True, False, False, {"opened_here": True},
     ["ClaimLive"], LOG_VERIFY),
    ("live, claimed elsewhere: attached", True, False, False, {"opened_here": False},
     ["ClaimLive"], LOG_ATTACH),
    ("live, a resume", True, False, True, {"opened_here": False}, ["ClaimLive"], LOG_ATTACH),
    ("recorded, in the log, generated here", True, True, False,
     {"found": True, "generated_here": True}, ["LookInLog"], LOG_ATTACH),
    ("recorded, in the log, another replica's: a takeover plan", True, True, True,
     {"found": True, "generated_here": False}, ["LookInLog"], TAKEOVER),
    ("recorded, new, made here: from its plan", True, True, False,
     {"found": False, "loggable": True, "logged": True, "made_here": True},
     ["LookInLog", "Prepare", "LogPlan"], PLAN_VERIFY),
    ("recorded, a resume the producer has no log of: logged anew, from the log", True, True,
     True, {"found": False, "loggable": True, "logged": True, "made_here": True},
     ["LookInLog", "Prepare", "LogPlan"], LOG_VERIFY),
    ("recorded, new, another delivery made it meanwhile", True, True, False,
     {"found": False, "loggable": True, "logged": True, "made_here": False},
     ["LookInLog", "Prepare", "LogPlan"], LOG_VERIFY),
    ("recorded, a frame fault: not logged, the plan's own", True, True, False,
     {"found": False, "loggable": False}, ["LookInLog", "Prepare"], PLAN_VERIFY),
    ("recorded, a resume of a faulted reply", True, True, True,
     {"found": False, "loggable": False}, ["LookInLog", "Prepare"], NOT_LOGGED),
]  # fmt: skip


@pytest.mark.parametrize(
    ("has_id", "regenerates", "resuming", "answers", "asked", "outcome"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_every_delivery_case(
    has_id: bool,
    regenerates: bool,
    resuming: bool,
    answers: dict[str, bool],
    asked: list[str],
    outcome: Deliver | Refuse,
) -> None:
    facts = Facts(has_stream_id=has_id, regenerates=regenerates, resuming=resuming)
    assert run(facts, answers) == (asked, outcome)


FIELDS = ("opened_here", "found", "generated_here", "loggable", "logged", "made_here")


@pytest.mark.parametrize(
    ("has_id", "regenerates", "resuming"), list(itertools.product((False, True), repeat=3))
)
def test_any_answers_end_in_a_decision_that_asks_nothing_twice(
    has_id: bool, regenerates: bool, resuming: bool
) -> None:
    facts = Facts(has_stream_id=has_id, regenerates=regenerates, resuming=resuming)
    for values in itertools.product((False, True), repeat=len(FIELDS)):
        answers = dict(zip(FIELDS, values, strict=True))
        asked, outcome = run(facts, answers)
        assert len(asked) == len(set(asked))
        if not has_id:  # nothing to claim, look for or log
            assert set(asked) <= {"Prepare"}
        if not regenerates and has_id:  # a live reply: claimed before anything is paid
            assert asked == ["ClaimLive"]
        if isinstance(outcome, Deliver) and outcome.origin is Origin.PLAN:
            assert "Prepare" in asked  # a plan to deliver from
