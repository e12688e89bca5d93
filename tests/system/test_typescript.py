"""The TypeScript consumer (clients/typescript/) as `make test` runs it, and against the
Python consumer over real gRPC.

Its checks run here, not as a step of the Makefile's recipe, so a failure is reported with
the others, the build is bounded (a hung npm or node is killed, with its children), and
it is made once per run (``once_per_run``: the first worker builds, the others wait for
it and read the outcome) for every test below that needs ``dist/``. The build is ``make
ts``, which runs the steps its README shows, from the committed package-lock.json: ``npm
ci``, ``npm run build`` (strict tsc over src/) and ``npm test`` (strict tsc over src/ and
test/, then the node:test tests).

Then every command its README shows, as written (the producer on a free port, through the
ready file), and the wire-mode smoke test: a real producer, the TypeScript CLI and the
Python consumer on the same cases, wires and faults, their result documents compared
field by field (the stream id and the flow's timings aside).

Skipped where Node or npm is missing, except in CI (.ci/run installs them), where they
must run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.processes import ROOT, Producer, producer
from tests.typescript import MAKE_TS, STEP_TIMEOUT_S, STEPS, TS, run_bounded

README = (TS / "README.md").read_text(encoding="utf-8")
RUN_TIMEOUT_S = 60.0

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        (shutil.which("node") is None or shutil.which("npm") is None) and not os.environ.get("CI"),
        reason="the TypeScript consumer needs Node and npm",
    ),
]


def test_make_ts_runs_the_readme_steps(typescript_build: dict[str, Any]) -> None:
    """The root README's `make ts` runs this README's first block, as written, in
    clients/typescript/ (npm ci from the lockfile, the strict build, the node:test tests),
    and it exits 0 with every node:test test passed. Run once for the whole run (the
    fixture), in the parallel pass: every test that needs dist/ waits for it."""
    assert block_with("npm ci").splitlines() == list(STEPS)
    recipe = run_bounded(f"{MAKE_TS} --dry-run", ROOT, STEP_TIMEOUT_S).stdout
    ran = [line.removeprefix("cd clients/typescript && ") for line in recipe.splitlines()]
    assert [line for line in ran if line in STEPS] == list(STEPS), recipe
    output = typescript_build["output"]
    assert typescript_build["returncode"] == 0, f"{typescript_build['command']}:\n{output}"
    assert "\n# fail 0\n" in output and "\n# pass " in output


def test_the_packages_are_pinned_exactly() -> None:
    """package.json names exact versions (no range), and the lockfile holds them."""
    manifest = json.loads((TS / "package.json").read_text(encoding="utf-8"))
    lock = json.loads((TS / "package-lock.json").read_text(encoding="utf-8"))
    pinned = {**manifest["dependencies"], **manifest["devDependencies"]}
    assert pinned
    for name, version in pinned.items():
        assert version[0].isdigit() and all(c.isdigit() or c == "." for c in version), name
        assert lock["packages"][f"node_modules/{name}"]["version"] == version, name
    assert lock["packages"][""]["dependencies"] == manifest["dependencies"]


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout")
@pytest.mark.usefixtures("built")
def test_git_shows_nothing_the_build_wrote() -> None:
    """node_modules/, dist/ and dist-test/ are ignored, and the build changed no tracked
    file (package-lock.json included: npm ci never rewrites it)."""
    written = ("node_modules", "dist", "dist-test")
    for name in written:
        assert (TS / name).is_dir(), name
    status = run_bounded(
        ["git", "status", "--porcelain", "--untracked-files=all", "--", *written],
        TS,
        RUN_TIMEOUT_S,
    )
    assert status.returncode == 0, status.stderr
    assert status.stdout == ""
    lock = run_bounded(["git", "diff", "--exit-code", "--", "package-lock.json"], TS, RUN_TIMEOUT_S)
    assert lock.returncode == 0, lock.stdout


def sh_blocks() -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", README, re.S | re.M)


def block_with(text: str) -> str:
    (block,) = [b for b in sh_blocks() if text in b]
    return block


CORE = json.loads((TS / "test/fixtures/core.json").read_text(encoding="utf-8"))
TRANSMISSIONS = json.loads((TS / "test/fixtures/transmissions.json").read_text(encoding="utf-8"))


@pytest.mark.usefixtures("built")
def test_the_testee_command(tmp_path: Path) -> None:
    """The README's testee command as written, in a folder with the built dist/: one answer
    a line, in order. The recorded transmissions complete on every wire; one core case per
    verdict the Python core gives gets that verdict (test/core.test.ts runs them all in
    process; content_digest_mismatch is left to it, where the fixture cases that predate
    the done-digest rule are listed)."""
    (tmp_path / "dist").symlink_to(TS / "dist")
    binding = json.loads((TS / "test/fixtures/bindings/replace-file.json").read_text())
    lines: list[dict[str, Any]] = [
        {
            "id": f"recorded/{wire}",
            "wire": wire,
            "binding": binding,
            "chunks": t["chunks"],
            "end": "eof",
        }
        for wire, t in TRANSMISSIONS.items()
    ]
    expected: dict[str, dict[str, Any]] = {
        line["id"]: {"status": "complete", "reason": None} for line in lines
    }
    seen: set[tuple[str, str | None]] = set()
    for case in CORE["cases"]:
        verdict = (case["expected"]["status"], case["expected"]["reason"])
        if verdict in seen or verdict[1] == "content_digest_mismatch":
            continue
        seen.add(verdict)
        line = {k: v for k, v in case.items() if k != "expected"}
        lines.append({**line, "binding": CORE["bindings"][case["binding"]]})
        expected[case["id"]] = case["expected"]
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = run_bounded(block_with("dist/testee.js"), tmp_path, RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in (tmp_path / "answers.jsonl").read_text().splitlines()]
    assert [a["id"] for a in answers] == list(expected)
    for answer in answers:
        assert {k: answer[k] for k in expected[answer["id"]] if k != "id"} == {
            k: v for k, v in expected[answer["id"]].items() if k != "id"
        }, answer["id"]
    assert len(seen) > 30


@pytest.mark.usefixtures("built")
def test_the_cli_recipe(tmp_path: Path) -> None:
    """The README's CLI recipe as written (a producer on a free port, stopped by its pid)."""
    done = run_bounded(
        block_with("dist/cli.js stream"), TS, RUN_TIMEOUT_S, {"TMPDIR": str(tmp_path)}
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["status"], result["reason"], result["case_id"]) == (
        "complete",
        None,
        "replace-file",
    )


