"""One table of flags per process, from which its argparse parser, its environment
defaults, its validators and the documentation's flag table are all made.

A :class:`Flag` is one line of a table: its name, how its text is read (a validator
below), its default, and its one description, in Markdown: the documentation's table
gives it as it is (``tools/docs.py`` renders it), ``--help`` as plain text. A
:class:`FlagTable` groups them (an argparse group, a consumer command) and says whether
the process reads ``REPLYWIRE_<FLAG>`` environment variables: the producer does, for every
flag, and a flag on the command line wins; an empty variable is as good as unset. A value
from the environment goes through the flag's own validator, as the flag's text would.

The validators are written once, named for what they accept, and raise
``argparse.ArgumentTypeError``: argparse turns that into its one-line usage error
(exit 2) naming the flag.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

ENV_PREFIX: Final = "REPLYWIRE_"
#: The words that turn a switch on from the environment (any case); anything else is off.
TRUE_WORDS: Final = frozenset({"1", "true", "yes", "on"})
MAX_PORT: Final = 65535

# --- validators ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Count:
    """A whole number of ``unit`` (streams, bytes, frames, ...), at least ``minimum`` (and,
    given, at most ``maximum``)."""

    unit: str
    minimum: int = 1
    maximum: int | None = None

    def __call__(self, text: str) -> int:
        try:
            value = int(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(
                f"not a whole number of {self.unit}: {text!r}"
            ) from error
        if value < self.minimum:
            raise argparse.ArgumentTypeError(f"must be at least {self.minimum}: {value}")
        if self.maximum is not None and value > self.maximum:
            raise argparse.ArgumentTypeError(f"must be at most {self.maximum}: {value}")
        return value


@dataclass(frozen=True, slots=True)
class Number:
    """A finite number (of ``unit``), at least ``minimum`` or, not ``inclusive``, more
    than it; ``why`` is said when it is not."""

    minimum: float = 0.0
    inclusive: bool = True
    unit: str = "seconds"
    why: str = ""

    def __call__(self, text: str) -> float:
        try:
            value = float(text)
        except ValueError as error:
            of = f" of {self.unit}" if self.unit else ""
            raise argparse.ArgumentTypeError(f"not a number{of}: {text!r}") from error
        above = value >= self.minimum if self.inclusive else value > self.minimum
        if not (above and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"must be {self.rule}: {text}")
        return value

    @property
    def rule(self) -> str:
        why = f" ({self.why})" if self.why else ""
        if self.inclusive and self.minimum != 0:
            return f"at least {self.minimum:g}{why}, and finite"
        return f"a finite number {'>=' if self.inclusive else '>'} {self.minimum:g}{why}"


#: Seconds that must be more than 0: a timeout, a lease, an age.
positive_seconds: Final = Number(0.0, inclusive=False)
#: Seconds that may be 0: a grace, a delay, a time to keep something.
seconds_or_zero: Final = Number(0.0)
#: A finite number >= 0 that is no time (a share, which its own setting bounds above).
non_negative_number: Final = Number(0.0, unit="")


def seconds_at_least(minimum: float, why: str) -> Number:
    """Seconds at least ``minimum`` (a floor ``why`` explains)."""
    return Number(minimum, why=why)


def port_number(text: str) -> int:
    """A TCP port, 0 to 65535 (0: the system picks a free one)."""
    try:
        value = int(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from error
    if not 0 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"a port is 0..{MAX_PORT} (0 picks a free one): {value}")
    return value


@dataclass(frozen=True, slots=True)
class OrNone:
    """What ``parse`` accepts, or None for an empty text (which is how a flag set in the
    environment is turned off on the command line: ``--metrics-port ''``)."""

    parse: Callable[[str], Any]

    def __call__(self, text: str) -> Any:
        return self.parse(text) if text else None


@dataclass(frozen=True, slots=True)
class OneOf:
    """One of ``words``: argparse checks a flag's choices, but not a default's (one from the
    environment), so the flag's type checks both."""

    words: tuple[str, ...]

    def __call__(self, text: str) -> str:
        if text not in self.words:
            raise argparse.ArgumentTypeError(
                f"invalid choice: {text!r} (choose from {', '.join(self.words)})"
            )
        return text


# --- the table -------------------------------------------------------------------------------

