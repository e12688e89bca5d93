"""Tests of the fake Gemini server itself (harness/fake_gemini/), over real sockets.

Every async scenario runs under ``asyncio.run`` inside a plain test function; the
client is httpx (streaming), except one test that speaks raw HTTP/1.1 to check
the bytes on the wire.

One file past 500 lines: one server's tests, sharing its ``run`` and ``post`` helpers.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import pytest

from harness.fake_gemini.scripts import DEFAULT_MODEL, RATE_LIMITED_BODY, SCRIPTS
from harness.fake_gemini.server import FakeGemini, Pacing
from tests.gemini_runs import CASES, EVENT_END, FIRST, HEADERS, KEY, split_events, text_of
from tests.gemini_runs import fake_request_body as request_body

ERROR_CONTENT_TYPE = "application/json; charset=UTF-8"


BY_ID = {case.case_id: case for case in CASES.values()}


T = TypeVar("T")


@dataclass
class Reply:
    status: int
    headers: httpx.Headers
    raw: bytes
    fragments: int

    def json(self) -> Any:
        return json.loads(self.raw)


def run(scenario: Callable[[FakeGemini], Awaitable[T]], **options: Any) -> T:
    """Start a fake, run ``scenario`` against it, wait until it is idle, stop it."""

    async def main() -> T:
        fake = FakeGemini(**options)
        await fake.start()
        try:
            result = await scenario(fake)
            await fake.wait_idle()
            return result
        finally:
            await fake.stop()

    return asyncio.run(main())


async def post(
    fake: FakeGemini,
    model: str = DEFAULT_MODEL,
    body: dict[str, Any] | None = None,
    *,
    headers: dict[str, str] | None = None,
    query: str = "alt=sse",
) -> Reply:
    async with (
        httpx.AsyncClient(timeout=10.0) as client,
        client.stream(
            "POST",
            fake.url(model, query),
            headers=HEADERS if headers is None else headers,
            json=request_body() if body is None else body,
        ) as response,
    ):
        raw, fragments = b"", 0
        async for piece in response.aiter_bytes():
            raw += piece
            fragments += 1
        return Reply(response.status_code, response.headers, raw, fragments)


def finish_of(event: dict[str, Any]) -> str | None:
    return event["candidates"][0].get("finishReason")


def only_entry(fake: FakeGemini) -> dict[str, Any]:
    assert len(fake.log) == 1
    return fake.log[0]


def test_published_record_has_the_four_development_cases() -> None:
    assert list(BY_ID) == ["utf8-write", "replace-file", "json-result-type", "backup-schedule"]
    assert [case.frame_count for case in CASES.values()] == [4, 4, 3, 4]
    assert all(len(case.texts) == case.frame_count - 1 for case in CASES.values())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case_id", list(BY_ID))
def test_ok_script_serves_the_published_text_events(case_id: str) -> None:
    case = BY_ID[case_id]

    async def scenario(fake: FakeGemini) -> tuple[Reply, dict[str, Any]]:
        reply = await post(fake, DEFAULT_MODEL, request_body(case))
        await fake.wait_idle()
        return reply, only_entry(fake)

    reply, entry = run(scenario)
    assert reply.status == 200
    assert reply.headers["content-type"] == "text/event-stream"
    assert reply.headers["transfer-encoding"] == "chunked"
    assert "retry-after" not in reply.headers
    events, tail = split_events(reply.raw)
    assert tail == b""
    assert b"[DONE]" not in reply.raw
    assert [text_of(e) for e in events] == list(case.texts)
    assert len(events) + 1 == case.frame_count  # the published frames include ``done``
    assert [finish_of(e) for e in events] == [None] * (len(events) - 1) + ["STOP"]
    with_usage = [e for e in events if "usageMetadata" in e]
    assert with_usage == [events[-1]]
    usage = events[-1]["usageMetadata"]
    for name in ("promptTokenCount", "candidatesTokenCount", "totalTokenCount"):
        assert isinstance(usage[name], int) and usage[name] > 0
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]
    assert {e["candidates"][0]["content"]["role"] for e in events} == {"model"}
    assert {e["modelVersion"] for e in events} == {DEFAULT_MODEL}
    assert len({e["responseId"] for e in events}) == 1
    assert json.loads("".join(case.texts))["status"] in ("answered", "not_in_docs")

    assert entry["method"] == "POST"
    assert entry["path"] == f"/v1beta/models/{DEFAULT_MODEL}:streamGenerateContent"
    assert entry["query"] == {"alt": "sse"}
    assert entry["headers"]["x-goog-api-key"] == KEY
    assert entry["headers"]["content-type"] == "application/json"
    assert entry["body"] == request_body(case)
    assert entry["script"] == "ok"
    assert entry["case_id"] == case_id
    assert entry["status"] == 200
    assert entry["events_sent"] == len(events)
    assert entry["body_completed"] is True
    assert entry["client_disconnected"] is False
    assert entry["finished"] is True


@pytest.mark.timeout(60)
def test_unknown_question_gets_a_valid_not_in_docs_reply() -> None:
    body = request_body(user_text='{"question": "Who wrote this?", "context": []}')

    async def scenario(fake: FakeGemini) -> tuple[Reply, dict[str, Any]]:
        reply = await post(fake, DEFAULT_MODEL, body)
        await fake.wait_idle()
        return reply, only_entry(fake)

    reply, entry = run(scenario)
    events, tail = split_events(reply.raw)
    assert tail == b""
    assert 2 <= len(events) <= 3
    assert [finish_of(e) for e in events][-1] == "STOP"
    assert "usageMetadata" in events[-1]
    answer = json.loads("".join(text_of(e) or "" for e in events))
    assert answer["status"] == "not_in_docs"
    assert answer["source_ids"] == []
    assert isinstance(answer["answer"], str) and answer["answer"]
    assert entry["case_id"] is None
    assert entry["body_completed"] is True


@pytest.mark.timeout(60)
def test_raw_wire_format_one_chunk_per_event() -> None:
    """Speak HTTP/1.1 by hand: status line, headers and chunk framing exactly."""

    async def scenario(fake: FakeGemini) -> bytes:
        body = json.dumps(request_body()).encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", fake.port)
        writer.write(
            (
                f"POST /v1beta/models/{DEFAULT_MODEL}:streamGenerateContent?alt=sse HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{fake.port}\r\nx-goog-api-key: {KEY}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            + body
        )
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 10.0)  # until the server closes
        writer.close()
        await writer.wait_closed()
        return data

    data = run(scenario)
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0] == "HTTP/1.1 200 OK"
    headers = [line.split(": ", 1) for line in lines[1:]]
    names = [name.lower() for name, _ in headers]
    assert ["content-type", "text/event-stream"] in [[n.lower(), v] for n, v in headers]
    assert "transfer-encoding" in names and "content-length" not in names
    chunks = []
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            assert rest == b"\r\n"
            break
        chunks.append(rest[:size])
        assert rest[size : size + 2] == b"\r\n"
        rest = rest[size + 2 :]
    assert len(chunks) == len(FIRST.texts)
    assert all(c.startswith(b"data: {") and c.endswith(b"}\r\n\r\n") for c in chunks)
    assert [text_of(json.loads(c[6:])) for c in chunks] == list(FIRST.texts)


@pytest.mark.timeout(60)
def test_early_eof_two_text_events_then_a_clean_end_without_finish_reason() -> None:
    reply = run(lambda fake: post(fake, "fake-early-eof"))
    assert reply.status == 200
    events, tail = split_events(reply.raw)
    assert tail == b""
    assert [text_of(e) for e in events] == list(FIRST.texts[:2])
    assert [finish_of(e) for e in events] == [None, None]
    assert all("usageMetadata" not in e for e in events)


@pytest.mark.timeout(60)
def test_max_tokens_last_event_carries_max_tokens() -> None:
    reply = run(lambda fake: post(fake, "fake-max-tokens"))
    events, tail = split_events(reply.raw)
    assert tail == b""
    assert [text_of(e) for e in events] == list(FIRST.texts[:-1])
    assert [finish_of(e) for e in events] == [None] * (len(events) - 1) + ["MAX_TOKENS"]
    assert "usageMetadata" in events[-1]


@pytest.mark.timeout(60)
def test_safety_one_text_event_then_a_blocked_event_without_text() -> None:
    reply = run(lambda fake: post(fake, "fake-safety"))
    events, tail = split_events(reply.raw)
    assert tail == b""
    assert len(events) == 2
    assert text_of(events[0]) == FIRST.texts[0]
    assert finish_of(events[0]) is None
    assert finish_of(events[1]) == "SAFETY"
    assert "content" not in events[1]["candidates"][0]
    assert text_of(events[1]) is None
    assert "usageMetadata" in events[1]


@pytest.mark.timeout(60)
def test_midstream_error_event_after_one_text_event() -> None:
    reply = run(lambda fake: post(fake, "fake-midstream-error"))
    assert reply.status == 200
    events, tail = split_events(reply.raw)
    assert tail == b""
    assert len(events) == 2
    assert text_of(events[0]) == FIRST.texts[0]
    assert events[1] == {
        "error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}
    }


@pytest.mark.timeout(60)
def test_midstream_error_raw_is_pretty_json_outside_sse_framing() -> None:
    reply = run(lambda fake: post(fake, "fake-midstream-error-raw"))
    assert reply.status == 200
    first, _, rest = reply.raw.partition(EVENT_END)
    assert text_of(json.loads(first[len(b"data: ") :])) == FIRST.texts[0]
    assert rest.startswith(b'{\n  "error": {\n')
    assert json.loads(rest) == {
        "error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}
    }


@pytest.mark.timeout(60)
def test_rate_limited_is_429_with_retry_info_in_the_body() -> None:
    reply = run(lambda fake: post(fake, "fake-rate-limited"))
    assert reply.status == 429
    assert reply.headers["content-type"] == ERROR_CONTENT_TYPE
    assert "retry-after" not in reply.headers
    body = reply.json()
    assert body == RATE_LIMITED_BODY
    assert body["error"]["code"] == 429
    assert body["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert {
        "@type": "type.googleapis.com/google.rpc.RetryInfo",
        "retryDelay": "7s",
    } in body["error"]["details"]


@pytest.mark.timeout(60)
def test_server_error_is_500_internal() -> None:
    reply = run(lambda fake: post(fake, "fake-server-error"))
    assert reply.status == 500
    assert reply.headers["content-type"] == ERROR_CONTENT_TYPE
    assert reply.json() == {
        "error": {
            "code": 500,
            "message": (
                "An internal error has occurred. Please retry or report in "
                "https://developers.generativeai.google/guide/troubleshooting"
            ),
            "status": "INTERNAL",
        }
    }


@pytest.mark.timeout(60)
def test_malformed_sse_one_good_event_then_a_line_that_is_not_sse() -> None:
    reply = run(lambda fake: post(fake, "fake-malformed-sse"))
    first, _, rest = reply.raw.partition(EVENT_END)
    assert text_of(json.loads(first[len(b"data: ") :])) == FIRST.texts[0]
    assert rest == b"this is not sse\r\n\r\n"


@pytest.mark.timeout(60)
def test_invalid_json_event() -> None:
    reply = run(lambda fake: post(fake, "fake-invalid-json"))
    assert reply.status == 200
    assert reply.raw == b'data: {"candidates": [\r\n\r\n'


@pytest.mark.timeout(60)
def test_after_finish_one_more_text_event_follows_stop() -> None:
    reply = run(lambda fake: post(fake, "fake-after-finish"))
    events, tail = split_events(reply.raw)
    assert tail == b""
    assert len(events) == 2
    assert finish_of(events[0]) == "STOP"
    assert "usageMetadata" in events[0]
    assert finish_of(events[1]) is None
    assert text_of(events[1])


@pytest.mark.timeout(60)
def test_unterminated_final_event_lacks_its_blank_line() -> None:
    reply = run(lambda fake: post(fake, "fake-unterminated"))
    events, tail = split_events(reply.raw)
    assert reply.raw.endswith(b"}\r\n") and not reply.raw.endswith(EVENT_END)
    assert [text_of(e) for e in events] == list(FIRST.texts[:-1])
    assert tail.startswith(b"data: ") and tail.endswith(b"\r\n")
    last = json.loads(tail[len(b"data: ") :])
    assert text_of(last) == FIRST.texts[-1]
    assert finish_of(last) == "STOP"


@pytest.mark.timeout(60)
def test_running_usage_every_event_carries_cumulative_usage() -> None:
    reply = run(lambda fake: post(fake, "fake-running-usage"))
    events, _ = split_events(reply.raw)
    assert [text_of(e) for e in events] == list(FIRST.texts)
    counts = [e["usageMetadata"]["candidatesTokenCount"] for e in events]
    assert counts == sorted(counts)
    assert [finish_of(e) for e in events][-1] == "STOP"


@pytest.mark.timeout(60)
def test_extra_usage_fields_on_the_last_event() -> None:
    extra = {"thoughtsTokenCount": 12, "cachedContentTokenCount": 8}
    reply = run(post, extra_usage=extra)
    events, _ = split_events(reply.raw)
    usage = events[-1]["usageMetadata"]
    assert usage["thoughtsTokenCount"] == 12
    assert usage["cachedContentTokenCount"] == 8
    assert usage["totalTokenCount"] == (
        usage["promptTokenCount"] + usage["candidatesTokenCount"] + 12
    )


@pytest.mark.timeout(60)
def test_slow_drip_read_to_the_end_arrives_in_many_small_pieces() -> None:
    async def scenario(fake: FakeGemini) -> tuple[Reply, dict[str, Any]]:
        reply = await post(fake, "fake-slow-drip")
        await fake.wait_idle()
        return reply, only_entry(fake)

    reply, entry = run(scenario, pacing=Pacing(drip_delay=0.002))
    events, tail = split_events(reply.raw)
    assert tail == b""
    assert [text_of(e) for e in events] == list(FIRST.texts)
    assert reply.fragments > 10 * len(events)
    assert entry["body_completed"] is True
    assert entry["client_disconnected"] is False


@pytest.mark.timeout(60)
def test_slow_drip_closed_early_by_the_client_is_logged_as_disconnected() -> None:
    async def scenario(fake: FakeGemini) -> tuple[bytes, dict[str, Any]]:
        got = b""
        async with (
            httpx.AsyncClient(timeout=10.0) as client,
            client.stream(
                "POST", fake.url("fake-slow-drip"), headers=HEADERS, json=request_body()
            ) as response,
        ):
            assert response.status_code == 200
            async for piece in response.aiter_bytes():
                got += piece
                if len(got) >= 24:
                    break
        await fake.wait_idle()
        return got, only_entry(fake)

    got, entry = run(scenario)
    assert got.startswith(b"data: {")
    assert entry["client_disconnected"] is True
    assert entry["body_completed"] is False
    assert entry["events_sent"] < len(FIRST.texts)
    assert entry["finished"] is True


@pytest.mark.timeout(60)
def test_connection_reset_after_one_event() -> None:
    async def scenario(fake: FakeGemini) -> tuple[bytes, dict[str, Any]]:
        got = b""
        async with httpx.AsyncClient(timeout=10.0) as client:
            with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
                async with client.stream(
                    "POST", fake.url("fake-connection-reset"), headers=HEADERS, json=request_body()
                ) as response:
                    assert response.status_code == 200
                    async for piece in response.aiter_bytes():
                        got += piece
        await fake.wait_idle()
        return got, only_entry(fake)

    got, entry = run(scenario)
    events, tail = split_events(got)
    assert [text_of(e) for e in events] == [FIRST.texts[0]]
    assert tail == b""
    assert entry["server_reset"] is True
    assert entry["body_completed"] is False
    assert entry["events_sent"] == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("headers", "code", "status"),
    [
        ({}, 401, "UNAUTHENTICATED"),
        ({"x-goog-api-key": ""}, 401, "UNAUTHENTICATED"),
        ({"x-goog-api-key": "wrong-key"}, 403, "PERMISSION_DENIED"),
        ({"authorization": f"Bearer {KEY}"}, 401, "UNAUTHENTICATED"),
    ],
)
def test_missing_or_wrong_key_is_refused(headers: dict[str, str], code: int, status: str) -> None:
    async def scenario(fake: FakeGemini) -> tuple[Reply, dict[str, Any]]:
        reply = await post(fake, headers=headers)
        await fake.wait_idle()
        return reply, only_entry(fake)

    reply, entry = run(scenario)
    assert reply.status == code
    assert reply.headers["content-type"] == ERROR_CONTENT_TYPE
    error = reply.json()["error"]
    assert error["code"] == code
    assert error["status"] == status
    assert isinstance(error["message"], str) and error["message"]
    assert entry["status"] == code
    assert entry["error_status"] == status
    assert entry["events_sent"] == 0


@pytest.mark.timeout(60)
def test_key_in_the_query_is_refused_even_with_the_right_header() -> None:
    async def scenario(fake: FakeGemini) -> tuple[Reply, dict[str, Any]]:
        reply = await post(fake, query=f"alt=sse&key={KEY}")
        await fake.wait_idle()
        return reply, only_entry(fake)

    reply, entry = run(scenario)
    assert reply.status == 400
    assert reply.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert entry["query"] == {"alt": "sse", "key": KEY}


@pytest.mark.timeout(60)
def test_google_auth_errors_mode_uses_googles_real_shapes() -> None:
    async def scenario(fake: FakeGemini) -> tuple[Reply, Reply]:
        return await post(fake, headers={}), await post(fake, headers={"x-goog-api-key": "nope"})

    missing, wrong = run(scenario, google_auth_errors=True)
    assert missing.status == 403
    assert missing.json()["error"]["status"] == "PERMISSION_DENIED"
    assert "unregistered callers" in missing.json()["error"]["message"]
    assert wrong.status == 400
    error = wrong.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["details"][0]["reason"] == "API_KEY_INVALID"


@pytest.mark.timeout(60)
def test_a_custom_api_key_is_the_only_one_accepted() -> None:
    async def scenario(fake: FakeGemini) -> tuple[Reply, Reply]:
        good = await post(fake, headers={"x-goog-api-key": "custom"})
        default = await post(fake, headers=HEADERS)
        return good, default

    good, default = run(scenario, api_key="custom")
    assert good.status == 200
    assert default.status == 403


def _drop(*path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(body: dict[str, Any]) -> None:
        target = body
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return mutate


def _set(value: Any, *path: str | int) -> Callable[[dict[str, Any]], None]:
    def mutate(body: dict[str, Any]) -> None:
        target: Any = body
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


INVALID_BODIES: dict[str, Callable[[dict[str, Any]], None]] = {
    "no contents": _drop("contents"),
    "two turns": lambda b: b["contents"].append(copy.deepcopy(b["contents"][0])),
    "model turn": _set("model", "contents", 0, "role"),
    "no user text": _set([{}], "contents", 0, "parts"),
    "no systemInstruction": _drop("systemInstruction"),
    "systemInstruction without text": _set({"parts": []}, "systemInstruction"),
    "no generationConfig": _drop("generationConfig"),
    "text mime type": _set("text/plain", "generationConfig", "responseMimeType"),
    "no schema": _drop("generationConfig", "responseJsonSchema"),
    "schema not an object": _set("Reply", "generationConfig", "responseJsonSchema"),
    "responseSchema as well": _set({"type": "OBJECT"}, "generationConfig", "responseSchema"),
    "no maxOutputTokens": _drop("generationConfig", "maxOutputTokens"),
    "maxOutputTokens a string": _set("1024", "generationConfig", "maxOutputTokens"),
    "maxOutputTokens a bool": _set(True, "generationConfig", "maxOutputTokens"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(INVALID_BODIES))
def test_invalid_request_body_is_400_invalid_argument(name: str) -> None:
    body = request_body()
    INVALID_BODIES[name](body)
    reply = run(lambda fake: post(fake, body=body))
    assert reply.status == 400
    assert reply.json()["error"]["code"] == 400
    assert reply.json()["error"]["status"] == "INVALID_ARGUMENT"


@pytest.mark.timeout(60)
def test_a_body_that_is_not_json_is_400() -> None:
    async def scenario(fake: FakeGemini) -> httpx.Response:
        async with httpx.AsyncClient(timeout=10.0) as client:
            return await client.post(
                fake.url(),
                headers={**HEADERS, "content-type": "application/json"},
                content=b'{"contents": [',
            )

    response = run(scenario)
    assert response.status_code == 400
    assert response.json()["error"]["status"] == "INVALID_ARGUMENT"


@pytest.mark.timeout(60)
def test_routing_unknown_model_missing_alt_and_wrong_method() -> None:
    async def scenario(fake: FakeGemini) -> list[int]:
        codes = [(await post(fake, "gemini-0-unknown")).status, (await post(fake, query="")).status]
        async with httpx.AsyncClient(timeout=10.0) as client:
            codes.append((await client.get(fake.url(), headers=HEADERS)).status_code)
            codes.append((await client.post(f"{fake.base_url}/v1/other", json={})).status_code)
        return codes

    assert run(scenario) == [404, 400, 404, 404]


def test_every_script_name_is_served() -> None:
    assert SCRIPTS[0] == DEFAULT_MODEL
    assert len(set(SCRIPTS)) == len(SCRIPTS)
    assert all(name.startswith("fake-") for name in SCRIPTS[1:])