@pytest.mark.usefixtures("built")
def test_the_cli_help_lists_the_flags_the_readme_names() -> None:
    done = run_bounded(["node", "dist/cli.js", "--help"], TS, RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    # The paragraph that lists them (not the list of what the CLI lacks, after it).
    section = README.split("\n## The CLI\n", 1)[1].split("Where it differs", 1)[0]
    named = {word for word in section.replace("`", " ").split() if word.startswith("--")}
    named = {word.strip(",.()") for word in named}
    assert len(named) > 25
    assert not {flag for flag in named if flag not in done.stdout}


# `make_tables.py` and `make_fixtures.py` rewrite src/generated.ts and test/fixtures/: a
# build or a node:test run at that moment could read half a file. Nothing else runs
# meanwhile (make test's serial pass).
@pytest.mark.serial
def test_regenerating_finds_the_committed_files() -> None:
    """The README's two regeneration commands, as written, from the root: they rewrite
    what they own with the same bytes (else the Python reference moved on: regenerate and
    commit)."""
    owned = [TS / "src/generated.ts", *sorted((TS / "test/fixtures").rglob("*.json"))]
    before = {path: path.read_bytes() for path in owned}
    block = README.split("\n## Regenerating what comes from the Python code\n", 1)[1]
    commands = [line for line in block.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()]
    assert commands == [
        ".venv/bin/python clients/typescript/scripts/make_tables.py",
        ".venv/bin/python clients/typescript/scripts/make_fixtures.py",
    ]
    for command in commands:
        done = run_bounded(command, ROOT, RUN_TIMEOUT_S)
        assert done.returncode == 0, done.stderr
    after = [TS / "src/generated.ts", *sorted((TS / "test/fixtures").rglob("*.json"))]
    assert after == owned, "the fixtures written are not the files committed"
    changed = [str(p.relative_to(ROOT)) for p in owned if p.read_bytes() != before[p]]
    assert not changed, f"regenerated, and different: {changed} (commit the new files)"


# The wire-mode smoke test: the two consumers on one real producer.

CASES = ("backup-schedule", "json-result-type", "replace-file", "utf8-write")
WIRES = ("lp", "ndjson")
#: The faults compared, with their flags; transport-abort is resumed (the default).
FAULTS: dict[str, tuple[str, ...]] = {
    "omit": ("--fault", "omit"),
    "corrupt": ("--fault", "corrupt"),
    "truncate-tail": ("--fault", "truncate-tail"),
    "transport-abort": ("--fault", "transport-abort"),
}
#: What depends on the run, not on the verdict: the stream's id and the flow's timings.
TIMING = {("stream_id",), ("flow", "reads_paused"), ("flow", "paused_ms")}


@pytest.fixture(scope="module")
def shared_producer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Producer]:
    with producer(tmp_path_factory.mktemp("producer"), "--allow-faults") as running:
        yield running


