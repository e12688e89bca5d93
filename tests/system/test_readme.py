"""Every command the documentation shows is run: here, by another named test, or by CI.

The documentation is every file of ``tools.docs.doc_files()``: the README, docs/*.md,
bench/README.md and fixtures/PROVENANCE.md. Commands are the lines of their ```sh blocks
(continuation lines joined, comments and heredoc bodies dropped) and the ``$ `` lines of
their other blocks. Each must be in ``RUN_BY`` (which test runs it) or ``NOT_RUN`` (why
nothing can), wherever it is shown. The recipes that background a producer run whole,
with ``bash -euo pipefail``, from the repository's root, with ``TMPDIR`` in the test's
temporary directory (they write only under ``mktemp -d``). A command with a fixed demo
port runs with that port, and only that port, replaced.

One file past 500 lines: ``RUN_BY`` and ``NOT_RUN`` are one table of every command shown;
split, a command could be left out of both.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bench.fanout_layouts import LAYOUTS
from replywire.native import running
from tests.otlp_collector import STATUS_OK, otlp_collector
from tests.processes import ROOT, wait_for
from tests.redis_server import free_port, redis_server
from tests.system import test_distribution as distribution
from tests.timeline_reading import parse_table
from tools import view_samples
from tools.docs import doc_files

pytestmark = pytest.mark.timeout(240)

#: Each documentation file's text, by its path from the repository's root.
DOCS = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in doc_files()}
HERE = "tests/system/test_readme.py"
SESSION = f"{HERE}::test_one_shell_session_recipe"
TRACES = f"{HERE}::test_traces_recipe"
SECURITY = f"{HERE}::test_security_recipe"
WALKTHROUGH = f"{HERE}::test_fake_gemini_walkthrough"
TWO_TERMINALS = f"{HERE}::test_two_terminals"
VIEW = "tests/system/test_view_processes.py::test_the_readme_view_samples_are_real_runs"
DEVELOPMENT = f"{HERE}::test_development_commands"
BENCH = f"{HERE}::test_benchmarks"
BUILD = f"{HERE}::test_build_commands"
REPLICAS = f"{HERE}::test_replicas_recipe"
TIMELINE = f"{HERE}::test_timeline_recipe"
OTEL = f"{HERE}::test_opentelemetry_recipe"
DISTRIBUTION = "tests/system/test_distribution.py"
OPERATOR = f"{HERE}::test_operator_recipe"
TYPESCRIPT = "tests/system/test_typescript.py"


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced block, fences paired in order."""
    found: list[tuple[str, str]] = []
    info: str | None = None
    body: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            if info is None:
                info, body = line[3:].strip(), []
            else:
                found.append((info, "".join(body)))
                info = None
        elif info is not None:
            body.append(line)
    return found


def blocks(kind: str, text: str | None = None) -> list[str]:
    """The bodies of the fenced blocks of this kind, in ``text`` or in every doc file."""
    texts = DOCS.values() if text is None else [text]
    return [body for one in texts for info, body in fenced_blocks(one) if info == kind]


def commands_of_sh(block: str) -> list[str]:
    commands, heredoc = [], None
    for line in block.replace("\\\n", " ").splitlines():
        if heredoc is not None:
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        if match := re.search(r"<<'?(\w+)'?", line):
            heredoc = match.group(1)
        command = re.sub(r"\s+#.*$", "", line).strip()
        if command and not command.startswith("#"):
            commands.append(" ".join(command.split()))
    return commands


def commands_in(text: str) -> set[str]:
    commands = {c for block in blocks("sh", text) for c in commands_of_sh(block)}
    for block in [*blocks("", text), *blocks("console", text)]:
        commands |= {line[2:].strip() for line in block.splitlines() if line.startswith("$ ")}
    return commands


def shown_commands() -> set[str]:
    return {command for text in DOCS.values() for command in commands_in(text)}


