"""bench/results.md from the results dict: the tables, the machine, the exact commands.

One file past 500 lines: it is one document's layout, every table drawn from the same dict
with the same cell and ratio formatting, in the order results.md shows them; split by table,
each part would take the whole dict and the formatters, and the order would live elsewhere."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from bench import durability as durability_bench
from bench import fanout as fanout_bench
from bench import workers
from bench.common import CHECKS_ONLY, CONSUMER_ALONE, RECORDS_ONLY


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 100 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, dict):
        return ", ".join(f"{k} ×{v}" for k, v in value.items()) or "none"
    return str(value)


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return [*lines, ""]


def sequential(streams: dict[str, Any]) -> list[str]:
    rows = []
    for chunking, row in streams["sequential"].items():
        ours, bare, pair, checks, alone = (
            row["sides"][k]
            for k in ("replywire", "bare client", "bare pair", CHECKS_ONLY, CONSUMER_ALONE)
        )
        rows.append([
            chunking, ours["streams_per_s"], bare["streams_per_s"], pair["streams_per_s"],
            row["replywire_over_bare_pair"], row["replywire_over_bare_client"],
            checks["streams_per_s"], row["checks_only_over_bare_pair"],
            row["replywire_over_checks_only"], alone["streams_per_s"],
            row["consumer_over_checks_only"], alone["client_cpu_ms_per_stream"],
            checks["client_cpu_ms_per_stream"], pair["client_cpu_ms_per_stream"],
        ])  # fmt: skip
    return table(
        ["chunks", "replywire streams/s", "bare client → producer", "bare pair",
         "replywire / bare pair", "replywire / bare client", "checks only → bare server",
         "checks only / bare pair", "replywire pair / checks only",
         "replywire → bare server", "its / checks only (≥ 0.9)",
         "client CPU ms/stream (replywire → bare server)", "(checks only)",
         "(bare pair)"],
        rows,
    )  # fmt: skip


def producer_cpu(streams: dict[str, Any]) -> list[str]:
    rows = []
    for chunking, row in streams["sequential"].items():
        ours, pair = row["sides"]["replywire"], row["sides"]["bare pair"]
        rows.append([
            chunking, ours["server_cpu_ms_per_stream"], pair["server_cpu_ms_per_stream"],
            row["producer_cpu_over_bare_server"],
            row["sides"][RECORDS_ONLY]["server_cpu_ms_per_stream"],
            row["records_only_server_cpu_over_bare_server"], row["producer_cpu_over_records_only"],
        ])  # fmt: skip
    return table(
        ["chunks", "producer CPU ms/stream", "bare server CPU ms/stream", "producer / bare",
         "records only CPU ms/stream", "records only / bare", "producer / records only (≤ 1.1)"],
        rows,
    )  # fmt: skip


def concurrency(streams: dict[str, Any]) -> list[str]:
    rows = []
    for n, row in streams["concurrency"].items():
        for name, side in row["sides"].items():
            rows.append([
                n, name, side["streams_per_s"], side["first_chunk_ms_p50"],
                side["first_chunk_ms_p99"], side["failures"],
                row[OVER_PAIR[name]] if name in OVER_PAIR else "",
                row[OVER_CHECKS[name]] if name in OVER_CHECKS else "",
            ])  # fmt: skip
    return table(
        ["concurrent streams", "side", "streams/s", "first chunk p50 ms", "p99 ms",
         "failures (by code)", "/ bare pair", "/ checks only (≥ 0.9: replywire → bare server)"],
        rows,
    )  # fmt: skip


#: A concurrency side's ratio to the bare pair, by the side's name.
OVER_PAIR: Final = {
    "replywire": "replywire_over_bare_pair",
    CHECKS_ONLY: "checks_only_over_bare_pair",
}
#: A concurrency side's streams/s over the checks-only client's, by the side's name.
OVER_CHECKS: Final = {
    "replywire": "replywire_over_checks_only",
    CONSUMER_ALONE: "consumer_over_checks_only",
}


def over_limit(streams: dict[str, Any]) -> list[str]:
    row = streams["over_limit"]
    side = row["replywire"]
    return table(
        ["concurrent streams", "connections", "producer --max-streams", "streams (all rounds)",
         "completed", "failures (by code)"],
        [[row["streams"], row["connections"], row["max_streams"], side["streams"],
          side["streams"] - sum(side["failures"].values()), side["failures"]]],
    )  # fmt: skip


def paced(rows: dict[str, Any]) -> list[str]:
    cells = []
    for n, row in rows["by_streams"].items():
        for name, side in row["sides"].items():
            cells.append([
                n, name, side["client_cpu_us_per_chunk"], side["server_cpu_us_per_chunk"],
                side["added_ms_p50"], side["added_ms_p99"], side["added_ms_max"],
                side["client_rss_kib_per_stream"], side["server_rss_kib_per_stream"],
                side["client_core_busy"], side["server_core_busy"], side["failures"],
                side["held"],
            ])  # fmt: skip
    return table(
        ["paced streams", "side", "consumer CPU µs/chunk", "producer CPU µs/chunk",
         "added latency p50 ms", "p99 ms", "max ms", "consumer RSS KiB/stream",
         "producer RSS KiB/stream", "consumer core busy", "producer core busy",
         "failures (by code)", f"held (p99 < {rows['held_ms']:g} ms)"],
        cells,
    )  # fmt: skip


def paced_ratios(rows: dict[str, Any]) -> list[str]:
    cells = [
        [n, row["consumer_cpu_over_checks_only"], row["producer_cpu_over_records_only"],
         row["consumer_memory_over_bare_pair"], row["producer_memory_over_bare_pair"],
         row["consumer_cpu_over_bare_pair"], row["producer_cpu_over_bare_pair"],
         row.get("pair_cpu_over_sse_pair"), row.get("consumer_cpu_over_sse_client")]
        for n, row in rows["by_streams"].items()
    ]  # fmt: skip
    return table(
        ["paced streams", "consumer CPU/chunk / checks only (target ≤ 1.1)",
         "producer CPU/chunk / records only (≤ 1.1)", "consumer memory/stream / bare pair (≤ 1.3)",
         "producer memory/stream / bare pair (≤ 1.3)", "consumer CPU/chunk / bare pair",
         "producer CPU/chunk / bare pair", "pair CPU/chunk / SSE pair (≤ 1)",
         "consumer CPU/chunk / SSE client (≤ 1)"],
        cells,
    )  # fmt: skip


def paced_search(rows: dict[str, Any]) -> list[str]:
    cells = [
        [name, found["largest_held"],
         found["smallest_not_held"] if found["smallest_not_held"] is not None
         else "— (the table's largest held)",
         ", ".join(f"{p['streams']:,}: p99 {_cell(p['added_ms_p99'])} ms"
                   for p in found["probes"]) or "none"]
        for name, found in rows["largest_n_held"].items()
    ]  # fmt: skip
    cells.append(["replywire / bare pair (target ≥ 0.85)", rows["paced_n_over_bare_pair"], "", ""])
    cells.append(["replywire / sse stack (target ≥ 1)", rows.get("paced_n_over_sse_stack"), "", ""])
    return table(["side", "largest N held", "smallest N not held", "probes"], cells)


def budget_per_stream(budget: dict[str, Any]) -> list[str]:
    row = budget["per_stream"]
    ours, producer = row["consumer"], row["producer"]
    return table(
        ["side", "gRPC's own work (bare pair)", "decoding", "checks", "records", "reply log",
         "session and the rest", "total"],
        [["consumer", ours["grpc"], ours["decoding"], ours["checks"], ours["records"], None,
          ours["session"], ours["total"]],
         ["producer", producer["grpc"], None, None, producer["records"], producer["reply_log"],
          producer["rest_without_reply_log"], producer["total"]]],
    )  # fmt: skip


def budget_per_chunk(budget: dict[str, Any]) -> list[str]:
    cells = []
    for n, row in budget["per_chunk"].items():
        ours, producer = row["consumer"], row["producer"]
        cells += [
            [n, "consumer", ours["grpc"], ours["decoding"], ours["checks"], None, None,
             ours["records_and_session"], ours["total"]],
            [n, "producer", producer["grpc"], None, None, producer["records"],
             producer["reply_log"], producer["rest_without_reply_log"], producer["total"]],
        ]  # fmt: skip
    return table(
        ["paced streams", "side", "gRPC's own work (bare pair)", "decoding", "checks",
         "records", "reply log", "session and the rest (consumer: with its records)", "total"],
        cells,
    )  # fmt: skip


def budget_section(budget: dict[str, Any]) -> list[str]:
    per_stream = budget["per_stream"]
    return [
        "## Where the time goes (µs of CPU, by difference of this run's sides)",
        "",
        "gRPC's own work: the bare pair's process. Consumer: checks only − bare pair is the "
        "sans-IO core, of which decoding is the length-prefixed decoder's µs per whole frame "
        f"({_cell(budget['decode_us_per_frame'])}, the decoder table) × frames; replywire − "
        "checks only is its records (per stream: the consumer at info − at warning, the "
        "trace-cost rounds), reader, queue, session and verdict. Producer: records only − "
        "bare server is the four records; replywire − records only is the rest (request "
        "checks, plan, reply log, state machine, metrics, the pacing's sleeps), of which the "
        "reply log is its share of the producer side's time in a cProfile of both sides in "
        "one process (the functions of producer/replylog/ entered "
        "from outside them, over the producer package's: "
        f"{_share(budget, 'per_stream')} of the short streams, "
        f"{_share(budget, 'per_chunk')} of the paced reply's) × the producer's total. "
        "Differences of medians: on a shared machine a small part can come out negative.",
        "",
        f"Per stream (short streams, one frame per chunk, {per_stream['frames']} frames; the "
        "producer's records at info − at warning, the trace-cost rounds: "
        f"{_cell(per_stream['producer_records_at_info_over_warning'])} µs):",
        "",
        *budget_per_stream(budget),
        "Per chunk (the paced streams):",
        "",
        *budget_per_chunk(budget),
    ]


def _share(budget: dict[str, Any], shape: str) -> str:
    share = budget.get("reply_log_share", {}).get(shape)
    return "not profiled" if share is None else f"{share:.1%}"


def targets_section(results: dict[str, Any]) -> list[str]:
    rows = [
        [f"{target['issue']}: {'item' if target['issue'] == 37 else 'section'} "
         f"{target['section']}", target["what"],
         ", ".join(f"{where} {_cell(figure)}" for where, figure in target["figures"]),
         target["verdict"]]
        for target in results["targets"]
    ]  # fmt: skip
    return [
        "## Targets (issues 22 and 37; a target is met when every figure it names is)",
        "",
        f"Build: {results['build']}. Issue 22's section 3 targets are read with the compiled "
        "build. Issue 37's are replywire against the SSE stack (item 5, the paced `sse stack` "
        "side) and the floor's records against the least JSON lines (item 6, `record_floor`).",
        "",
        *table(["issue: section", "target", "figures", "verdict"], rows),
    ]


def pure_against_compiled(results: dict[str, Any]) -> list[str]:
    pure = results["pure"]
    head = ["## Pure against compiled (the hot modules compiled by mypyc, or not)", ""]
    if "skipped" in pure:
        return [*head, f"No pure pass: {pure['skipped']}.", ""]
    head += [
        f"Compiled: this run ({results['build']}). Pure: the same sides in a child process "
        f"with REPLYWIRE_PURE=1 ({pure['build']}), {pure['duration_s']} s, after the "
        "compiled sides (not alternated with them: compare the ratios, each of its own "
        "rounds).",
        "",
    ]
    seq_p, seq_c = pure["streams"]["sequential"], results["streams"]["sequential"]
    keys = ("checks_only_over_bare_pair", "records_only_server_cpu_over_bare_server",
            "replywire_over_bare_pair", "producer_cpu_over_records_only")  # fmt: skip
    rows = []
    for chunking, row in seq_p.items():
        compiled = seq_c[chunking]
        cells: list[Any] = [chunking]
        for key in keys:
            cells += [row[key], compiled[key]]
        cpu = "client_cpu_ms_per_stream"
        cells += [row["sides"]["replywire"][cpu], compiled["sides"]["replywire"][cpu]]
        rows.append(cells)
    short = table(
        ["chunks", "checks only / bare pair: pure", "compiled",
         "records only / bare server CPU: pure", "compiled", "replywire / bare pair: pure",
         "compiled", "producer CPU / records only: pure", "compiled",
         "consumer CPU ms/stream: pure", "compiled"],
        rows,
    )  # fmt: skip
    crows = []
    for n, row in pure["streams"]["concurrency"].items():
        compiled = results["streams"]["concurrency"].get(n, {})
        crows.append([n, *(x for key in ("checks_only_over_bare_pair", "replywire_over_bare_pair",
                                         "consumer_over_checks_only")
                           for x in (row.get(key), compiled.get(key)))])  # fmt: skip
    concurrent = table(
        ["concurrent streams", "checks only / bare pair: pure", "compiled",
         "replywire / bare pair: pure", "compiled",
         "replywire → bare server / checks only: pure", "compiled"],
        crows,
    )  # fmt: skip
    prows = []
    for n, row in pure["paced"]["by_streams"].items():
        compiled_sides = results["paced"]["by_streams"].get(n, {}).get("sides", {})
        for name, side in row["sides"].items():
            other = compiled_sides.get(name, {})
            prows.append([n, name, *(x for key in ("client_cpu_us_per_chunk",
                                                  "server_cpu_us_per_chunk")
                                    for x in (side[key], other.get(key)))])  # fmt: skip
    paced_rows = table(
        ["paced streams", "side", "consumer CPU µs/chunk: pure", "compiled",
         "producer CPU µs/chunk: pure", "compiled"],
        prows,
    )  # fmt: skip
    return [*head, *short, "Concurrent (one frame per chunk):", "", *concurrent,
            "Paced, CPU per chunk of each side:", "", *paced_rows]  # fmt: skip


def decoder_costs(decoders: dict[str, Any]) -> list[str]:
    rows = []
    for cell in decoders["cells"]:
        cost = cell["us_per_frame"]
        rows.append([
            cell["fragment"], cell["frames"], cost["lp"], cost["ndjson"],
            cost.get("lab", cell.get("lab_not_run")), cell.get("ndjson_over_lab"),
            cell.get("lp_over_lab"),
        ])  # fmt: skip
    return table(
        ["fragments", "frames", "lp µs/frame", "ndjson µs/frame", "lab's algorithm µs/frame",
         "ndjson / lab", "lp / lab"],
        rows,
    )  # fmt: skip


def flatness(decoders: dict[str, Any]) -> list[str]:
    flat = decoders["flatness_vs_1k"]
    counts = sorted({int(n) for series in flat.values() for n in series})
    rows = [[name, *(series.get(str(n)) for n in counts)] for name, series in flat.items()]
    return table(["fragments, decoder", *(f"{n:,} frames" for n in counts)], rows)


def backpressure(memory: dict[str, Any]) -> list[str]:
    rows = [
        [r["window_bytes"], r["announced_window_bytes"],
         f"{r['window_returned_while_paused_bytes']:,} ({r['window_updates_while_paused']})",
         r["wire_bytes_while_paused"], r["chunks_sent_while_paused"], r["chunks_sent_by_the_end"],
         r["reply_chunks"], r["bound_chunks"], r["chunks_over_bound"],
         r["blocked_while_paused"], r["stopped_before_the_end"]]
        for r in memory["rows"]
    ]  # fmt: skip
    return table(
        ["consumer window bytes", "announced (SETTINGS)", "returned while paused (updates)",
         "DATA bytes while paused", "chunks sent while paused", "by the end", "reply chunks",
         "bound (2 × announced / 8 + queue + 2)", "over the bound", "blocked",
         "stopped before the end"],
        rows,
    )  # fmt: skip


def trace_cost(rows: dict[str, Any], side: str) -> list[str]:
    """A trace-cost table: ``side``'s CPU per stream (producer or consumer) and the
    streams per second, at info against warning."""
    cpu = "server_cpu_ms_per_stream" if side == "producer" else "client_cpu_ms_per_stream"
    cells = []
    for chunking, row in rows.items():
        info, warning = row["sides"].values()
        cells.append([
            chunking, info[cpu], warning[cpu], row[f"info_over_warning_{side}_cpu"],
            info["streams_per_s"], warning["streams_per_s"],
            row["info_over_warning_streams_per_s"],
        ])  # fmt: skip
    return table(
        ["chunks", f"{side} CPU ms/stream at info", "at warning", "info / warning",
         "streams/s at info", "at warning", "info / warning"],
        cells,
    )  # fmt: skip


def tracing(row: dict[str, Any]) -> list[str]:
    """The tracing-cost table: each side's CPU per stream, OpenTelemetry off against on."""
    off, on = row["sides"].values()
    cells = [
        ["consumer CPU ms/stream", off["client_cpu_ms_per_stream"],
         on["client_cpu_ms_per_stream"], row["tracing_on_over_off_consumer_cpu"]],
        ["producer CPU ms/stream", off["server_cpu_ms_per_stream"],
         on["server_cpu_ms_per_stream"], row["tracing_on_over_off_producer_cpu"]],
        ["streams/s", off["streams_per_s"], on["streams_per_s"],
         row["tracing_on_over_off_streams_per_s"]],
    ]  # fmt: skip
    return [
        *table(["", "tracing off", "tracing on, OTLP export", "on / off"], cells),
        f"Chunks: {row['chunking']}; {off['streams']} streams a side over {row['rounds']} "
        f"round(s); spans the collector received: {row['collector_spans']} (the consumer's "
        f"exported {row['consumer_spans_exported']}, dropped {row['consumer_spans_dropped']}).",
        "",
    ]


