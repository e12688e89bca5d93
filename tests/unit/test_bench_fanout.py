"""bench.fanout's arithmetic: commands counted by difference, a round's row from its readers'
reads, what the readers beyond the first cost, a row's medians over rounds: exact."""

from __future__ import annotations

from typing import Any

import pytest

from bench.fanout import (
    HEADER,
    Measured,
    Read,
    added,
    cells,
    command_calls,
    difference,
    figures,
    joined,
    summary,
)


def test_commands_are_counted_by_difference_without_the_benchmark_s_own() -> None:
    before = command_calls({"cmdstat_xread": {"calls": 3, "usec": 9}, "cmdstat_info": {"calls": 5}})
    after = command_calls(
        {
            "cmdstat_xread": {"calls": 7},
            "cmdstat_info": {"calls": 6},
            "cmdstat_evalsha": {"calls": 2},
            "cmdstat_client|setinfo": {"calls": 0},
        }
    )
    assert before == {"xread": 3}
    # Largest first; a command that did not run is left out; INFO (ours) never counted.
    assert difference(before, after) == {"xread": 4, "evalsha": 2}
    assert list(difference(before, after)) == ["xread", "evalsha"]


def reads(*spec: tuple[str, str, int, float | None, float]) -> list[Read]:
    return [Read(status, digest, chunks, first, end) for status, digest, chunks, first, end in spec]


def test_a_round_s_row_from_its_readers() -> None:
    measured = Measured(
        reads(
            ("ok", "a", 80, 1.0, 9.0),  # the first reader: the reply ended at 9.0
            ("ok", "a", 80, 2.0, 9.5),
            ("ok", "b", 79, 9.2, 9.6),  # other bytes, and its first chunk after the end
            ("reply_log_busy", "e", 0, None, 3.0),
        ),
        provider_calls=1,
        cpu_s=0.2395,
        commands={"xread": 160, "evalsha": 80, "hgetall": 4},
    )
    row = figures(measured)
    assert (row["readers"], row["complete"], row["same_bytes"], row["digests"]) == (4, 3, 2, 2)
    assert row["failed"] == {"reply_log_busy": 1}
    assert row["joined_live"] == 2
    # From the first reader's first chunk: the last first chunk, and the reply's end.
    assert (row["last_joined_s"], row["reply_s"]) == (8.2, 8.0)
    # The reply's chunks: the common digest's; reader-chunks: every chunk any reader read.
    assert (row["chunks"], row["reader_chunks"]) == (80, 239)
    assert row["producer_cpu_us_per_reader_chunk"] == round(239_500 / 239, 3)
    assert row["redis_commands"] == 244
    assert row["redis_commands_per_reader_chunk"] == round(244 / 239, 3)
    assert row["redis_commands_per_chunk"] == round(244 / 80, 3)
    assert row["xread_per_chunk"] == 2.0


def test_a_row_with_no_reader_complete_has_no_figure_per_chunk() -> None:
    row = figures(Measured(reads(("generator_lost", "x", 0, None, 1.0)), 1, 0.1, {"xread": 2}))
    assert (row["complete"], row["same_bytes"], row["chunks"], row["joined_live"]) == (0, 0, 0, 0)
    assert (row["last_joined_s"], row["reply_s"]) == (None, None)
    assert row["redis_commands_per_chunk"] is None
    assert row["producer_cpu_us_per_reader_chunk"] is None


def row(readers: int, cpu_s: float, commands: int, same: int | None = None) -> dict[str, Any]:
    chunks = 80
    return {
        "readers": readers,
        "complete": readers,
        "failed": {},
        "same_bytes": readers if same is None else same,
        "joined_live": readers,
        "provider_calls": 1,
        "reader_chunks": readers * chunks,
        "chunks": chunks,
        "producer_cpu_s": cpu_s,
        "producer_cpu_us_per_reader_chunk": cpu_s * 1e6 / (readers * chunks),
        "redis_commands": commands,
        "redis_commands_per_reader_chunk": commands / (readers * chunks),
        "redis_commands_per_chunk": commands / chunks,
        "xread_per_chunk": 1.0,
        "commands": {"xread": 80},
    }


def test_what_the_readers_beyond_the_first_cost() -> None:
    one, ten = row(1, 0.15, 674), row(10, 0.186, 719)
    assert added(one, ten) == {
        # 36 ms over 9 readers of 80 chunks; 45 commands over 9 readers (5 an Open).
        "producer_cpu_us_per_added_reader_chunk": 50.0,
        "redis_commands_per_added_reader": 5.0,
    }


def test_a_row_is_the_median_of_its_rounds_and_its_worst_round_s_completions() -> None:
    base = [row(1, 0.15, 674), row(1, 0.17, 674), row(1, 0.16, 675)]
    rounds = [row(10, 0.186, 719), row(10, 0.25, 720, same=9), row(10, 0.20, 719)]
    summed = summary(rounds, base)
    assert summed["producer_cpu_s"] == 0.2
    assert summed["redis_commands"] == 719
    assert summed["same_bytes"] == 9  # the worst round's
    assert summed["provider_calls_by_round"] == [1, 1, 1]
    assert summed["rounds"] == rounds
    assert "commands" not in summed
    # Round by round against the same round of one reader: 50, 111.1, 55.6 µs; 5, 5.1, 4.9.
    assert summed["producer_cpu_us_per_added_reader_chunk"] == pytest.approx(55.556)
    assert summed["redis_commands_per_added_reader"] == pytest.approx(5.0)
    # One reader: nothing added to compare.
    alone = summary(base, base)
    assert "producer_cpu_us_per_added_reader_chunk" not in alone
    assert alone["producer_cpu_s"] == 0.16


def test_the_table_has_a_cell_for_every_column() -> None:
    base = [row(1, 0.15, 674)]
    fanout = {
        "layouts": {
            "one producer": {
                "producers": 1,
                "rows": {"1": summary(base, base), "10": summary([row(10, 0.186, 719)], base)},
            }
        }
    }
    table = cells(fanout)
    assert [len(cells_) for cells_ in table] == [len(HEADER)] * 2
    assert table[0][:8] == ["one producer", 1, 1, 1, {}, "1", "1", 80]
    timed = {**summary(base, base), "last_joined_s": 0.0, "reply_s": 15.84}
    assert joined(timed) == "1 (last at 0.0 s of 15.8)"
    assert table[0][9] is None and table[1][9] == 50.0  # per added reader-chunk
