"""How tests run and wait: the case most tests stream, a bounded wait for a condition, work
done once per test run (shared by the workers), children started unmeasured, a logger
that drops everything, and what two runs of one stream must agree on."""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import pytest
import structlog
import structlog.testing

#: The case most tests stream.
CASE = "replace-file"


async def until(
    predicate: Callable[[], bool], *, timeout: float = 15.0, interval: float = 0.02
) -> None:
    """tests.processes.wait_for inside an event loop: poll without blocking it, bounded."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() >= deadline:
            raise TimeoutError(f"condition not met within {timeout} s")
        await asyncio.sleep(interval)


#: Coverage's subprocess hook: set in a test process's environment, every Python process the
#: test starts is measured too (pyproject.toml: ``patch = ["subprocess"]``).
COVERAGE_HOOK = ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START")


def unmeasured_environ(**extra: str) -> dict[str, str]:
    """This process's environment (and ``extra``) without coverage's subprocess hook: for
    what a test marked ``no_cover`` starts in a fixture wider than the test (the processes
    the test itself starts are unmeasured by tests/conftest.py)."""
    environ = {key: value for key, value in os.environ.items() if key not in COVERAGE_HOOK}
    return {**environ, **extra}


def once_per_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, compute: Callable[[], Any]
) -> Any:
    """``compute()`` (a JSON value) once for the whole run: under pytest-xdist the first
    worker to ask computes it and writes it down, in the folder all the run's workers share;
    the others wait for it (bounded) and read it."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return compute()
    shared = tmp_path_factory.getbasetemp().parent
    done = shared / f"{name}.json"
    with (shared / f"{name}.lock").open("a") as lock:
        deadline = time.monotonic() + ONCE_TIMEOUT_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{name}: another worker still at it") from None
                time.sleep(0.05)
        if not done.exists():
            done.write_text(json.dumps(compute()), encoding="utf-8")
        return json.loads(done.read_text(encoding="utf-8"))


#: How long a worker waits for another to compute what once_per_run shares.
ONCE_TIMEOUT_S = 300.0


def essence(result: dict[str, Any]) -> tuple[Any, ...]:
    """What must equal an unbroken run's."""
    return (
        result["status"],
        result["accepted_answer"],
        result["citations"],
        result["provisional_content"],
        result["stats"]["application_frames"],
    )


UTF8_CASE = "utf8-write"


def quiet() -> structlog.typing.FilteringBoundLogger:
    return structlog.wrap_logger(
        None, wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL)
    )
