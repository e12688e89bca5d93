"""Test set-up: the tiers' markers (applied by path), structlog reset around every test,
shared fixtures.

The tiers are folders: ``tests/unit`` (no sockets, no processes, no files outside a
temporary directory), ``tests/integration`` (real sockets and real gRPC in the test's own
process: in-process servers, and a private Redis server as a store), ``tests/system``
(several processes: producers, consumers, the fake Gemini server, ``make``, a browser,
hosts in network namespaces). Each test gets its folder's marker, so ``-m unit`` or
``-m "not system"`` selects by tier, and a unit or integration test that reaches past its
tier fails with the reason (``_tests_keep_to_their_tier``; tests/unit/test_tiers.py).

``make check`` and ``make test`` run the tests on pytest-xdist workers, but those marked
``serial``, which run in one process of their own, alone: ``make protos`` (it rewrites
shared/pb/) and a module whose last test reads what its others left. The cross-host
tests run on the workers too: tests/netns.py makes one set of test hosts at a time.
"""

from __future__ import annotations

import logging
import multiprocessing.util
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
import structlog

from replywire.runtime.recording_file import load_recording
from replywire.shared.recording import Recording
from tests.runs import COVERAGE_HOOK

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


class TierViolation(AssertionError):
    """A test reached for what its tier does not allow: it belongs in another tier."""


#: The only programs an integration test may start: the private Redis server it stores in.
STORE_PROGRAMS = frozenset({"redis-server", "valkey-server"})


@pytest.fixture(autouse=True)
def _tests_keep_to_their_tier(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tiers are kept by the code, not by convention. A unit test that opens a network
    socket (a socketpair, such as an event loop's own, is not one), starts a process or
    opens a gRPC server or channel fails, with the reason; an integration test that starts
    a process other than its Redis server, too."""
    tier = next((t for t in TIERS if request.node.get_closest_marker(t)), None)
    if tier in ("unit", "integration"):
        _refuse_processes(monkeypatch, tier, allowed=STORE_PROGRAMS if tier != "unit" else ())
    if tier == "unit":
        _refuse_network(monkeypatch, tier)


def _refusal(tier: str, what: str) -> Callable[..., None]:
    def refused(*_args: object, **_kwargs: object) -> None:
        raise TierViolation(f"a test in tests/{tier} must not {what}")

    return refused


def _refuse_processes(monkeypatch: pytest.MonkeyPatch, tier: str, allowed: Collection[str]) -> None:
    start = subprocess.Popen.__init__

    def only_allowed(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        program = Path(str(args if isinstance(args, str | os.PathLike) else args[0])).name
        if program not in allowed:
            raise TierViolation(f"a test in tests/{tier} must not start {program}")
        start(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", only_allowed)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refusal(tier, "start a process"))
    # multiprocessing's spawn and forkserver start their processes without Popen or fork.
    monkeypatch.setattr(multiprocessing.util, "spawnv_passfds", _refusal(tier, "start a process"))


def _refuse_network(monkeypatch: pytest.MonkeyPatch, tier: str) -> None:
    for name in ("bind", "connect", "connect_ex", "listen"):
        monkeypatch.setattr(socket.socket, name, _refusal(tier, f"{name} a socket"))
    for module in (grpc, grpc.aio):
        for name in ("server", "insecure_channel", "secure_channel"):
            monkeypatch.setattr(module, name, _refusal(tier, f"open a gRPC {name.split('_')[0]}"))


@pytest.fixture(autouse=True)
def _no_cover_children(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test marked ``no_cover`` drives a load (thousands of vectors, mutants of the core,
    the benchmarks, thousands of streams) through code other tests measure: the processes it
    starts are not measured either. Traced, they were a sixth of ``make test``'s time and
    measured nothing new."""
    if request.node.get_closest_marker("no_cover") is not None:
        for name in COVERAGE_HOOK:
            monkeypatch.delenv(name, raising=False)


@pytest.hookimpl(wrapper=True, trylast=True)  # innermost: inside pytest-cov's own wrapper
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A test marked ``no_cover`` runs untraced. pytest-cov stops its measurement for it,
    but on an xdist worker more than one measurement is stacked (the worker's own, and the
    one coverage's subprocess patch starts in every Python process the run starts), and
    stopping the top one resumes the next: the test was traced all the same, three times
    slower. The trace function is taken off this thread for the call, and put back."""
    tracer = sys.gettrace()
    if tracer is None or item.get_closest_marker("no_cover") is None:
        return (yield)
    sys.settrace(None)
    try:
        return (yield)
    finally:
        sys.settrace(tracer)


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
