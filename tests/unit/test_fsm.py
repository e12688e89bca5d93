"""Every machine, every state x input pair: in the table and logged once, or a bug.

The machines are data (``shared.fsm.MachineSpec``); these rules hold for each:
a pair in the table moves to its target and logs exactly one ``state_changed``;
a pair not in the table raises ``InvalidTransition`` and changes nothing; a
final state has no way out; any sequence of inputs (hypothesis, as h2 does)
keeps the machine in a known state and logs one record per move.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from replywire.consumer.reader_states import SPEC as READER_SPEC
from replywire.producer.replylog.states import REPLY as REPLY_SPEC
from replywire.producer.states import SPEC as PRODUCER_SPEC
from replywire.shared.consumer_core import SPEC as CORE_SPEC
from replywire.shared.errors import InvalidTransition
from replywire.shared.fsm import Machine, MachineSpec

SPECS: list[MachineSpec[Any, Any]] = [PRODUCER_SPEC, CORE_SPEC, READER_SPEC, REPLY_SPEC]


def pairs(spec: MachineSpec[Any, Any]) -> list[tuple[StrEnum, StrEnum]]:
    return [(state, event) for state in spec.all_states() for event in spec.all_inputs()]


def machine_in(
    spec: MachineSpec[Any, Any], state: StrEnum, logger: Any = None
) -> Machine[Any, Any]:
    """A machine put in ``state`` (a test may start anywhere; the table is what is tested)."""
    machine: Machine[Any, Any] = Machine(spec, logger)
    machine._state = state
    return machine


ALL_PAIRS = [
    pytest.param(spec, state, event, id=f"{spec.name}:{state}:{event}")
    for spec in SPECS
    for state, event in pairs(spec)
]


@pytest.mark.parametrize(("spec", "state", "event"), ALL_PAIRS)
def test_every_state_input_pair(
    spec: MachineSpec[Any, Any], state: StrEnum, event: StrEnum
) -> None:
    target = spec.target(state, event)
    with capture_logs() as records:
        machine = machine_in(spec, state, structlog.get_logger())
        if target is None:
            with pytest.raises(InvalidTransition):
                machine.fire(event)
            assert machine.state is state
            assert records == []
        else:
            assert machine.fire(event, detail="x") is target
            assert machine.state is target
            assert records == [
                {
                    "event": "state_changed",
                    "from_state": state.value,
                    "to_state": target.value,
                    "input": event.value,
                    "detail": "x",
                    "log_level": "info",
                }
            ]
    if state in spec.final:
        assert target is None, "a final state has no way out"


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_every_open_state_can_end_and_every_state_is_reachable(spec: MachineSpec[Any, Any]) -> None:
    reachable = {spec.initial}
    frontier = [spec.initial]
    while frontier:
        state = frontier.pop()
        for event in spec.all_inputs():
            target = spec.target(state, event)
            if target is not None and target not in reachable:
                reachable.add(target)
                frontier.append(target)
    assert reachable == set(spec.all_states())
    for state in spec.open_states:
        assert any(spec.target(state, event) is not None for event in spec.all_inputs()), state


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
@given(data=st.data())
def test_any_input_sequence(spec: MachineSpec[Any, Any], data: st.DataObject) -> None:
    events = data.draw(st.lists(st.sampled_from(spec.all_inputs()), max_size=30))
    with capture_logs() as records:
        machine: Machine[Any, Any] = Machine(spec, structlog.get_logger())
        moves = 0
        for event in events:
            before = machine.state
            expected = spec.target(before, event)
            if expected is None:
                with pytest.raises(InvalidTransition):
                    machine.fire(event)
                assert machine.state is before
            else:
                machine.fire(event)
                moves += 1
                assert machine.state is expected
            assert machine.finished == (machine.state in spec.final)
    assert len(records) == moves


def test_the_default_logger_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    machine: Machine[Any, Any] = Machine(PRODUCER_SPEC)
    machine.fire(PRODUCER_SPEC.all_inputs()[1])
    assert capsys.readouterr() == ("", "")


def test_a_spec_refuses_a_way_out_of_a_final_state() -> None:
    class State(StrEnum):
        A = "a"
        B = "b"

    class Input(StrEnum):
        GO = "go"

    final = frozenset({State.B})
    with pytest.raises(ValueError, match="final state b"):
        MachineSpec[State, Input](
            "bad", State, Input, State.A, final, {(State.B, Input.GO): State.A}
        )
    mixed: Any = {(State.A, State.B): State.B}
    with pytest.raises(TypeError):
        MachineSpec[State, Input]("bad", State, Input, State.A, final, mixed)
