"""Usage errors as one line: the parser every command line of the project is built with.

argparse answers a bad flag value with its whole usage block (tens of lines) above the one
line that says what is wrong; ``OneLineParser`` prints that line alone, bounded and with
what a terminal would obey escaped (a flag's value is the user's text), and where to read
more: ``python -m consumer stream: error: argument --queue-size: must be at least 1: 0
(try python -m consumer stream --help)``. Exit code 2, as argparse's. ``--help`` is
argparse's own, unchanged.
"""

from __future__ import annotations

import argparse
from typing import Final, NoReturn

from replywire.shared.status import EXIT_USAGE
from replywire.shared.terminal_text import shown_line

#: The longest usage line printed: a flag's value is echoed in it, cut with ``…``.
MAX_USAGE_CHARS: Final = 300


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage error is one line on stderr (its subcommands'
    parsers are of this class too: argparse makes them of the parent's class)."""

    def error(self, message: str) -> NoReturn:
        line = shown_line(f"{self.prog}: error: {message}", MAX_USAGE_CHARS)
        self.exit(EXIT_USAGE, f"{line} (try {self.prog} --help)\n")