def without_timing(document: dict[str, Any]) -> dict[str, Any]:
    kept = json.loads(json.dumps(document))
    for path in TIMING:
        holder = kept
        for key in path[:-1]:
            holder = holder.get(key) or {}
        holder.pop(path[-1], None)
    return dict(kept)


def both_consumers(
    target: str, tmp_path: Path, name: str, case: str, *flags: str
) -> tuple[tuple[int, dict[str, Any]], tuple[int, dict[str, Any]]]:
    """One stream each, with the same flags: (exit code, result document) of the TypeScript
    CLI and of the Python consumer, each from its --result file."""
    runs = []
    for side, command in (
        ("ts", ["node", "dist/cli.js", "stream", "--binding",
                str(TS / f"test/fixtures/bindings/{case}.json")]),
        ("py", [sys.executable, "-m", "replywire.consumer", "stream", "--log-level", "warning"]),
    ):  # fmt: skip
        result = tmp_path / f"{name}.{side}.json"
        done = run_bounded(
            [*command, "--target", target, "--case", case, "--stream-id", f"{name}-{side}",
             "--result", str(result), *flags],
            TS if side == "ts" else ROOT,
            RUN_TIMEOUT_S,
        )  # fmt: skip
        assert result.exists(), f"{side}: exit {done.returncode}: {done.stderr[-2000:]}"
        runs.append((done.returncode, json.loads(result.read_text(encoding="utf-8"))))
    return runs[0], runs[1]


def differences(ts: dict[str, Any], py: dict[str, Any], path: str = "") -> list[str]:
    """Field by field, where the two documents differ (each path and both values)."""
    if isinstance(ts, dict) and isinstance(py, dict):
        found = []
        for key in sorted(set(ts) | set(py)):
            found += differences(ts.get(key, "<absent>"), py.get(key, "<absent>"), f"{path}.{key}")
        return found
    return [] if ts == py else [f"{path}: ts {ts!r:.120} python {py!r:.120}"]


@pytest.mark.usefixtures("built")
@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("case", CASES)
def test_each_development_case_as_the_python_consumer_has_it(
    shared_producer: Producer, tmp_path: Path, case: str, wire: str
) -> None:
    name = f"{case}-{wire}"
    (ts_exit, ts), (py_exit, py) = both_consumers(
        shared_producer.target, tmp_path, name, case, "--wire", wire
    )
    assert (ts["status"], ts["reason"]) == ("complete", None)
    assert ts_exit == py_exit == 0
    assert differences(without_timing(ts), without_timing(py)) == []


@pytest.mark.usefixtures("built")
@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_fault_as_the_python_consumer_has_it(
    shared_producer: Producer, tmp_path: Path, fault: str, wire: str
) -> None:
    name = f"{fault}-{wire}"
    (ts_exit, ts), (py_exit, py) = both_consumers(
        shared_producer.target, tmp_path, name, "replace-file", "--wire", wire, *FAULTS[fault]
    )
    assert ts_exit == py_exit
    assert differences(without_timing(ts), without_timing(py)) == []
    if fault == "transport-abort":
        assert (ts["status"], ts["stats"]["reconnects"]) == ("complete", 1)
    else:
        assert ts["status"] == "invalid"


@pytest.mark.usefixtures("built")
def test_the_cli_sends_the_binding_as_canonical_bytes(
    shared_producer: Producer, tmp_path: Path
) -> None:
    """A binding file pretty-printed, its keys reversed: the CLI sends the canonical bytes,
    so the frames' binding digest is the canonical one and the stream completes, as the
    Python consumer's does from the recording."""
    binding = json.loads((TS / "test/fixtures/bindings/replace-file.json").read_text())
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(dict(reversed(binding.items())), indent=4, ensure_ascii=True))
    done = run_bounded(
        ["node", "dist/cli.js", "stream", "--binding", str(pretty), "--case", "replace-file",
         "--target", shared_producer.target, "--stream-id", "pretty"],
        TS,
        RUN_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    canonical = json.dumps(binding, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert result["binding_sha256"] == hashlib.sha256(canonical.encode()).hexdigest()
    assert result["status"] == "complete"
