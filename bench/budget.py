"""Where the time goes: per-stream and per-chunk budgets in µs, from one ``make bench`` run.

A budget by difference of the run's own sides, which differ by one layer each: the bare
pair is gRPC's own work; the checks-only client adds the consumer's sans-IO core (of it,
decoding is the length-prefixed decoder's cost per whole frame, ``bench.decoders``, same
run); the replywire consumer adds its records, reader, queue and session (of them, the
records: the consumer at info against warning, ``bench.streams``' trace-cost rounds). The
records-only server adds the producer's four records to the bare server; the producer adds
the rest (the request checks, the plan, the reply log, the state machine, metrics, the
pacing's sleeps). Of the rest, the reply log is not a side of its own: it is its share of
the producer side's time in a cProfile of both sides in one process (``bench.profile``'s
``reply_log_share``, the same run: the cumulative time of the functions of
``producer/replylog/`` entered from outside them, over that of the producer package's)
times the producer's measured total. A part is the difference of two medians, so on a shared
machine a small one can come out negative: it is shown as measured.
"""

from __future__ import annotations

from typing import Any

from bench.common import CHECKS_ONLY, CONSUMER_ALONE, RECORDS_ONLY, median
from bench.streams import CASE_ID, request_for
from replywire.runtime.recording_file import load_recording
from replywire.shared.faults import transmit
from replywire.shared.wire.chunking import ChunkPlan

#: The short-stream chunking the per-stream budget is read at (the paced streams' chunking).
PER_STREAM_CHUNKING = "frame"


def decode_us_per_frame(decoders: dict[str, Any]) -> float | None:
    """The length-prefixed decoder's µs per frame when a chunk holds whole frames (median
    over the run's frame counts): a paced chunk is one whole frame."""
    values = [c["us_per_frame"]["lp"] for c in decoders["cells"] if c["fragment"] == "whole body"]
    return median(values) if values else None


def _parts(
    pair: float, checks: float, ours: float, decoding: float | None, records: float | None
) -> dict[str, float | None]:
    core = checks - pair
    rest = ours - checks
    return {
        "grpc": pair,
        "decoding": decoding,
        "checks": None if decoding is None else core - decoding,
        "core": core,
        "records": records,
        "session": None if records is None else rest - records,
        "records_and_session": rest,
        "total": ours,
    }


def consumer_budget(
    sides: dict[str, Any], key: str, scale: float, decoding: float | None, records: float | None
) -> dict[str, float | None]:
    """The consumer's parts, of the replywire consumer against the bare server (the checks-only
    client's server) when the run has that side, else of the replywire pair's consumer."""
    consumer = CONSUMER_ALONE if CONSUMER_ALONE in sides else "replywire"
    pair, checks, ours = (sides[s][key] * scale for s in ("bare pair", CHECKS_ONLY, consumer))
    return _parts(pair, checks, ours, decoding, records)


def producer_budget(
    sides: dict[str, Any], key: str, scale: float, reply_log_share: float | None
) -> dict[str, float | None]:
    """The producer's parts; of the rest, the reply log: its share of the producer side's
    profiled time (``bench.profile.reply_log_share``) times the producer's measured total."""
    pair, records, ours = (sides[s][key] * scale for s in ("bare pair", RECORDS_ONLY, "replywire"))
    rest = ours - records
    reply_log = None if reply_log_share is None else reply_log_share * ours
    return {
        "grpc": pair,
        "records": records - pair,
        "reply_log": reply_log,
        "rest_without_reply_log": None if reply_log is None else rest - reply_log,
        "rest": rest,
        "total": ours,
    }


def budgets(results: dict[str, Any]) -> dict[str, Any]:
    """Per chunk at each paced N, and per stream of the short streams (one frame per chunk)."""
    decoding = decode_us_per_frame(results["decoders"])
    streams = results["streams"]
    row = streams["sequential"][PER_STREAM_CHUNKING]
    frames = frames_per_stream()
    trace = streams["consumer_trace_cost"][PER_STREAM_CHUNKING]["sides"]
    at_info, at_warning = (side["client_cpu_ms_per_stream"] for side in trace.values())
    producer_trace = streams["trace_cost"][PER_STREAM_CHUNKING]["sides"]
    p_info, p_warning = (side["server_cpu_ms_per_stream"] for side in producer_trace.values())
    per_stream = {
        "chunks": PER_STREAM_CHUNKING,
        "frames": frames,
        "consumer": consumer_budget(
            row["sides"],
            "client_cpu_ms_per_stream",
            1e3,
            None if decoding is None else decoding * frames,
            (at_info - at_warning) * 1e3,
        ),
        "producer": producer_budget(
            row["sides"], "server_cpu_ms_per_stream", 1e3, _share(results, "per_stream")
        ),
        "producer_records_at_info_over_warning": (p_info - p_warning) * 1e3,
    }
    per_chunk = {
        n: {
            "consumer": consumer_budget(
                paced["sides"], "client_cpu_us_per_chunk", 1.0, decoding, None
            ),
            "producer": producer_budget(
                paced["sides"], "server_cpu_us_per_chunk", 1.0, _share(results, "per_chunk")
            ),
        }
        for n, paced in results["paced"]["by_streams"].items()
    }
    shares = {shape: _share(results, shape) for shape in ("per_stream", "per_chunk")}
    return {
        "per_stream": per_stream,
        "per_chunk": per_chunk,
        "decode_us_per_frame": decoding,
        "reply_log_share": shares,
    }


def _share(results: dict[str, Any], shape: str) -> float | None:
    """The reply log's share of the producer side, profiled in this run (None: not run)."""
    profiled = results.get("reply_log_profile")
    return None if profiled is None else profiled[shape]["share"]


def frames_per_stream() -> int:
    """Frames of the short streams' reply (``bench.streams``' case, one a chunk)."""
    request = request_for(ChunkPlan.parse(PER_STREAM_CHUNKING))
    case = load_recording().case(CASE_ID)
    return len(transmit(case, wire=request.wire, plan=request.plan).frames)
