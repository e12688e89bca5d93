"""A Gemini call's span (``gemini.stream_generate_content``), when tracing is on.

A child of the span current where the call is made (the reply's generation, under the
delivery's ``replywire.serve``). Attributes after OpenTelemetry's generative-AI and HTTP
conventions (``gen_ai.*``, ``server.address``, ``http.response.status_code``) and the
ledger's outcome (``replywire.ledger.*``); the API key is never one of them. Status: OK
for a call whose stream completed with the provider's ``STOP``, else an error whose
description is the outcome (a stream that ended without a finish reason, cut short,
is ``completed (finish never reported)``: an error).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

if TYPE_CHECKING:  # OpenTelemetry is imported only when tracing is on
    from replywire.runtime.otel import Tracing

SPAN_NAME: Final = "gemini.stream_generate_content"
#: The usage counts a span carries, by the conventions' names.
USAGE_ATTRIBUTES: Final = {
    "promptTokenCount": "gen_ai.usage.input_tokens",
    "candidatesTokenCount": "gen_ai.usage.output_tokens",
}


def start_call_span(tracing: Tracing, *, model: str, url: str) -> Any:
    parts = urlsplit(url)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "generate_content",
        "gen_ai.provider.name": "gcp.gemini",
        "gen_ai.system": "gemini",
        "gen_ai.request.model": model,
        "http.request.method": "POST",
        "server.address": parts.hostname or "",
    }
    if parts.port is not None:
        attributes["server.port"] = parts.port
    return tracing.start_child(SPAN_NAME, attributes)


def end_call_span(
    tracing: Tracing,
    call: Any,
    *,
    usage: Mapping[str, object] | None,
    outcome: str,
    finish_reason: str | None,
    sent: bool,
) -> None:
    """End ``call``'s span (``producer.sources.gemini.call_ledger.Call``: its span, what it
    charged)."""
    span, charged_usd = call.span, call.charged
    attributes: dict[str, Any] = {
        "replywire.ledger.outcome": outcome,
        "replywire.request_sent": sent,
    }
    for key, name in USAGE_ATTRIBUTES.items():
        value = (usage or {}).get(key)
        if type(value) is int:
            attributes[name] = value
    if finish_reason:
        attributes["gen_ai.response.finish_reasons"] = (finish_reason[:64],)
    if charged_usd is not None:
        attributes["replywire.ledger.charged_usd"] = charged_usd
    completed = outcome.startswith("completed") and finish_reason == "STOP"
    if not completed:
        attributes["error.type"] = outcome.split(" ", 1)[0]
    tracing.end(span, error=None if completed else outcome, attributes=attributes)
