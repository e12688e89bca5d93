"""`make bench` runs whole at the tiny size, so the benchmarks cannot rot.

Results, never times: every benchmark ran, every side of every comparison has
its figures and ratio, every stream of the tiny run ended complete, the decoders
decoded every frame, and results.md holds every table. The figures themselves
are not asserted: they are measurements (bench/results.md has the full run).

One file past 500 lines: the tiny ``make bench`` is built once (a module fixture) and every
test reads it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.common import middle, process_cpu_s
from bench.decoders import FRAGMENTS, PLANS
from bench.fanout import PLANS as FANOUT_PLANS
from bench.fanout_layouts import LAYOUTS
from bench.paced import ON_UVLOOP, PURE_SIDES, SEARCHED, SSE_STACK
from bench.paced import PLANS as PACED_PLANS
from bench.streams import (
    CHUNKINGS,
    BareClient,
    Outcome,
    PerStreamClient,
    bare_server,
    replywire_client,
    request_for,
    shares_channel,
)
from bench.streams import PLANS as STREAM_PLANS
from bench.workers import PLANS as WORKERS_PLANS
from replywire.children import stop_process
from replywire.consumer.client import ReplyClient
from replywire.consumer.options import StreamOptions
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire.chunking import ChunkPlan
from tests.processes import wait_for
from tests.runs import unmeasured_environ

# The benchmarks drive thousands of streams through code the other tests measure: their
# processes are not measured (tests/conftest.py, ``_no_cover_children``).
# Whichever test of this module a worker runs first builds the shared tiny run (some two
# minutes, more on a busy host): every test here is allowed that, not the default 120 s.
pytestmark = [pytest.mark.no_cover, pytest.mark.timeout(420)]
ROOT = Path(__file__).resolve().parents[2]
TABLES = (
    "## Paced streams",
    "## Workers",
    "## Where the time goes",
    "## Sequential streams between two processes",
    "## Producer CPU per stream",
    "## Concurrent streams",
    "## Decoder cost per frame",
    "## Backpressure memory",
    "## How far a producer runs ahead",
    "## Trace cost",
    "## Tracing cost",
    "## Targets",
    "## Pure against compiled",
    "## The floor's own parts",
    "## Fan-out",
    "## Durability",
)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run(
        ["make", "--no-print-directory", "bench", "BENCH_SIZE=tiny", f"BENCH_OUT={out}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
        env=unmeasured_environ(BENCH_SIZE="tiny"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "results.json").read_text()), (out / "results.md").read_text()


def test_make_bench_at_the_tiny_size(tiny_run: tuple[dict[str, Any], str]) -> None:
    results, markdown = tiny_run
    assert results["size"] == "tiny"
    assert set(results["machine"]) == {
        "python",
        "platform",
        "cpus",
        "cpu_model",
        "grpcio",
        "protobuf",
    }
    assert all(heading in markdown for heading in TABLES)
    assert all(command in markdown for command in results["commands"])


def test_every_stream_of_every_side_completed(tiny_run: tuple[dict[str, Any], str]) -> None:
    streams = tiny_run[0]["streams"]
    assert list(streams["sequential"]) == list(CHUNKINGS)
    assert streams["channel_policy"] == "one channel, shared"
    for row in streams["sequential"].values():
        assert set(row["sides"]) == {
            "replywire",
            "bare client",
            "bare pair",
            "checks only",
            "replywire → bare server",
            "records only",
        }
        assert all(side["failures"] == {} for side in row["sides"].values())
        assert all(side["streams"] == 2 or side["streams"] == 3 for side in row["sides"].values())
        assert row["replywire_over_bare_pair"] > 0
        assert row["replywire_over_bare_client"] > 0
        assert row["checks_only_over_bare_pair"] > 0
        assert row["records_only_server_cpu_over_bare_server"] > 0
    for row in streams["concurrency"].values():
        assert set(row["sides"]) == {
            "replywire", "bare pair", "checks only", "replywire → bare server"
        }  # fmt: skip
        assert row["checks_only_over_bare_pair"] > 0
        for side in row["sides"].values():
            assert side["failures"] == {}
            assert side["first_chunk_ms_p50"] is not None
    assert set(streams["trace_cost"]) == {"frame", "64"}
    assert set(streams["consumer_trace_cost"]) == {"frame", "4096"}
    for row in streams["consumer_trace_cost"].values():
        assert list(row["sides"]) == [
            "replywire (consumer at info)",
            "replywire (consumer at warning)",
        ]
        assert all(
            side["failures"] == {} and side["streams"] == 3 for side in row["sides"].values()
        )


def test_the_tracing_cost_has_both_sides_and_their_ratios(
    tiny_run: tuple[dict[str, Any], str],
) -> None:
    """OpenTelemetry off against on with OTLP export: both sides' CPU per stream and the
    ratios (no figure asserted); the collector process received the spans of the on rounds."""
    tracing = tiny_run[0]["tracing"]
    assert list(tracing["sides"]) == ["replywire (tracing off)", "replywire (tracing on)"]
    for side in tracing["sides"].values():
        assert side["failures"] == {}
        assert side["streams"] == 3
        assert side["client_cpu_ms_per_stream"] > 0
        assert side["server_cpu_ms_per_stream"] > 0
    for key in ("consumer_cpu", "producer_cpu", "streams_per_s"):
        assert tracing[f"tracing_on_over_off_{key}"] > 0
    # One replywire.consume a stream (3 and the warm-up) from the consumer; the producer's
    # spans on top.
    assert tracing["consumer_spans_exported"] == 4
    assert tracing["consumer_spans_dropped"] == 0
    assert tracing["collector_spans"] > tracing["consumer_spans_exported"]
    assert "| consumer CPU ms/stream |" in tiny_run[1]
    assert "| producer CPU ms/stream |" in tiny_run[1]


def test_every_paced_stream_of_every_side_completed(tiny_run: tuple[dict[str, Any], str]) -> None:
    paced = tiny_run[0]["paced"]
    plan = PACED_PLANS["tiny"]
    assert (paced["content_frames"], paced["chunks_per_stream"]) == (
        plan.content_frames,
        plan.content_frames + 1,
    )
    assert list(paced["by_streams"]) == [str(n) for n in plan.streams]
    for n, row in paced["by_streams"].items():
        assert set(row["sides"]) == {
            "replywire", "bare pair", "checks only", "records only", SSE_STACK, ON_UVLOOP
        }  # fmt: skip
        for side in row["sides"].values():
            # The SSE side's too: its client fails a stream whose events are not in order.
            assert side["failures"] == {}
            # Every chunk (the SSE side: every event) of every stream was read, and timed.
            assert side["chunks_per_round"] == int(n) * paced["chunks_per_stream"]
            assert side["client_cpu_us_per_chunk"] > 0 and side["server_cpu_us_per_chunk"] > 0
            assert side["added_ms_p50"] is not None and side["added_ms_p99"] is not None
            for key in ("client_rss_kib_per_stream", "server_rss_kib_per_stream", "held"):
                assert key in side
        assert row["consumer_cpu_over_checks_only"] > 0
        assert row["producer_cpu_over_records_only"] > 0
        assert {"consumer_memory_over_bare_pair", "producer_memory_over_bare_pair"} <= set(row)
        # Issue 37's, against the SSE pair.
        assert row["pair_cpu_over_sse_pair"] > 0 and row["consumer_cpu_over_sse_client"] > 0
        assert row["producer_on_uvloop_over_asyncio"] > 0  # the producer's --event-loop uvloop
        assert f"| {n} | {SSE_STACK} |" in tiny_run[1]
    assert set(paced["largest_n_held"]) == set(SEARCHED) >= {"replywire", "bare pair", SSE_STACK}
    assert f"| {SSE_STACK} |" in tiny_run[1]
    for found in paced["largest_n_held"].values():
        assert set(found) == {"largest_held", "smallest_not_held", "bounded_by_the_table", "probes"}
        assert len(found["probes"]) <= plan.search_steps
    assert "paced_n_over_bare_pair" in paced and "paced_n_over_sse_stack" in paced
    # Issue 22's ratios against the floor sides, in the short-stream rows of the same run.
    for row in tiny_run[0]["streams"]["sequential"].values():
        assert row["replywire_over_checks_only"] > 0
        assert row["consumer_over_checks_only"] > 0
        assert row["consumer_cpu_over_checks_only"] > 0
        assert row["producer_cpu_over_records_only"] > 0
    for row in tiny_run[0]["streams"]["concurrency"].values():
        assert row["replywire_over_checks_only"] > 0
        assert row["consumer_over_checks_only"] > 0


def test_every_workers_row_ran_complete(tiny_run: tuple[dict[str, Any], str]) -> None:
    """1 and 2 workers at each N: every stream complete, the Redis log's commands counted."""
    workers = tiny_run[0]["workers"]
    plan = WORKERS_PLANS["tiny"]
    rows = workers["rows"]
    assert [(r["workers"], r["streams"]) for r in rows] == [
        (w, n) for n in plan.streams for w in plan.workers
    ]
    for r in rows:
        assert r["failures"] == {}, r
        assert r["chunks_per_round"] == r["streams"] * (plan.content_frames + 1)
        assert r["redis_commands_per_chunk"] > 0
        assert r["added_ms_p99"] is not None


