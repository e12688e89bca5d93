"""Fixtures of the system tier that more than one of its modules uses."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import once_per_run
from tests.typescript import STEPS, build


@pytest.fixture(scope="session")
def typescript_build(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    outcomes: list[dict[str, Any]] = once_per_run(tmp_path_factory, "typescript-build", build)
    return outcomes


@pytest.fixture
def built(typescript_build: list[dict[str, Any]]) -> None:
    """dist/ is there: the build succeeded (its failure is test_npm_ci_build_and_test's)."""
    failed = [o["step"] for o in typescript_build if o["returncode"] != 0]
    if failed or len(typescript_build) != len(STEPS):
        pytest.fail(f"the TypeScript build failed at {failed}: see test_npm_ci_build_and_test")
