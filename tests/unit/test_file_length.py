"""A file past 500 lines says at its top why it is one file (the house rule).

Every source file of the tree (``tests.tree``: Python, TypeScript, shell) longer than
``LIMIT`` lines has the words "One file past 500 lines:" and a reason within its first
``TOP`` lines. Generated code (protobuf's ``*_pb2.py``, the TypeScript tables), links and
data are not sources.
"""

from __future__ import annotations

from pathlib import Path

from tests.tree import tree

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 500
TOP = 40
SOURCES = (".py", ".ts", ".sh")
MARK = "One file past 500 lines:"


def sources() -> list[Path]:
    return [
        ROOT / name
        for name in tree()
        if name.endswith(SOURCES)
        and not name.endswith("_pb2.py")
        and "generated" not in Path(name).name
        and not (ROOT / name).is_symlink()
    ]


def test_every_long_file_says_why_it_is_one_file() -> None:
    silent = []
    for path in sources():
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) > LIMIT and not any(MARK in line for line in lines[:TOP]):
            silent.append(f"{path.relative_to(ROOT)} ({len(lines)} lines)")
    assert silent == [], f"past {LIMIT} lines without '{MARK}' at the top: {silent}"


def test_the_rule_sees_the_long_files() -> None:
    long = {
        p.relative_to(ROOT).as_posix() for p in sources() if len(p.read_text().splitlines()) > LIMIT
    }
    assert "tests/unit/test_protocol_rules.py" in long