def test_the_budget_has_every_part_for_each_side(tiny_run: tuple[dict[str, Any], str]) -> None:
    budget = tiny_run[0]["budget"]
    consumer = {"grpc", "decoding", "checks", "core", "records", "session"}
    consumer |= {"records_and_session", "total"}
    producer = {"grpc", "records", "reply_log", "rest_without_reply_log", "rest", "total"}
    per_stream = budget["per_stream"]
    assert per_stream["frames"] == 15 and budget["decode_us_per_frame"] > 0
    assert set(per_stream["consumer"]) == consumer
    assert set(per_stream["producer"]) == producer
    assert list(budget["per_chunk"]) == list(tiny_run[0]["paced"]["by_streams"])
    for row in budget["per_chunk"].values():
        assert set(row["consumer"]) == consumer and set(row["producer"]) == producer
        # The parts add up to the side's total (decoding and checks make up the core).
        parts = row["consumer"]
        assert parts["grpc"] + parts["core"] + parts["records_and_session"] == pytest.approx(
            parts["total"]
        )
        assert parts["decoding"] + parts["checks"] == pytest.approx(parts["core"])
    # The producer's rest: the reply log (its profiled share of the total) and the others.
    profiled = tiny_run[0]["reply_log_profile"]
    for shape, rows in (("per_stream", [per_stream]), ("per_chunk", budget["per_chunk"].values())):
        assert profiled[shape]["reply_log_s"] > 0 and 0 < profiled[shape]["share"] < 1
        for row in rows:
            parts = row["producer"]
            assert parts["reply_log"] == pytest.approx(profiled[shape]["share"] * parts["total"])
            assert parts["reply_log"] + parts["rest_without_reply_log"] == pytest.approx(
                parts["rest"]
            )
    assert "| reply log |" in tiny_run[1]


