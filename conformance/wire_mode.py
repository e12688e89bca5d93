"""The wire mode: the producer's conformance mode serves each vector's chunks over real
gRPC, and any consumer CLI, run from a command template, streams them and writes its
result document, which is compared with the vector's expected verdict.

The template's placeholders (each a whole word of it, or inside one):

``{target}`` the producer's ``HOST:PORT``; ``{stream_id}`` the vector's stream id;
``{case_id}``; ``{wire}`` (``lp``, ``ndjson``, ``ndjson-lab``); ``{binding_file}`` a file
holding the vector's exact binding bytes; ``{result_file}`` where the CLI must write its
result document; ``{limit_flags}`` (a word of its own) the vector's limits and policy as the
Python CLI's flags (``--max-stream-bytes N`` ..., ``--ignore-duplicates``), nothing when it
has none; ``{vector_id}``.

One CLI process per vector, at most ``jobs`` at once, each bounded by ``timeout_s`` (then
killed: that process, by its pid). The producer is started first and stopped (SIGTERM,
then SIGKILL after a bound) when every vector is done.
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

from conformance.report import Outcome, compare, from_result_document, unanswered
from replywire.shared.vectors import Mode, Vector

PLACEHOLDERS: Final = (
    "{target}",
    "{stream_id}",
    "{case_id}",
    "{wire}",
    "{binding_file}",
    "{result_file}",
    "{limit_flags}",
    "{vector_id}",
)
LIMIT_FLAGS: Final = {
    "max_stream_bytes": "--max-stream-bytes",
    "max_frame_bytes": "--max-frame-bytes",
    "max_content_chars": "--max-content-chars",
    "max_frames": "--max-frames",
    "max_tool_calls": "--max-tool-calls",
}
DEFAULT_JOBS: Final = 4
DEFAULT_TIMEOUT_S: Final = 30.0
READY_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 10.0
STDERR_CHARS: Final = 400


def limit_flags(vector: Vector) -> list[str]:
    flags: list[str] = []
    for name, value in (vector.limits or {}).items():
        flags += [LIMIT_FLAGS[name], str(value)]
    if vector.ignore_duplicates:
        flags.append("--ignore-duplicates")
    return flags


def expand(template: str, values: dict[str, str], flags: list[str]) -> list[str]:
    """The template's words with the placeholders filled in (``{limit_flags}``: its words)."""
    argv: list[str] = []
    for word in shlex.split(template):
        if word == "{limit_flags}":
            argv += flags
            continue
        filled = word
        for name, value in values.items():
            filled = filled.replace(name, value)
        argv.append(filled)
    return argv


def run_vector(
    template: str, vector: Vector, target: str, work: Path, timeout_s: float, cwd: Path
) -> Outcome:
    binding_file = work / f"{vector.id}.binding.json"
    result_file = work / f"{vector.id}.result.json"
    binding_file.write_bytes(vector.binding_bytes)
    values = {
        "{target}": target,
        "{stream_id}": vector.stream_id,
        "{case_id}": vector.case_id,
        "{wire}": vector.wire,
        "{binding_file}": str(binding_file),
        "{result_file}": str(result_file),
        "{vector_id}": vector.id,
    }
    argv = expand(template, values, limit_flags(vector))
    try:
        finished = subprocess.run(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout_s,  # on expiry run() kills the process it started
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Outcome(vector, error=f"the CLI did not finish within {timeout_s:g} s")
    except OSError as error:
        return Outcome(vector, error=f"cannot start {argv[0]!r}: {error.strerror}")
    try:
        document = json.loads(result_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        tail = finished.stderr.decode("utf-8", "replace").strip()[-STDERR_CHARS:]
        return Outcome(vector, error=f"no result document (exit {finished.returncode}); {tail}")
    if not isinstance(document, dict):
        return Outcome(vector, error="the result document is not an object")
    return compare(vector, from_result_document(document))


class ConformanceProducer:
    """``python -m producer --conformance DIR`` on a free loopback port, for one run."""

    def __init__(self, vectors_dir: Path, work: Path, cwd: Path) -> None:
        self.ready = work / "producer.ready"
        self.trace = work / "producer.jsonl"
        argv = [
            sys.executable, "-m", "replywire.producer", "--conformance", str(vectors_dir),
            "--host", "127.0.0.1", "--port", "0", "--ready-file", str(self.ready),
            "--trace-file", str(self.trace), "--log-format", "json",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip

    def target(self) -> str:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.ready.is_file():
                return self.ready.read_text(encoding="utf-8").strip()
            if self.process.poll() is not None:
                error = self.process.stderr.read() if self.process.stderr else b""
                raise RuntimeError(
                    f"the conformance producer exited {self.process.returncode}: "
                    + error.decode("utf-8", "replace").strip()[-STDERR_CHARS:]
                )
            time.sleep(0.05)
        raise RuntimeError(f"the conformance producer was not ready within {READY_TIMEOUT_S:g} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT_S)
        if self.process.stderr is not None:
            self.process.stderr.close()


def run_wire(
    template: str,
    vectors: Sequence[Vector],
    *,
    vectors_dir: Path,
    cwd: Path,
    jobs: int = DEFAULT_JOBS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[Outcome]:
    """Every vector that runs in the wire mode, through the CLI ``template``."""
    if not shlex.split(template):
        raise ValueError("the wire mode needs a command template")
    chosen = [vector for vector in vectors if Mode.WIRE in vector.modes]
    with tempfile.TemporaryDirectory(prefix="replywire-conformance-") as folder:
        work = Path(folder)
        producer = ConformanceProducer(vectors_dir, work, cwd)
        try:
            try:
                target = producer.target()
            except RuntimeError as error:
                return unanswered(chosen, str(error))
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                return list(
                    pool.map(
                        lambda vector: run_vector(template, vector, target, work, timeout_s, cwd),
                        chosen,
                    )
                )
        finally:
            producer.stop()
