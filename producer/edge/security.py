"""Who may reach the producer: TLS credentials, bearer tokens, and the exposure rule.

* **TLS** (``--tls-cert``, ``--tls-key``; mutual TLS with ``--tls-client-ca``):
  grpc's own TLS; the files are read once, at start.
* **Tokens** (``--auth-tokens PATH``): one ``NAME TOKEN`` pair per line (``#``
  comments and blank lines allowed). The name is the caller's identity in the
  trace, the metrics and the ledger. A request carries ``authorization: Bearer
  TOKEN``; it is compared in constant time with every known token (SHA-256 of
  each, ``hmac.compare_digest``), so neither the match nor its position shows
  in the time taken. A missing or wrong token is refused ``UNAUTHENTICATED`` /
  ``invalid_token`` before any work.
* **Exposure**: a producer listening on anything but a loopback address needs
  both TLS and tokens, or an explicit ``--insecure``.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import grpc

from replywire.shared.errors import ConfigurationError

#: The token file's limits: a name is short and plain; a token is long enough to guess at no rate.
NAME_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
TOKEN_PATTERN: Final = re.compile(r"[\x21-\x7e]{16,512}")
MAX_TOKENS: Final = 10_000
MAX_TOKEN_FILE_BYTES: Final = 1 << 20
BEARER: Final = "bearer "
#: The caller's name when the producer checks no tokens (loopback, or --insecure).
ANONYMOUS: Final = "anonymous"
#: The longest ``authorization`` value looked at; longer is refused without hashing it.
MAX_AUTHORIZATION_CHARS: Final = len(BEARER) + 512


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    token_sha256: bytes


class TokenAuthenticator:
    """Maps a request's ``authorization`` metadata to the caller's name, or None."""

    def __init__(self, entries: Sequence[tuple[str, str]]) -> None:
        if not entries:
            raise ConfigurationError("the token file names no caller")
        names = [name for name, _ in entries]
        if len(set(names)) != len(names):
            raise ConfigurationError("the token file names a caller twice")
        digests = [hashlib.sha256(token.encode()).digest() for _, token in entries]
        if len(set(digests)) != len(digests):
            raise ConfigurationError("the token file gives two callers the same token")
        self._entries = tuple(
            _Entry(name, digest) for name, digest in zip(names, digests, strict=True)
        )

    @classmethod
    def from_file(cls, path: Path) -> TokenAuthenticator:
        try:
            data = path.read_bytes()[: MAX_TOKEN_FILE_BYTES + 1]
        except OSError as error:
            raise ConfigurationError(
                f"cannot read --auth-tokens {path}: {error.strerror}"
            ) from error
        if len(data) > MAX_TOKEN_FILE_BYTES:
            raise ConfigurationError(f"--auth-tokens {path} is over {MAX_TOKEN_FILE_BYTES} bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ConfigurationError(f"--auth-tokens {path} is not UTF-8") from error
        return cls(parse_token_lines(text, str(path)))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(entry.name for entry in self._entries)

    def identify(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
        """The caller's name for a request's metadata; None for no or a wrong token."""
        value = _authorization(metadata)
        if value is None or len(value) > MAX_AUTHORIZATION_CHARS:
            return None
        if value[: len(BEARER)].lower() != BEARER:
            return None
        offered = hashlib.sha256(value[len(BEARER) :].strip().encode()).digest()
        found: str | None = None
        for entry in self._entries:  # every entry, whatever matched: no early exit
            if hmac.compare_digest(offered, entry.token_sha256):
                found = entry.name
        return found


def parse_token_lines(text: str, where: str = "the token file") -> list[tuple[str, str]]:
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if (
            len(parts) != 2
            or not NAME_PATTERN.fullmatch(parts[0])
            or not TOKEN_PATTERN.fullmatch(parts[1])
        ):
            # Never echo the line: it may hold a token.
            raise ConfigurationError(
                f"{where}, line {number}: expected 'NAME TOKEN' (a plain name of up to 64 "
                "characters, a token of 16 to 512 visible ASCII characters)"
            )
        entries.append((parts[0], parts[1]))
        if len(entries) > MAX_TOKENS:
            raise ConfigurationError(f"{where}: more than {MAX_TOKENS} tokens")
    return entries


def _authorization(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    values = [value for key, value in metadata or () if key.lower() == "authorization"]
    if len(values) != 1 or not isinstance(values[0], str):
        return None
    return values[0]


def server_credentials(
    cert: Path, key: Path, client_ca: Path | None = None
) -> grpc.ServerCredentials:
    """TLS for the listening port; with ``client_ca``, a client certificate is required."""
    try:
        pair = (key.read_bytes(), cert.read_bytes())
        roots = client_ca.read_bytes() if client_ca else None
    except OSError as error:
        raise ConfigurationError(
            f"cannot read a TLS file: {error.filename}: {error.strerror}"
        ) from error
    return grpc.ssl_server_credentials(
        [pair], root_certificates=roots, require_client_auth=roots is not None
    )


def is_loopback(host: str) -> bool:
    """True for addresses only this host can reach (127.0.0.0/8, ::1, localhost)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