def paced_section(rows: dict[str, Any]) -> list[str]:
    return [
        f"## Paced streams ({rows['case']}: {rows['content_frames']} content frames of 13 "
        f"characters, one a chunk, {rows['interval_ms']} ms apart, {rows['stream_s']:g} s a "
        f"stream, opened over {rows['ramp_s']:g} s; median of {rows['rounds']} rounds, each a "
        "fresh server and a fresh client process)",
        "",
        "A model's reply as it is delivered: many streams at once, each a few hundred small "
        "chunks at the model's pace. CPU per chunk: each process's CPU clock over the "
        "streams (opening and closing them included) / the chunks read. Added latency: "
        "each chunk's arrival at the consumer minus the previous chunk's, minus the "
        "interval (the producer paces from its previous write). RSS per stream: (RSS with "
        "every stream open − RSS idle, after one warm-up stream) / N. Core busy: the "
        "process's CPU seconds over the round's wall seconds (near 1: that process set the "
        "pace). Records only and checks only are the floor sides, as in the short-stream "
        "tables below. The sse stack: the same deltas as server-sent events, httpx and "
        "httpx-sse (each event parsed, its sequence checked) → uvicorn (one worker, uvloop, "
        "httptools), Starlette, sse-starlette (issue 37).",
        "",
        *paced(rows),
        "Ratios (the same run):",
        "",
        *paced_ratios(rows),
        f"The largest N each pair holds with p99 added latency under {rows['held_ms']:g} ms "
        "and no failure (producer pinned to one core; a bisection between the table's "
        "largest N held and its smallest not held, one round a probe):",
        "",
        *paced_search(rows),
    ]


