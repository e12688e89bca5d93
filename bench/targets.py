"""The targets of issues 22 and 37, each met or not met with its figures, from a ``make bench`` run.

Section 2 (replywire against the floor sides, whatever the build): the consumer's streams/s ≥
0.9 times the checks-only client's at every chunking and at the middle concurrency row (1,000
streams at the full size), each reading the bare server (``CONSUMER_ALONE``: the replywire
pair's streams/s would charge the consumer with its producer's cost too); its CPU per paced
chunk ≤ 1.1 times the checks-only client's; the producer's CPU per stream ≤ 1.1 times the
records-only server's at every chunking, and per paced chunk; memory per open paced stream ≤
1.3 times the bare pair's, each side; the largest paced N held ≥ 0.85 times the bare pair's.
Section 3 (the floor sides against the bare pair, with the compiled build): checks only ≥ 0.9
times the bare pair's streams/s and records only ≤ 1.15 times the bare server's CPU per stream,
at every chunking. Issue 37, item 5 (replywire against the SSE stack, the ``sse stack``
side of ``bench.paced``): the replywire pair's CPU per paced chunk (consumer + producer) at
most the SSE pair's, the replywire consumer's at most the SSE client's, and the largest paced
N the replywire pair holds (its producer pinned to one core) at least the SSE pair's. Issue
37, item 6 (issue 22's floor as it proposed, from ``bench.record_floor``'s rounds): the
records' CPU per stream (the producer's four at info over its stream's code at warning; the
consumer's seven at info over the consumer at warning) at most twice the least JSON lines'
(the same records as ``bench.least_records`` writes them, over the same side without them:
the records-only server at warning, the checks-only client), at each chunking, on both sides;
and the records-only server's CPU per stream at most its stream's code plus the least lines,
i.e. at most the least-records server's, on the producer side only (the floor measures no
consumer session writing least lines, only the checks-only client). A target is met when
every figure it names is; a figure that was not measured (None) leaves it not measured, as
does a ratio over least lines that cost nothing measurable (at most zero).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from bench.common import RECORDS_ONLY, middle
from bench.record_floor import LEAST_RECORDS


@dataclass(frozen=True)
class Target:
    #: The issue's section (22) or item (37) the target is.
    section: int
    what: str
    #: ≥ bound when ``at_least``, else ≤ bound.
    bound: float
    at_least: bool
    #: (where, figure) for every point the target is read at.
    figures: tuple[tuple[str, float | None], ...]
    #: Why its figures do not count (the build was not the one the target names), or "".
    not_applicable: str = ""
    issue: int = 22

    def misses(self) -> list[str]:
        return [
            where for where, figure in self.figures if figure is not None and not self.holds(figure)
        ]

    def holds(self, figure: float) -> bool:
        return figure >= self.bound if self.at_least else figure <= self.bound

    @property
    def verdict(self) -> str:
        if self.not_applicable:
            return f"not measured ({self.not_applicable})"
        missed = self.misses()
        if missed:
            return f"not met ({', '.join(missed)})"
        if not self.figures or any(figure is None for _, figure in self.figures):
            return "not measured"
        return "met"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict}


def _by_chunking(streams: dict[str, Any], key: str) -> tuple[tuple[str, float | None], ...]:
    return tuple((chunking, row.get(key)) for chunking, row in streams["sequential"].items())


def _by_n(paced: dict[str, Any], key: str, label: str = "") -> tuple[tuple[str, Any], ...]:
    return tuple((f"N {n}{label}", row.get(key)) for n, row in paced["by_streams"].items())


def _ratio(over: Any, under: Any) -> float | None:
    """``over / under``, or None when either was not measured or is below zero, or ``under``
    is zero: a cost below zero is noise of differences of medians (a short run on a shared
    machine), and counting it as a pass of an upper bound would be a verdict nobody measured."""
    if over is None or under is None or over < 0 or under <= 0:
        return None
    return round(over / under, 3)


def _records_over_least(floor: dict[str, Any]) -> tuple[tuple[str, float | None], ...]:
    """Each side's records over its least lines, each over the side without them, by chunking."""
    figures = tuple(
        (f"{chunking} {label}", _ratio(row.get("records_us"), row.get("least_records_us")))
        for side, label in (("server", "producer"), ("client", "consumer"))
        for chunking, row in floor.get(side, {}).items()
    )
    return figures or (("record floor", None),)