Action = Literal["store", "switch", "toggle"]


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag: ``name`` is ``--long-name`` (or a positional argument's name), ``help``
    its one description, in Markdown: the documentation table's meaning as it is, and the
    ``--help`` line as plain text (``plain``: links as their text, no backticks).

    ``action``: ``store`` takes a value (read by ``type``), ``switch`` is on when given,
    ``toggle`` is ``--name`` / ``--no-name`` (unset: None). ``required_in``: the commands
    that cannot do without it. ``shown`` is the documentation
    table's default where the value itself says too little (``the fixture's``); ``redact``
    shows a default in ``--help`` through it (a URL's password is never printed)."""

    name: str
    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    aliases: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    action: Action = "store"
    metavar: str | None = None
    dest: str | None = None
    nargs: str | None = None
    required_in: tuple[str, ...] = ()
    shown: str = ""
    redact: Callable[[str], str] | None = None

    @property
    def positional(self) -> bool:
        return not self.name.startswith("-")

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    @property
    def meaning(self) -> str:
        return self.help

    def env_name(self, prefix: str) -> str:
        return prefix + self.name.lstrip("-").upper().replace("-", "_")

    def add_to(
        self, parser: argparse._ActionsContainer, default: Any, *, required: bool = False
    ) -> None:
        """Add this flag to ``parser`` with ``default`` (the table's, or the environment's)."""
        options: dict[str, Any] = {"help": self._help(default)}
        if self.action == "switch":
            options.update(action="store_true", default=default)
        elif self.action == "toggle":
            options.update(action=argparse.BooleanOptionalAction, default=default)
        else:
            parse = self.type or (OneOf(self.choices) if self.choices else None)
            given = {
                "type": parse,
                "choices": list(self.choices) or None,
                "metavar": self.metavar,
                "nargs": self.nargs,
            }
            options.update({key: value for key, value in given.items() if value is not None})
            options["default"] = default
            if required:
                options["required"] = True
        if self.dest is not None:
            options["dest"] = self.dest
        parser.add_argument(*self.names, **options)

    def _help(self, default: Any) -> str:
        text = plain(self.help).replace("%", "%%")  # argparse formats help with %
        if self.redact is None or not isinstance(default, str):
            return text
        # The default shown without what ``redact`` takes out. ``%(default).0s`` formats the
        # real default as nothing: argparse, seeing it, adds no ``(default: ...)`` of its own.
        shown = self.redact(default).replace("%", "%%")
        return f"{text} (default: {shown})%(default).0s"


#: A Markdown link, ``[text](target)``.
_LINK: Final = re.compile(r"\[([^\]]*)\]\([^)]*\)")


def plain(markdown: str) -> str:
    """A flag's description as a terminal shows it: each link as its text, no backticks."""
    return _LINK.sub(r"\1", markdown).replace("`", "")


@dataclass(frozen=True, slots=True)
class FlagGroup:
    """Flags shown together: ``title`` (and ``description``) make an argparse group of them
    and a heading in the documentation's table. ``commands``: the subcommands that take
    them (the consumer's); empty for a process with one command (the producer)."""

    flags: tuple[Flag, ...]
    title: str | None = None
    description: str | None = None
    commands: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FlagTable:
    """A process's flags. With ``env_prefix``, every flag has an environment variable."""

    groups: tuple[FlagGroup, ...]
    env_prefix: str | None = None

    def __iter__(self) -> Iterator[Flag]:
        for group in self.groups:
            yield from group.flags

    def env_name(self, flag: Flag) -> str | None:
        return None if self.env_prefix is None else flag.env_name(self.env_prefix)

    def default(self, flag: Flag, environ: Mapping[str, str]) -> Any:
        """The flag's default: its environment variable's text when that is set (argparse
        reads it with the flag's type), else the table's."""
        name = self.env_name(flag)
        text = environ.get(name, "") if name is not None else ""
        if flag.action == "switch":
            return text.lower() in TRUE_WORDS
        return text or flag.default

    def add_to(
        self,
        parser: argparse.ArgumentParser,
        command: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """Add the flags ``command`` takes (every flag: None) to ``parser``, their defaults
        from ``environ`` (the process's environment unless given)."""
        environ = os.environ if environ is None else environ
        for group in self.groups:
            if command is not None and command not in group.commands:
                continue
            container: argparse._ActionsContainer = parser
            if group.title is not None:
                container = parser.add_argument_group(group.title, group.description)
            for flag in group.flags:
                required = command in flag.required_in
                flag.add_to(container, self.default(flag, environ), required=required)
