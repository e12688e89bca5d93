"""The producer's operations surface without processes: the stream limit and its gRPC
options, the health servicer's interface and bound, each producer's metrics registry,
connection ages at their edges, gRPC's Python logging as one record, the write-wait buckets.
(tests/system/test_operations_processes.py runs them on real producer processes.)"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from pathlib import Path

import pytest
import structlog
import structlog.testing

from replywire.producer.edge.connections import ConnectionAges
from replywire.producer.edge.health import DEFAULT_MAX_HEALTH_WATCHES, BoundedHealthServicer
from replywire.producer.edge.server import server_options
from replywire.producer.flags import build_parser
from replywire.producer.metrics import ProducerMetrics, install, record_ledger_spend
from replywire.producer.settings import DEFAULT_MAX_PENDING, DEFAULT_MAX_STREAMS
from replywire.producer.states import FINAL_STATES, StreamInput, StreamState
from replywire.runtime.library_logs import FOREIGN_LOG_EVENT, route_stdlib_logging
from replywire.runtime.logs import configure_logging
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import Reason
from replywire.shared.status import Status
from tests.hostile_input import INJECTED
from tests.producer_records import NOT_SERVING, SERVING

pytestmark = pytest.mark.timeout(120)


def test_grpc_options_follow_max_streams() -> None:
    options = dict(server_options(max_streams=3))
    assert options["grpc.max_concurrent_streams"] == 4  # the 4th hears the refusal
    big = dict(server_options(max_streams=5000))
    assert big["grpc.max_concurrent_streams"] == 5001
    # RPCs waiting for the servicer are bounded by --max-pending alone (tests/test_concurrency).
    assert big["grpc.server.max_pending_requests"] == DEFAULT_MAX_PENDING


@pytest.mark.parametrize("value", ["0", "-1", "many", "1.5"])
def test_max_streams_below_one_is_a_usage_error(value: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--max-streams", value])
    assert exit_info.value.code == 2


def test_max_streams_bounds_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_parser().parse_args([]).max_streams == DEFAULT_MAX_STREAMS == 4000
    assert build_parser().parse_args(["--max-streams", "1"]).max_streams == 1
    monkeypatch.setenv("REPLYWIRE_MAX_STREAMS", "7")
    assert build_parser().parse_args([]).max_streams == 7
    assert build_parser().parse_args(["--max-streams", "9"]).max_streams == 9


def test_stream_limit_is_a_refusal() -> None:
    assert REASONS[Reason.STREAM_LIMIT].status is Status.REFUSED
    assert REASONS[Reason.STREAM_LIMIT].grpc_code == "RESOURCE_EXHAUSTED"


def test_the_health_servicer_keeps_grpc_health_s_interface() -> None:
    async def scenario() -> None:
        servicer = BoundedHealthServicer()
        assert servicer.max_watches == DEFAULT_MAX_HEALTH_WATCHES == 100
        await servicer.set("x", SERVING)
        await servicer.enter_graceful_shutdown()
        await servicer.set("x", SERVING)  # ignored from now on
        assert servicer._server_status["x"] == NOT_SERVING

    asyncio.run(scenario())
    with pytest.raises(ValueError, match="at least 1"):
        BoundedHealthServicer(0)


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_max_health_watches_below_one_is_a_usage_error(value: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--max-health-watches", value])
    assert exit_info.value.code == 2


def test_max_health_watches_default_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_parser().parse_args([]).max_health_watches == DEFAULT_MAX_HEALTH_WATCHES
    monkeypatch.setenv("REPLYWIRE_MAX_HEALTH_WATCHES", "7")
    assert build_parser().parse_args([]).max_health_watches == 7
    assert build_parser().parse_args(["--max-health-watches", "9"]).max_health_watches == 9
    assert REASONS[Reason.HEALTH_WATCH_LIMIT].grpc_code == "RESOURCE_EXHAUSTED"


def documented_metrics() -> set[tuple[str, tuple[str, ...]]]:
    """The metrics docs/operations.md's table names (its first column), with their labels."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    section = text.split("\n## Metrics\n", 1)[1]
    table = section.split("| metric | kind | meaning |\n|---|---|---|\n", 1)[1].split("\n\n")[0]
    named = set()
    for row in table.splitlines():
        for name in re.findall(r"`(replywire_[a-z_]+)(?:\{([a-z_,]+)\})?`", row.split(" | ")[0]):
            named.add((name[0], tuple(name[1].split(",")) if name[1] else ()))
    return named


