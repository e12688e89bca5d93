"""The pure parts of the Gemini protocol, without a server: HTTP errors before the stream,
and the codes of the stream's finish reasons and error events."""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any

import pytest
from structlog.testing import capture_logs

from replywire.producer.sources.gemini.codes import PROVIDER_ERROR_STATUSES, PROVIDER_FINISHES
from replywire.producer.sources.gemini.protocol import (
    ProviderFrames,
    frames_from_sse,
    provider_error,
    text_request_body,
)
from replywire.shared.errors import RequestRefused
from replywire.shared.frames import FrameKind
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import Reason
from replywire.shared.status import Status
from replywire.shared.texts import build_text_binding

RETRY_INFO = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}


def error_body(status: str, *details: object) -> bytes:
    return json.dumps({"error": {"code": 0, "status": status, "details": list(details)}}).encode()


@pytest.mark.parametrize(
    ("status", "body", "reason", "metadata"),
    [
        (
            429,
            error_body("RESOURCE_EXHAUSTED", RETRY_INFO),
            Reason.PROVIDER_RATE_LIMITED,
            {"provider-http-status": "429", "retry-delay": "7s"},
        ),
        (
            400,
            error_body("INVALID_ARGUMENT", {"reason": "API_KEY_INVALID"}),
            Reason.PROVIDER_AUTH_FAILED,
            {"provider-http-status": "400"},
        ),
        (400, error_body("INVALID_ARGUMENT"), Reason.PROVIDER_REJECTED, None),
        (401, error_body("UNAUTHENTICATED"), Reason.PROVIDER_AUTH_FAILED, None),
        (403, error_body("PERMISSION_DENIED", "no dict"), Reason.PROVIDER_AUTH_FAILED, None),
        (404, b"", Reason.PROVIDER_REJECTED, None),
        (500, error_body("INTERNAL"), Reason.PROVIDER_UNAVAILABLE, None),
        (503, b"<html>not json</html>", Reason.PROVIDER_UNAVAILABLE, None),
    ],
)
def test_provider_error_maps_the_status_and_keeps_the_retry_delay(
    status: int, body: bytes, reason: Reason, metadata: dict[str, str] | None
) -> None:
    refusal = provider_error(status, body)
    assert isinstance(refusal, RequestRefused)
    assert refusal.reason is reason
    assert refusal.metadata == (metadata or {"provider-http-status": str(status)})
    assert f"'http_status': {status}" in refusal.detail


def test_the_documented_finish_reasons_and_error_statuses_are_registered_codes() -> None:
    assert len(PROVIDER_FINISHES) == 19 and "STOP" not in PROVIDER_FINISHES
    assert len(PROVIDER_ERROR_STATUSES) == 16 and "OK" not in PROVIDER_ERROR_STATUSES
    for name, code in PROVIDER_FINISHES.items():
        assert code.value == f"provider_finish_{name}"  # the spelling the tests expect
        assert REASONS[code].status is Status.ERROR
    for name, code in PROVIDER_ERROR_STATUSES.items():
        assert code.value == f"provider_error_{name}"
        assert (REASONS[code].status, REASONS[code].grpc_code) == (Status.ERROR, name)


def finished(event: dict[str, object]) -> tuple[str, list[MutableMapping[str, Any]], str | None]:
    """The terminal's reason, the records logged, and the adapter's finish_reason."""
    adapter = ProviderFrames("b" * 64)
    with capture_logs() as logs:
        (frame,) = adapter.event(event)
    assert frame.kind is FrameKind.ERROR
    assert isinstance(frame.reason, str)
    return frame.reason, logs, adapter.finish_reason


@pytest.mark.parametrize("finish", sorted(PROVIDER_FINISHES))
def test_a_documented_finish_reason_is_its_own_code(finish: str) -> None:
    reason, logs, kept = finished({"candidates": [{"finishReason": finish}]})
    assert (reason, logs, kept) == (f"provider_finish_{finish}", [], finish)


@pytest.mark.parametrize(
    ("finish", "shown"),
    [
        ("NEW_REASON", "NEW_REASON"),
        ("max_tokens", "max_tokens"),  # codes are exact: not upper-cased into one
        ("x\x1b[2J" + "y" * 300, "x\\x1b[2J" + "y" * 247 + "\u2026"),
    ],
)
def test_any_other_finish_reason_is_one_code_and_its_value_is_in_the_trace(
    finish: str, shown: str
) -> None:
    reason, logs, kept = finished({"candidates": [{"finishReason": finish}]})
    assert reason == Reason.PROVIDER_FINISH_UNREGISTERED.value
    (record,) = logs
    assert record["event"] == "provider_reason_unregistered"
    assert (record["field"], record["value"], record["reason"]) == (
        "finishReason",
        shown,
        "provider_finish_unregistered",
    )
    assert kept == shown  # what provider_stream_closed and the capture record


