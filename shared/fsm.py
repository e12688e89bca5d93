"""One state-machine shape for every machine in replywire.

Theory of operation
-------------------
A machine is data plus one method, in the manner of h11's ``_state.py`` and h2's
``stream.py``. A :class:`MachineSpec` names the states and the inputs (both
``StrEnum``), the initial state, the final states, and the table
``(state, input) -> state``. A :class:`Machine` holds one current state; its
:meth:`Machine.fire` is the only code that changes it, and it logs every change
once, as ``state_changed`` with ``from_state``, ``to_state``, ``input`` and the
caller's fields. A pair that is not in the table is a bug in the caller
(:class:`InvalidTransition`), never a verdict: a verdict is a named input.

Final states have no way out, and every table is checked for that (and for
states and inputs of the right kind) when the spec is made. The logger (a
:class:`shared.trace_logger.TraceLogger`) defaults to one that drops everything, so a
machine used without logging configured prints nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Generic, TypeVar

from replywire.shared.errors import InvalidTransition
from replywire.shared.trace_logger import NULL_LOGGER, TraceLogger

S = TypeVar("S", bound=StrEnum)
I = TypeVar("I", bound=StrEnum)  # noqa: E741 - the conventional name of an input type


class MachineSpec(Generic[S, I]):
    """A machine's states, inputs, initial and final states, and its table; checked when
    made. (A plain class, not a frozen dataclass: mypyc cannot compile a generic dataclass.)"""

    def __init__(
        self,
        name: str,
        states: type[S],
        inputs: type[I],
        initial: S,
        final: frozenset[S],
        table: Mapping[tuple[S, I], S],
    ) -> None:
        self.name = name
        self.states = states
        self.inputs = inputs
        self.initial = initial
        self.final = final
        self.table = table
        for (state, event), target in table.items():
            if not (
                isinstance(state, states)
                and isinstance(event, inputs)
                and isinstance(target, states)
            ):
                raise TypeError(f"{name}: ({state!r}, {event!r}) -> {target!r} mixes kinds")
            if state in final:
                raise ValueError(f"{name}: final state {state} has a way out on {event}")
        if initial in final:
            raise ValueError(f"{name}: the initial state is final")

    def __repr__(self) -> str:
        return f"MachineSpec(name={self.name!r}, initial={self.initial!r})"

    def target(self, state: S, event: I) -> S | None:
        """Where ``event`` leads from ``state``; None when the table has no such pair."""
        return self.table.get((state, event))

    def all_states(self) -> list[S]:
        return list(self.states)

    def all_inputs(self) -> list[I]:
        return list(self.inputs)

    @property
    def open_states(self) -> frozenset[S]:
        return frozenset(set(self.states) - self.final)

    def edges(self) -> list[tuple[S, I, S]]:
        """Every ``(state, input, target)`` in the order of the states, then the inputs."""
        states, inputs = self.all_states(), self.all_inputs()
        return sorted(
            ((state, event, target) for (state, event), target in self.table.items()),
            key=lambda edge: (states.index(edge[0]), inputs.index(edge[1])),
        )


class Machine(Generic[S, I]):
    """One running machine: its state, and the one method that changes and logs it."""

    def __init__(
        self,
        spec: MachineSpec[S, I],
        logger: TraceLogger | None = None,
        *,
        on_final: Callable[[S], None] | None = None,
        log_initial: bool = False,
    ) -> None:
        self.spec = spec
        self._state = spec.initial
        self._log = logger or NULL_LOGGER
        self._on_final = on_final
        if log_initial:
            self._log.info("state_changed", from_state=None, to_state=spec.initial.value)

    @property
    def state(self) -> S:
        return self._state

    @property
    def finished(self) -> bool:
        return self._state in self.spec.final

    def can_fire(self, event: I) -> bool:
        return self.spec.target(self._state, event) is not None

    def fire(self, event: I, **fields: object) -> S:
        """Move on ``event``; log the change once. Raises ``InvalidTransition`` if the
        table has no entry for the current state and ``event``."""
        target = self.spec.target(self._state, event)
        if target is None:
            raise InvalidTransition(
                f"{self.spec.name}: no transition from {self._state} on {event}"
            )
        self._log.info(
            "state_changed",
            from_state=self._state.value,
            to_state=target.value,
            input=event.value,
            **fields,
        )
        self._state = target
        if target in self.spec.final and self._on_final is not None:
            self._on_final(target)
        return target
