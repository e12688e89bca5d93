"""Gemini in chat mode (producer/sources/gemini/chat.py): a chat binding's request body, as
the fake server checks it, and each chat script's events as chat frames, through the live
source's own loop (``ProviderStream`` with ``ChatFrames``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import structlog

from harness.fake_gemini.chat_scripts import CALLS, SIGNATURE, TEXT, THOUGHT
from harness.fake_gemini.checks import validate
from harness.fake_gemini.protocol import HttpError, sse_event
from harness.fake_gemini.scripts import CHAT_MODELS, Scripts
from replywire.producer.sources.gemini.chat import ChatFrames, chat_request_body, ledger_usage
from replywire.producer.sources.gemini.protocol import ProviderStream, request_body
from replywire.runtime.recording_file import load_recording
from replywire.shared.chat_parts import (
    ChatDigest,
    FinishPart,
    SignaturePart,
    ThoughtPart,
    ToolCallPart,
    UsagePart,
)
from replywire.shared.chats import chat_binding, chat_request
from replywire.shared.digest import digest
from replywire.shared.frames import Frame, FrameKind

RECORDING = load_recording()
WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def binding_for(model: str, **request: Any) -> dict[str, Any]:
    return chat_binding({**chat_request("Oslo or Lima?", [WEATHER], model=model), **request})


def run(events: list[Any], binding_sha256: str = "b" * 64) -> tuple[list[Frame], ChatFrames]:
    """Events as the provider's SSE body, through the source's loop in chat mode."""
    stream = ProviderStream(binding_sha256, structlog.get_logger(), adapter_type=ChatFrames)
    frames: list[Frame] = []
    for event in events:
        frames += stream.receive_data(sse_event(event))
        if stream.closed:
            break
    frames += stream.end_of_input()
    assert isinstance(stream.adapter, ChatFrames)
    return frames, stream.adapter


def scripted(model: str, binding: dict[str, Any]) -> list[Any]:
    body = chat_request_body(binding, max_output_tokens=1024)
    turn = validate(model, json.loads(json.dumps(body)))
    steps = Scripts().plan(turn, {"headers": {}})
    return [json.loads(step.data.removeprefix(b"data: ")) for step in steps]


def parts(frames: list[Frame]) -> list[Any]:
    return [(frame.kind, frame.text if frame.part is None else frame.part) for frame in frames]


def claim_of(frames: list[Frame]) -> tuple[str, int]:
    running = ChatDigest()
    for frame in frames:
        if frame.kind is FrameKind.CONTENT_DELTA:
            assert isinstance(frame.text, str)
            running.add_text(frame.text)
        elif frame.part is not None:
            running.add_part(frame.kind.value, frame.part)
    return running.claim()


def test_a_chat_binding_s_request_is_sent_as_it_is() -> None:
    call = {"id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}
    binding = binding_for(
        "fake-chat-turn",
        system="Be brief.",
        turns=[
            {"role": "user", "parts": [{"text": "Oslo?"}]},
            {
                "role": "model",
                "parts": [
                    {"thought": "One city.", "signature": "c2ln"},
                    {"tool_call": call, "signature": SIGNATURE},
                    {"tool_call": {**call, "id": ""}},
                ],
            },
            {"role": "user", "parts": [{"tool_result": {"id": "c1", "name": "get_weather",
                                                        "result": {"c": 4}}}]},
        ],
        settings={"temperature": 0.5, "max_output_tokens": 4096},
    )  # fmt: skip
    body = chat_request_body(binding, max_output_tokens=1024)
    assert body == {
        "contents": [
            {"role": "user", "parts": [{"text": "Oslo?"}]},
            {
                "role": "model",
                "parts": [
                    {"text": "One city.", "thought": True, "thoughtSignature": "c2ln"},
                    {
                        "functionCall": {"name": "get_weather", "args": {"city": "Oslo"},
                                         "id": "c1"},
                        "thoughtSignature": SIGNATURE,
                    },
                    {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "get_weather", "response": {"c": 4},
                                          "id": "c1"}}
                ],
            },
        ],
        "generationConfig": {
            "maxOutputTokens": 1024,  # the binding's, at most the source's
            "thinkingConfig": {"includeThoughts": True},
            "temperature": 0.5,
        },
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "tools": [
            {
                "functionDeclarations": [
                    {"name": "get_weather", "description": "The weather in a city.",
                     "parametersJsonSchema": WEATHER["parameters"]}
                ]
            }
        ],
    }  # fmt: skip
    turn = validate("fake-chat-turn", body)
    assert (turn.user_text, turn.tools, turn.max_output_tokens) == ("", ("get_weather",), 1024)
    bare = chat_request_body(binding_for("fake-chat-text", tools=[]), max_output_tokens=64)
    assert "tools" not in bare and "systemInstruction" not in bare
    assert bare["generationConfig"] == {"maxOutputTokens": 64,
                                        "thinkingConfig": {"includeThoughts": True}}  # fmt: skip


def test_the_fake_refuses_a_chat_request_it_would_not_be_sent() -> None:
    body = chat_request_body(binding_for("fake-chat-text"), max_output_tokens=64)
    for broken in (
        {**body, "generationConfig": {"maxOutputTokens": 64}},
        {**body, "contents": [{"role": "model", "parts": [{"text": "hi"}]}]},
        {**body, "contents": [{"role": "user", "parts": [{"text": "a", "functionCall": {}}]}]},
        {**body, "tools": [{"functionDeclarations": [{"name": "x"}]}]},
        {**body, "extra": 1},
        request_body(RECORDING.case("replace-file").binding, max_output_tokens=64),
    ):
        with pytest.raises(HttpError):
            validate("fake-chat-text", broken)


def test_the_evidence_turn_becomes_its_frames_and_done_claims_them_all() -> None:
    binding = binding_for("fake-chat-turn")
    frames, adapter = run(scripted("fake-chat-turn", binding), digest(binding))

    def usage(completion: int, total: int) -> UsagePart:
        counts = {"prompt_tokens": 31, "cached_tokens": 0, "thoughts_tokens": 12}
        return UsagePart(**counts, completion_tokens=completion, tool_use_prompt_tokens=0,
                         total_tokens=total)  # fmt: skip

    first, second = CALLS
    assert parts(frames[:-1]) == [
        (FrameKind.THOUGHT, ThoughtPart(text=THOUGHT)),
        (FrameKind.USAGE, usage(0, 43)),
        (FrameKind.CONTENT_DELTA, TEXT),
        (FrameKind.USAGE, usage(4, 47)),
        (FrameKind.TOOL_CALL, ToolCallPart(index=0, id="c1", name="get_weather",
                                           arguments='{"city":"Oslo"}')),
        (FrameKind.SIGNATURE, SignaturePart(part="tool_call", index=0, value=SIGNATURE)),
        (FrameKind.TOOL_CALL, ToolCallPart(index=1, id="c2", name="get_weather",
                                           arguments='{"city":"Lima"}')),
        (FrameKind.USAGE, usage(18, 61)),
        (FrameKind.FINISH, FinishPart(reason="STOP")),
    ]  # fmt: skip
    assert [frame.sequence for frame in frames] == list(range(1, 11))
    assert {frame.binding_sha256 for frame in frames} == {digest(binding)}
    done = frames[-1]
    assert done.kind is FrameKind.DONE and done.done_digest is not None
    assert (done.done_digest.content_sha256, done.done_digest.content_frames) == claim_of(
        frames[:-1]
    )
    # The call is settled from the last usage frame, in the ledger's keys.
    assert adapter.usage == ledger_usage(usage(18, 61))
    assert adapter.usage == {
        "promptTokenCount": 31, "cachedContentTokenCount": 0, "candidatesTokenCount": 18,
        "thoughtsTokenCount": 12, "toolUsePromptTokenCount": 0, "totalTokenCount": 61,
    }  # fmt: skip
    assert (adapter.finish_reason, adapter.cut_off) == ("STOP", None)
    assert first["args"] == {"city": "Oslo"} and second["id"] == "c2"


def test_text_only_and_an_undeclared_call_are_whole_turns() -> None:
    binding = binding_for("fake-chat-text")
    frames, _ = run(scripted("fake-chat-text", binding))
    kinds = [frame.kind for frame in frames]
    assert kinds.count(FrameKind.CONTENT_DELTA) == 3 and kinds.count(FrameKind.USAGE) == 3
    assert kinds[-2:] == [FrameKind.FINISH, FrameKind.DONE]
    text = "".join(frame.text for frame in frames if isinstance(frame.text, str))
    assert text == "A chat reply to: Oslo or Lima?"
    undeclared, _ = run(scripted("fake-chat-undeclared", binding_for("fake-chat-undeclared")))
    (call,) = [frame.part for frame in undeclared if frame.kind is FrameKind.TOOL_CALL]
    assert isinstance(call, ToolCallPart) and call.name == "tool_not_declared"
    assert undeclared[-1].kind is FrameKind.DONE


def test_a_part_a_turn_cannot_carry_ends_it_in_error_the_text_kept() -> None:
    frames, adapter = run(scripted("fake-chat-inline-data", binding_for("fake-chat-inline-data")))
    assert frames[0].text == "Here is a picture:"
    assert [(frame.kind, frame.reason) for frame in frames[-1:]] == [
        (FrameKind.ERROR, "provider_part_unsupported")
    ]
    assert FrameKind.FINISH not in [frame.kind for frame in frames]
    assert adapter.cut_off is not None


def event(parts: list[Any], finish: str | None = None, usage: Any = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    out: dict[str, Any] = {"candidates": [candidate]}
    if usage is not None:
        out["usageMetadata"] = usage
    return out


def test_signatures_follow_their_part_and_usage_is_sent_when_it_changes() -> None:
    same = {"promptTokenCount": 5, "totalTokenCount": 5}
    frames, adapter = run(
        [
            event([{"text": "Hm.", "thought": True, "thoughtSignature": "dGg="}], usage=same),
            event([{"text": "Hi", "thoughtSignature": "dHg="}], usage=same),
            event([{"text": "", "thoughtSignature": "ZW1wdHk="}, {"functionCall": {"name": "f"}}]),
            event([], "STOP", {"promptTokenCount": 5, "totalTokenCount": 9,
                               "candidatesTokenCount": 3, "toolUsePromptTokenCount": 1}),
        ]
    )  # fmt: skip
    assert parts(frames[:-1]) == [
        (FrameKind.THOUGHT, ThoughtPart(text="Hm.")),
        (FrameKind.SIGNATURE, SignaturePart(part="thought", index=0, value="dGg=")),
        (FrameKind.USAGE, UsagePart(prompt_tokens=5, cached_tokens=0, completion_tokens=0,
                                    thoughts_tokens=0, tool_use_prompt_tokens=0, total_tokens=5)),
        (FrameKind.CONTENT_DELTA, "Hi"),
        (FrameKind.SIGNATURE, SignaturePart(part="text", index=0, value="dHg=")),
        (FrameKind.SIGNATURE, SignaturePart(part="text", index=0, value="ZW1wdHk=")),
        (FrameKind.TOOL_CALL, ToolCallPart(index=0, id="", name="f", arguments="{}")),
        (FrameKind.USAGE, UsagePart(prompt_tokens=5, cached_tokens=0, completion_tokens=3,
                                    thoughts_tokens=0, tool_use_prompt_tokens=1, total_tokens=9)),
        (FrameKind.FINISH, FinishPart(reason="STOP")),
    ]  # fmt: skip
    assert adapter.usage is not None and adapter.usage["toolUsePromptTokenCount"] == 1


@pytest.mark.parametrize(
    "count", [-1, 1.5, "7", True, None, 1 << 64], ids=["negative", "float", "str", "bool",
                                                      "null", "huge"]
)  # fmt: skip
def test_a_usage_count_no_frame_can_carry_ends_the_turn_in_error(count: Any) -> None:
    frames, adapter = run([event([{"text": "Hi"}]), event([], "STOP", {"promptTokenCount": count})])
    assert [(frame.kind, frame.reason) for frame in frames[1:]] == [
        (FrameKind.ERROR, "provider_invalid_event")
    ]
    assert adapter.cut_off is not None  # the call is not settled from it


def test_a_part_with_no_canonical_form_ends_the_turn_in_error() -> None:
    for body in (b'{"text": "a\\ud800"}', b'{"functionCall": {"name": "f", "args": {"n": 1e400}}}'):
        raw = (
            b'data: {"candidates": [{"content": {"parts": [{"text": "ok"}, '
            + body
            + b"]}}]}\r\n\r\n"
        )
        stream = ProviderStream("b" * 64, structlog.get_logger(), adapter_type=ChatFrames)
        frames = stream.receive_data(raw) + stream.end_of_input()
        assert [(frame.kind, frame.reason) for frame in frames] == [
            (FrameKind.CONTENT_DELTA, None),
            (FrameKind.ERROR, "provider_invalid_event"),
        ]
        assert stream.adapter.cut_off is not None


def test_other_finishes_and_errors_stay_error_terminals() -> None:
    frames, _ = run([event([{"text": "Hi"}], "MAX_TOKENS", {"promptTokenCount": 2})])
    assert [frame.kind for frame in frames] == [
        FrameKind.CONTENT_DELTA,
        FrameKind.USAGE,
        FrameKind.ERROR,
    ]
    assert frames[-1].reason == "provider_finish_MAX_TOKENS"
    errored, _ = run([{"error": {"code": 503, "status": "UNAVAILABLE", "message": "x"}}])
    assert [(frame.kind, frame.reason) for frame in errored] == [
        (FrameKind.ERROR, "provider_error_UNAVAILABLE")
    ]
    malformed: object
    for malformed in ({"functionCall": {"name": ""}}, {"functionCall": {"name": "f", "args": 1}},
                      {"text": 1}, {"executableCode": {}}, "a string"):  # fmt: skip
        cut, _ = run([event([{"text": "a"}, malformed], "STOP")])
        assert [frame.kind for frame in cut] == [FrameKind.CONTENT_DELTA, FrameKind.ERROR]
        assert cut[-1].reason == "provider_part_unsupported"


def test_every_chat_model_is_a_fake_model() -> None:
    assert set(CHAT_MODELS) == {
        "fake-chat-text",
        "fake-chat-turn",
        "fake-chat-undeclared",
        "fake-chat-inline-data",
    }
