"""The README's repository map names everything in the tree, and nothing that is not there.

The map is the table under the README's ``## Repository map``. Its first column holds
paths from the repository's root, in backticks; a path that ends in ``/`` is a folder.
The rule:

1. Every top-level folder of the tree has a row of its own (``.ci/``, ``shared/``, ...).
2. Every Python module of the tree is named, but ``__init__.py`` and ``__main__.py`` (the
   package itself, which its folder's row describes): by a row of its own
   (``shared/digest.py``); or in backticks in the row of a folder above it, as a path
   from that folder (``server.py`` in the row of ``producer/``, ``sources/recording.py``
   there too); or by being under a folder whose row says it holds "everything under it"
   (``tests/``, ``bench/``: their own documents describe their files).
3. Everything the map names exists: the paths of the first column, and in a folder's
   row every backticked name that ends in ``.py`` or ``/``, taken from that folder or,
   when it is not there, from the root (``tests/unit/test_layers.py`` in the row of
   ``shared/``).

The tree is the files on disk but ``.git`` and what ``.gitignore`` ignores (tests/tree.py),
so a new module counts as soon as it exists, tracked or not, and generated code
(``shared/pb/*_pb2.py``, ``node_modules/``) never does. A new module fails this test
until a word in its folder's row names it; a moved or deleted one, until the map stops
naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.tree import tree

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
WHOLE = "everything under it"
PACKAGE_FILES = {"__init__.py", "__main__.py"}


@dataclass(frozen=True)
class Row:
    paths: tuple[str, ...]
    text: str

    @property
    def folder(self) -> str | None:
        """The folder this row is about (one path ending in ``/``), else None."""
        if len(self.paths) == 1 and self.paths[0].endswith("/"):
            return self.paths[0]
        return None


def rows() -> list[Row]:
    table = README.split("\n## Repository map\n", 1)[1].split("\n## ", 1)[0]
    found = []
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue  # the heading row, the rule, prose
        first, text = line.strip().strip("|").split("|", 1)
        found.append(Row(tuple(re.findall(r"`([^`]+)`", first)), text))
    assert found, "the README has no repository map"
    return found


def named_in(row: Row) -> tuple[set[str], list[str]]:
    """What a folder's row names in its text (paths from the root), and what it names that
    does not exist."""
    assert row.folder
    named, missing = set(), []
    for word in re.findall(r"`([^`\s]+)`", row.text):
        if not word.endswith((".py", "/")):
            continue
        for candidate in (row.folder + word, word):
            if (ROOT / candidate).exists():
                named.add(candidate)
                break
        else:
            missing.append(f"{row.folder}: {word}")
    return named, missing


def test_every_top_level_folder_has_a_row() -> None:
    folders = {path.split("/", 1)[0] + "/" for path in tree() if "/" in path}
    with_rows = {row.folder for row in rows() if row.folder and row.folder.count("/") == 1}
    assert not folders - with_rows, f"top-level folders the map leaves out: {folders - with_rows}"


def test_every_module_is_named() -> None:
    named = {path for row in rows() for path in row.paths}
    whole = [row.folder for row in rows() if row.folder and WHOLE in row.text]
    for row in rows():
        if row.folder:
            named |= named_in(row)[0]
    modules = [p for p in tree() if p.endswith(".py") and p.rsplit("/", 1)[-1] not in PACKAGE_FILES]
    unnamed = [
        module
        for module in modules
        if module not in named and not any(module.startswith(folder) for folder in whole if folder)
    ]
    assert not unnamed, f"modules the README's map does not name: {unnamed}"


def test_everything_the_map_names_exists() -> None:
    missing = [path for row in rows() for path in row.paths if not (ROOT / path).exists()]
    missing += [word for row in rows() if row.folder for word in named_in(row)[1]]
    assert not missing, f"the map names what is not there: {missing}"


def test_the_rule_holds_the_cases_it_says() -> None:
    """The rule on a few known cases, so a change to the parsing cannot make it vacuous."""
    files = tree()
    assert "shared/digest.py" in files and "producer/sources/recording.py" in files
    assert not any(path.startswith((".venv/", ".git/")) for path in files)
    assert not any(re.fullmatch(r"shared/pb/\w+_pb2(_grpc)?\.pyi?", path) for path in files)
    by_folder = {row.folder: row for row in rows() if row.folder}
    assert "producer/sources/recording.py" in named_in(by_folder["producer/"])[0]
    assert WHOLE in by_folder["tests/"].text
