"""What every call of the Gemini source shares, and where the API key may be sent (pure).

The provider's base URL must be ``https://`` (plain ``http://`` only to a loopback
address, e.g. the tests' fake server): the API key travels in a header. A settings
object that names another URL is never made, so the producer does not start with it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from replywire.producer.sources.gemini.protocol import (
    DEFAULT_BASE_URL,
    DEFAULT_MAX_OUTPUT_TOKENS,
    DEFAULT_MODEL,
)
from replywire.shared.errors import ConfigurationError

LOOPBACK_NAMES: Final = frozenset({"localhost"})


def check_base_url(url: str) -> str:
    """The provider's base URL, if the API key may be sent to it: ``https://``, or plain
    ``http://`` to a loopback address (127.0.0.0/8, ::1, localhost). Otherwise a
    ``ConfigurationError`` (the producer does not start). The URL is not echoed."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port  # a malformed port raises here
    except ValueError:
        raise ConfigurationError("--gemini-base-url is not a valid URL") from None
    if parts.scheme not in {"https", "http"} or not host:
        raise ConfigurationError("--gemini-base-url must be an https:// URL")
    if parts.scheme == "http" and not _is_loopback(host):
        raise ConfigurationError(
            "--gemini-base-url must be https:// (plain http:// only to a loopback address:"
            " 127.0.0.0/8, ::1, localhost): the API key travels in a header"
        )
    return url


def _is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True, kw_only=True)
class GeminiSettings:
    """What every call of a source shares (the API key is passed apart: it is a secret)."""

    model: str = DEFAULT_MODEL
    base_url: str = DEFAULT_BASE_URL
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    http_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        check_base_url(self.base_url)
