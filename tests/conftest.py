"""Test set-up: structlog reset around every test; shared fixtures."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog

from shared.recording import Recording


@pytest.fixture(autouse=True)
def _reset_structlog() -> Iterator[None]:
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


@pytest.fixture(scope="session")
def recording() -> Recording:
    return Recording.load()


@pytest.fixture
def quiet_logger() -> structlog.typing.FilteringBoundLogger:
    """A logger that drops everything below CRITICAL (for large inputs)."""
    return structlog.wrap_logger(
        structlog.PrintLogger(),
        wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL),
    )
