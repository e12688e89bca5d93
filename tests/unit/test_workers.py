"""``--workers``' pure parts: each worker's trace file named from the one given, its slot
carried in the environment, the refusals, the workers' expositions summed sample by sample,
and the flag's bounds (tests/system/test_workers_processes.py runs the processes)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from replywire.producer.flags import build_parser
from replywire.producer.metrics import ProducerMetrics
from replywire.producer.worker_metrics import summed
from replywire.producer.workers import (
    MAX_WORKERS,
    WORKER_ENV,
    WorkerSlot,
    refuse_unshareable,
    worker_trace_file,
)
from replywire.shared.errors import ConfigurationError


def test_each_worker_traces_beside_the_file_named() -> None:
    assert worker_trace_file(Path("/t/producer.jsonl"), 2) == Path("/t/producer.worker-2.jsonl")
    assert worker_trace_file(Path("trace"), 1) == Path("trace.worker-1")


def test_a_slot_goes_through_the_environment_and_sets_the_workers_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slot = WorkerSlot(2, 3, 40123, Path("/tmp/replywire-workers-x"))
    monkeypatch.setenv(WORKER_ENV, slot.encoded())
    assert WorkerSlot.from_environment() == slot
    args = build_parser().parse_args(
        ["--port", "0", "--trace-file", "/t/p.jsonl", "--metrics-port", "9464",
         "--ready-file", "/t/ready"]
    )  # fmt: skip
    slot.apply(args)
    assert (args.port, args.metrics_port) == (40123, None)
    assert args.trace_file == Path("/t/p.worker-2.jsonl")
    assert args.ready_file == slot.ready_file and slot.ready_file.parent == slot.folder
    monkeypatch.delenv(WORKER_ENV)
    assert WorkerSlot.from_environment() is None


def parsed(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["--workers", "2", *argv])


def test_what_cannot_be_spread_over_workers_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="needs a shared reply log, --reply-log redis"):
        refuse_unshareable(parsed())
    shared = ("--reply-log", "redis://127.0.0.1:6379/0")
    refuse_unshareable(parsed(*shared))  # a file ledger is shared safely (flock)
    with pytest.raises(ConfigurationError, match="--conformance is served by one process"):
        refuse_unshareable(parsed(*shared, "--conformance", "vectors"))
    with pytest.raises(ConfigurationError, match="every worker would capture"):
        refuse_unshareable(parsed(*shared, "--source", "gemini", "--record", "runs/x"))


def test_the_flag_is_bounded() -> None:
    assert build_parser().parse_args([]).workers == 1
    assert build_parser().parse_args(["--workers", str(MAX_WORKERS)]).workers == MAX_WORKERS
    for wrong in ("0", str(MAX_WORKERS + 1), "x"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--workers", wrong])


def exposition(streams: int, chunks: int, waited_s: float) -> str:
    metrics = ProducerMetrics()
    for _ in range(streams):
        metrics.stream_ended("completed", "")
    metrics.streams_open.set(streams)
    for _ in range(chunks):
        metrics.chunk_written(10, waited_s)
    return generate_latest(metrics.registry).decode()


def test_the_workers_figures_are_summed_sample_by_sample() -> None:
    registry = CollectorRegistry()
    families = summed([exposition(3, 5, 0.0002), exposition(4, 7, 2.0)])

    class Fixed:
        def collect(self) -> list[object]:
            return list(families)

    registry.register(Fixed())  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    assert 'replywire_streams_ended_total{outcome="completed",reason=""} 7.0' in text
    assert "replywire_streams_open 7.0" in text
    assert "replywire_chunks_written_total 12.0" in text
    assert "replywire_bytes_written_total 120.0" in text
    assert 'replywire_chunk_write_wait_seconds_bucket{le="0.0005"} 5.0' in text
    assert 'replywire_chunk_write_wait_seconds_bucket{le="+Inf"} 12.0' in text
    assert "replywire_chunk_write_wait_seconds_count 12.0" in text
    assert "# TYPE replywire_streams_ended_total counter" in text  # as one producer says it