def sh_block(first_line_contains: str) -> str:
    (block,) = [b for b in blocks("sh") if first_line_contains in b]
    return block


def doc_holding(text: str) -> str:
    """The one doc file that holds this text."""
    (found,) = [doc for doc in DOCS.values() if text in doc]
    return found


#: Skipped (with the reason printed) where jq is missing, except in CI, where it must run.
NEEDS_JQ = pytest.mark.skipif(
    shutil.which("jq") is None and not os.environ.get("CI"), reason="the recipe needs jq"
)


# Every command shown, and the test that runs it.
RUN_BY = {
    "make demo": "tests/system/test_cli_processes.py::test_demo_prints_the_table",
    view_samples.TOUR_PRODUCER: f"{TWO_TERMINALS} (also {VIEW}, stopped and restarted)",
    "make run-consumer CASE=replace-file": f"{TWO_TERMINALS} (Live Gemini shows it)",
    view_samples.COMPLETE: f"{TWO_TERMINALS} (also {VIEW})",
    view_samples.TRUNCATED: VIEW,
    view_samples.SLOW: VIEW + " (with the producer stopped, and restarted or not)",
    view_samples.PRODUCER: VIEW,
    view_samples.NO_PRODUCER: VIEW,
    ".venv/bin/python -m producer.convert_capture RUN_DIR OUT_DIR": WALKTHROUGH
    + " (with RUN_DIR, OUT_DIR in a temporary directory)",
    "BENCH_SIZE=tiny .venv/bin/python -m bench.paced": BENCH,
    "BENCH_SIZE=tiny .venv/bin/python -m bench.record_floor": BENCH,
    "BENCH_SIZE=tiny .venv/bin/python -m bench.fanout": BENCH,
    "BENCH_SIZE=tiny .venv/bin/python -m bench.durability": BENCH,
    "BENCH_SIZE=tiny .venv/bin/python -m bench.grpc_gap": BENCH,
    "BENCH_SIZE=tiny .venv/bin/python -m bench.grpc_gap_profile cprofile": BENCH,
    "BENCH_SIZE=tiny .venv/bin/python -m bench.grpc_gap_profile perf": BENCH
    + " (where perf is installed and may profile the test's own processes)",
    "BENCH_SIZE=tiny .venv/bin/python -m bench.grpc_gap_profile syscalls": BENCH
    + " (where strace is installed)",
    ".venv/bin/python -m bench.flow_window": BENCH,
    ".venv/bin/python -m bench.peer_headers": (
        "tests/system/test_peer_headers.py::test_the_command_prints_each_case"
    ),
    ".venv/bin/python -m bench.profile decoders": BENCH,
    ".venv/bin/python -m bench.profile streams": BENCH,
    "make bench": "tests/system/test_bench.py::test_make_bench_at_the_tiny_size (BENCH_SIZE=tiny, "
    "BENCH_OUT in a temporary directory: the full size takes ~25 minutes)",
    "make setup": DEVELOPMENT,
    ".venv/bin/python -m native": BUILD,
    ".venv/bin/python -m producer --version": BUILD,
    "REPLYWIRE_PURE=1 .venv/bin/python -m consumer --version": BUILD,
    ".venv/bin/python -m bench.native --rounds 5 --frames 2000": BUILD
    + " (with --rounds 1 --frames 200: the figures are not asserted)",
    "make protos": DEVELOPMENT,
    "make trace P=PRODUCER.jsonl C=CONSUMER.jsonl STREAM=ID OUT=ID.html": (
        "tests/system/test_timeline_processes.py::test_make_trace (on real traces)"
    ),
    "make lint": "CI (.ci/run runs make test, which runs make lint)",
    "make conformance": "tests/system/test_conformance_processes.py::"
    "test_make_conformance_runs_both_modes_against_both_consumers "
    "(with CONFORMANCE_ARGS=--smoke: the wire mode's whole set takes minutes)",
    'make conformance CONSUMER=".venv/bin/python -m conformance.testee"': (
        "tests/system/test_conformance_processes.py::test_make_conformance_with_a_consumer_runs_its_core_mode"
    ),
    ".venv/bin/python -m conformance mutants": (
        "tests/system/test_conformance_processes.py::test_every_mutant_fails_some_vector"
    ),
    "make vectors": "tests/unit/test_conformance.py::"
    "test_the_committed_vectors_are_what_the_generator_writes (the same generator, its files "
    "compared rather than written)",
    "make ts": f"{TYPESCRIPT}::test_make_ts_runs_the_readme_steps",
    "npm ci": f"{TYPESCRIPT}::test_make_ts_runs_the_readme_steps (through make ts)",
    "npm run build": f"{TYPESCRIPT}::test_make_ts_runs_the_readme_steps (through make ts)",
    "npm test": f"{TYPESCRIPT}::test_make_ts_runs_the_readme_steps (through make ts)",
    "node dist/testee.js < cases.jsonl > answers.jsonl": f"{TYPESCRIPT}::test_the_testee_command"
    " (cases.jsonl written from the core fixtures)",
    ".venv/bin/python clients/typescript/scripts/make_tables.py": (
        f"{TYPESCRIPT}::test_regenerating_finds_the_committed_files"
    ),
    ".venv/bin/python clients/typescript/scripts/make_fixtures.py": (
        f"{TYPESCRIPT}::test_regenerating_finds_the_committed_files"
    ),
    distribution.INSTALL: f"{DISTRIBUTION} (in a fresh virtual environment, in a copy of the "
    "tree a clean clone has)",
    distribution.BUILD: f"{DISTRIBUTION} (in the same copy; the sdist and the wheel installed)",
    distribution.REPLAY: f"{DISTRIBUTION} (from a folder of decoys, each installation)",
    distribution.DEMO: f"{DISTRIBUTION} (from a folder of decoys, each installation)",
}
# The tour's `make trace ... STREAM=ID`, one per stream, with the id of the sample's run.
RUN_BY.update(
    {
        c: VIEW
        for c in shown_commands()
        if c.startswith(view_samples.TRACE) and c != view_samples.TRACE
    }
)
for _block, _test in (
    (sh_block("--stall-ms 3000"), SESSION),
    (sh_block("--stream-id s1"), TRACES),
    (sh_block("--stream-id r1"), TIMELINE),
    (sh_block("--stream-id t1"), OTEL),
    (sh_block("fake_gemini --port 0"), WALKTHROUGH),
    (sh_block("--tls-cert"), SECURITY),
    (sh_block("the operator's commands"), OPERATOR),
    (sh_block("two replicas sharing one reply log"), REPLICAS),
    (sh_block("dist/cli.js stream"), f"{TYPESCRIPT}::test_the_cli_recipe"),
):
    RUN_BY.update(dict.fromkeys(commands_of_sh(_block), _test))

