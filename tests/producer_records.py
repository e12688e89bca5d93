"""A producer's trace and metrics read back: each stream's final record, the stopped
record's counters, its health statuses and its Prometheus samples."""

from __future__ import annotations

import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from typing import Any

from grpc_health.v1 import health_pb2
from prometheus_client.parser import text_string_to_metric_families

from replywire.producer.states import FINAL_STATES
from tests.processes import (
    Producer,
    wait_for,
)

FINAL_VALUES = {state.value for state in FINAL_STATES}
FINAL_COUNTERS = (
    "streams_completed",
    "streams_refused",
    "streams_aborted",
    "streams_cancelled",
    "streams_failed",
    "streams_shutdown",
    "streams_aged_out",
)


def finals(p: Producer) -> dict[str, dict[str, Any]]:
    """Each stream's final record, by stream id."""
    return {
        r["stream_id"]: r
        for r in p.trace()
        if r["event"] == "state_changed" and r["to_state"] in FINAL_VALUES
    }


def stopped_record(p: Producer) -> dict[str, Any]:
    """Stop the producer; its last record, whose counters add up."""
    p.process.send_signal(signal.SIGTERM)
    p.process.wait(timeout=30)
    assert p.process.returncode == 0
    stopped = p.trace()[-1]
    assert stopped["event"] == "producer_stopped"
    assert stopped["streams_opened"] == sum(stopped[name] for name in FINAL_COUNTERS)
    return stopped


def metrics_port(p: Producer) -> int:
    wait_for(lambda: p.logged("metrics_listening"))
    return int(next(r["port"] for r in p.trace() if r["event"] == "metrics_listening"))


def exposition(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def check_exposition(text: str) -> None:
    """Names that say what they count: no ``_created`` series (a timestamp gauge beside each
    counter), and what ``promtool check metrics`` accepts, where Prometheus is installed."""
    names = {name for name, _ in samples(text)}
    assert not {name for name in names if name.endswith("_created")}
    promtool = shutil.which("promtool")
    if promtool is not None:
        done = subprocess.run(
            [promtool, "check", "metrics"], input=text, capture_output=True, text=True,
            timeout=30, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return samples(exposition(port))


SERVING = health_pb2.HealthCheckResponse.SERVING


NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
