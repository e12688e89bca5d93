"""The producer on uvloop (``--event-loop uvloop``) does all it does on asyncio's loop.

Real producer processes on loopback; real consumer processes and a health check from this
one. Only what a test started is signalled, by pid; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.certs import make_pki
from tests.processes import producer, run_consumer, wait_for

pytestmark = pytest.mark.timeout(120)
uvloop = pytest.importorskip("uvloop")

SERVING = health_pb2.HealthCheckResponse.SERVING


async def health(target: str, ca: bytes) -> int:
    credentials = grpc.ssl_channel_credentials(root_certificates=ca)
    async with grpc.aio.secure_channel(target, credentials) as channel:
        response = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="replywire.v1.ReplyStream"), timeout=10
        )
    return int(response.status)


def test_a_producer_on_uvloop_serves_over_tls_and_stops_on_sigterm(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    tls = ("--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key))
    with producer(tmp_path, "--event-loop", "uvloop", *tls) as p:
        listening = p.trace()[0]
        served = run_consumer(
            p.target, "--case", "replace-file", "--stream-id", "on-uvloop", "--tls-ca", str(pki.ca)
        )
        status = asyncio.run(health(p.target, pki.ca.read_bytes()))
        p.process.send_signal(signal.SIGTERM)
        assert p.process.wait(timeout=30) == 0
        trace = p.trace()
    assert listening["event"] == "producer_listening"
    assert listening["event_loop"] == "uvloop"  # read from the running loop, not the flag
    assert (served.returncode, served.result["status"]) == (0, "complete")
    assert status == SERVING
    assert trace[-1]["event"] == "producer_stopped"
    assert trace[-1]["streams_completed"] == 1


def test_the_default_loop_is_asyncios(tmp_path: Path) -> None:
    with producer(tmp_path) as p:
        wait_for(lambda: any(r["event"] == "producer_listening" for r in p.trace()))
        assert p.trace()[0]["event_loop"] == "asyncio"


def test_uvloop_missing_is_one_line_and_exit_2() -> None:
    """Where uvloop is not installed (here: its import made to fail), the flag is a usage
    error before the producer opens anything."""
    blocked = (
        "import sys; sys.modules['uvloop'] = None; from replywire.producer.cli import main; "
        "sys.exit(main(['--event-loop', 'uvloop', '--port', '0']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocked], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "producer: --event-loop uvloop needs the uvloop package, which is not installed "
        "(pip install uvloop)"
    ]
    assert "listening on" not in done.stdout
