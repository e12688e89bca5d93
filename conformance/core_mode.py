"""The core mode: any consumer as a command speaking the line protocol (docs/conformance.md).

The vectors go to the command in batches, one process per batch: each batch's lines are
written to its stdin and its answers read from its stdout within a bounded time. A batch
that outlives it is killed (that process, by its pid, and nothing else), and its vectors
without an answer fail. The line checks (``conformance.line_checks``: lines the command
must answer with ``error``) go with them.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from conformance.line_checks import expects_error, judged, line_checks
from conformance.report import Outcome, compare, unanswered
from replywire.shared.vectors import Mode, Vector

DEFAULT_BATCH: Final = 200
DEFAULT_TIMEOUT_S: Final = 60.0
#: What of a vector the command is sent: nothing of its expected verdict.
SENT_KEYS: Final = ("id", "wire", "binding", "chunks", "end", "limits", "ignore_duplicates")
#: The tail of a batch's stderr shown when it gave no answer.
STDERR_CHARS: Final = 400


def testee_line(vector: Vector) -> str:
    obj = vector.to_object()
    return json.dumps({key: obj[key] for key in SENT_KEYS if key in obj}, ensure_ascii=True)


def answers_by_id(stdout: str) -> dict[str, dict[str, Any]]:
    """The answers by id (the first for an id); a line that is not an object is skipped.
    Lines end at a line feed only: an answer may hold U+0085, U+2028 or U+2029 raw (JSON
    need not escape them), where ``str.splitlines`` would cut it too."""
    answers: dict[str, dict[str, Any]] = {}
    for line in stdout.split("\n"):
        try:
            answer = json.loads(line)
        except ValueError:
            continue
        if isinstance(answer, dict) and isinstance(answer.get("id"), str):
            answers.setdefault(answer["id"], answer)
    return answers


def run_batch(
    argv: Sequence[str], vectors: Sequence[Vector], timeout_s: float, cwd: Path
) -> list[Outcome]:
    text = "".join(testee_line(vector) + "\n" for vector in vectors)
    try:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            encoding="utf-8",
            errors="replace",
        )
    except OSError as error:
        return unanswered(vectors, f"cannot start {argv[0]!r}: {error.strerror}")
    timed_out = False
    try:
        stdout, stderr = process.communicate(text, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        process.kill()  # the process this batch started, by its pid
        stdout, stderr = process.communicate()
    answers = answers_by_id(stdout)
    outcomes = []
    for vector in vectors:
        answer = answers.get(vector.id)
        if answer is None:
            why = f"no answer within {timeout_s:g} s" if timed_out else "no answer"
            tail = stderr.strip()[-STDERR_CHARS:]
            outcomes.append(Outcome(vector, error=f"{why}; exit {process.returncode}; {tail}"))
        elif expects_error(vector):
            outcomes.append(judged(vector, answer))
        elif "error" in answer:
            outcomes.append(Outcome(vector, error=f"answered error: {answer['error']}"))
        else:
            outcomes.append(compare(vector, answer))
    return outcomes


def run_core(
    command: str,
    vectors: Sequence[Vector],
    *,
    cwd: Path,
    batch: int = DEFAULT_BATCH,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[Outcome]:
    """Every vector that runs in the core mode, then the line checks made from them, through
    ``command`` (split as a shell would, run without one)."""
    argv = shlex.split(command)
    if not argv:
        raise ValueError("the core mode needs a command")
    chosen = [vector for vector in vectors if Mode.CORE in vector.modes]
    chosen += line_checks(chosen)
    outcomes: list[Outcome] = []
    for start in range(0, len(chosen), batch):
        outcomes += run_batch(argv, chosen[start : start + batch], timeout_s, cwd)
    return outcomes
