"""Gemini's REST streaming protocol as the fake speaks it, with where each fact was found.

What a request asks for (:class:`Turn`), how an answer is spelled (one SSE event, a
Google-style error body, Google's response heads) and the refusal every check raises
(:class:`HttpError`). The facts below are the reason for every byte the fake writes.

Protocol facts, and where they were confirmed
---------------------------------------------
Confirmed (stored public material, looked up with the search tool):

* Endpoint ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse``: the
  Gemini API reference (ai.google.dev/api: "streamGenerateContent uses
  server-sent events"); recorded real traffic in google/adk-go
  ``agent/remoteagent/testdata/TestA2ARemoteAgentStreamingGeminiError.httprr``
  (``POST https://generativelanguage.googleapis.com/v1beta/models/
  gemini-2.5-flash:streamGenerateContent?alt=sse``); googleapis/js-genai
  ``src/_api_client.ts`` ``requestStream`` forces ``alt=sse``. Without ``alt=sse``
  the reply is not SSE (discuss.ai.google.dev thread 2963), so this fake refuses it.
* API key in the ``x-goog-api-key`` header: ai.google.dev/api ("all requests to
  the Gemini API must include an x-goog-api-key header", with a curl example).
* Response ``Content-Type: text/event-stream`` plus ``Content-Disposition:
  attachment``, ``Connection: close``, ``Server: scaffolding on HTTPServer2``,
  ``Vary``/``X-*`` headers: the response heads in the adk-go ``.httprr`` traces.
  (Google answers over HTTP/2; this fake uses HTTP/1.1 ``Transfer-Encoding:
  chunked`` with one chunk per event.)
* Each event is one ``data: <GenerateContentResponse JSON>`` line followed by a
  blank line, terminated ``\\r\\n\\r\\n``: adk-go
  ``TestA2ASingleHopFinalResponse_llm_mid-response_error_response.httprr``
  declares a 2498-byte response; its text with LF line ends is 2476 bytes, and
  the 22 missing bytes are exactly one CR per head line (13 + the blank line)
  plus two per event (4 events), so Google sent CRLF and ``\\r\\n\\r\\n`` after
  each event. js-genai ``processStreamResponse`` splits on ``\\n\\n``, ``\\r\\r``
  and ``\\r\\n\\r\\n``. No ``[DONE]``: the traces end right after the event that
  carries ``finishReason``.
* Event JSON shape and spelling: ``{"candidates": [{"content": {"parts":
  [{"text": ...}],"role": "model"},"finishReason": "STOP","index": 0}],
  "usageMetadata": {...},"modelVersion": ...,"responseId": ...}``, serialised
  with ``": "`` and ``","`` separators and raw UTF-8 (adk-go traces; this fake
  reproduces that spelling). ``modelVersion``/``responseId`` are the same on
  every event of one response.
* ``usageMetadata`` fields promptTokenCount, candidatesTokenCount,
  totalTokenCount, promptTokensDetails, thoughtsTokenCount (adk-go traces),
  cachedContentTokenCount (generativelanguage v1beta ``UsageMetadata`` in the
  Node client docs; LangChain's GenerateContentResponseUsageMetadata).
* FinishReason values STOP, MAX_TOKENS, SAFETY, RECITATION, OTHER, ...
  (ai.google.dev python ``protos.Candidate.FinishReason``); "when streaming the
  Candidate.content will be empty if content filters blocked the output"
  (Vertex AI ``Candidate.FinishReason`` reference), hence the SAFETY event here
  has no ``content``.
* ``generationConfig.responseJsonSchema`` is a JSON Schema object; when it is set
  ``responseMimeType`` must be ``application/json`` and ``responseSchema`` must be
  omitted (Firebase AI ``GenerationConfig`` reference).
* Error bodies ``{"error": {"code", "message", "status", "details"?}}``, pretty
  printed, ``application/json; charset=UTF-8``: 429 RESOURCE_EXHAUSTED with
  details QuotaFailure, Help and ``{"@type":
  "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "26s"}``
  (RooCodeInc/Roo-Code#3883, googleapis/python-genai#2114, which reads the
  delay from the body); 500 INTERNAL; 503 UNAVAILABLE "The model is overloaded.
  Please try again later." (google-gemini/cookbook#425); 400 INVALID_ARGUMENT
  for a malformed request (ai.google.dev troubleshooting table).
* Errors can arrive mid-stream after a 200: vercel/ai#5217 (a raw,
  pretty-printed ``{"error": {"code": 503, ...}}`` after two data events),
  maximhq/bifrost#5262 ("pretty-printed JSON error payload directly into the
  HTTP 200 stream body, outside of SSE framing"), js-genai checks every raw
  chunk for ``{"error": ...}``.

Taken from the brief, NOT confirmed (or contradicted) by what was found:

* ``data: {"error": {...}}`` as an SSE event (``fake-midstream-error``) is what
  proxies emit (e.g. lbjlaq/Antigravity-Manager#2322); the Google form found is
  the un-framed one, served here as ``fake-midstream-error-raw``.
* No ``Retry-After`` header on 429: not contradicted, but no source states it.
* Auth errors: the brief asks for 401 UNAUTHENTICATED (no key) and 403
  PERMISSION_DENIED (wrong key). Real Google answers a missing key with 403
  PERMISSION_DENIED "Method doesn't allow unregistered callers ..." (many
  reports, e.g. googleapis/js-genai#898) and a wrong key with 400
  INVALID_ARGUMENT, details ErrorInfo reason ``API_KEY_INVALID`` (e.g.
  google/timesketch#3703, continuedev/continue#8516). ``google_auth_errors=True``
  (``--google-auth-errors``) serves those real shapes instead.
* A key in the URL (``?key=``) is accepted by Google; this fake answers 400 by
  project policy (the client must send the key only in the header).
* ``usageMetadata`` only on the last event: real Gemini (adk-go traces) sends a
  running ``usageMetadata`` on every event; the final one is authoritative.
  ``fake-running-usage`` serves that form.
"""