@pytest.mark.parametrize(
    ("error", "reason", "value"),
    [
        ({"code": 503, "status": "UNAVAILABLE"}, "provider_error_UNAVAILABLE", None),
        ({"status": "DATA_LOSS"}, "provider_error_DATA_LOSS", None),
        ({"code": 503}, "provider_error_unregistered", "503"),
        ({"status": "unavailable"}, "provider_error_unregistered", "unavailable"),
        ({"status": "OK"}, "provider_error_unregistered", "OK"),
        ({"status": ["not text"]}, "provider_error_unregistered", "['not text']"),
        ({}, "provider_error_unregistered", "None"),
    ],
)
def test_an_error_event_is_the_code_of_its_status(
    error: dict[str, object], reason: str, value: str | None
) -> None:
    got, logs, kept = finished({"error": error})
    assert (got, kept) == (reason, "ERROR")
    assert [record.get("value") for record in logs] == ([] if value is None else [value])


# --- parts a grounded reply cannot carry ----------------------------------------------------


def turn(*parts: object, finish: str | None = None) -> dict[str, object]:
    candidate: dict[str, object] = {"content": {"role": "model", "parts": list(parts)}}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "usageMetadata": {"totalTokenCount": 9}}


CALL = {"functionCall": {"name": "search_docs", "args": {"query": "x"}}}


@pytest.mark.parametrize(
    ("part", "kinds"),
    [
        (CALL, ["functionCall"]),
        ({**CALL, "thoughtSignature": "c2ln"}, ["functionCall"]),
        ({"inlineData": {"mimeType": "image/png", "data": "AAAA"}}, ["inlineData"]),
        ({"executableCode": {"language": "PYTHON", "code": "1"}}, ["executableCode"]),
        ({"codeExecutionResult": {"outcome": "OUTCOME_OK"}}, ["codeExecutionResult"]),
        ({"text": "I think", "thought": True}, ["thought"]),
        ({"text": "x", "somethingNew": 1}, ["somethingNew"]),
        ({"text": 7}, ["text_not_a_string"]),
        ("a string", ["not_an_object"]),
        (None, ["not_an_object"]),
    ],
)
def test_a_part_that_is_not_text_ends_the_reply_with_its_text_kept(
    part: object, kinds: list[str]
) -> None:
    """Never dropped: the text before it is a delta, then an error terminal; the record
    names what the part was."""
    adapter = ProviderFrames("b" * 64)
    first = adapter.event(turn({"text": "one "}))
    with capture_logs() as logs:
        frames = adapter.event(turn({"text": "two "}, part, {"text": "three"}, finish="STOP"))
    assert [(f.sequence, f.kind, f.text) for f in first + frames[:1]] == [
        (1, FrameKind.CONTENT_DELTA, "one "),
        (2, FrameKind.CONTENT_DELTA, "two "),
    ]
    assert (frames[1].sequence, frames[1].kind, frames[1].reason) == (
        3,
        FrameKind.ERROR,
        "provider_part_unsupported",
    )
    assert len(frames) == 2
    assert adapter.cut_off is Reason.PROVIDER_PART_UNSUPPORTED
    assert adapter.finish_reason == "ERROR"
    (record,) = logs
    assert (record["event"], record["parts"], record["reason"]) == (
        "provider_part_unsupported",
        [*kinds, "text"],
        "provider_part_unsupported",
    )


@pytest.mark.parametrize(
    "parts",
    [
        [{"text": "a"}, {"text": "b"}],
        [{"text": "ab", "thoughtSignature": "c2ln"}],
        [{"text": "ab"}, {"thoughtSignature": "c2ln"}],  # a signature alone carries no text
        [{"text": "ab"}, {"text": "", "thoughtSignature": "c2ln"}],
        [{"text": "ab", "thought": False}],
    ],
)
def test_text_parts_and_a_signature_are_a_grounded_reply(parts: list[object]) -> None:
    adapter = ProviderFrames("b" * 64)
    frames = adapter.event(turn(*parts, finish="STOP"))
    assert [f.kind for f in frames] == [FrameKind.CONTENT_DELTA, FrameKind.DONE]
    assert frames[0].text == "ab"
    assert adapter.cut_off is None


def test_a_part_first_gives_no_delta_and_the_stream_reads_no_further() -> None:
    """The provider's stream is closed at the part: what follows it (even a STOP) is not
    read, so no event after the terminal can abort the call."""
    body = b"".join(
        b"data: " + json.dumps(event).encode() + b"\r\n\r\n"
        for event in (turn(CALL), turn({"text": "late"}, finish="STOP"))
    )
    frames, stream = frames_from_sse([body], "b" * 64)
    assert [(f.kind, f.reason) for f in frames] == [(FrameKind.ERROR, "provider_part_unsupported")]
    assert stream.closed and stream.abort is None
    assert stream.adapter.events == 1


def test_a_text_request_sends_the_messages_as_they_are_and_no_schema() -> None:
    binding = build_text_binding("What is 2 + 2?", system="Answer briefly.")
    assert text_request_body(binding, max_output_tokens=64) == {
        "contents": [{"role": "user", "parts": [{"text": "What is 2 + 2?"}]}],
        "generationConfig": {"maxOutputTokens": 64},
        "systemInstruction": {"parts": [{"text": "Answer briefly."}]},
    }
    assert "systemInstruction" not in text_request_body(
        build_text_binding("hi"), max_output_tokens=64
    )
