"""docs/consumer.md#a-text-reply: the 004 lab's experiments across two processes, each row of
the documented table run on both default wires, with its outcome as the table says."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.experiment_tables import reason_on, table_rows
from tests.processes import Producer, producer, run_consumer

ROOT = Path(__file__).resolve().parents[2]
TEXT = "abcdefghijklmnopqrstuvwxyz0123456789"
ROWS = table_rows("text-experiments")


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Producer]:
    with producer(tmp_path_factory.mktemp("text"), "--allow-faults") as started:
        yield started


@pytest.fixture(scope="module")
def recording_texts() -> dict[str, str]:
    document = json.loads((ROOT / "fixtures" / "text-recording.json").read_text(encoding="utf-8"))
    return {case: entry["text"] for case, entry in document["cases"].items()}


def test_the_table_has_every_experiment() -> None:
    assert len(ROWS) == 8
    assert {row[2] for row in ROWS} == {"complete", "invalid"}


@pytest.mark.parametrize("wire", ["lp", "ndjson"])
@pytest.mark.parametrize("row", ROWS, ids=[row[0] for row in ROWS])
def test_each_experiment_ends_as_documented(running: Producer, wire: str, row: list[str]) -> None:
    _, flags, status, reason, kept = row
    args = shlex.split(flags.strip("`"))
    if "--text" not in args:
        args = ["--text", TEXT, *args]
    run = run_consumer(running.target, "--kind", "text", "--wire", wire, *args)
    text = args[args.index("--text") + 1]
    result = run.result
    assert (result["status"], result["reason"]) == (status, reason_on(reason, wire))
    assert result["provisional_content"] == text[: int(kept)]
    assert result["kind"] == "text"
    assert result["first_output"] is (int(kept) > 0)
    accepted = status == "complete"
    assert result["accepted_answer"] == ({"text": text} if accepted else None)
    assert run.returncode == (0 if accepted else 6)
    if result["reason"] == "truncated_frame":  # what was left over, in the trace
        (invalid,) = [r for r in run.trace if r.get("to_state") == "invalid"]
        assert re.fullmatch(
            r"\d+ bytes (of an unfinished frame|after the last newline)", invalid["why"]
        )


@pytest.mark.parametrize(
    "case", ["utf8-write", "replace-file", "json-result-type", "backup-schedule"]
)
def test_a_recorded_text_reply_is_the_published_answer_s_text(
    running: Producer, case: str, recording_texts: dict[str, str]
) -> None:
    """--kind text --case C: the text recording's reply of C (the lab's published answer,
    as free text), in six-code-point deltas; the grounded reply of C is another reply."""
    run = run_consumer(running.target, "--kind", "text", "--case", case)
    assert run.result["accepted_answer"] == {"text": recording_texts[case]}
    frames = -(-len(recording_texts[case]) // 6) + 1
    assert run.result["stats"]["application_frames"] == frames
    grounded = run_consumer(running.target, "--case", case)
    assert grounded.result["accepted_answer"]["answer"] == recording_texts[case]


@pytest.mark.parametrize("fault", ["transport-abort", "abort-after-done"])
def test_a_broken_text_reply_resumes_from_the_log(running: Producer, fault: str) -> None:
    """A text reply is logged and resumed as a grounded one is: the call broken after two
    frames (or after done), the consumer resumes and completes with the text, once."""
    run = run_consumer(running.target, "--kind", "text", "--text", TEXT, "--fault", fault)
    assert (run.returncode, run.result["status"]) == (0, "complete")
    assert run.result["accepted_answer"] == {"text": TEXT}
    assert run.result["stats"]["reconnects"] == 1
    applied = [e for e in run.result["events"] if e["kind"] == "provisional_content"]
    assert [e["sequence"] for e in applied] == list(range(1, 7))