def record_floor(floor: dict[str, Any]) -> list[str]:
    """The floor's own parts (``bench.record_floor``): each layer by difference of two sides."""
    out = [
        f"## The floor's own parts ({floor['streams']} sequential streams a side, median of "
        f"{floor['rounds']} rounds; bench/record_floor.py)",
        "",
        "What the records-only server and the consumer's records cost, taken apart by sides "
        "that differ by one layer, alternated in one run: the stream's code with its trace at "
        "warning (no record written); the same records written as the least a JSON line "
        "costs in CPython (a dict, orjson, batched writes: bench/least_records.py); the "
        "records through the trace. µs of CPU per stream, and per record.",
        "",
    ]
    out += table(
        [
            "chunking",
            "bare server",
            "+ stream code",
            "+ least records",
            "+ records (records only)",
            "stream code",
            "least records (per record)",
            "records (per record)",
            "least / bare",
            "records only / bare",
        ],
        [
            [
                chunking,
                row["server_cpu_us_per_stream"]["bare server"],
                row["server_cpu_us_per_stream"]["stream code only"],
                row["server_cpu_us_per_stream"]["least records"],
                row["server_cpu_us_per_stream"]["records only"],
                row["stream_code_us"],
                f"{_cell(row['least_records_us'])} ({_cell(row['least_us_per_record'])})",
                f"{_cell(row['records_us'])} ({_cell(row['us_per_record'])})",
                row["least_records_over_bare_server"],
                row["records_only_over_bare_server"],
            ]
            for chunking, row in floor["server"].items()
        ],
    )
    out += [
        f"The consumer, against the bare server: its {len(floor['consumer_records'])} records "
        f"of a stream ({', '.join(floor['consumer_records'])}) as least lines beside the "
        "checks, and the consumer at warning and at info.",
        "",
    ]
    out += table(
        ["chunking", "checks only", "+ least records", "replywire at warning", "replywire",
         "least records (per record)", "records (per record)", "session",
         "checks and least / checks only, streams/s", "replywire / checks only, streams/s"],
        [
            [
                chunking,
                row["client_cpu_us_per_stream"]["checks only"],
                row["client_cpu_us_per_stream"]["checks and least records"],
                row["client_cpu_us_per_stream"]["replywire (consumer at warning)"],
                row["client_cpu_us_per_stream"]["replywire"],
                f"{_cell(row['least_records_us'])} ({_cell(row['least_us_per_record'])})",
                f"{_cell(row['records_us'])} ({_cell(row['us_per_record'])})",
                row["session_us"],
                row["checks_and_least_over_checks_only"],
                row["replywire_over_checks_only"],
            ]
            for chunking, row in floor["client"].items()
        ],
    )  # fmt: skip
    return out


