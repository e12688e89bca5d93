"""The command lines in one process, without a connection: the demo's wires (``python -m
replywire demo``), and the consumer's request and options checked before anything runs, a
value error while streaming told from a usage error. (tests/system/test_cli_processes.py
runs ``python -m consumer`` and ``make demo`` as a user does.)"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from replywire.consumer import cli as consumer_cli
from replywire.consumer.binding_flags import load_binding
from replywire.consumer.flags import build_parser
from replywire.demo import demo_runs
from replywire.runtime.recording_file import load_recording
from replywire.shared.errors import ConfigurationError
from replywire.shared.requests import ReplyRequest
from replywire.shared.texts import build_text_binding
from replywire.shared.wire import DEFAULT_WIRES


def test_the_demo_streams_the_default_wires_only() -> None:
    runs = demo_runs(load_recording())
    assert len(runs) == 27
    assert {run.wire for run in runs} == set(DEFAULT_WIRES)


def test_a_request_and_its_options_are_checked_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ConfigurationError):
        ReplyRequest(case_id="replace-file", binding={}, chunk_interval_ms=-1)

    def no_stream(*args: object, **kwargs: object) -> None:
        raise AssertionError("nothing runs when the options are bad")

    monkeypatch.setattr(consumer_cli, "stream_once", no_stream)
    # --window-bytes below 1024 passes argparse but not StreamOptions: a usage error.
    argv = ["stream", "--case", "replace-file", "--window-bytes", "10", "--log-level", "critical"]
    assert consumer_cli.main(argv, io.StringIO()) == 2


def test_a_value_error_while_streaming_is_not_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("a bug while streaming")

    monkeypatch.setattr(consumer_cli, "stream_once", broken)
    argv = ["stream", "--case", "replace-file", "--log-level", "critical"]
    with pytest.raises(ValueError, match="a bug while streaming"):
        consumer_cli.main(argv, io.StringIO())


@pytest.mark.parametrize(
    "flags",
    [
        ["--text", "hi"],  # a text without --kind text
        ["--kind", "text"],  # --kind text without a text
        ["--kind", "text", "--text", "hi", "--case", "replace-file"],
        ["--kind", "text", "--text", "hi", "--wire", "ndjson-lab"],
        ["--kind", "text", "--text", "x" * 16_385],
        ["--kind", "grounded", "--case", "replace-file", "--text", "hi"],
    ],
)
def test_a_text_request_is_checked_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch, flags: list[str]
) -> None:
    def no_stream(*args: object, **kwargs: object) -> None:
        raise AssertionError("nothing runs when the flags are wrong")

    monkeypatch.setattr(consumer_cli, "stream_once", no_stream)
    assert consumer_cli.main(["stream", *flags, "--log-level", "critical"], io.StringIO()) == 2


def test_kind_text_binds_its_own_case() -> None:
    args = build_parser().parse_args(["stream", "--kind", "text", "--text", ""])
    case_id, binding = load_binding(args)
    assert case_id == binding["case_id"] and case_id.startswith("text-")
    assert binding["messages"] == [["human", ""]]


def test_a_binding_file_names_its_own_kind(tmp_path: Path) -> None:
    """--binding FILE needs no --kind (the conformance runner's wire mode sends a text
    vector's binding so); a --kind that differs from the file's is a usage error."""
    path = tmp_path / "text.json"
    binding = build_text_binding("hi")
    path.write_text(json.dumps(binding))
    flags = ["stream", "--case", binding["case_id"], "--binding", str(path)]
    assert load_binding(build_parser().parse_args(flags)) == (
        binding["case_id"],
        binding,
    )
    with pytest.raises(ConfigurationError):
        load_binding(build_parser().parse_args([*flags, "--kind", "grounded"]))


TOOLS = [
    {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


def test_kind_chat_binds_its_own_case_from_the_prompt_and_tools(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    flags = ["stream", "--kind", "chat", "--prompt", "Oslo?", "--tools", str(tools)]
    case_id, binding = load_binding(build_parser().parse_args(flags))
    assert case_id == binding["case_id"] == "chat-" + binding["request_sha256"][:16]
    assert binding["request"] == {
        "model": "gemini-3.1-flash-lite",
        "system": "",
        "turns": [{"role": "user", "parts": [{"text": "Oslo?"}]}],
        "tools": TOOLS,
        "settings": {},
    }
    more = [*flags, "--system", "Be brief.", "--model", "fake-chat-turn"]
    _, other = load_binding(build_parser().parse_args(more))
    assert (other["request"]["system"], other["request"]["model"]) == (
        "Be brief.",
        "fake-chat-turn",
    )
    bare = ["stream", "--kind", "chat", "--prompt", ""]
    assert load_binding(build_parser().parse_args(bare))[1]["request"]["tools"] == []


def test_kind_chat_case_asks_for_a_recorded_chat_turn() -> None:
    flags = ["stream", "--kind", "chat", "--case", "chat-interleaved-calls"]
    case_id, binding = load_binding(build_parser().parse_args(flags))
    assert case_id == binding["case_id"] == "chat-interleaved-calls"
    assert binding["kind"] == "chat"


@pytest.mark.parametrize(
    "flags",
    [
        ["--prompt", "hi"],  # a prompt without --kind chat
        ["--kind", "text", "--text", "hi", "--tools", "TOOLS"],
        ["--kind", "chat"],  # neither a prompt nor a case
        ["--kind", "chat", "--tools", "TOOLS", "--case", "chat-one-call"],
        ["--kind", "chat", "--prompt", "hi", "--case", "chat-one-call"],
        ["--kind", "chat", "--case", "chat-nope"],
        ["--kind", "chat", "--case", "replace-file"],
        ["--kind", "chat", "--prompt", "hi", "--tools", "BAD_TOOLS"],
        ["--kind", "chat", "--prompt", "hi", "--tools", "TWICE"],
        ["--kind", "chat", "--prompt", "hi", "--tools", "NOT_A_LIST"],
        ["--kind", "chat", "--prompt", "hi", "--tools", "MISSING"],
        ["--kind", "chat", "--prompt", "hi", "--model", ""],
        ["--kind", "chat", "--prompt", "x" * 70_000],
        ["--kind", "chat", "--prompt", "hi", "--wire", "ndjson-lab"],
        ["--kind", "chat", "--prompt", "hi", "--question", "why?"],
    ],
)
def test_a_chat_request_is_checked_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flags: list[str]
) -> None:
    def no_stream(*args: object, **kwargs: object) -> None:
        raise AssertionError("nothing runs when the flags are wrong")

    files = {
        "TOOLS": TOOLS,
        "BAD_TOOLS": [{"name": "x", "description": "", "parameters": {"type": "string"}}],
        "TWICE": TOOLS * 2,
        "NOT_A_LIST": TOOLS[0],
    }
    for name, value in files.items():
        (tmp_path / name).write_text(json.dumps(value))
    argv = [str(tmp_path / flag) if flag in {*files, "MISSING"} else flag for flag in flags]
    monkeypatch.setattr(consumer_cli, "stream_once", no_stream)
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    assert consumer_cli.main(["stream", *argv, "--log-level", "critical"], io.StringIO()) == 2
    assert len(err.getvalue().strip().splitlines()) == 1  # one line says why
