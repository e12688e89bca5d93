"""Comparing what a consumer concluded with a vector's ``expected``, and the runner's table."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TextIO

from replywire.shared.vectors import CHAT_EXPECTED_KEYS, Vector

#: What a consumer's answer must match, beside ``expected``'s own key when it differs.
COMPARED: Final = (
    "status",
    "reason",
    "detail",
    "frames",
    "bytes",
    "provisional_content",
    "accepted_answer",
    "citations",
)
#: The longest value shown in a failure.
SHOWN_CHARS: Final = 160


@dataclass(frozen=True, slots=True)
class Outcome:
    """One vector's run: the differences (field, expected, got), or why there is no answer."""

    vector: Vector
    differences: tuple[tuple[str, Any, Any], ...] = ()
    error: str | None = None

    @property
    def passed(self) -> bool:
        return not self.differences and self.error is None

    @property
    def reason(self) -> str:
        """The row of the table: the expected reason (``complete`` for none), or ``error
        line`` for a line the core must answer with ``error`` (``conformance.line_checks``)."""
        if "error" in self.vector.expected:
            return "error line"
        return str(self.vector.expected["reason"] or "complete")


@dataclass
class Report:
    mode: str
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(outcome.passed for outcome in self.outcomes)

    def write(self, out: TextIO, max_failures: int = 50) -> None:
        totals: Counter[str] = Counter()
        passes: Counter[str] = Counter()
        for outcome in self.outcomes:
            totals[outcome.reason] += 1
            passes[outcome.reason] += outcome.passed
        width = max([len("reason"), *map(len, totals)])
        out.write(f"conformance, {self.mode} mode\n")
        out.write(f"{'reason':<{width}}  vectors  passed  failed\n")
        for reason in sorted(totals):
            failed = totals[reason] - passes[reason]
            out.write(f"{reason:<{width}}  {totals[reason]:>7}  {passes[reason]:>6}  {failed:>6}\n")
        total, passed = sum(totals.values()), sum(passes.values())
        out.write(f"{'total':<{width}}  {total:>7}  {passed:>6}  {total - passed:>6}\n")
        failures = [outcome for outcome in self.outcomes if not outcome.passed]
        for outcome in failures[:max_failures]:
            out.write(f"FAIL {outcome.vector.id}\n")
            if outcome.error is not None:
                out.write(f"  {_shown(outcome.error)}\n")
            for name, expected, got in outcome.differences:
                out.write(f"  {name}: expected {_shown(expected)}, got {_shown(got)}\n")
        if len(failures) > max_failures:
            out.write(f"... and {len(failures) - max_failures} more failures\n")


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def compare(vector: Vector, got: Mapping[str, Any]) -> Outcome:
    """A consumer's answer (the line protocol's keys) against the vector's expected; for a
    chat reply (its expected has a ``turn``), its ``turn``, ``call`` and ``notes`` too, a
    key absent on either side compared as null."""
    expected = vector.expected
    names = COMPARED + (CHAT_EXPECTED_KEYS if "turn" in expected else ())
    differences = tuple(
        (name, expected.get(name), got.get(name))
        for name in names
        if not _same(expected.get(name), got.get(name))
    )
    return Outcome(vector, differences)


def _same(expected: Any, got: Any) -> bool:
    """Equal as JSON values: ``1`` is not ``true``, nor ``1.0`` an integer's ``1``."""
    return json.dumps(expected, sort_keys=True) == json.dumps(got, sort_keys=True)


def from_result_document(document: Mapping[str, Any]) -> dict[str, Any]:
    """A result document's fields under the line protocol's names."""
    stats = document.get("stats")
    stats = stats if isinstance(stats, dict) else {}
    return {
        "status": document.get("status"),
        "reason": document.get("reason"),
        "detail": document.get("detail"),
        "frames": stats.get("application_frames"),
        "bytes": stats.get("bytes_received"),
        "provisional_content": document.get("provisional_content"),
        "accepted_answer": document.get("accepted_answer"),
        "citations": document.get("citations"),
        **{key: document[key] for key in CHAT_EXPECTED_KEYS if key in document},
    }


def unanswered(vectors: Iterable[Vector], why: str) -> list[Outcome]:
    return [Outcome(vector, error=why) for vector in vectors]
