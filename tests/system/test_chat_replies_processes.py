"""docs/consumer.md#a-chat-reply: the recorded chat turns and the 002 lab's experiments on its
turn across two processes, each row of the documented table run on both default wires, its
outcome, the turn kept, and (accepted) the answer as the table says."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replywire.shared.status import Status
from tests.chat_turns import WEATHER
from tests.experiment_tables import reason_on, table_rows
from tests.processes import Producer, producer, run_consumer

ROOT = Path(__file__).resolve().parents[2]
ROWS = table_rows("chat-experiments")
#: The consumer's exit code of each status.
EXIT_CODES = {"complete": 0, "incomplete": 3, "cancelled": 4, "invalid": 6}


def calls_of(cell: str) -> list[tuple[str, str]]:
    """A calls cell: ``—``, or ``name arguments`` per call, ``;`` between them."""
    if cell == "—":
        return []
    calls = []
    for call in cell.split(" ; "):
        name, _, arguments = call.strip().strip("`").partition(" ")
        calls.append((name, arguments))
    return calls


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Producer]:
    with producer(tmp_path_factory.mktemp("chat"), "--allow-faults") as started:
        yield started


@pytest.fixture(scope="module")
def recorded_usage() -> dict[str, dict[str, Any] | None]:
    """Each recorded turn's last usage report (the one a consumer keeps)."""
    document = json.loads((ROOT / "fixtures" / "chat-recording.json").read_text("utf-8"))
    last: dict[str, dict[str, Any] | None] = {}
    for case, entry in document["cases"].items():
        reports = [item for item in entry["items"] if item["kind"] == "usage"]
        last[case] = {k: v for k, v in reports[-1].items() if k != "kind"} if reports else None
    return last


def test_the_table_has_every_experiment() -> None:
    assert len(ROWS) == 15
    assert all(len(row) == 7 for row in ROWS)
    assert {row[2] for row in ROWS} == {"complete", "invalid", "cancelled", "incomplete"}


@pytest.mark.parametrize("wire", ["lp", "ndjson"])
@pytest.mark.parametrize("row", ROWS, ids=[row[1].strip("`") for row in ROWS])
def test_each_experiment_ends_as_documented(
    running: Producer,
    recorded_usage: dict[str, dict[str, Any] | None],
    wire: str,
    row: list[str],
) -> None:
    _, flags, status, reason, text, calls, notes = row
    args = shlex.split(flags.strip("`"))
    run = run_consumer(running.target, "--kind", "chat", "--wire", wire, *args)
    result = run.result
    assert (result["status"], result["reason"]) == (status, reason_on(reason, wire))
    assert run.returncode == EXIT_CODES[status]
    assert result["kind"] == "chat"
    turn = result["turn"]
    assert turn["text"] == ("" if text == "—" else text.strip("`"))
    kept = [(call["name"], call["arguments"]) for call in turn["tool_calls"]]
    assert kept == calls_of(calls)
    assert [call["index"] for call in turn["tool_calls"]] == list(range(len(kept)))
    assert result["notes"] == ([] if notes == "—" else [notes.strip("`")])
    case = args[args.index("--case") + 1]
    if "transport-abort" in args:  # cut between the calls' first fragments, resumed once
        assert result["stats"]["reconnects"] == 1
    if status != Status.COMPLETE.value:
        assert result["accepted_answer"] is None
        return
    answer = result["accepted_answer"]
    assert answer["text"] == turn["text"]
    assert [(c["name"], c["arguments"]) for c in answer["tool_calls"]] == [
        (name, json.loads(arguments)) for name, arguments in kept
    ]
    assert answer["usage"] == turn["usage"] == recorded_usage[case]
    assert answer["finish_reason"] == turn["finish_reason"]


def test_the_002_lab_s_turn_is_the_lab_s(running: Producer) -> None:
    """The 002 lab's summary, value for value: the text, the calls by id, name and arguments,
    and the usage as reported (prompt 18, completion 9, total 27, cached 4)."""
    run = run_consumer(running.target, "--kind", "chat", "--case", "chat-interleaved-calls")
    answer = run.result["accepted_answer"]
    assert answer["text"] == "Reading the files."
    assert [(c["id"], c["name"], c["arguments"]) for c in answer["tool_calls"]] == [
        ("call-read", "read_file", {"path": "notes.py"}),
        ("call-shell", "shell", {"command": "pwd"}),
    ]
    usage = answer["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (18, 9)
    assert (usage["total_tokens"], usage["cached_tokens"]) == (27, 4)
    assert answer["finish_reason"] == "tool_calls"


# --- a hostile producer alters the fake model's turn on the way --------------------------------


@pytest.mark.parametrize("wire", ["lp", "ndjson"])
@pytest.mark.parametrize(
    ("word", "reason"),
    [
        ("chat-intact", None),
        ("chat-drop-call", "content_digest_mismatch"),
        ("chat-swap", "content_digest_mismatch"),
        ("chat-swap-calls", "invalid_tool_call"),
    ],
)
def test_a_turn_altered_on_the_way_is_refused(
    hostile_target: str, tmp_path: Path, wire: str, word: str, reason: str | None
) -> None:
    """The issue's evidence turn (text, two parallel calls, a thought and its signature, usage
    over three reports) delivered intact is accepted; one call's frame removed, or two frames
    swapped, and renumbered so every sequence checks out, is refused: done's claim covers
    every part (docs/protocol.md#chat-digest), and a call begun out of order is no call."""
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([WEATHER]), encoding="utf-8")
    run = run_consumer(
        hostile_target,
        *("--kind", "chat", "--prompt", "Is it warmer in Oslo or Lima?", "--tools", str(tools)),
        *("--model", "fake-chat-turn", "--stream-id", word, "--wire", wire),
    )
    result = run.result
    if reason is None:
        assert (result["status"], result["reason"]) == ("complete", None)
        assert [c["id"] for c in result["accepted_answer"]["tool_calls"]] == ["c1", "c2"]
        assert result["accepted_answer"]["usage"]["total_tokens"] == 61  # the last, not a sum
        return
    assert (result["status"], result["reason"]) == ("invalid", reason)
    assert result["accepted_answer"] is None and run.returncode == 6
