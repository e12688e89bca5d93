"""Tests of the fake Gemini server itself (harness/fake_gemini/), over real sockets.

Every async scenario runs under ``asyncio.run`` inside a plain test function; the
client is httpx (streaming), except one test that speaks raw HTTP/1.1 to check
the bytes on the wire.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from harness.fake_gemini.scripts import DEFAULT_MODEL
from replywire.children import read_listening_port
from tests.gemini_runs import FIRST, HEADERS, split_events, text_of
from tests.gemini_runs import fake_request_body as request_body

ROOT = Path(__file__).resolve().parents[2]


START_TIMEOUT_S = 20.0


def _read_port(process: subprocess.Popen[bytes]) -> int:
    port = read_listening_port(process, START_TIMEOUT_S)
    if port is None:
        raise RuntimeError(f"fake did not print its port (exit code {process.poll()})")
    return port


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_process_mode_serves_its_log_and_stops_on_signal(tmp_path: Path, sig: int) -> None:
    with (tmp_path / "stderr.txt").open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "harness.fake_gemini", "--port", "0", "--api-key", "proc-key"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    try:
        port = _read_port(process)
        base = f"http://127.0.0.1:{port}"
        url = f"{base}/v1beta/models/{DEFAULT_MODEL}:streamGenerateContent?alt=sse"
        with httpx.Client(timeout=10.0) as client:
            assert client.get(f"{base}/_fake/log").json() == []
            with client.stream(
                "POST", url, headers={"x-goog-api-key": "proc-key"}, json=request_body()
            ) as response:
                raw = b"".join(response.iter_bytes())
            assert response.status_code == 200
            events, _ = split_events(raw)
            assert [text_of(e) for e in events] == list(FIRST.texts)
            assert client.post(url, headers=HEADERS, json=request_body()).status_code == 403
            log = client.get(f"{base}/_fake/log").json()
        assert [entry["status"] for entry in log] == [200, 403]
        assert log[0]["body_completed"] is True
        assert log[0]["events_sent"] == len(FIRST.texts)
        assert log[0]["headers"]["x-goog-api-key"] == "proc-key"
        assert log[0]["body"] == request_body()
        os.kill(process.pid, sig)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
