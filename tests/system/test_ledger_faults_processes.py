"""The ledger when its store fails: idempotent reserves, a reserve whose answer was lost asked
again or abandoned, owner leases and their reconciliation, settles retried in the background
and at shutdown, and the bounds that say how long all that may take.

Real stores only: a private valkey/redis server (tests/redis_server.py), paused with SIGSTOP
(its commands then wait in its socket buffers and run when it resumes, as a stalled server's
do), and the JSON file. No producer process here: tests/system/test_gemini_ledger_faults.py runs the
same faults through producers and the fake Gemini server.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import ROOT

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ledger-lease-s", "3", "--ledger-timeout-s", "1.01"], "--ledger-timeout-s (1.01)"),
        (["--ledger-lease-s", "0"], "--ledger-lease-s must be"),
        (["--ledger-retry-jitter", "2"], "--ledger-retry-jitter is a share"),
    ],
)
def test_a_ledger_setting_past_its_edge_stops_the_producer(
    tmp_path: Path, args: list[str], message: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "replywire.producer", "--port", "0", "--source", "gemini",
         "--gemini-base-url", "http://127.0.0.1:1", "--ledger", str(tmp_path / "l.json"), *args],
        cwd=ROOT, env={**os.environ, "GEMINI_API_KEY": "k" * 30},
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("producer: ") and message in line
    assert not (tmp_path / "l.json").exists()