def fanout(rows: dict[str, Any]) -> list[str]:
    """The fan-out table (``bench.fanout``): K readers of one live reply, per layout."""
    return [
        f"## Fan-out ({', '.join(f'{k:,}' for k in rows['readers'])} readers of one live "
        f"reply, {rows['case']}, one identity; median of {rows['rounds']} round(s); "
        "bench/fanout.py)",
        "",
        "The first reader opens the reply (the Gemini source, the fake's two-character "
        f"deltas {rows['event_delay_s']:g} s apart); the others join once it is live, spread "
        "over the layout's producers in turn. Same bytes: readers with the digest most got; "
        "joined live: first chunk before the reply ended. CPU: the producers' processes over "
        "the row, per chunk every reader read (K × the reply's chunks), and per chunk the "
        "readers beyond the first added, against the same round's row of one reader. Redis: "
        "every command the reply log's server ran (inside scripts and transactions too), per "
        "reader-chunk and per chunk of the reply; XREAD is the replicas' followers' reads (a "
        "reply read once per replica, not per reader); per added reader, each Open's look-up "
        "(and, with two replicas, the second one's reads of the reply, which K = 1 has not). "
        "Bounds: `--max-streams-per-identity` "
        f"{rows['max_streams_per_identity']:,}, the reply log's at their defaults.",
        "",
        *table(fanout_bench.HEADER, fanout_bench.cells(rows)),
    ]