# Shown, and not run by any test, with the reason.
NOT_RUN = {
    "make test": (
        "it runs this test suite; CI runs it (tests/unit/test_docs.py::test_ci_runs_make_test)"
    ),
    "make test-pure": "CI runs it after make test (.ci/run; tests/unit/test_docs.py::"
    "test_ci_runs_make_test)",
    "make check": "it runs lint and tests/unit (make test runs them too)",
    "make lock": "re-resolves the pins from the package index (network); run by hand",
    "make fuzz": "100,000 inputs (many minutes); make test runs tests/system/test_fuzz.py with 400",
    "export GEMINI_API_KEY=...": "a real key; the same flow runs keyless in " + WALKTHROUGH,
    'make run-producer ARGS="--source gemini --budget-usd 0.05 --record runs/$(date +%F-%H%M)"': (
        "spends money on the real API; the same flow runs keyless in " + WALKTHROUGH
    ),
}


def test_every_command_shown_is_run_or_explained() -> None:
    accounted = set(RUN_BY) | set(NOT_RUN)
    unaccounted = {
        f"{name}: {command}"
        for name, text in DOCS.items()
        for command in commands_in(text) - accounted
    }
    assert not unaccounted, f"commands shown that no test runs: {sorted(unaccounted)}"
    stale = accounted - shown_commands()
    assert not stale, f"listed but shown nowhere in the docs: {sorted(stale)}"


