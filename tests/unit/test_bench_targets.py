"""bench.targets' verdicts and bench.profile's time entered into a set of files: exact."""

from __future__ import annotations

import cProfile
import pstats

from bench.profile import entered
from bench.targets import Target


def test_a_target_is_met_only_when_every_figure_is() -> None:
    at_least = Target(3, "x ≥ 0.9", 0.9, True, (("frame", 0.9), ("64", 1.2)))
    assert at_least.verdict == "met"
    missed = Target(3, "x ≥ 0.9", 0.9, True, (("frame", 0.89), ("64", 1.2), ("4096", 0.5)))
    assert missed.verdict == "not met (frame, 4096)"
    at_most = Target(2, "y ≤ 1.1", 1.1, False, (("N 4", 1.1), ("N 8", 1.11)))
    assert at_most.verdict == "not met (N 8)"
    # A figure missing leaves a target not measured, unless another already misses it.
    assert Target(2, "y ≤ 1.1", 1.1, False, (("N 4", None),)).verdict == "not measured"
    assert Target(2, "y ≤ 1.1", 1.1, False, (("a", None), ("b", 2.0))).verdict == "not met (b)"
    assert Target(2, "y ≤ 1.1", 1.1, False, ()).verdict == "not measured"
    pure = Target(3, "x ≥ 0.9", 0.9, True, (("frame", 1.0),), "the run's build: pure")
    assert pure.verdict == "not measured (the run's build: pure)"
    assert pure.as_dict()["verdict"] == pure.verdict


def _inner(n: int) -> int:
    return sum(range(n))


def _outer(n: int) -> int:
    return _inner(n) + _inner(n)


def test_time_entered_into_files_counts_a_nested_call_once() -> None:
    profile = cProfile.Profile()
    profile.runcall(_outer, 200_000)
    table = getattr(pstats.Stats(profile), "stats")  # noqa: B009
    outer = next(v for k, v in table.items() if k[2] == "_outer")
    # _outer has no caller in these files (the profiler called it): its cumulative time,
    # which holds both calls of _inner, and nothing of _inner again.
    assert entered(profile, lambda path: path == __file__) == outer[3]
    assert entered(profile, lambda path: False) == 0.0
