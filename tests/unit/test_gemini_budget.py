"""The Gemini source's money rules without processes: a capture scrubs a key split across
reads and at its cut, and only https or loopback base URLs are accepted (so the key never
travels in clear). (tests/system/test_gemini_budget_processes.py runs the hostile provider
against real processes.)"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from replywire.producer.sources.gemini.capture import RunCapture
from replywire.producer.sources.gemini.protocol import request_body
from replywire.producer.sources.gemini.settings import GeminiSettings, check_base_url
from replywire.runtime.logs import register_secret
from replywire.shared.errors import ConfigurationError

pytestmark = pytest.mark.timeout(180)


def test_a_capture_scrubs_a_key_split_across_reads_and_at_the_cut(tmp_path: Path) -> None:
    secret = "capture-unit-secret-0123456789"
    register_secret(secret)
    run = RunCapture(tmp_path / "run", model="m")
    binding = {
        "case_id": "c",
        "request_sha256": "0" * 64,
        "messages": [["human", json.dumps({"context": []})]],
        "selected_context": [],
    }
    body = request_body(binding, max_output_tokens=8)
    call = run.start(binding=binding, body=body)
    half = len(secret) // 2
    call.received(b'data: {"echo": "' + secret[:half].encode())
    call.received(secret[half:].encode() + b'"}\r\n\r\n')
    asyncio.run(call.finish(outcome="x"))
    raw = (tmp_path / "run/requests/request-001.sse").read_bytes()
    assert raw == b'data: {"echo": "[redacted]"}\r\n\r\n'
    record = json.loads((tmp_path / "run/requests/request-001.json").read_text())
    assert record["sse_redacted"] is True
    # A body cut off at the capture bound inside the key: its beginning is not kept either.
    cut = run.start(binding=binding, body=body)
    cut.raw += b"x"
    cut.truncated = True
    cut.raw += secret[:-3].encode()
    asyncio.run(cut.finish(outcome="x"))
    assert (tmp_path / "run/requests/request-002.sse").read_bytes() == b"x[redacted]"


@pytest.mark.parametrize(
    "url",
    [
        "https://generativelanguage.googleapis.com",
        "https://example.com:8443/prefix",
        "http://127.0.0.1:8080",
        "http://127.9.9.9",
        "http://[::1]:9000",
        "http://localhost:1234",
        "http://LOCALHOST",
    ],
)
def test_https_or_loopback_base_urls_are_accepted(url: str) -> None:
    assert check_base_url(url) == url
    assert GeminiSettings(base_url=url).base_url == url


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com",
        "http://10.0.0.1",
        "http://[::2]",
        "http://localhost.example.com",
        "http://127.0.0.1.example.com",
        "ftp://127.0.0.1",
        "generativelanguage.googleapis.com",
        "https://",
        "http://127.0.0.1:notaport",
    ],
)
def test_other_base_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigurationError):
        check_base_url(url)
