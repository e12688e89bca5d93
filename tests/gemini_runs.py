"""A Gemini-backed producer in the tests: the test key, the fake server's failure scripts
(each with the consumer's outcome), and its requests and events read back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.fake_gemini.scripts import PublishedCase, load_published_cases
from tests.processes import (
    FakeGeminiProcess,
    producer,
)

#: The key the fake Gemini server expects (a real key's shape; never logged).
API_KEY = "AIzaSy-test-key-0123456789-never-logged"

#: Each failure script of the fake Gemini server (its "model"): the consumer's status, reason
#: and exit code.
SCRIPTS = {
    "fake-early-eof": ("incomplete", "missing_terminal", 3),
    "fake-max-tokens": ("error", "provider_finish_MAX_TOKENS", 5),
    "fake-safety": ("error", "provider_finish_SAFETY", 5),
    "fake-midstream-error": ("error", "provider_error_UNAVAILABLE", 5),
    "fake-midstream-error-raw": ("error", "provider_invalid_event", 5),
    "fake-rate-limited": ("refused", "provider_rate_limited", 7),
    "fake-server-error": ("error", "provider_unavailable", 5),
    "fake-malformed-sse": ("error", "provider_invalid_event", 5),
    "fake-invalid-json": ("error", "provider_invalid_event", 5),
    "fake-connection-reset": ("error", "provider_connection_lost", 5),
    "fake-after-finish": ("error", "transport_io_error", 5),
    "fake-function-call": ("error", "provider_part_unsupported", 5),
}


def gemini_producer(
    tmp_path: Path, fake: FakeGeminiProcess, *args: str, model: str | None = None
) -> Any:
    """A producer whose source is the fake Gemini server, with a file ledger of $1."""
    extra = ["--model", model] if model else []
    return producer(
        tmp_path,
        "--source", "gemini", "--gemini-base-url", fake.base_url,
        "--ledger", str(tmp_path / "ledger.json"), "--budget-usd", "1.0",
        "--log-level", "debug", *extra, *args,
        name=f"producer-{model or 'default'}",
        env={"GEMINI_API_KEY": API_KEY},
    )  # fmt: skip


KEY = "test-key"


HEADERS = {"x-goog-api-key": KEY}


EVENT_END = b"\r\n\r\n"


CASES: dict[str, PublishedCase] = load_published_cases()


FIRST = next(iter(CASES.values()))


SCHEMA = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "enum": ["answered", "not_in_docs"]},
        "answer": {"type": "string"},
        "source_ids": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["status", "answer", "source_ids"],
}


def fake_request_body(case: PublishedCase = FIRST, user_text: str | None = None) -> dict[str, Any]:
    return {
        "contents": [{"role": "user", "parts": [{"text": user_text or case.user_text}]}],
        "systemInstruction": {"parts": [{"text": case.system_text}]},
        "generationConfig": {
            "responseMimeType": "application/json",
            "responseJsonSchema": SCHEMA,
            "maxOutputTokens": 1024,
        },
    }


def split_events(raw: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """Complete ``data: <json>\\r\\n\\r\\n`` events, and whatever follows the last one."""
    *parts, tail = raw.split(EVENT_END)
    events = []
    for part in parts:
        assert part.startswith(b"data: "), part
        assert b"\n" not in part and b"\r" not in part
        events.append(json.loads(part[len(b"data: ") :]))
    return events, tail


def text_of(event: dict[str, Any]) -> str | None:
    content = event["candidates"][0].get("content")
    return None if content is None else content["parts"][0]["text"]


#: Bounded waits: the pause ends on its own well before the test's timeout.
HOLD_S = 15.0
