"""How a command is spelled where it runs, for what a command prints (usage lines, hints,
the demo's next steps): installed, the console scripts ``replywire-producer``,
``replywire-consumer``, ``replywire`` (``pyproject.toml``); in the repository, what its
README and ``docs/`` show (``python -m consumer``, ``make run-producer``).

In the repository the packages are links (``replywire/runtime`` is ``runtime/``), so their
real folder has the ``Makefile`` beside it; installed it does not (``native.IN_REPOSITORY``)."""

from __future__ import annotations

from typing import Final

from replywire.native import IN_REPOSITORY

#: Each command's installed name, by its ``python -m`` name in the repository.
INSTALLED: Final = {
    "producer": "replywire-producer",
    "consumer": "replywire-consumer",
    "replywire": "replywire",
}


def in_repository() -> bool:
    return IN_REPOSITORY


def command(name: str) -> str:
    """``name``'s command line (``producer``, ``consumer``, ``replywire``): ``python -m
    consumer`` in the repository, ``replywire-consumer`` installed."""
    return f"python -m {name}" if in_repository() else INSTALLED[name]


def shown_command(name: str) -> str:
    """``command``, as the documents show one to type: the repository's with the virtual
    environment ``make setup`` made (``.venv/bin/python -m replywire``)."""
    return f".venv/bin/{command(name)}" if in_repository() else command(name)