def durability_section(rows: dict[str, Any]) -> list[str]:
    """What ``--reply-log-durability`` costs a write (``bench.durability``)."""
    return [
        f"## Durability ({rows['frames']} frames a reply, `aof` {rows['aof_frames']}; median "
        f"of {rows['rounds']} round(s); {rows['cluster']}; bench/durability.py)",
        "",
        "One generation in the bench's process writes a reply through the shared log as the "
        "producer's does: a live reply's frames one by one, each waited for (`replica`: "
        "`WAIT 1`, `aof`: `WAITAOF 1 1`, on the write's own connection), and a recorded "
        "reply's as one batch, one wait after its last frame. What each setting guarantees: "
        "docs/operations.md#redis-cluster.",
        "",
        *table(durability_bench.HEADER, durability_bench.cells(rows)),
        *(ledger_durability(rows) if "ledger" in rows else []),
    ]


def ledger_durability(rows: dict[str, Any]) -> list[str]:
    """What ``--ledger-durability`` costs a provider call (``bench.durability``)."""
    return [
        f"The ledger on the same cluster: {rows['ledger_calls']} calls a round (`aof` "
        f"{rows['aof_frames']}), each reserved, marked sending and settled as the source does; "
        "with `replica` and `aof` the first two wait (`producer/budget/redis_durable.py`), "
        f"the settle does not (measured {rows['ledger_measured_utc']} UTC).",
        "",
        *table(durability_bench.LEDGER_HEADER, durability_bench.ledger_cells(rows)),
    ]


