"""The documentation holds together: its generated sections are current and each lives in
one file, every relative link and anchor resolves, the README is short and opens with its
two commands and indexes every file of docs/, each docs file says who it is for, "the lab"
is defined (or linked to its definition) where each file first uses it, every reason code
is documented. What its commands do is tests/system/test_readme.py's; the repository map is
tests/unit/test_repository_map.py's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import Reason
from tests.tree import tree
from tools.docs import RUN_SECTIONS, SECTIONS, doc_files

ROOT = Path(__file__).resolve().parents[2]
DOCS = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in doc_files()}
README = DOCS["README.md"]
#: Generated sections whose renderer is not registered in tools.docs yet: their text is
#: still written by hand (the flag tables). Take a name out once tools.docs renders it.
NOT_YET_GENERATED: set[str] = set()
#: Markdown files that are not documentation: `make bench` writes this one.
NOT_DOCS = {"bench/results.md"}
README_MAX_LINES = 250


def holders(name: str) -> list[str]:
    """The doc files that hold the generated section ``name``."""
    return [doc for doc, text in DOCS.items() if f"<!-- generated:{name} -->\n" in text]


def section(name: str) -> str:
    (doc,) = holders(name)
    match = re.search(
        rf"<!-- generated:{name} -->\n(.*?)<!-- /generated:{name} -->", DOCS[doc], re.DOTALL
    )
    assert match, f"{doc}: generated:{name} has no end"
    return match.group(1)


def test_generated_markers_are_paired_and_known() -> None:
    known = set(SECTIONS) | set(RUN_SECTIONS) | NOT_YET_GENERATED
    for doc, text in DOCS.items():
        starts = re.findall(r"<!-- generated:([\w-]+) -->", text)
        ends = re.findall(r"<!-- /generated:([\w-]+) -->", text)
        assert starts == ends, f"{doc}: generated sections not paired in order"
        assert not set(starts) - known, f"{doc}: sections nothing renders: {set(starts) - known}"


@pytest.mark.parametrize("name", [*SECTIONS, *RUN_SECTIONS, *sorted(NOT_YET_GENERATED)])
def test_each_generated_section_lives_in_one_file(name: str) -> None:
    found = holders(name)
    assert len(found) == 1, f"generated:{name} in {found or 'no doc file'}"
    assert DOCS[found[0]].count(f"<!-- generated:{name} -->") == 1


@pytest.mark.parametrize("name", list(SECTIONS))
def test_generated_sections_are_current(name: str) -> None:
    """The sections rendered from the code's tables. Those rendered from real runs are
    compared by tests/system/test_cli_processes.py (the demo) and
    tests/system/test_view_processes.py (the tour)."""
    assert section(name) == SECTIONS[name](), (
        f"regenerate: python -m tools.docs --update {holders(name)[0]} ({name})"
    )


def test_every_reason_code_is_documented() -> None:
    assert set(REASONS) == set(Reason)
    (doc,) = holders("reason-table")
    for reason in Reason:
        assert f"`{reason.value}`" in DOCS[doc]


def test_readme_opens_with_the_two_commands() -> None:
    block = README.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]


def test_readme_is_short() -> None:
    lines = len(README.splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move reference to docs/"


def test_readme_indexes_every_docs_file() -> None:
    index = README.split("\n## Documentation\n", 1)[1].split("\n## ", 1)[0]
    linked = set(re.findall(r"\]\((docs/[^)#]+\.md)\)", index))
    assert linked == {doc for doc in DOCS if doc.startswith("docs/")}


@pytest.mark.parametrize("doc", sorted(doc for doc in DOCS if doc.startswith("docs/")))
def test_each_docs_file_says_who_it_is_for(doc: str) -> None:
    """A title, then a paragraph that opens with the reader it is written for."""
    title, opening = DOCS[doc].split("\n\n", 2)[:2]
    assert title.startswith("# ") and "\n" not in title, doc
    assert opening.startswith("For "), f"{doc} opens with {opening[:40]!r}"


def test_every_markdown_file_is_checked() -> None:
    """doc_files() leaves no Markdown file of the tree out (those it misses would go
    unchecked); what .gitignore ignores (node_modules/, a build's output) is not the tree."""
    found = {
        path
        for path in tree()
        if path.endswith(".md") and not any(part.startswith(".") for part in path.split("/"))
    }
    assert found - NOT_DOCS == set(DOCS)


def without_code(text: str) -> str:
    """The text with its fenced blocks and inline code spans blanked (line count kept)."""
    text = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)
    return re.sub(r"`[^`]*`", lambda m: "\n" * m.group(0).count("\n"), text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


#: An explicit anchor, stable whatever its heading says (docs/protocol.md's sections, which
#: tests and the conformance vectors cite): ``<a id="binding"></a>``.
EXPLICIT_ANCHOR = re.compile(r'<a id="([\w-]+)"></a>')


def anchors(text: str) -> set[str]:
    found: set[str] = set(EXPLICIT_ANCHOR.findall(without_code_blocks(text)))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", without_code_blocks(text), re.M):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_relative_links_and_anchors_resolve() -> None:
    broken = []
    for doc, text in DOCS.items():
        here = (ROOT / doc).parent
        for target in LINK.findall(without_code(text)):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (here / path).resolve() if path else ROOT / doc
            if not file.exists():
                broken.append(f"{doc}: {target} (no such file)")
            elif anchor and not (file.suffix == ".md" and anchor in anchors(file.read_text())):
                broken.append(f"{doc}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


LAB = re.compile(r"(?<![\w-])[Ll]ab\b")


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_the_lab_is_defined_where_first_used(doc: str) -> None:
    """The paragraph that first names the lab links to its definition, the README's
    section "The lab" (a wire's name, ndjson-lab, is not a use)."""
    assert "the-lab" in anchors(README)
    paragraphs = without_code(DOCS[doc]).split("\n\n")
    first = next((p for p in paragraphs if LAB.search(p)), None)
    if first is not None:
        assert "#the-lab)" in first, f"{doc}: first names the lab in {first[:80]!r}"


def test_ci_runs_make_test() -> None:
    ci = (ROOT / ".ci/run").read_text(encoding="utf-8")
    assert [line for line in ci.splitlines() if line.startswith("make")] == [
        "make test",
        "make test-pure",
    ]