def test_the_operations_table_names_every_metric_with_its_labels() -> None:
    """docs/operations.md#metrics is written by hand: it names each family the registry
    exposes (the shared log's gauges too), with the labels it has, and nothing else."""
    metrics = ProducerMetrics()
    metrics.watch_reply_log(lambda: 0, lambda: 0)
    exposed = set()
    for family in metrics.registry.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = {key for sample in family.samples for key in sample.labels if key != "le"}
        exposed.add((name, tuple(sorted(labels))))
    for collector in (metrics.streams_ended, metrics.generations_ended, metrics.requests_refused):
        # Labelled counters with no sample yet: their labels from the collector.
        exposed = {
            (name, collector.labels if name == collector.name + "_total" else labels)
            for name, labels in exposed
        }
    assert exposed == documented_metrics()


def test_each_producer_has_its_own_registry_and_the_ledger_hook() -> None:
    first, second = ProducerMetrics(), ProducerMetrics()
    record_ledger_spend(1.0)  # nothing installed: nothing counted, nothing raised
    install(first)
    try:
        record_ledger_spend(0.25)
        record_ledger_spend(0.5)
        record_ledger_spend(0.0)
    finally:
        install(None)
    record_ledger_spend(2.0)
    assert first.registry.get_sample_value("replywire_ledger_spend_usd_total") == 0.75
    assert second.registry.get_sample_value("replywire_ledger_spend_usd_total") == 0


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_connection_ages_at_the_edges() -> None:
    clock = FakeClock()
    ages = ConnectionAges(10.0, 10.0, 60.0, clock=clock)
    assert (ages.cut_after_s, ages.forget_after_s, ages.renew_after_s) == (18.0, 22.0, 61.0)
    first = ages.opened("ipv4:127.0.0.1:1000")
    clock.now += 5
    assert ages.opened("ipv4:127.0.0.1:1000") == first  # a second stream, same connection
    assert ages.opened("ipv4:127.0.0.1:2000") == clock.now
    clock.now = first + 18.0 - 0.001
    assert not ages.aged_out(first)
    clock.now = first + 18.0
    assert ages.aged_out(first)
    clock.now = first + 22.0  # the first connection is certainly closed: forgotten
    assert ages.opened("ipv4:127.0.0.1:3000") == clock.now
    assert len(ages) == 2
    clock.now += 1000  # all forgotten but the newest: the table stays bounded
    ages.opened("ipv4:127.0.0.1:4000")
    assert len(ages) == 1


def test_a_client_port_idle_past_the_connection_idle_bound_is_a_new_connection() -> None:
    """gRPC closes a connection without a stream for idle_s: a stream from the same address
    after that (plus a second) is on a new connection, even one that reused the port."""
    clock = FakeClock()
    ages = ConnectionAges(10.0, 10.0, 2.0, clock=clock)
    peer = "ipv4:127.0.0.1:1000"
    first = ages.opened(peer)
    ages.opened(peer)
    clock.now += 1
    ages.ended(peer)
    clock.now += 5  # one stream still open: the same connection, however long
    assert ages.opened(peer) == first
    ages.ended(peer)
    ages.ended(peer)
    clock.now += 3.0  # idle for exactly 2 + 1 s: possibly still the same connection
    assert ages.opened(peer) == first
    ages.ended(peer)
    clock.now += 3.001  # idle longer: closed by gRPC; this stream's connection is new
    assert ages.opened(peer) == clock.now
    assert len(ages) == 1


