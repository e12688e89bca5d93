"""Fixtures of the system tier that more than one of its modules uses."""

from __future__ import annotations

from typing import Any

import pytest

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
