"""The TypeScript consumer's build as the tests make it (clients/typescript/): `make ts`, which
runs its README's steps, bounded, once per run (``once_per_run``). The fixtures that hand it
to tests are in tests/system/conftest.py; tests/system/test_typescript.py checks it, and the
conformance tests run the built consumer."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from tests.processes import ROOT
from tests.runs import ONCE_TIMEOUT_S

TS = ROOT / "clients/typescript"
#: The steps of `make ts`, as the README shows them.
STEPS = ("npm ci", "npm run build", "npm test")
#: The build: the README's steps, in clients/typescript/, through make (the root README's).
MAKE_TS = "make --no-print-directory ts"
#: Each step's bound: the three together stay under the time the other workers wait for the
#: first one's build (tests.runs.ONCE_TIMEOUT_S), so a slow build fails here, with its output.
STEP_TIMEOUT_S = 90.0
#: What a failed step's output keeps for the report (its tail: where tsc and node:test say why).
OUTPUT_TAIL = 6000


def run_bounded(
    command: str | list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``command`` (a list, or a string for bash -euo pipefail) to its end, in a session of
    its own: past ``timeout`` the session is killed (npm's and node's children with it) and
    TimeoutExpired raised; whatever it left running is killed after."""
    args = ["bash", "-euo", "pipefail", "-c", command] if isinstance(command, str) else command
    process = subprocess.Popen(
        args,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    return subprocess.CompletedProcess(args, process.returncode, out, err)


assert len(STEPS) * STEP_TIMEOUT_S < ONCE_TIMEOUT_S


def build() -> dict[str, Any]:
    """`make ts` (the README's steps, then the stamp make conformance reads), bounded: how it
    ended and the tail of what it printed."""
    timeout = len(STEPS) * STEP_TIMEOUT_S
    try:
        done = run_bounded(MAKE_TS, ROOT, timeout)
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired:
        code, output = None, f"killed after {timeout} s"
    return {"command": MAKE_TS, "returncode": code, "output": output[-OUTPUT_TAIL:]}