def test_the_docs_show_commands() -> None:
    """The scan finds what it should: the README's two, and a recipe in docs/."""
    assert {"make demo", "make test"} <= commands_in(DOCS["README.md"])
    assert any(name.startswith("docs/") and commands_in(text) for name, text in DOCS.items())


def run_recipe(
    block: str, tmp_path: Path, timeout: float = 150, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A doc's block as written, in its own session (so every process it left is stoppable)."""
    process = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path), **(env or {})},
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        with_group_stopped(process.pid)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def with_group_stopped(pgid: int) -> None:
    """SIGKILL what is left of the session this test started (its own process group, by id)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def made_dirs(tmp_path: Path) -> list[Path]:
    return sorted(path for path in tmp_path.iterdir() if path.name.startswith("tmp."))


def test_one_shell_session_recipe(tmp_path: Path) -> None:
    done = run_recipe(sh_block("--stall-ms 3000"), tmp_path)
    assert done.returncode == 0, done.stderr
    first, rest = done.stdout.split("\n}\n", 1)
    assert json.loads(first + "}")["status"] == "complete"
    assert rest == "consumer exit 3\n"
    (directory,) = made_dirs(tmp_path)
    stall = json.loads((directory / "stall.json").read_text())
    assert (stall["status"], stall["reason"]) == ("incomplete", "idle_timeout")


def test_security_recipe(tmp_path: Path) -> None:
    done = run_recipe(sh_block("--tls-cert"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "consumer exit 7\nconsumer exit 2\n"
    assert (
        "consumer: refusing to send the token from --auth-token-file in clear to "
        "192.0.2.1:50051 (not a loopback address or a Unix socket): give --tls or --tls-ca, "
        "or --insecure\n"
    ) in done.stderr
    (directory,) = made_dirs(tmp_path)
    ok = json.loads((directory / "ok.json").read_text())
    refused = json.loads((directory / "no-token.json").read_text())
    assert ok["status"] == "complete"
    assert (refused["status"], refused["reason"]) == ("refused", "invalid_token")
    token = (directory / "alice.token").read_text().strip()
    assert token not in (directory / "producer.log").read_text()


def test_operator_recipe(tmp_path: Path) -> None:
    """Health (Check, a service's, Watch through a SIGTERM), reflection and /metrics with
    the project's commands and curl; the metrics port shown (9464) is a free one here."""
    block = sh_block("the operator's commands")
    done = run_recipe(block.replace("9464", str(free_port())), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "SERVING",
        "SERVING",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "replywire.v1.ReplyStream",
        "replywire_streams_open 0.0",
        "health exit 1",
        "SERVING",
        "NOT_SERVING",
    ]


@NEEDS_JQ
def test_traces_recipe(tmp_path: Path) -> None:
    done = run_recipe(sh_block("--stream-id s1"), tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "consumer exit 6"
    joined = [json.loads(line) for line in lines[1:] if line.startswith('{"timestamp"')]
    # The consumer refuses s1 at its second frame and cancels the RPC: the producer ends
    # cancelled_by_consumer, or completed if its last write went out before the cancel came.
    ends = {(r["side"], r["to_state"]) for r in joined}
    assert ("consumer", "invalid") in ends
    assert ends & {("producer", "completed"), ("producer", "cancelled_by_consumer")}
    with_jq = [json.loads(line) for line in lines if line.startswith('{"side"')]
    assert [(r["side"], r["to_state"]) for r in with_jq] == [
        (r["side"], r["to_state"]) for r in joined
    ]
    ended = [
        json.loads(line) for line in lines if line.startswith('{"stream_id"') and "to_state" in line
    ]
    assert [r["stream_id"] for r in ended] == ["s1", "s2"]
    assert ended[0]["to_state"] in {"completed", "cancelled_by_consumer"}
    assert ended[1]["to_state"] == "completed"
    pauses = [json.loads(line) for line in lines if '"paused_ms"' in line]
    assert pauses, "the paused recipe printed no pause"
    assert {r["stream_id"] for r in pauses} == {"s2"}


def test_opentelemetry_recipe(tmp_path: Path) -> None:
    """The recipe against a collector here: one trace, the consumer's span under the
    caller's, the producer's under it, and join-traces printing both sides' transitions."""
    trace_id, caller = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with otlp_collector() as collector:
        done = run_recipe(
            sh_block("--stream-id t1"),
            tmp_path,
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint},
        )
        assert done.returncode == 0, done.stderr
        collector.wait_for("replywire.consume", "replywire.serve")
    (consume,) = collector.named("replywire.consume")
    (serve,) = collector.named("replywire.serve")
    assert (consume.trace_id, consume.parent_span_id, consume.service) == (
        trace_id, caller, "replywire-consumer"
    )  # fmt: skip
    assert (serve.trace_id, serve.parent_span_id, serve.service) == (
        trace_id, consume.span_id, "replywire-producer"
    )  # fmt: skip
    assert (consume.status_code, serve.status_code) == (STATUS_OK, STATUS_OK)
    assert serve.events == ["verified", "streaming", "completed"]
    joined = [json.loads(line) for line in done.stdout.splitlines()]
    assert {(r["side"], r["stream_id"], r["trace_id"]) for r in joined} == {
        ("consumer", "t1", trace_id), ("producer", "t1", trace_id)
    }  # fmt: skip
    assert ("producer", "completed") in {(r["side"], r["to_state"]) for r in joined}
    assert ("consumer", "complete") in {(r["side"], r["to_state"]) for r in joined}


def rows_by_component(table: str) -> dict[str, list[tuple[str, str, list[str]]]]:
    """A timeline table's rows per side/component: (event, from -> to, field names). Each
    component's own rows keep their order; how the components interleave is timing."""
    rows: dict[str, list[tuple[str, str, list[str]]]] = {}
    for row in parse_table(table):
        keys = re.findall(r"(\w+)=", row["fields"])
        rows.setdefault(row["side"], []).append((row["event"], row["from -> to"], keys))
    return rows


def result_event_kinds(text: str) -> list[str]:
    """The kinds on a timeline's "result events" line, in order."""
    (line,) = [line for line in text.splitlines() if line.startswith("result events ")]
    return re.findall(r"(?:: |; )(\w+)", line)


def test_timeline_recipe(tmp_path: Path) -> None:
    """The timeline recipe as written; its table has the sample's rows, component by
    component (times and values are the run's own), and `make trace` lists the stream."""
    done = run_recipe(sh_block("--stream-id r1"), tmp_path)
    assert done.returncode == 0, done.stderr
    (directory,) = made_dirs(tmp_path)
    result = json.loads((directory / "r1.json").read_text())
    assert (result["status"], result["stats"]["reconnects"]) == ("complete", 1)
    page = (directory / "r1.html").read_text(encoding="utf-8")
    assert 'id="lane-producer"' in page and 'id="lane-consumer"' in page
    table, rest = done.stdout.split("\ntimeline: ", 1)
    assert rest.startswith(f"{directory}/r1.html (")
    (sample,) = [b for b in blocks("") if b.startswith("$ python -m replywire trace ")]
    assert table.splitlines()[0].startswith("stream r1 (replace-file): complete;")
    assert rows_by_component(table) == rows_by_component(sample)
    assert result_event_kinds(table) == result_event_kinds(sample) != []
    listing = {row["stream id"]: row for row in parse_table(rest.split("\n", 1)[1])}
    assert list(listing) == ["r1"]
    assert (listing["r1"]["case"], listing["r1"]["verdict"]) == ("replace-file", "complete")


@NEEDS_JQ
def test_replicas_recipe(tmp_path: Path) -> None:
    """Two replicas on a private Redis server; the one serving the stream is killed: the
    consumer resumes on the other and prints what docs/consumer.md says."""
    with redis_server() as server:
        done = run_recipe(
            sh_block("two replicas sharing one reply log"), tmp_path, env={"REDIS_URL": server.url}
        )
    assert done.returncode == 0, done.stderr
    shown = '{"status":"complete","reason":null,"reconnects":1}'
    assert done.stdout == shown + "\n"
    assert f"It prints `{shown}`" in doc_holding("two replicas sharing one reply log")
    (directory,) = made_dirs(tmp_path)
    assert json.loads((directory / "replicated.json").read_text())["stream_id"] == "replicated"


@NEEDS_JQ
def test_fake_gemini_walkthrough(tmp_path: Path) -> None:
    done = run_recipe(sh_block("fake_gemini --port 0"), tmp_path)
    assert done.returncode == 0, done.stderr
    marker = "<!-- output-of-the-walkthrough -->\n```\n"
    shown = doc_holding(marker).split(marker, 1)[1].split("```", 1)[0]
    assert done.stdout == shown
    assert not list(ROOT.glob("passages.jsonl")), "the recipe wrote into the repository"


@contextmanager
def session(command: str, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        command,
        shell=True,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **env},
        start_new_session=True,
    )
    try:
        yield process
    finally:
        # SIGTERM to the session this test started (make and its producer), then what is left.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=15)
        # make exits at once; its producer stops cleanly (5 s grace) a little later.
        with contextlib.suppress(TimeoutError):
            wait_for(lambda: not group_alive(process.pid), timeout=15)
        with_group_stopped(process.pid)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def shell(command: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        env={**os.environ, **(env or {})},
    )