def _records_only_over_least(floor: dict[str, Any]) -> tuple[tuple[str, float | None], ...]:
    """The records-only server's CPU per stream over the least-records server's, by chunking."""
    figures: list[tuple[str, float | None]] = []
    for chunking, row in floor.get("server", {}).items():
        us = row.get("server_cpu_us_per_stream", {})
        figures.append((chunking, _ratio(us.get(RECORDS_ONLY), us.get(LEAST_RECORDS))))
    return tuple(figures) or (("record floor", None),)


def targets(results: dict[str, Any]) -> list[Target]:
    streams, paced = results["streams"], results["paced"]
    floor = results.get("record_floor", {})
    concurrency = streams["concurrency"]
    n = str(middle([int(key) for key in concurrency]))
    compiled = results["build"].startswith("compiled")
    pure = "" if compiled else f"the run's build: {results['build']}"
    return [
        Target(2, "consumer streams/s ≥ 0.9× checks only (both against the bare server)", 0.9,
               True, (
            *_by_chunking(streams, "consumer_over_checks_only"),
            (f"{n} concurrent", concurrency[n].get("consumer_over_checks_only")),
        )),
        Target(2, "paced consumer CPU/chunk ≤ 1.1× checks only", 1.1, False,
               _by_n(paced, "consumer_cpu_over_checks_only")),
        Target(2, "producer CPU/stream ≤ 1.1× records only", 1.1, False,
               _by_chunking(streams, "producer_cpu_over_records_only")),
        Target(2, "paced producer CPU/chunk ≤ 1.1× records only", 1.1, False,
               _by_n(paced, "producer_cpu_over_records_only")),
        Target(2, "memory per open paced stream ≤ 1.3× the bare pair's, each side", 1.3, False, (
            *_by_n(paced, "consumer_memory_over_bare_pair", " consumer"),
            *_by_n(paced, "producer_memory_over_bare_pair", " producer"),
        )),
        Target(2, "largest paced N held ≥ 0.85× the bare pair's", 0.85, True,
               (("largest N held", paced.get("paced_n_over_bare_pair")),)),
        Target(3, "checks only streams/s ≥ 0.9× bare pair (compiled)", 0.9, True,
               _by_chunking(streams, "checks_only_over_bare_pair"), pure),
        Target(3, "records only CPU/stream ≤ 1.15× bare server (compiled)", 1.15, False,
               _by_chunking(streams, "records_only_server_cpu_over_bare_server"), pure),
        Target(5, "paced pair CPU/chunk (consumer + producer) ≤ the SSE pair's", 1.0, False,
               _by_n(paced, "pair_cpu_over_sse_pair"), issue=37),
        Target(5, "paced consumer CPU/chunk ≤ the SSE client's", 1.0, False,
               _by_n(paced, "consumer_cpu_over_sse_client"), issue=37),
        Target(5, "largest paced N held ≥ the SSE pair's", 1.0, True,
               (("largest N held", paced.get("paced_n_over_sse_stack")),), issue=37),
        Target(6, "records' CPU/stream ≤ 2× the same records as the least JSON lines",
               2.0, False, _records_over_least(floor), issue=37),
        Target(6, "records only CPU/stream ≤ the stream's code + the least lines", 1.0, False,
               _records_only_over_least(floor), issue=37),
    ]  # fmt: skip


def verdicts(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target as data (results.json's ``targets``)."""
    return [target.as_dict() for target in targets(results)]