def markdown(results: dict[str, Any]) -> str:
    machine = results["machine"]
    streams, decoders = results["streams"], results["decoders"]
    out = [
        "# replywire benchmark results",
        "",
        f"Size `{results['size']}`, run {results['started_utc']} UTC in {results['duration_s']} s. "
        "Generated by `make bench` (bench/report.py); the same figures are in results.json.",
        "",
        f"Machine: {machine['cpus']} CPUs ({machine['cpu_model']}), {machine['platform']}, "
        f"Python {machine['python']}, grpcio {machine['grpcio']}, protobuf {machine['protobuf']}; "
        f"load average before {results['load_average_before']}, "
        f"after {results['load_average_after']} (a shared machine: ratios of alternated "
        "rounds are the figures to read, not the absolute numbers). "
        f"Stream benchmarks: {streams.get('pinning', 'not pinned')}.",
        "",
        "Commands:",
        "",
        "```",
        *results["commands"],
        "```",
        "",
        *paced_section(results["paced"]),
        *(workers.section(results["workers"]) if "workers" in results else []),
        f"## Sequential streams between two processes ({streams['case']}, {streams['wire']} wire, "
        f"{streams['channel_policy']} on every side, median of {streams['rounds']} rounds)",
        "",
        "Checks only: a bare client that runs each chunk through the consumer's sans-IO core "
        "(decoding, the frame checks, the content digest, the reply validation; no records, "
        "no session, no reader) against the bare server: the most a consumer that checks "
        "what it reads can reach against the bare pair. Replywire → bare server: the "
        "replywire consumer against the same bare server, the consumer's target's side (the "
        "replywire pair's streams/s also carries its producer's cost beyond a bare server's).",
        "",
        *sequential(streams),
        "## Producer CPU per stream (the producer against the bare server, same streams)",
        "",
        "Records only: the bare server writing, per stream, the producer's four transition "
        "records at info (its stream machine, into a batched JSON trace), nothing else: "
        "the least a producer that records every transition costs.",
        "",
        *producer_cpu(streams),
        "## Concurrent streams (one frame per chunk; time to first chunk; failures by code)",
        "",
        *concurrency(streams),
        "Above a configured limit (the same burst, all rounds together; a stream past "
        "`--max-streams` is refused `RESOURCE_EXHAUSTED` / `stream_limit`):",
        "",
        *over_limit(streams),
        *budget_section(results["budget"]),
        *targets_section(results),
        *record_floor(results["record_floor"]),
        *pure_against_compiled(results),
        f"## Decoder cost per frame (CPU µs, median of {decoders['rounds']} rounds; "
        "the lab's algorithm is the labelled baseline)",
        "",
        "Not run: " + "; ".join(f"{k} {v}" for k, v in decoders["not_run"].items()) + ".",
        "",
        *decoder_costs(decoders),
        "Flatness: the cost per frame at each count over the cost at the smallest count "
        "(±20% is flat).",
        "",
        *flatness(decoders),
        "## Backpressure memory (a paused consumer, a reply larger than the window)",
        "",
        "Counted on the wire by a proxy (bench/window_proxy.py): the window the consumer "
        "announces (half `--window-bytes`), the WINDOW_UPDATEs it returned while paused "
        "(gRPC returns the bytes that arrived after the reader's last read once), the DATA "
        "bytes the producer sent; chunks from the producer's trace. Bound: the announced "
        "window, one update at most as large, the queue, the reader's and the processor's "
        "chunk.",
        "",
        *backpressure(results["backpressure"]),
        "## How far a producer runs ahead of a reader that never reads (bare grpc.aio)",
        "",
        *table(
            ["channel options", "bytes written before blocking"],
            results["flow_window"]["bytes_written_before_blocking"].items(),
        ),
        "## Trace cost (the producer's records at info against warning)",
        "",
        *trace_cost(streams["trace_cost"], "producer"),
        "## Trace cost (the consumer's records at info against warning, against the bare server)",
        "",
        *trace_cost(streams["consumer_trace_cost"], "consumer"),
        "## Tracing cost (OpenTelemetry off against on, spans exported over OTLP/gRPC)",
        "",
        "Sequential replywire streams, both sides' tracing off (the default) against on "
        "with `--otlp-endpoint` to a collector of its own process (harness.otlp_collector), "
        "alternated round by round; every round waits for the batched export before the "
        "CPU is read (bench/tracing_cost.py).",
        "",
        *tracing(results["tracing"]),
        *fanout(results["fanout"]),
        *durability_section(results["durability"]),
    ]
    return "\n".join(out).rstrip() + "\n"