@contextmanager
def made_producer(command: str, tmp_path: Path) -> Iterator[str]:
    """A doc's `make run-producer` command, on a free port (PORT=0) found via the ready file."""
    ready = tmp_path / "ready"
    env = {"PORT": "0", "REPLYWIRE_READY_FILE": str(ready)}
    with session(command, env):
        wait_for(ready.exists, timeout=60)
        yield ready.read_text()


def test_two_terminals(tmp_path: Path) -> None:
    """The tour's two terminals as written (a free port, the traces in a temporary
    directory): the stream completes, both traces hold it, and make trace finds it."""
    traces = {
        view_samples.PRODUCER_TRACE: str(tmp_path / "producer.jsonl"),
        view_samples.CONSUMER_TRACE: str(tmp_path / "consumer.jsonl"),
    }

    def here(command: str) -> str:
        for shown, used in traces.items():
            command = command.replace(shown, used)
        return command

    with made_producer(here(view_samples.TOUR_PRODUCER), tmp_path) as target:
        done = shell(here(view_samples.COMPLETE), {"TARGET": target})
        plain = shell("make run-consumer CASE=replace-file", {"TARGET": target})
    assert done.returncode == 0, done.stderr
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout)["status"] == "complete"
    result = json.loads(done.stdout)
    assert result["status"] == "complete"
    listed = shell(here(view_samples.TRACE + result["stream_id"][:8]))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith(f"stream {result['stream_id']} (replace-file): complete;")
    assert "producer: 10 chunks sent, 1 delivery;" in listed.stdout


