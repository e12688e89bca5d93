"""A chat binding (docs/protocol.md#chat-binding): built from a request, and checked as the
producer checks one (``shared.chats``)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from replywire.shared.chat_binding_schema import SCHEMA_TEXT
from replywire.shared.chats import (
    chat_binding,
    chat_request,
    check_chat_binding,
    declared_tools,
    is_chat_case,
)
from replywire.shared.digest import digest
from replywire.shared.errors import RequestRefused
from tests.chat_turns import WEATHER

ROOT = Path(__file__).resolve().parents[2]


def a_binding(**request: Any) -> dict[str, Any]:
    return chat_binding({**chat_request("Weather in Oslo?", [WEATHER]), **request})


def refused(binding: Any, case_id: str | None = None, **options: Any) -> str:
    case_id = case_id or (binding["case_id"] if isinstance(binding, dict) else "chat-x")
    with pytest.raises(RequestRefused) as caught:
        check_chat_binding(binding, case_id, **options)
    return caught.value.code


def test_the_schema_the_core_checks_is_the_contract_s_file() -> None:
    contract = ROOT / "protos" / "schemas" / "chat-binding.schema.json"
    assert contract.read_text(encoding="utf-8") == SCHEMA_TEXT


def test_a_chat_binding_is_built_and_checked_back() -> None:
    binding = a_binding(system="Be brief.", settings={"temperature": 0.2})
    assert binding["kind"] == "chat"
    assert binding["request_sha256"] == digest(binding["request"])
    assert binding["case_id"] == "chat-" + binding["request_sha256"][:16]
    assert is_chat_case(binding["case_id"]) and not is_chat_case("text-0")
    assert check_chat_binding(binding, binding["case_id"]) == binding
    assert declared_tools(binding) == {"get_weather": WEATHER["parameters"]}
    named = chat_binding(binding["request"], "chat-my-case")
    assert check_chat_binding(named, "chat-my-case", recorded=True) == named


def changed(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """A valid binding with one value changed, its digest and case id made right again (so
    only that value is wrong)."""
    binding = copy.deepcopy(a_binding())
    target = binding
    for step in path[:-1]:
        target = target[step]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    if path[0] == "request":
        return chat_binding(binding["request"])
    return binding


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("kind",), "text"),
        (("request", "model"), ""),
        (("request", "system"), None),
        (("request", "turns"), []),
        (("request", "turns", 0, "role"), "system"),
        (("request", "turns", 0, "parts"), []),
        (("request", "turns", 0, "parts", 0), {"text": "a", "thought": "b"}),
        (("request", "turns", 0, "parts", 0), {"signature": "s"}),
        (("request", "turns", 0, "parts", 0), {"text": "a", "signature": ""}),
        (("request", "tools", 0, "name"), "9starts-with-a-digit"),
        (("request", "tools", 0, "parameters", "type"), "string"),
        (("request", "tools", 0, "parameters", "pattern"), "^a"),
        (("request", "tools", 0, "parameters", "properties", "city", "format"), "date"),
        (("request", "tools", 0, "description"), KeyError),
        (("request", "settings"), {"temperature": 3}),
        (("request", "settings"), {"max_output_tokens": 0}),
        (("request", "settings"), {"top_k": 3}),
        (("request", "extra"), 1),
        (("extra",), 1),
    ],
)
def test_a_binding_against_the_schema_is_a_mismatch(path: tuple[Any, ...], value: Any) -> None:
    assert refused(changed(path, value)) == "request_binding_mismatch"


def test_what_the_schema_cannot_say_is_checked_too() -> None:
    binding = a_binding()
    assert refused({**binding, "request_sha256": "0" * 64}) == "request_binding_mismatch"
    assert refused(binding, "chat-0000000000000000") == "request_binding_mismatch"
    assert refused(chat_binding(binding["request"], "chat-named")) == "request_binding_mismatch"
    twice = a_binding(tools=[WEATHER, WEATHER])
    assert refused(twice) == "request_binding_mismatch"
    model_last = a_binding(
        turns=[
            {"role": "user", "parts": [{"text": "hi"}]},
            {"role": "model", "parts": [{"text": "hello"}]},
        ]
    )
    assert refused(model_last) == "request_binding_mismatch"
    assert refused(["not", "an", "object"], "chat-x") == "request_binding_mismatch"


def test_a_whole_conversation_is_a_binding() -> None:
    call = {"id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}
    binding = a_binding(
        turns=[
            {"role": "user", "parts": [{"text": "Weather in Oslo?"}]},
            {
                "role": "model",
                "parts": [
                    {"thought": "One city.", "signature": "c2ln"},
                    {"tool_call": call, "signature": "c2lnLTE="},
                ],
            },
            {
                "role": "user",
                "parts": [{"tool_result": {"id": "c1", "name": "get_weather", "result": {"c": 4}}}],
            },
        ],
        settings={"temperature": 0, "max_output_tokens": 256},
    )
    assert check_chat_binding(binding, binding["case_id"]) == binding
