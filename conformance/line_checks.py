"""The line protocol's own checks: lines that are not valid input, which a core MUST answer
with ``error`` (docs/conformance.md#the-core-mode-and-its-line-protocol). Each is a kit
vector with one limit set to 0 or to -1: a limit below 1 is no limit at all, and a consumer
refuses it before reading anything (docs/protocol.md#limits). A vector file cannot hold
such a vector (its schema wants every limit at least 1, and the wire mode's CLIs refuse the
flag), so the core mode sends these along with the vectors it runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

from conformance.report import Outcome
from replywire.shared.vectors import LIMIT_KEYS, Mode, Vector

#: The values below 1 each limit is checked with, and the word an id gives each.
BELOW_ONE: Final = ((0, "0"), (-1, "negative"))
#: Why a line check's answer must be an ``error`` line (its ``expected``'s ``error``).
WHY: Final = "a limit below 1 is not valid input"


def line_checks(vectors: Sequence[Vector]) -> list[Vector]:
    """Each limit at 0 and at -1, on the first core vector that completes with the default
    limits (none when there is no such vector among ``vectors``)."""
    base = next(
        (
            vector
            for vector in vectors
            if Mode.CORE in vector.modes
            and vector.limits is None
            and vector.expected["status"] == "complete"
        ),
        None,
    )
    if base is None:
        return []
    return [
        dataclasses.replace(
            base,
            id=f"line.{name}-{word}.{base.wire}",
            description=f"{base.id} with {name} = {value}: answered with error",
            stream_id=f"line.{name}-{word}.{base.wire}",
            limits={name: value},
            modes=(Mode.CORE,),
            expected={**base.expected, "error": WHY},
        )
        for name in LIMIT_KEYS
        for value, word in BELOW_ONE
    ]


def expects_error(vector: Vector) -> bool:
    """Is ``vector`` a line check, whose answer must be an ``error`` line?"""
    return "error" in vector.expected


def judged(check: Vector, answer: Mapping[str, Any]) -> Outcome:
    """A line check passes when the answer is an ``error`` line, whatever it says."""
    if isinstance(answer.get("error"), str):
        return Outcome(check)
    status = answer.get("status")
    return Outcome(check, error=f"answered {status!r}, not error: {WHY} (docs/protocol.md#limits)")
