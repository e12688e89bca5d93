"""A reader that closed stdout (``python -m replywire join-traces … | head -1``) ends the
command quietly: no ``Broken pipe`` line, no traceback at exit, and the exit code of what was
being printed (the command's own, not a usage error's)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable


def stdout_closed() -> None:
    """Point stdout at the null device: what is still buffered, and the interpreter's own
    flush at exit, then go nowhere instead of raising ``BrokenPipeError`` again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def run_printing(main: Callable[[], int]) -> int:
    """``main``'s exit code, its output flushed: a closed pipe met in that flush (the last,
    buffered lines) keeps that code; one raised out of ``main`` while it printed (a command
    that prints as it goes, ``join-traces``, ``--help``) ends quietly with 0: what it
    printed was its answer. The consumer catches its own, to keep its result's code."""
    try:
        code = main()
    except BrokenPipeError:
        stdout_closed()
        return 0
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_closed()
    return code
