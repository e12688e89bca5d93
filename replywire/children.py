"""Child processes: start a producer, read the port it listens on, stop it by its pid.

Used by ``make demo`` and by the tests that run real processes. Every wait is
bounded; only the child that was started is ever signalled.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from replywire.shared.errors import ConfigurationError

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


def start_producer(
    trace: Path,
    recording_path: Path,
    log_level: str = "info",
    *flags: str,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], int]:
    """A producer (its trace in ``trace``) and its port; ``env``: variables set for it alone."""
    command = [
        sys.executable, "-m", "replywire.producer", "--port", "0", "--allow-faults",
        "--recording", str(recording_path), "--log-format", "json", "--log-level", log_level,
        *flags,
    ]  # fmt: skip
    with trace.open("w") as trace_file:
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=trace_file,
            env=None if env is None else {**os.environ, **env},
        )
    port = read_listening_port(process)
    if port is None:
        stop_producer(process)
        raise ConfigurationError(f"the producer did not start; its trace is in {trace}")
    return process, port


def read_listening_port(
    process: subprocess.Popen[bytes], timeout_s: float = START_TIMEOUT_S
) -> int | None:
    """Wait, bounded, for a child's ``listening on HOST:PORT`` line; None if it never comes."""
    assert process.stdout is not None
    fd, buffered = process.stdout.fileno(), b""
    deadline = time.monotonic() + timeout_s
    while (remaining := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], min(remaining, 0.1))
        if ready:
            data = os.read(fd, 4096)
            if not data:
                return None
            buffered += data
            for line in buffered.decode(errors="replace").splitlines():
                if line.startswith("listening on "):
                    return int(line.rsplit(":", 1)[1])
        elif process.poll() is not None:
            return None
    return None


def stop_process(process: subprocess.Popen[Any], sig: int = signal.SIGTERM) -> int:
    """Signal one child by pid and wait for it; SIGKILL if it does not stop in time."""
    if process.poll() is None:
        os.kill(process.pid, sig)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_TIMEOUT_S)
    return process.returncode


def stop_producer(process: subprocess.Popen[bytes]) -> None:
    stop_process(process)
    if process.stdout:
        process.stdout.close()