def test_the_pure_pass_runs_beside_the_compiled_build(
    tiny_run: tuple[dict[str, Any], str],
) -> None:
    """With the compiled build, the same sides again in a pure child process: the sequential
    section, the middle concurrency row, the paced streams at the middle N (no search);
    without it, the results say why there is no second pass."""
    results, markdown = tiny_run
    pure = results["pure"]
    if not results["build"].startswith("compiled"):
        assert pure == {"skipped": f"compiled build not available: {results['build']}"}
        assert "No pure pass: compiled build not available" in markdown
        return
    assert pure["build"] == "pure (REPLYWIRE_PURE=1)"
    streams = pure["streams"]
    assert list(streams["sequential"]) == list(CHUNKINGS)
    for row in streams["sequential"].values():
        assert set(row["sides"]) == set(results["streams"]["sequential"]["frame"]["sides"])
        assert all(side["failures"] == {} for side in row["sides"].values())
    assert list(streams["concurrency"]) == [str(middle(STREAM_PLANS["tiny"].concurrency))]
    paced = pure["paced"]
    assert list(paced["by_streams"]) == [str(middle(PACED_PLANS["tiny"].streams))]
    assert "largest_n_held" not in paced
    assert list(paced["by_streams"]["4"]["sides"]) == list(PURE_SIDES)  # not the SSE stack
    for side in paced["by_streams"]["4"]["sides"].values():
        assert side["failures"] == {}
        assert side["chunks_per_round"] == 4 * paced["chunks_per_stream"]
    assert "| chunks | checks only / bare pair: pure | compiled |" in markdown


