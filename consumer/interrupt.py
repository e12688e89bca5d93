"""Ctrl-C and SIGTERM as an ``asyncio.Event`` a stream watches (a deliberate stop).

A stream that sees the event set sends ``Cancel`` and ends ``consumer_cancelled``
(``consumer/session.py``); between resumes, the backoff is cut short by it.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable


async def interrupted_within(stop: asyncio.Event | None, wait_s: float) -> bool:
    """Wait ``wait_s`` (a resume's backoff); True, at once, if ``stop`` is set meanwhile."""
    if stop is None:
        await asyncio.sleep(wait_s)
        return False
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({stopped}, timeout=wait_s)
    stopped.cancel()
    return stop.is_set()


def install_interrupt(event: asyncio.Event) -> Callable[[], None]:
    """Ctrl-C / SIGTERM set ``event``; returns a function that removes the handlers."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, event.set)

    def remove() -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)

    return remove
