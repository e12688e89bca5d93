"""Test set-up: structlog reset around every test; shared fixtures."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
import structlog

from runtime.recording_file import load_recording
from shared.recording import Recording

# `make test` runs pytest inside make: a `make` command a test runs (the README's) would
# then print "Entering directory" lines around its output, unlike the same command typed
# in a shell. Tests run commands as a user would.
for _name in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS"):
    os.environ.pop(_name, None)


@pytest.fixture(autouse=True)
def _reset_structlog() -> Iterator[None]:
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


@pytest.fixture(scope="session")
def recording() -> Recording:
    return load_recording()


@pytest.fixture
def quiet_logger() -> structlog.typing.FilteringBoundLogger:
    """A logger that drops everything below CRITICAL (for large inputs)."""
    return structlog.wrap_logger(
        structlog.PrintLogger(),
        wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL),
    )
