"""The producer as a process: SIGTERM stops it cleanly, environment variables configure it,
usage errors exit 2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from replywire import native
from replywire.children import stop_process
from tests.processes import ROOT, producer, read_trace, wait_for

pytestmark = pytest.mark.timeout(60)


def test_sigterm_stops_the_producer_cleanly(tmp_path: Path) -> None:
    with producer(tmp_path, "--allow-faults") as running:
        assert stop_process(running.process, signal.SIGTERM) == 0
        records = running.trace()
    events = [record["event"] for record in records]
    assert events[0] == "producer_listening"
    assert events[-2:] == ["producer_stopping", "producer_stopped"]
    assert records[0]["port"] == running.port
    assert records[0]["build"] == native.running().build  # the same environment as this one


def test_environment_variables_configure_the_producer(tmp_path: Path) -> None:
    trace = tmp_path / "env.jsonl"
    env = {**os.environ, "REPLYWIRE_PORT": "0", "REPLYWIRE_ALLOW_FAULTS": "1",
           "REPLYWIRE_LOG_FORMAT": "json"}  # fmt: skip
    with trace.open("w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "replywire.producer"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        wait_for(lambda: any(r["event"] == "producer_listening" for r in read_trace(trace)))
        listening = read_trace(trace)[0]
        assert listening["allow_faults"] is True
        assert listening["port"] != 0
    finally:
        stop_process(process)


@pytest.mark.parametrize(
    "args", [["--port", "x"], ["--source", "other"], ["--max-connection-age-s", "0"]]
)
def test_producer_usage_errors_exit_2(args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "replywire.producer", *args],
        cwd=ROOT,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