def test_every_target_has_a_verdict(tiny_run: tuple[dict[str, Any], str]) -> None:
    """Issue 22's targets, sections 2 and 3, and issue 37's against the SSE stack (item 5)
    and on the floor's records against the least lines (item 6), each with its figures and a
    verdict (which one is not asserted: the tiny run's figures mean nothing)."""
    targets = tiny_run[0]["targets"]
    assert [target["section"] for target in targets] == [2, 2, 2, 2, 2, 2, 3, 3, 5, 5, 5, 6, 6]
    assert [target["issue"] for target in targets] == [22] * 8 + [37] * 5
    for target in targets:
        assert target["figures"]
        assert target["verdict"].split(" (")[0] in {"met", "not met", "not measured"}
        assert f"| {target['verdict']} |" in tiny_run[1]


def test_every_reader_of_one_live_reply_got_the_same_bytes_from_one_call(
    tiny_run: tuple[dict[str, Any], str],
) -> None:
    """The fan-out table: in each layout, each K's readers all complete with the same bytes,
    every one joined the reply live, the provider was called once; every cost is there (its
    figure not asserted), and the readers beyond the first cost an Open's look-up each."""
    fanout = tiny_run[0]["fanout"]
    plan = FANOUT_PLANS["tiny"]
    assert fanout["readers"] == list(plan.readers) and fanout["rounds"] == plan.rounds
    assert list(fanout["layouts"]) == list(LAYOUTS)
    assert [layout["producers"] for layout in fanout["layouts"].values()] == [1, 2, 2]
    for name, layout in fanout["layouts"].items():
        assert list(layout["rows"]) == [str(k) for k in plan.readers]
        for k, row in layout["rows"].items():
            readers = int(k)
            assert (row["readers"], row["complete"], row["same_bytes"]) == (readers,) * 3
            assert (row["digests"], row["failed"], row["joined_live"]) == (1, {}, readers)
            assert row["provider_calls_by_round"] == [1] * plan.rounds
            assert row["chunks"] > 10 and row["reader_chunks"] == readers * row["chunks"]
            for key in ("producer_cpu_us_per_reader_chunk", "redis_commands_per_chunk"):
                assert row[key] > 0
            # Each producer's followers read the reply (at least once a chunk's worth).
            assert row["xread_per_chunk"] >= 0.5
            assert f"| {name} | {readers} |" in tiny_run[1]
        added = layout["rows"][str(max(plan.readers))]
        assert added["producer_cpu_us_per_added_reader_chunk"] is not None
        assert added["redis_commands_per_added_reader"] > 0


def test_every_durability_setting_wrote_its_replies_whole(
    tiny_run: tuple[dict[str, Any], str],
) -> None:
    """The durability table: each setting, each shape of reply, every reply complete (a
    wait that fell short would have ended one ``reply_log_unavailable``), every cost there."""
    shapes = tiny_run[0]["durability"]["shapes"]
    assert list(shapes) == ["live", "recorded"]
    for shape, modes in shapes.items():
        assert list(modes) == ["none", "replica", "aof"]
        for mode, row in modes.items():
            assert row["ended"] == ["complete"], (shape, mode)
            assert row["wall_us_per_frame"] > 0 and row["cpu_us_per_frame"] > 0
            assert f"| {shape} | {mode} |" in tiny_run[1]
    ledger = tiny_run[0]["durability"]["ledger"]
    assert list(ledger) == ["none", "replica", "aof"]
    for mode, row in ledger.items():
        assert row["settled"] == row["calls"] > 0, mode  # no wait fell short
        assert row["wall_us_per_call"] > 0 and row["cpu_us_per_call"] > 0
        assert f"| {mode} | " in tiny_run[1]


