"""A chat reply end to end in one process: the producer's frames (the chat recording through
the fault pipeline; the fake Gemini's chat scripts through the source's adapter) encoded on
both default wires, cut into chunks, judged by the consumer core (docs/protocol.md#chat-reply)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import structlog

from harness.fake_gemini.checks import validate
from harness.fake_gemini.scripts import Scripts
from replywire.producer.sources.gemini.chat import ChatFrames, chat_request_body
from replywire.producer.sources.gemini.protocol import ProviderStream
from replywire.runtime.recording_file import DEFAULT_CHAT_RECORDING_PATH
from replywire.shared.chat_parts import ToolCallPart
from replywire.shared.chat_recording import ChatRecording
from replywire.shared.chats import chat_binding, chat_request
from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.digest import digest
from replywire.shared.errors import ProtocolFailure
from replywire.shared.faults import EXPECTED_OUTCOMES, TIMING_FAULTS, Fault, FaultKind, transmit
from replywire.shared.frames import Frame
from replywire.shared.replay import consume
from replywire.shared.wire import WireFormat, codec_for
from replywire.shared.wire.chunking import ChunkPlan
from tests.chat_turns import WEATHER

WIRES = (WireFormat.LENGTH_PREFIXED, WireFormat.NDJSON)
PLANS = ("frame", "whole", "1", "1,2,7,3,11")
CHATS = ChatRecording.from_bytes(DEFAULT_CHAT_RECORDING_PATH.read_bytes())
#: Each recorded turn's verdict, and its notes.
VERDICTS: dict[str, tuple[str, str | None, list[str]]] = {
    case_id: ("complete", None, []) for case_id in CHATS.case_ids
} | {
    "chat-malformed-arguments": ("invalid", "tool_call_malformed", []),
    "chat-usage-mismatch": ("complete", None, ["usage_total_mismatch"]),
}


def judged(case_id: str, wire: WireFormat, plan: str, fault: Fault | None = None) -> Any:
    case = CHATS.case(case_id)
    transmission = transmit(
        case, wire=wire, plan=ChunkPlan.parse(plan), fault=fault, foreign_binding_sha256="f" * 64
    )
    return consume(ReplyConsumer(case.binding, wire=wire), transmission).to_dict()


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("case_id", CHATS.case_ids)
def test_each_recorded_turn_ends_as_its_case_says(
    case_id: str, wire: WireFormat, plan: str
) -> None:
    result = judged(case_id, wire, plan)
    status, reason, notes = VERDICTS[case_id]
    assert (result["status"], result["reason"]) == (status, reason)
    assert (result["kind"], result["first_output"], result["notes"]) == ("chat", True, notes)
    case = CHATS.case(case_id)
    items = case.chat_items or ()
    calls = {part.index for _, part in items if isinstance(part, ToolCallPart)}
    assert result["turn"]["text"] == case.content
    assert len(result["turn"]["tool_calls"]) == len(calls)
    if status == "complete":
        assert result["accepted_answer"]["text"] == case.content


@pytest.mark.parametrize("wire", WIRES)
def test_the_002_lab_s_turn_is_accepted_with_its_calls_assembled(wire: WireFormat) -> None:
    result = judged("chat-interleaved-calls", wire, "1,2,7,3,11")
    assert result["accepted_answer"] == {
        "text": "Reading the files.",
        "thoughts": "",
        "tool_calls": [
            {"index": 0, "id": "call-read", "name": "read_file", "arguments": {"path": "notes.py"}},
            {"index": 1, "id": "call-shell", "name": "shell", "arguments": {"command": "pwd"}},
        ],
        "signatures": [],
        "usage": {"prompt_tokens": 18, "cached_tokens": 4, "completion_tokens": 9,
                  "thoughts_tokens": 0, "tool_use_prompt_tokens": 0, "total_tokens": 27},
        "finish_reason": "tool_calls",
    }  # fmt: skip


@pytest.mark.parametrize("wire", WIRES)
def test_malformed_arguments_are_refused_and_kept_as_they_came(wire: WireFormat) -> None:
    result = judged("chat-malformed-arguments", wire, "frame")
    assert result["call"] == {"index": 0, "id": "call-read", "name": "read_file"}
    assert result["turn"]["tool_calls"][0]["arguments"] == '{"path":'
    assert result["accepted_answer"] is None


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("kind", [kind for kind in FaultKind if kind not in TIMING_FAULTS])
def test_every_fault_ends_a_chat_turn_as_documented(kind: FaultKind, wire: WireFormat) -> None:
    expected = EXPECTED_OUTCOMES[kind][wire]
    for case_id in CHATS.case_ids:
        result = judged(case_id, wire, "1,2,7,3,11", Fault(kind=kind))
        assert (result["status"], result["reason"]) == (expected.status, expected.reason)
        assert result["accepted_answer"] is None


# --- the fake Gemini's chat scripts through the source's adapter --------------------------------


def from_the_model(model: str, wire: WireFormat) -> dict[str, Any]:
    binding = chat_binding(chat_request("Is it warmer in Oslo or Lima?", [WEATHER], model=model))
    body = json.loads(json.dumps(chat_request_body(binding, max_output_tokens=1024)))
    steps = Scripts().plan(validate(model, body), {"headers": {}})
    stream = ProviderStream(digest(binding), structlog.get_logger(), adapter_type=ChatFrames)
    frames: list[Frame] = []
    for step in steps:
        frames += stream.receive_data(step.data)
    frames += stream.end_of_input()
    core, codec = ReplyConsumer(binding, wire=wire), codec_for(wire)
    try:
        for frame in frames:
            core.receive_data(codec.encode_frame(frame))
    except ProtocolFailure:
        return core.result().to_dict()
    return core.end_of_stream().to_dict()


@pytest.mark.parametrize("wire", WIRES)
def test_the_evidence_turn_is_the_protocol_s_example(wire: WireFormat) -> None:
    result = from_the_model("fake-chat-turn", wire)
    assert (result["status"], result["reason"], result["notes"]) == ("complete", None, [])
    assert result["accepted_answer"] == {
        "text": "Checking both.",
        "thoughts": "The user wants two cities.",
        "tool_calls": [
            {"index": 0, "id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}},
            {"index": 1, "id": "c2", "name": "get_weather", "arguments": {"city": "Lima"}},
        ],
        "signatures": [{"part": "tool_call", "index": 0, "value": "c2lnLTE="}],
        "usage": {"prompt_tokens": 31, "cached_tokens": 0, "completion_tokens": 18,
                  "thoughts_tokens": 12, "tool_use_prompt_tokens": 0, "total_tokens": 61},
        "finish_reason": "STOP",
    }  # fmt: skip


@pytest.mark.parametrize("wire", WIRES)
def test_an_undeclared_call_and_an_unsupported_part_are_refused(wire: WireFormat) -> None:
    undeclared = from_the_model("fake-chat-undeclared", wire)
    assert (undeclared["status"], undeclared["reason"]) == ("invalid", "tool_call_undeclared")
    assert undeclared["call"] == {"index": 0, "id": "c1", "name": "tool_not_declared"}
    inline = from_the_model("fake-chat-inline-data", wire)
    assert (inline["status"], inline["reason"]) == ("error", "provider_part_unsupported")
    assert inline["provisional_content"] == "Here is a picture:"
    text = from_the_model("fake-chat-text", wire)
    assert (text["status"], text["accepted_answer"]["tool_calls"]) == ("complete", [])
    assert [event["kind"] for event in text["events"]].count("part_received") == 4
    assert text["accepted_answer"]["finish_reason"] == "STOP"
