"""Chat replies across processes: ``python -m producer`` (the recording source, and the Gemini
source against the fake server's chat scripts) and ``python -m consumer stream --kind chat``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chat_turns import WEATHER
from tests.gemini_runs import API_KEY, gemini_producer
from tests.processes import FakeGeminiProcess, Producer, fake_gemini, producer, run_consumer

pytestmark = pytest.mark.timeout(180)

TOOLS: list[dict[str, Any]] = [WEATHER]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Producer]:
    with producer(tmp_path_factory.mktemp("chat"), "--allow-faults") as started:
        yield started


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGeminiProcess]:
    with fake_gemini(API_KEY) as server:
        yield server


@pytest.mark.parametrize("wire", ["lp", "ndjson"])
def test_a_recorded_chat_turn_streams_and_is_accepted(recorded: Producer, wire: str) -> None:
    run = run_consumer(
        recorded.target, "--kind", "chat", "--case", "chat-interleaved-calls", "--wire", wire
    )
    assert run.returncode == 0, run.result
    calls = run.result["accepted_answer"]["tool_calls"]
    assert [call["arguments"] for call in calls] == [{"path": "notes.py"}, {"command": "pwd"}]
    malformed = run_consumer(
        recorded.target, "--kind", "chat", "--case", "chat-malformed-arguments", "--wire", wire
    )
    assert (malformed.returncode, malformed.result["reason"]) == (6, "tool_call_malformed")
    omitted = run_consumer(
        recorded.target, "--kind", "chat", "--case", "chat-parallel-calls", "--wire", wire,
        "--fault", "omit", "--fault-frame", "5",
    )  # fmt: skip
    assert (omitted.returncode, omitted.result["reason"]) == (6, "invalid_sequence")


def test_a_chat_turn_from_the_model_settles_its_call_from_the_last_usage_sent(
    tmp_path: Path, fake: FakeGeminiProcess
) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS), encoding="utf-8")
    asked = ["--kind", "chat", "--prompt", "Oslo or Lima?", "--tools", str(tools)]
    with gemini_producer(tmp_path, fake, model="fake-chat-turn") as running:
        run = run_consumer(running.target, *asked, "--model", "fake-chat-turn")
        other_model = run_consumer(running.target, *asked)
    assert run.returncode == 0, run.result
    usage = run.result["accepted_answer"]["usage"]
    assert usage["total_tokens"] == 61
    (entry,) = json.loads((tmp_path / "ledger.json").read_text())["entries"]
    assert entry["state"] == "settled"
    assert entry["usage"] == {
        "promptTokenCount": usage["prompt_tokens"],
        "cachedContentTokenCount": usage["cached_tokens"],
        "candidatesTokenCount": usage["completion_tokens"],
        "thoughtsTokenCount": usage["thoughts_tokens"],
        "toolUsePromptTokenCount": usage["tool_use_prompt_tokens"],
        "totalTokenCount": usage["total_tokens"],
    }
    assert (other_model.returncode, other_model.result["reason"]) == (
        7,
        "request_binding_mismatch",
    )


@pytest.mark.parametrize(
    ("model", "code", "reason"),
    [
        ("fake-chat-text", 0, None),
        ("fake-chat-undeclared", 6, "tool_call_undeclared"),
        ("fake-chat-inline-data", 5, "provider_part_unsupported"),
    ],
)
def test_each_chat_script_ends_as_it_says(
    tmp_path: Path, fake: FakeGeminiProcess, model: str, code: int, reason: str | None
) -> None:
    with gemini_producer(tmp_path, fake, model=model) as running:
        run = run_consumer(running.target, "--kind", "chat", "--prompt", "Hi.", "--model", model)
    assert (run.returncode, run.result["reason"]) == (code, reason)
    assert run.result["kind"] == "chat"
