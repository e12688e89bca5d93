"""bench.targets' verdicts and issue 37 item 6's arithmetic, and bench.profile's time entered
into a set of files: exact."""

from __future__ import annotations

import cProfile
import pstats
from typing import Any

from bench.profile import entered
from bench.targets import Target, targets


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


def _floor_results(floor: dict[str, Any]) -> dict[str, Any]:
    """A results dict with nothing measured but ``bench.record_floor``'s rows."""
    return {
        "build": "pure",
        "streams": {"sequential": {}, "concurrency": {"1": {}}},
        "paced": {"by_streams": {}},
        "record_floor": floor,
    }


def _item_6(results: dict[str, Any]) -> list[Target]:
    return [t for t in targets(results) if (t.issue, t.section) == (37, 6)]


def test_issue_37_item_6_reads_the_floor_s_records_against_the_least_lines() -> None:
    """Records over the least lines (each over its side without them) ≤ 2 on both sides; the
    records-only server over the least-records server ≤ 1, producer side only."""
    server = {
        "frame": {
            "records_us": 150.0,  # records only 1,240 - the stream's code 1,090
            "least_records_us": 94.0,  # least records 1,184 - 1,090
            "server_cpu_us_per_stream": {
                "bare server": 968.0, "stream code only": 1090.0,
                "least records": 1184.0, "records only": 1240.0,
            },
        },
        "4096": {
            "records_us": 100.0,
            "least_records_us": 40.0,
            "server_cpu_us_per_stream": {"least records": 500.0, "records only": 450.0},
        },
    }  # fmt: skip
    client = {
        "frame": {"records_us": 230.0, "least_records_us": 117.0},
        "4096": {"records_us": 150.0, "least_records_us": 0.0},  # no measurable least cost
        "64": {"records_us": -3.0, "least_records_us": 2.0},  # noise: no pass of ≤ 2
    }
    twice, at_most = _item_6(_floor_results({"server": server, "client": client}))
    assert (twice.bound, twice.at_least, at_most.bound, at_most.at_least) == (2, False, 1, False)
    assert twice.figures == (
        ("frame producer", 1.596),
        ("4096 producer", 2.5),
        ("frame consumer", 1.966),
        ("4096 consumer", None),
        ("64 consumer", None),
    )
    assert twice.verdict == "not met (4096 producer)"
    assert at_most.figures == (("frame", 1.047), ("4096", 0.9))
    assert at_most.verdict == "not met (frame)"
    # Not measured: no record floor in the results, or a side without its figures.
    for target in _item_6(_floor_results({})):
        assert target.figures == (("record floor", None),)
        assert target.verdict == "not measured"
    met = {"server": {"frame": {"records_us": 2.0, "least_records_us": 1.0,
                                "server_cpu_us_per_stream": {"least records": 9.0,
                                                             "records only": 9.0}}}}  # fmt: skip
    assert [t.verdict for t in _item_6(_floor_results(met))] == ["met", "met"]
