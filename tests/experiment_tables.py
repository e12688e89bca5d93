"""The experiment tables of docs/consumer.md (``<!-- NAME -->`` … ``<!-- /NAME -->``), read
as the tests that run every row read them: the rows' cells, and a reason cell's code."""

from __future__ import annotations

import re
from pathlib import Path

CONSUMER_MD = Path(__file__).resolve().parents[1] / "docs" / "consumer.md"


def table_rows(name: str) -> list[list[str]]:
    """The cells of each row of the table marked ``name`` (its header and rule left out)."""
    found = re.search(
        rf"<!-- {name} -->\n(.*?)<!-- /{name} -->", CONSUMER_MD.read_text(encoding="utf-8"), re.S
    )
    assert found is not None, f"docs/consumer.md has no {name} table"
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in found.group(1).splitlines()[2:]
    ]


def reason_on(cell: str, wire: str) -> str | None:
    """A reason cell: ``—`` (none), one code, or one per wire (``a`` on ``lp``, ...)."""
    if cell == "—":
        return None
    per_wire = dict(re.findall(r"`(\w+)` on `(\w+)`", cell))
    if per_wire:
        return {on: code for code, on in per_wire.items()}[wire]
    return cell.strip("`")
