"""Which event loop the producer's process runs on: asyncio's own, or uvloop's.

``--event-loop asyncio`` (the default) runs the producer on the standard library's loop;
``--event-loop uvloop`` on uvloop's (libuv), which grpc.aio supports as it supports any
loop: its completion queue is polled by a thread of its own that wakes the loop through a
socket the loop reads (``add_reader``), so the loop runs the servicer's tasks, timers and
futures, never gRPC's I/O. uvloop is not one of the producer's dependencies: the flag
needs it installed (``make setup`` installs it with the benchmark's pins); without it the
producer stops with a usage error before it opens anything. ``bench.paced`` measures both
(bench/README.md, "gRPC's own gap").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

T = TypeVar("T")

ASYNCIO: Final = "asyncio"
UVLOOP: Final = "uvloop"
EVENT_LOOPS: Final = (ASYNCIO, UVLOOP)


class EventLoopUnavailable(RuntimeError):
    """The loop asked for cannot be had here (uvloop not installed)."""


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of ``name``'s loop (None: asyncio's default)."""
    if name == ASYNCIO:
        return None
    if name != UVLOOP:
        raise ValueError(f"unknown event loop {name!r}: one of {', '.join(EVENT_LOOPS)}")
    try:
        import uvloop  # noqa: PLC0415 - optional: imported only when asked for
    except ImportError as error:
        raise EventLoopUnavailable(
            "--event-loop uvloop needs the uvloop package, which is not installed "
            "(pip install uvloop)"
        ) from error
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T], name: str = ASYNCIO) -> T:
    """``asyncio.run(main)`` on ``name``'s loop."""
    try:
        factory = loop_factory(name)
    except BaseException:
        main.close()  # never awaited: no "coroutine was never awaited" warning
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def running_loop() -> str:
    """Which loop this task runs on, read from the loop itself: ``asyncio`` or ``uvloop``."""
    return type(asyncio.get_running_loop()).__module__.split(".")[0]
