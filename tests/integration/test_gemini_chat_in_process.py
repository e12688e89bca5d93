"""The Gemini source in chat mode against the fake server, over a real socket: a chat binding
sent, its turn's frames made as the events arrive, the call settled in the ledger from the
usage the frames carried (the last usage frame)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from harness.fake_gemini.server import FakeGemini
from replywire.producer.budget.file_ledger import BudgetLedger
from replywire.producer.sources.gemini.chat import ledger_usage
from replywire.producer.sources.gemini.settings import GeminiSettings
from replywire.producer.sources.gemini.source import GeminiSource
from replywire.shared.chat_parts import UsagePart
from replywire.shared.chats import chat_binding, chat_request
from replywire.shared.digest import canonical_json
from replywire.shared.errors import RequestRefused
from replywire.shared.frames import Frame, FrameKind
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.recording import Recording
from replywire.shared.requests import check_request

KEY = "chat-test-key"
WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def asked(binding: dict[str, Any]) -> Any:
    request = pb.OpenRequest(
        case_id=binding["case_id"], kind=pb.REPLY_KIND_CHAT, binding_json=canonical_json(binding)
    )
    return check_request(request, allow_faults=False)


async def chat_call(
    recording: Recording, ledger: BudgetLedger, model: str, binding_model: str | None = None
) -> list[Frame]:
    fake = FakeGemini(KEY)
    await fake.start()
    settings = GeminiSettings(model=model, base_url=fake.base_url)
    source = GeminiSource(recording, settings, api_key=KEY, ledger=ledger)
    binding = chat_binding(chat_request("Oslo or Lima?", [WEATHER], model=binding_model or model))
    try:
        plan = await source.prepare(asked(binding), identity="chat-tester")
        live = plan.live_frames()
        assert live is not None
        frames = [frame async for frame in live]
        await plan.close("completed")
        return frames
    finally:
        await source.aclose()
        await fake.wait_idle()
        await fake.stop()


@pytest.mark.timeout(60)
def test_the_ledger_is_settled_from_the_last_usage_frame_sent(
    recording: Recording, tmp_path: Path
) -> None:
    ledger = BudgetLedger(tmp_path / "ledger.json", budget_usd=1.0)
    frames = asyncio.run(chat_call(recording, ledger, "fake-chat-turn"))
    usages = [frame.part for frame in frames if frame.kind is FrameKind.USAGE]
    assert len(usages) == 3  # cumulative over the three events, each one sent
    last = usages[-1]
    assert isinstance(last, UsagePart) and last.total_tokens == 61
    assert [frame.kind for frame in frames[-2:]] == [FrameKind.FINISH, FrameKind.DONE]
    (entry,) = ledger.entries()
    assert entry["state"] == "settled"
    assert entry["usage"] == ledger_usage(last)
    assert entry["identity"] == "chat-tester"


@pytest.mark.timeout(60)
def test_a_chat_binding_for_another_model_is_refused_before_anything_is_paid(
    recording: Recording, tmp_path: Path
) -> None:
    ledger = BudgetLedger(tmp_path / "ledger.json", budget_usd=1.0)
    with pytest.raises(RequestRefused) as refused:
        asyncio.run(chat_call(recording, ledger, "fake-chat-turn", "gemini-3.1-flash-lite"))
    assert refused.value.code == "request_binding_mismatch"
    assert ledger.entries() == []