from __future__ import annotations

import email.utils
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

EVENT_END = b"\r\n\r\n"
ERROR_CONTENT_TYPE = "application/json; charset=UTF-8"


@dataclass
class Turn:
    """What the validated request asked for."""

    model: str
    system_text: str
    user_text: str
    #: The response schema of a JSON-only request; None for a text request (free text).
    schema: dict[str, Any] | None
    max_output_tokens: int
    #: A chat request's declared tools (their names); none for the others.
    tools: tuple[str, ...] = ()
    response_id: str = field(default_factory=lambda: secrets.token_urlsafe(16)[:22])


class HttpError(Exception):
    """Answer with this status and Google-style error body."""

    def __init__(
        self, code: int, status: str, message: str, details: list[Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message
        self.details = details


def encode_json(obj: Any) -> str:
    """Google's event spelling: ``": "`` and ``","`` separators, raw UTF-8."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ": "))


def sse_event(obj: Any, *, terminated: bool = True) -> bytes:
    """``data: <json>`` plus ``\\r\\n\\r\\n`` (or only ``\\r\\n`` when unterminated)."""
    return b"data: " + encode_json(obj).encode("utf-8") + (EVENT_END if terminated else b"\r\n")


def error_body(code: int, status: str, message: str, details: list[Any] | None = None) -> bytes:
    err: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details is not None:
        err["details"] = details
    return pretty_json({"error": err})


def pretty_json(obj: Any) -> bytes:
    """Google pretty-prints error bodies (two-space indent, trailing newline)."""
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def google_headers() -> list[tuple[str, str]]:
    """The headers of Google's response heads (the adk-go traces), the date today's."""
    return [
        ("Date", email.utils.formatdate(usegmt=True)),
        ("Server", "scaffolding on HTTPServer2"),
        ("Vary", "Origin"),
        ("Vary", "X-Origin"),
        ("Vary", "Referer"),
        ("X-XSS-Protection", "0"),
        ("X-Frame-Options", "SAMEORIGIN"),
        ("X-Content-Type-Options", "nosniff"),
        ("Server-Timing", "gfet4t7; dur=1"),
    ]