def test_a_passed_deadline_is_the_consumers_whatever_the_connections_age() -> None:
    clock = FakeClock()
    ages = ConnectionAges(10.0, 10.0, 60.0, clock=clock)
    first = ages.opened("ipv4:127.0.0.1:1000")
    clock.now += 18.0  # aged out
    assert ages.cut(first, 0.0) == (StreamInput.CONSUMER_CANCELLED, Reason.DEADLINE_EXCEEDED)
    # The caller's cancel at its deadline, before the producer's own (which starts later).
    assert ages.cut(first, 0.25) == (StreamInput.CONSUMER_CANCELLED, Reason.DEADLINE_EXCEEDED)
    assert ages.cut(first, 0.26) == (StreamInput.CONNECTION_AGED, Reason.CONNECTION_AGED_OUT)
    assert ages.cut(first, None) == (StreamInput.CONNECTION_AGED, Reason.CONNECTION_AGED_OUT)
    assert ages.cut(first, 3.0) == (StreamInput.CONNECTION_AGED, Reason.CONNECTION_AGED_OUT)
    clock.now -= 1.0
    assert ages.cut(first, 3.0) == (StreamInput.CONSUMER_CANCELLED, Reason.CONSUMER_CANCELLED)


def test_connection_aged_out_is_a_final_state_of_its_own() -> None:
    assert StreamState.CONNECTION_AGED_OUT in FINAL_STATES
    assert StreamInput.CONNECTION_AGED.value == "connection_aged"
    assert REASONS[Reason.CONNECTION_AGED_OUT].grpc_code == "UNAVAILABLE"


def test_grpc_python_logging_becomes_one_record() -> None:
    out = io.StringIO()
    configure_logging("producer", log_format="json", stream=out)
    route_stdlib_logging("grpc")
    try:
        logging.getLogger("grpc._cython.cygrpc").error("bad peer said:\n%s", INJECTED)
        logging.getLogger("grpc.aio").info("below the level: dropped")
    finally:
        for name in ("grpc",):
            logging.getLogger(name).handlers = []
            logging.getLogger(name).propagate = True
            logging.getLogger(name).setLevel(logging.NOTSET)
        structlog.reset_defaults()
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert (record["event"], record["logger"], record["side"]) == (
        FOREIGN_LOG_EVENT,
        "grpc._cython.cygrpc",
        "producer",
    )
    # Scrubbed like any text from elsewhere: the newline shown as its escape, never itself.
    assert record["message"] == f"bad peer said:\\n{INJECTED}"
    assert INJECTED not in lines[0]  # escaped: data inside a record, never a record


def test_write_waits_fall_in_prometheus_buckets_at_and_past_each_bound() -> None:
    from prometheus_client import generate_latest  # noqa: PLC0415 - this test only

    from replywire.producer.metrics import WRITE_WAIT_BUCKETS, ProducerMetrics  # noqa: PLC0415

    metrics = ProducerMetrics()
    # One write exactly at each bound (le: at or below it), one just past the last.
    for bound in WRITE_WAIT_BUCKETS:
        metrics.chunk_written(2, bound)
    metrics.chunk_written(3, WRITE_WAIT_BUCKETS[-1] * 1.0001)
    samples = {
        (sample.name, sample.labels.get("le")): sample.value
        for family in metrics.registry.collect()
        for sample in family.samples
    }
    for index, bound in enumerate(WRITE_WAIT_BUCKETS):
        assert samples["replywire_chunk_write_wait_seconds_bucket", repr(bound)] == index + 1
    count = len(WRITE_WAIT_BUCKETS) + 1
    assert samples["replywire_chunk_write_wait_seconds_bucket", "+Inf"] == count
    assert samples["replywire_chunk_write_wait_seconds_count", None] == count
    assert samples["replywire_chunks_written_total", None] == count
    assert samples["replywire_bytes_written_total", None] == 2 * (count - 1) + 3
    assert b"replywire_chunk_write_wait_seconds_sum" in generate_latest(metrics.registry)
