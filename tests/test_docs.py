"""The README's generated sections match the code's tables; the README's commands exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shared.errors import REASONS, Reason
from tools.docs import SECTIONS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(name: str) -> str:
    match = re.search(
        rf"<!-- generated:{name} -->\n(.*?)<!-- /generated:{name} -->", README, re.DOTALL
    )
    assert match, f"README has no generated:{name} section"
    return match.group(1)


@pytest.mark.parametrize("name", list(SECTIONS))
def test_generated_sections_are_current(name: str) -> None:
    expected = SECTIONS[name]()
    assert section(name) == expected, (
        f"regenerate: python -m tools.docs --update README.md ({name})"
    )


def test_every_reason_code_is_documented() -> None:
    assert set(REASONS) == set(Reason)
    for reason in Reason:
        assert f"`{reason.value}`" in README


def test_readme_opens_with_the_two_commands() -> None:
    block = README.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]


def test_ci_runs_make_test() -> None:
    ci = (ROOT / ".ci/run").read_text(encoding="utf-8")
    assert [line for line in ci.splitlines() if line.startswith("make")] == ["make test"]
