"""Test set-up: the tiers' markers (applied by path), structlog reset around every test,
shared fixtures.

The tiers are folders: ``tests/unit`` (no sockets, no processes, no files outside a
temporary directory), ``tests/integration`` (real sockets and real gRPC in the test's own
process: in-process servers, and a private Redis server as a store), ``tests/system``
(several processes: producers, consumers, the fake Gemini server, ``make``, a browser,
hosts in network namespaces). Each test gets its folder's marker, so ``-m unit`` or
``-m "not system"`` selects by tier.

``make check`` and ``make test`` run the tests on pytest-xdist workers, but those marked
``serial``, which run in one process of their own, alone: ``make protos`` (it rewrites
shared/pb/) and a module whose last test reads what its others left. The cross-host
tests run on the workers too: tests/netns.py makes one set of test hosts at a time.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from runtime.recording_file import load_recording
from shared.recording import Recording

# `make test` runs pytest inside make: a `make` command a test runs (the README's) would
# then print "Entering directory" lines around its output, unlike the same command typed
# in a shell. Tests run commands as a user would.
for _name in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS"):
    os.environ.pop(_name, None)

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "integration", "system")


def tier_of(path: Path) -> str | None:
    """The tier a test file belongs to: the folder under tests/ it is in."""
    parts = path.resolve().relative_to(TESTS).parts
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


# tryfirst: before -m selects by the markers added here.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item.path)
        if tier is None:
            raise pytest.UsageError(
                f"{item.nodeid}: a test module belongs in tests/{{{','.join(TIERS)}}}/"
            )
        item.add_marker(getattr(pytest.mark, tier))


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
