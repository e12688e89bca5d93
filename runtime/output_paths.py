"""The files a command will write, checked before it starts: a path that cannot be written
(its folder missing, not a folder, not writable; the path itself a folder) is a usage
error, one line, before anything is connected or written. Nothing is created here."""

from __future__ import annotations

import os
from pathlib import Path

from replywire.shared.errors import ConfigurationError


def writable_problem(path: Path, *, directory: bool = False) -> str | None:
    """Why ``path`` cannot be written as a file (``directory``: made and filled as a
    folder), or None when it can. A missing folder is a problem only for a file: a folder
    is made with its parents, so its nearest existing ancestor must take a new entry."""
    if path.exists():
        if path.is_dir() != directory:
            return "is a directory" if path.is_dir() else "is not a directory"
        return None if os.access(path, os.W_OK | os.X_OK * directory) else "permission denied"
    parent = path.parent
    if directory:
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
    if not parent.exists():
        return f"no such directory: {parent}"
    if not parent.is_dir():
        return f"not a directory: {parent}"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"permission denied: {parent}"
    return None


def check_writable(flag: str, path: Path | None, *, directory: bool = False) -> None:
    """``ConfigurationError`` (a usage error) when ``flag``'s ``path`` cannot be written."""
    if path is None:
        return
    problem = writable_problem(path, directory=directory)
    if problem is not None:
        raise ConfigurationError(f"{flag} {path}: cannot be written ({problem})")
