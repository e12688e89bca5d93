"""The consumer's gRPC keepalive (how it notices a producer cut off mid-stream; the cut
itself is in tests/system/test_cross_host.py) and the producer's ping policy, at their edge:
pings every ``MIN_KEEPALIVE_S`` through a long silence are accepted (no GOAWAY: the
stream completes on its one connection); faster pings are refused by the consumer's own
flags and options, and a client that sends them anyway is cut off by the producer."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.processes import ROOT
from tests.runs import CASE


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--keepalive-s", "0.999"), ("--keepalive-s", "0"), ("--keepalive-timeout-s", "0")],
)
def test_keepalive_flags_past_the_edge_are_usage_errors(flag: str, value: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "replywire.consumer", "stream", "--case", CASE, flag, value],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert f"argument {flag}: must be" in done.stderr


@pytest.mark.parametrize("value", ["0", "0.0009", "-1", "nan"])
def test_a_min_ping_interval_past_the_edge_stops_the_producer(value: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "replywire.producer", "--port", "0", "--min-ping-interval-s", value],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "argument --min-ping-interval-s: must be at least 0.001" in done.stderr
