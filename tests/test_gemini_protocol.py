"""The pure parts of the Gemini protocol, without a server: HTTP errors before the stream."""

from __future__ import annotations

import json

import pytest

from producer.gemini.protocol import provider_error
from shared.errors import Reason, RequestRefused

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
