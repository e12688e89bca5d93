"""``producer.event_loop``: which loop the producer runs on, and uvloop missing said plainly."""

from __future__ import annotations

import inspect
import sys

import pytest

from replywire.producer.event_loop import (
    ASYNCIO,
    UVLOOP,
    EventLoopUnavailable,
    loop_factory,
    run,
    running_loop,
)


async def loop_name() -> str:
    return running_loop()


def test_asyncio_is_the_default_and_runs_on_the_standard_loop() -> None:
    assert loop_factory(ASYNCIO) is None
    assert run(loop_name()) == "asyncio"


def test_uvloop_runs_on_uvloop() -> None:
    pytest.importorskip("uvloop")
    assert run(loop_name(), UVLOOP) == "uvloop"


def test_uvloop_missing_is_said_before_anything_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # ``import uvloop`` raises ImportError
    with pytest.raises(EventLoopUnavailable, match="uvloop package"):
        loop_factory(UVLOOP)
    main = loop_name()
    with pytest.raises(EventLoopUnavailable):
        run(main, UVLOOP)
    assert inspect.getcoroutinestate(main) == inspect.CORO_CLOSED  # no "never awaited"


def test_an_unknown_loop_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown event loop"):
        loop_factory("trio")
