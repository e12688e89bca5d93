"""The repository's tree as the documentation tests see it: every file on disk but ``.git``
and what the root ``.gitignore`` ignores (its lines read as globs: one without a ``/``
inside matches any part of a path, one with a ``/`` inside matches from the root). So a new
file counts as soon as it exists, tracked or not, and what a build writes (``shared/pb/``'s
generated code, ``node_modules/``, a compiler's ``dist/``) never does."""

from __future__ import annotations

import os
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ignore_patterns() -> list[str]:
    lines = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    return [line.strip().rstrip("/") for line in lines if line.strip() and line[0] != "#"]


def is_ignored(path: str, patterns: list[str]) -> bool:
    parts = path.split("/")
    for pattern in patterns:
        if "/" in pattern.strip("/"):
            prefixes = ("/".join(parts[:end]) for end in range(1, len(parts) + 1))
            if any(fnmatch(prefix, pattern.lstrip("/")) for prefix in prefixes):
                return True
        elif any(fnmatch(part, pattern.lstrip("/")) for part in parts):
            return True
    return False


def tree() -> list[str]:
    """Every file of the tree, as a path from the root."""
    patterns = [*ignore_patterns(), ".git"]
    found = []
    for directory, folders, files in os.walk(ROOT):
        here = Path(directory).relative_to(ROOT).as_posix()
        prefix = "" if here == "." else f"{here}/"
        folders[:] = [name for name in folders if not is_ignored(prefix + name, patterns)]
        found += [prefix + name for name in files if not is_ignored(prefix + name, patterns)]
    return sorted(found)
