"""The conformance kit with real processes: both consumers, the Python one and the TypeScript
one, pass every vector in the core mode and, over real gRPC against the producer's conformance
mode, the wire mode's smoke subset (make conformance; the whole wire mode takes minutes:
docs/conformance.md); every
mutant of the core fails some vector; a consumer that hangs is killed and fails; the
conformance producer refuses every request that is not a vector's own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from conformance.line_checks import line_checks
from conformance.vectors import VECTORS_DIR, load_all
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from tests.processes import ROOT, producer

pytestmark = pytest.mark.timeout(300)
PYTHON = ".venv/bin/python"
TESTEE = f"{PYTHON} -m conformance.testee"
VECTORS = {vector.id: vector for vector in load_all()}
#: The core mode's line checks (a limit below 1, answered with error) go with the vectors.
LINE_CHECKS = line_checks(list(VECTORS.values()))


def run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )


def totals(out: str, mode: str) -> tuple[str, ...]:
    """The ``total`` row of ``mode``'s table."""
    table = out.split(f"conformance, {mode}", 1)[1]
    found = re.search(r"^total +(\d+) +(\d+) +(\d+)$", table, re.M)
    assert found is not None, table[:2000]
    return found.groups()


# The loads of this module (every vector through each consumer, every mutant of the core) run
# unmeasured (tests/conftest.py): the code they reach is measured by the tests of its own.
@pytest.mark.no_cover
def test_make_conformance_runs_both_modes_against_both_consumers(built: None) -> None:
    """``make conformance``: every vector in the core mode, and the wire mode on the smoke
    subset (every expected reason on every wire, over real gRPC through each consumer's CLI),
    against the Python consumer, then the TypeScript one (built by the fixture, so make finds
    its build up to date). Each consumer passes every vector."""
    done = run(
        "make", "--no-print-directory", "conformance", "CONFORMANCE_ARGS=--smoke", timeout=800
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    before, python = done.stdout.split("conformance: the Python consumer\n", 1)
    assert "npm" not in before, before[-2000:]  # the build was up to date: nothing rebuilt
    python, typescript = python.split("conformance: the TypeScript consumer\n", 1)
    for out in (python, typescript):
        core, wire = totals(out, "core mode"), totals(out, "wire (smoke subset)")
        assert int(core[0]) == len(VECTORS) + len(LINE_CHECKS) and core[2] == "0"
        assert wire[2] == "0"
        assert int(wire[0]) >= 80


def test_make_conformance_with_a_consumer_runs_its_core_mode() -> None:
    """``make conformance CONSUMER=…`` runs that command's core mode, and nothing else (on a
    subset: every vector, against both consumers, is the test above)."""
    done = run(
        "make", "--no-print-directory", "conformance", f"CONSUMER={TESTEE}",
        "CONFORMANCE_ARGS=--only 'frames.*'",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    assert "conformance, core mode" in done.stdout
    assert "conformance, wire" not in done.stdout


@pytest.mark.no_cover
def test_every_mutant_fails_some_vector() -> None:
    done = run(PYTHON, "-m", "conformance", "mutants")
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines()[1:] if line.strip()]
    assert {row[0] for row in rows} >= {
        "sequence", "binding", "content-digest", "frame-count", "terminal", "clean-end",
        "reply-schema", "citations", "limits", "duplicate-zero", "citation-first-row",
        "blank-any-space", "detail-scrub", "detail-cut", "limits-below-one",
    }  # fmt: skip
    assert all(int(row[1]) > 0 for row in rows), done.stdout


def test_a_broken_consumer_fails_with_its_failures_listed() -> None:
    done = run(
        sys.executable, "-m", "conformance", "run", "--only", "frames.*",
        "--core", f"{TESTEE} --mutant sequence",
    )  # fmt: skip
    assert done.returncode == 1
    assert "FAIL frames.first-sequence-2.lp" in done.stdout
    assert 'reason: expected "invalid_sequence"' in done.stdout


def test_a_consumer_that_never_answers_is_killed_and_fails() -> None:
    done = run(
        sys.executable, "-m", "conformance", "run", "--only", "lp.header-*",
        "--timeout-s", "1", "--core", "sleep 60",
    )  # fmt: skip
    assert done.returncode == 1
    assert "no answer within 1 s" in done.stdout


def test_a_cli_that_writes_no_result_fails_in_the_wire_mode() -> None:
    done = run(
        sys.executable, "-m", "conformance", "run", "--only", "lp.header-flag-1.lp",
        "--wire", "false {target} {result_file}",
    )  # fmt: skip
    assert done.returncode == 1
    assert "no result document (exit 1)" in done.stdout


def _open(
    target: str, vector_id: str, **changes: object
) -> tuple[list[bytes], grpc.RpcError | None]:
    vector = VECTORS[vector_id]
    wires = {"lp": pb.LENGTH_PREFIXED, "ndjson": pb.NDJSON, "ndjson-lab": pb.NDJSON_LAB}
    request = pb.OpenRequest(
        stream_id=vector.stream_id, case_id=vector.case_id,
        binding_json=vector.binding_bytes, wire_format=wires[vector.wire],
    )  # fmt: skip
    for key, value in changes.items():
        setattr(request, key, value)
    chunks: list[bytes] = []
    with grpc.insecure_channel(target) as channel:
        try:
            for chunk in pb_grpc.ReplyStreamStub(channel).Open(request, timeout=20):
                chunks.append(chunk.data)
        except grpc.RpcError as error:
            return chunks, error
    return chunks, None


def test_the_conformance_producer_serves_vectors_verbatim_and_refuses_the_rest(
    tmp_path: Path,
) -> None:
    with producer(tmp_path, "--conformance", str(VECTORS_DIR)) as served:
        vector_id = "utf8.split-4-byte-at-2.ndjson"
        chunks, error = _open(served.target, vector_id)
        assert error is None and tuple(chunks) == VECTORS[vector_id].chunks
        broken = "frames.content-then-transport-error.lp"
        chunks, error = _open(served.target, broken)
        assert tuple(chunks) == VECTORS[broken].chunks
        assert error is not None and error.code() is grpc.StatusCode.UNAVAILABLE
        assert error.details() == "controlled_transport_abort"
        for changes, code, reason in (
            ({"stream_id": "no-such-vector"}, "INVALID_ARGUMENT", "invalid_request"),
            ({"wire_format": pb.NDJSON}, "INVALID_ARGUMENT", "invalid_request"),
            ({"binding_json": b"{}"}, "FAILED_PRECONDITION", "request_binding_mismatch"),
            ({"case_id": "utf8-write"}, "FAILED_PRECONDITION", "request_binding_mismatch"),
            ({"resume_after": 2}, "NOT_FOUND", "resume_unavailable"),
        ):
            chunks, error = _open(served.target, "lp.header-split-1.lp", **changes)
            assert chunks == [] and error is not None, changes
            assert (error.code().name, error.details()) == (code, reason)