# `make protos` deletes shared/pb/ and writes it again: a process another test starts at that
# moment could not import it. Nothing else runs meanwhile (make test's serial pass).
@pytest.mark.serial
def test_development_commands() -> None:
    for command in ("make setup", "make protos"):
        done = shell(command)
        assert done.returncode == 0, done.stderr


def test_build_commands() -> None:
    """Which build runs, as docs/operations.md shows it: the same in every child of this
    process (the same environment), and pure with REPLYWIRE_PURE=1."""
    build = running().build
    for command in (".venv/bin/python -m native", ".venv/bin/python -m producer --version"):
        done = shell(command)
        assert done.returncode == 0, done.stderr
        assert build in done.stdout
    done = shell("REPLYWIRE_PURE=1 .venv/bin/python -m consumer --version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "replywire 0.1.0, pure (REPLYWIRE_PURE=1)\n"
    done = shell(".venv/bin/python -m bench.native --rounds 1 --frames 200")
    if build == "compiled":
        assert done.returncode == 0, done.stderr
        assert "core lp" in done.stdout
    else:  # no compiled build to compare with: it says so
        assert done.returncode == 1
        assert "the pure build ran where another was asked for" in done.stdout


def perf_may_profile() -> bool:
    """``perf`` is here and may profile a process of this user (``perf_event_paranoid`` ≤ 2)."""
    try:
        paranoid = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
    except (OSError, ValueError):
        return False
    return shutil.which("perf") is not None and paranoid <= 2


# The benchmarks are a load, not paths: their processes are not measured (tests/conftest.py).
@pytest.mark.no_cover
def test_benchmarks() -> None:
    for what in ("decoders", "streams"):
        done = shell(f".venv/bin/python -m bench.profile {what}")
        assert done.returncode == 0, done.stderr
        assert "Ordered by: internal time" in done.stdout
    done = shell("BENCH_SIZE=tiny .venv/bin/python -m bench.paced")
    assert done.returncode == 0, done.stderr
    paced = json.loads(done.stdout)
    assert set(paced["by_streams"]["4"]["sides"]) == {
        "replywire",
        "bare pair",
        "checks only",
        "records only",
        "sse stack",
        "replywire, producer on uvloop",
    }
    done = shell("BENCH_SIZE=tiny .venv/bin/python -m bench.grpc_gap")
    assert done.returncode == 0, done.stderr
    variants = json.loads(done.stdout)["variants"]
    assert set(variants) == {"bare", "bare uvloop", "producer", "producer uvloop", "sse"}
    for row in variants.values():
        assert row["failures"] == {} and row["server_us_per_chunk"] > 0
    shown = {"cprofile": "by layer", "perf": "samples by dso", "syscalls": "system calls"}
    hows = ["cprofile"] + (["perf"] if perf_may_profile() else [])
    hows += ["syscalls"] if shutil.which("strace") else []
    for how in hows:
        done = shell(f"BENCH_SIZE=tiny .venv/bin/python -m bench.grpc_gap_profile {how}")
        assert done.returncode == 0, done.stderr
        assert shown[how] in done.stdout
    done = shell("BENCH_SIZE=tiny .venv/bin/python -m bench.record_floor")
    assert done.returncode == 0, done.stderr
    floor = json.loads(done.stdout)
    assert set(floor["server"]) == set(floor["client"]) == {"frame", "4096"}
    done = shell("BENCH_SIZE=tiny .venv/bin/python -m bench.fanout")
    assert done.returncode == 0, done.stderr
    fanout = json.loads(done.stdout)
    assert set(fanout["layouts"]) == set(LAYOUTS)
    done = shell("BENCH_SIZE=tiny .venv/bin/python -m bench.durability")
    assert done.returncode == 0, done.stderr
    shapes = json.loads(done.stdout)["shapes"]
    assert {shape: set(modes) for shape, modes in shapes.items()} == {
        "live": {"none", "replica", "aof"},
        "recorded": {"none", "replica", "aof"},
    }
    done = shell(".venv/bin/python -m bench.flow_window")
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)["bytes_written_before_blocking"]) == {
        "grpc defaults",
        "window 64 KiB, BDP off",
        "window 16 KiB, BDP off",
    }