def test_past_the_limit_streams_are_refused_by_name(tiny_run: tuple[dict[str, Any], str]) -> None:
    row = tiny_run[0]["streams"]["over_limit"]
    assert (row["streams"], row["max_streams"], row["connections"]) == (10, 3, 10)
    side = row["replywire"]
    # Ten streams open at once against a limit of three: some refused, only by name.
    assert set(side["failures"]) == {"refused:stream_limit"}
    assert 0 < side["failures"]["refused:stream_limit"] <= 7


def test_every_decoder_cell_ran(tiny_run: tuple[dict[str, Any], str]) -> None:
    decoders = tiny_run[0]["decoders"]
    cells = decoders["cells"]
    assert [(c["fragment"], c["frames"]) for c in cells] == [
        (name, count) for count in PLANS["tiny"].frame_counts for name in FRAGMENTS.values()
    ]
    for cell in cells:
        assert set(cell["us_per_frame"]) == {"lp", "ndjson", "lab"}
        assert cell["ndjson_over_lab"] > 0


def test_a_paused_consumer_stopped_the_producer_before_the_end(
    tiny_run: tuple[dict[str, Any], str],
) -> None:
    rows = {row["window_bytes"]: row for row in tiny_run[0]["backpressure"]["rows"]}
    # A 1 KiB window against an ~18 KB reply: the producer stops long before the end.
    small = rows[1024]
    assert small["reply_window_bytes"] > 10 * 1024
    # Every row's window is smaller than the reply, and the bound holds in each (the
    # tiny run's pause is short: how far the producer got is not asserted).
    for window, row in rows.items():
        assert row["window_bytes"] + 3 * 8 < row["reply_window_bytes"]
        assert row["announced_window_bytes"] == window // 2
        assert row["bound_chunks"] == window // 8 + 3
        assert row["chunks_over_bound"] == 0
        assert (
            row["wire_bytes_by_the_end"]
            <= row["announced_window_bytes"] + (row["window_returned_by_the_end_bytes"])
        )
        assert row["stopped_before_the_end"] is True
        assert row["consumer_ended"] == "incomplete:consumer_cancelled"


def test_the_replywire_side_is_one_function_and_the_bare_sides_copy_its_policy() -> None:
    client = replywire_client(StreamOptions(target="127.0.0.1:1"))
    assert isinstance(client, ReplyClient)  # one channel per target and options
    assert shares_channel(client) is True
    assert shares_channel(PerStreamClient(StreamOptions(target="127.0.0.1:1"))) is False
    assert shares_channel(object()) is True  # a client without the flag: one shared channel


