"""The tiers hold: tests/conftest.py refuses a unit test a network socket, a process and gRPC
(an integration test, any process but its Redis server), and every test has its tier's
marker."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from tests.conftest import TierViolation


def spawned() -> None:
    context = multiprocessing.get_context("spawn")
    context.Process(target=print).start()


# Each is a lambda so that what it calls is looked up when it is called: after the guard
# is in place, not at collection.
@pytest.mark.parametrize(
    "reach",
    [
        lambda: subprocess.run([sys.executable, "-c", "pass"], check=False),
        lambda: subprocess.run(["valkey-server", "--version"], check=False),
        lambda: os.fork(),  # noqa: PLW0108
        spawned,
        lambda: socket.create_connection(("127.0.0.1", 9), timeout=1),
        lambda: socket.socket().bind(("127.0.0.1", 0)),
        lambda: grpc.insecure_channel("127.0.0.1:9"),
        lambda: grpc.aio.server(),  # noqa: PLW0108
    ],
    ids=["process", "redis-server", "fork", "spawn", "connect", "bind", "channel", "server"],
)
def test_a_unit_test_reaches_no_socket_no_process_no_grpc(reach: Callable[[], object]) -> None:
    with pytest.raises(TierViolation, match="a test in tests/unit must not"):
        reach()


def test_an_event_loop_is_not_a_socket() -> None:
    """asyncio's own socketpair is allowed: unit tests run coroutines."""
    assert asyncio.run(asyncio.sleep(0, result="ran")) == "ran"


def test_each_test_has_its_folder_s_marker(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is not None
    assert request.node.get_closest_marker("system") is None


def test_no_test_module_name_repeats_across_the_tiers() -> None:
    """One topic, one module per tier, named so that a name says which: the integration
    tier's ``*_in_process``, the system tier's ``*_processes`` where a unit module has the
    topic's plain name."""
    tests = Path(__file__).resolve().parents[1]
    seen: dict[str, list[str]] = {}
    for path in sorted(tests.glob("*/test_*.py")):
        seen.setdefault(path.name, []).append(path.parent.name)
    assert {name: tiers for name, tiers in seen.items() if len(tiers) > 1} == {}
