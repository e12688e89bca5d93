"""A chat reply's validation after done and a clean end (docs/protocol.md#chat-reply), in
its order, and its result document (#result-document): kind, first_output, turn, call,
notes, the events, and the schema (protos/schemas/result.schema.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from replywire.shared.chat_parts import SignaturePart, ThoughtPart
from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.digest import digest
from replywire.shared.frames import FrameKind
from replywire.shared.reasons import Reason
from replywire.shared.wire import WireFormat
from tests.chat_turns import (
    EXAMPLE,
    EXAMPLE_CALLS,
    READ_FILE,
    SHELL,
    WIRES,
    Item,
    call,
    chat_binding,
    encoded,
    finish,
    frames,
    judge,
    run,
    signature,
    text,
    thought,
    usage,
)
from tests.unit.test_schemas import validator

RESULT = validator("result.schema.json")
PROTOCOL = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text(
    encoding="utf-8"
)


def verdict(result: dict[str, Any]) -> tuple[str, str | None]:
    RESULT.validate(json.loads(json.dumps(result)))
    return result["status"], result["reason"]


# --- 002's example, on both wires ------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_the_example_is_assembled_by_index(wire: WireFormat) -> None:
    result = run(EXAMPLE, wire)
    assert verdict(result) == ("complete", None)
    answer = result["accepted_answer"]
    assert answer["text"] == result["provisional_content"] == "Reading the files."
    assert [c["arguments"] for c in answer["tool_calls"]] == EXAMPLE_CALLS
    assert [(c["index"], c["id"], c["name"]) for c in answer["tool_calls"]] == [
        (0, "c1", "read_file"),
        (1, "c2", "shell"),
    ]
    assert answer["usage"]["total_tokens"] == 27
    assert result["notes"] == []
    assert result["kind"] == "chat"
    assert result["first_output"] is True
    assert result["citations"] == []
    assert result["events"][-1] == {
        "kind": "validated_turn",
        "characters": 18,
        "tool_calls": 2,
        "finish_reason": "STOP",
    }
    kinds = [(e["kind"], e.get("part")) for e in result["events"][:8]]
    assert kinds == [
        ("provisional_content", None),
        *[("part_received", "tool_call")] * 4,
        ("provisional_content", None),
        ("part_received", "usage"),
        ("part_received", "finish"),
    ]
    assert result["events"][5]["characters_received"] == 18  # the text's length
    assert [c["arguments"] for c in result["turn"]["tool_calls"]] == [
        '{"path":"notes.py"}',
        '{"command":"pwd"}',
    ]


def test_the_protocols_accepted_answer_is_what_the_core_accepts() -> None:
    """docs/protocol.md#chat-reply's example, turned into frames and judged."""
    example = PROTOCOL.split('<a id="chat-reply"></a>', 1)[1].split("```json\n", 1)[1]
    expected = json.loads(example.split("```", 1)[0])
    weather = {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
    items: list[Item] = [
        (FrameKind.THOUGHT, ThoughtPart(text="The user wants two cities.")),
        text("Checking both."),
        call(0, '{"city":"Oslo"}', name="get_weather", call_id="c1"),
        (FrameKind.SIGNATURE, SignaturePart(part="tool_call", index=0, value="c2lnLTE=")),
        call(1, '{"city":"Lima"}', name="get_weather", call_id="c2"),
        usage(31, 18, 61, thoughts=12),
        finish("STOP"),
    ]
    for wire in WIRES:
        result = run(items, wire, binding=chat_binding([weather]))
        assert verdict(result) == ("complete", None)
        assert result["accepted_answer"] == expected


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_an_empty_turn(wire: WireFormat) -> None:
    result = run([finish("STOP")], wire)
    assert verdict(result) == ("complete", None)
    assert result["accepted_answer"] == {
        "text": "",
        "thoughts": "",
        "tool_calls": [],
        "signatures": [],
        "usage": None,
        "finish_reason": "STOP",
    }
    assert result["first_output"] is True  # a finish is a content frame
    nothing = run([], wire)
    assert verdict(nothing) == ("invalid", "chat_finish_missing")
    assert nothing["first_output"] is False


# --- the order of the reply's checks ------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_no_finish_is_chat_finish_missing_before_any_call(wire: WireFormat) -> None:
    result = run([text("Hi"), call(0, "{", name="nowhere")], wire)
    assert verdict(result) == ("invalid", "chat_finish_missing")
    assert "call" not in result
    assert result["turn"]["tool_calls"][0]["arguments"] == "{"


MALFORMED = [
    '{"path":',
    "[]",
    '"notes.py"',
    "",
    '{"path":"a"} {}',
    '{"path":"a","path":"b"}',
    '{"path":NaN}',
    '\ufeff{"path":"a"}',
    '{"path":"\\ud800"}',
    '{"path":1e400}',
]


@pytest.mark.parametrize("wire", WIRES, ids=str)
@pytest.mark.parametrize("arguments", MALFORMED)
def test_malformed_arguments_are_kept_raw_and_refused(wire: WireFormat, arguments: str) -> None:
    items = [
        call(0, '{"path":"a"}', name="read_file", call_id="c0"),
        call(1, arguments, name="read_file", call_id="c1"),
        finish(),
    ]
    result = run(items, wire)
    assert verdict(result) == ("invalid", "tool_call_malformed")
    assert result["call"] == {"index": 1, "id": "c1", "name": "read_file"}
    assert result["turn"]["tool_calls"][1]["arguments"] == arguments
    assert result["accepted_answer"] is None


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_the_calls_are_judged_in_index_order_all_three_checks_each(wire: WireFormat) -> None:
    # call 0 undeclared, call 1 malformed: call 0's reason
    first = run([call(0, "{}", name="nowhere"), call(1, "{", name="shell"), finish()], wire)
    assert verdict(first) == ("invalid", "tool_call_undeclared")
    assert first["call"] == {"index": 0, "id": "", "name": "nowhere"}
    # call 0 invalid by its schema, call 1 malformed: call 0's reason
    second = run([call(0, "{}", name="shell"), call(1, "{", name="shell"), finish()], wire)
    assert verdict(second) == ("invalid", "tool_call_arguments_invalid")
    assert second["call"]["index"] == 0
    # within one call: malformed before undeclared
    third = run([call(0, "{", name="nowhere"), finish()], wire)
    assert verdict(third) == ("invalid", "tool_call_malformed")


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_an_undeclared_tool(wire: WireFormat) -> None:
    result = run([call(0, '{"path":"a"}', name="write_file", call_id="w"), finish()], wire)
    assert verdict(result) == ("invalid", "tool_call_undeclared")
    assert result["call"] == {"index": 0, "id": "w", "name": "write_file"}
    no_tools = run([call(0, "{}", name="shell"), finish()], wire, binding=chat_binding(()))
    assert verdict(no_tools) == ("invalid", "tool_call_undeclared")


@pytest.mark.parametrize(
    ("name", "arguments", "valid"),
    [
        ("read_file", "{}", False),  # required
        ("read_file", '{"path":""}', False),  # minLength
        ("read_file", '{"path":"a","mode":"r"}', False),  # additionalProperties false
        ("read_file", '{"path":7}', False),  # type
        ("read_file", '{"path":"' + "\U0001d11e" * 8 + '"}', True),  # maxLength: code points
        ("read_file", '{"path":"' + "\U0001d11e" * 9 + '"}', False),
        ("shell", '{"command":"ls","timeout":1.0}', True),  # 1.0 is an integer
        ("shell", '{"command":"ls","timeout":1.5}', False),
        ("shell", '{"command":"ls","extra":[1,{"a":null}]}', True),
    ],
)
def test_arguments_against_the_declared_parameters(name: str, arguments: str, valid: bool) -> None:
    for wire in WIRES:
        result = run([call(0, arguments, name=name, call_id="x"), finish()], wire)
        if valid:
            assert verdict(result) == ("complete", None)
            assert result["accepted_answer"]["tool_calls"][0]["arguments"] == json.loads(arguments)
        else:
            assert verdict(result) == ("invalid", "tool_call_arguments_invalid")
            assert result["call"] == {"index": 0, "id": "x", "name": name}


# --- notes, other endings -----------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_total_that_is_not_the_sum_is_noted_not_refused(wire: WireFormat) -> None:
    result = run([text("Hi"), usage(10, 5, 99, thoughts=2, cached=4), finish()], wire)
    assert verdict(result) == ("complete", None)
    assert result["notes"] == ["usage_total_mismatch"]
    assert result["accepted_answer"]["usage"]["total_tokens"] == 99  # kept as reported
    matching = run([text("Hi"), usage(10, 5, 17, thoughts=2, cached=4), finish()], wire)
    assert matching["notes"] == []  # cached is part of the prompt's


@pytest.mark.parametrize("wire", WIRES, ids=str)
@pytest.mark.parametrize("terminal", [FrameKind.CANCEL, FrameKind.ERROR])
def test_a_stopped_turn_keeps_its_turn(wire: WireFormat, terminal: FrameKind) -> None:
    binding = chat_binding()
    sent = frames(digest(binding), [text("Hi"), thought("Hm"), usage(1, 2, 4)], terminal=terminal)
    result = judge(binding, encoded(wire, sent), wire)
    assert verdict(result)[0] == {"cancel": "cancelled", "error": "error"}[terminal.value]
    assert result["turn"]["thoughts"] == "Hm"
    assert result["notes"] == ["usage_total_mismatch"]
    assert not any(e["kind"] == "validated_turn" for e in result["events"])


def test_an_aborted_turn_is_a_result_with_its_turn() -> None:
    binding = chat_binding()
    consumer = ReplyConsumer(binding)
    result = consumer.abort(Reason.DEADLINE_EXCEEDED).to_dict()
    assert verdict(result) == ("incomplete", "deadline_exceeded")
    assert result["turn"]["tool_calls"] == []
    assert result["first_output"] is False


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_every_chat_result_is_valid_against_the_schema(wire: WireFormat) -> None:
    for items in (
        EXAMPLE,
        [call(0, "{", name="shell"), finish()],
        [signature("text", 0, "s"), thought("x"), finish(), usage(1, 1, 2)],
        [finish(), finish()],
    ):
        verdict(run(items, wire))


def test_the_schema_refuses_a_chat_result_without_its_turn_or_with_a_stray_call() -> None:
    result = json.loads(json.dumps(run(EXAMPLE, WireFormat.LENGTH_PREFIXED)))
    for change in (
        lambda d: d.pop("turn"),
        lambda d: d.pop("notes"),
        lambda d: d.update(call={"index": 0, "id": "", "name": "shell"}),
        lambda d: d.update(notes=["usage_total_mismatch", "usage_total_mismatch"]),
        lambda d: d["accepted_answer"]["tool_calls"][0].update(arguments="{}"),
        lambda d: d["turn"]["tool_calls"][0].update(arguments={}),
        lambda d: d["events"].append({"kind": "part_received", "sequence": 1, "part": "text"}),
        lambda d: d.update(kind="text"),
    ):
        changed = json.loads(json.dumps(result))
        change(changed)
        assert not RESULT.is_valid(changed)
    refused = json.loads(json.dumps(run([call(0, "{", name="shell"), finish()], WIRES[0])))
    RESULT.validate(refused)
    refused.pop("call")
    assert not RESULT.is_valid(refused)


@pytest.mark.parametrize("tools", [(READ_FILE, SHELL), ()])
def test_the_tests_bindings_are_chat_bindings(tools: tuple[dict[str, Any], ...]) -> None:
    validator("chat-binding.schema.json").validate(chat_binding(tools))