def test_a_process_s_cpu_is_read_to_below_a_clock_tick() -> None:
    """The producer's CPU per stream comes from the kernel's CPU clock of its process (ns),
    not /proc's 10 ms ticks: it agrees with the ticks, and it is not a whole number of
    them."""
    burner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nend = time.process_time() + 0.3\n"
            "while time.process_time() < end: pass\ntime.sleep(30)",
        ]
    )
    try:
        wait_for(lambda: process_cpu_s(burner.pid) >= 0.3, timeout=30)
        precise = process_cpu_s(burner.pid)
        with open(f"/proc/{burner.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        ticks = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        assert abs(precise - ticks) < 0.05
        assert precise != round(precise, 2)  # not a whole number of 10 ms ticks
    finally:
        stop_process(burner)


def test_the_floor_s_parts_ran_every_side(tiny_run: tuple[dict[str, Any], str]) -> None:
    floor = tiny_run[0]["record_floor"]
    assert floor["consumer_records"] == [
        "stream_opening",
        *["state_changed"] * 5,
        "stream_finished",
    ]
    for row in floor["server"].values():
        assert list(row["failures"]) == [
            "bare server", "stream code only", "least records", "records only"
        ]  # fmt: skip
        assert set(row["failures"].values()) == {0}
        assert row["records_only_over_bare_server"] > 0
    for row in floor["client"].values():
        assert list(row["failures"]) == [
            "bare client", "checks only", "checks and least records",
            "replywire (consumer at warning)", "replywire",
        ]  # fmt: skip
        assert set(row["failures"].values()) == {0}
        assert row["records"] == 7


@pytest.mark.timeout(60)
def test_least_records_are_the_trace_s_records(tmp_path: Path) -> None:
    """The least records' yardstick writes what the trace writes, field for field (but the
    trace's own: side first, the stream context): the same records, a cheaper way."""
    lines: dict[str, list[dict[str, Any]]] = {}
    for name, flags in {
        "trace": [],
        "least": ["--least-records"],
        "code": ["--trace-level", "warning"],
    }.items():
        path = tmp_path / f"{name}.jsonl"
        with bare_server(path, *flags) as server:
            asyncio.run(bare_streams(server.target, request_for(ChunkPlan.parse("frame"))))
        lines[name] = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines["code"] == []
    assert len(lines["trace"]) == len(lines["least"]) == 4
    for ours, least in zip(lines["trace"], lines["least"], strict=True):
        for record in (ours, least):
            record.pop("timestamp"), record.pop("stream_id"), record.pop("peer")
        assert ours == least


async def bare_streams(target: str, request: ReplyRequest) -> None:
    client = BareClient(target, StreamOptions(target=target), True)
    try:
        assert (await client.once(request)).ok
    finally:
        await client.close()


@pytest.mark.timeout(60)
def test_the_floor_sides_check_and_record_what_replywire_does(tmp_path: Path) -> None:
    """The checks-only client judges each reply with the consumer's core (a reply bound to
    another request is refused by name); the records-only server writes the producer's four
    transition records per stream, and nothing else."""
    trace = tmp_path / "records.jsonl"
    request = request_for(ChunkPlan.parse("64"))
    other = dataclasses.replace(request, binding={**request.binding, "case_id": "another"})

    async def streams(target: str) -> list[Outcome]:
        client = BareClient(target, StreamOptions(target=target), True, checks=True)
        try:
            return [await client.once(request), await client.once(other)]
        finally:
            await client.close()

    with bare_server(trace) as server:
        ok, refused = asyncio.run(streams(server.target))
    assert (ok.ok, ok.code) == (True, "ok")
    assert (refused.ok, refused.code) == (False, "invalid:frame_request_mismatch")
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    by_stream: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        assert record["event"] == "state_changed"
        by_stream.setdefault(record["stream_id"], []).append(record)
    assert len(by_stream) == 2
    # The refused stream's consumer went away after its first chunk: the server may or may
    # not have written them all by then; either way the stream has its final state.
    ended = {"completed", "cancelled_by_consumer"}
    for stream in by_stream.values():
        states = [r["to_state"] for r in stream]
        assert states[:3] == ["received", "verified", "streaming"]
        assert len(states) == 4 and states[3] in ended
        assert {r["side"] for r in stream} == {"producer"}
        assert stream[1]["chunks"] == "64"
    first = next(iter(by_stream.values()))  # the ok stream ran first
    assert first[3]["to_state"] == "completed"
    assert first[3]["chunks_sent"] == first[1]["planned_chunks"] > 1


def test_with_the_pure_build_running_there_is_no_second_pass(tmp_path: Path) -> None:
    """REPLYWIRE_PURE=1 (or no compiled build): the pure pass is skipped, and says why."""
    code = (
        "import sys\nfrom pathlib import Path\nfrom bench.pure import pure_pass\n"
        "print(pure_pass('tiny', Path(sys.argv[1])))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "pure.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "REPLYWIRE_PURE": "1"},
    )
    assert done.returncode == 0, done.stderr
    expected = {"skipped": "compiled build not available: pure (REPLYWIRE_PURE=1)"}
    assert done.stdout == f"{expected}\n"
    assert not (tmp_path / "pure.json").exists()
