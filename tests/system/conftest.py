"""Fixtures of the system tier that more than one of its modules uses."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from replywire.children import read_listening_port, stop_process
from tests.processes import ROOT
from tests.runs import once_per_run
from tests.typescript import build


@pytest.fixture(scope="session")
def typescript_build(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    outcome: dict[str, Any] = once_per_run(tmp_path_factory, "typescript-build", build)
    return outcome


@pytest.fixture
def built(typescript_build: dict[str, Any]) -> None:
    """dist/ is there: the build succeeded (its failure is test_make_ts_runs_the_readme_steps's)."""
    if typescript_build["returncode"] != 0:
        pytest.fail("the TypeScript build failed: see test_make_ts_runs_the_readme_steps")


@pytest.fixture(scope="module")
def hostile_target() -> Iterator[str]:
    """The hostile producer (``tests/hostile_producer.py``), started for a module: its target."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.hostile_producer", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    try:
        port = read_listening_port(process, 20.0)
        assert port is not None, "the hostile producer did not start"
        yield f"127.0.0.1:{port}"
    finally:
        stop_process(process)
        assert process.stdout is not None
        process.stdout.close()
