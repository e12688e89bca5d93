"""How the consumer proves who it is and checks whom it talks to: TLS and a bearer token.

* ``--tls-ca PATH``: the CA that signed the producer's certificate; the channel is
  TLS and the producer's name is checked (``--tls-server-name`` overrides the
  name checked, for tests and for addressing a producer by IP).
* ``--tls-cert`` / ``--tls-key``: a client certificate, for mutual TLS.
* ``--auth-token-file PATH`` (the token alone) or ``REPLYWIRE_AUTH_TOKEN``: sent
  as ``authorization: Bearer TOKEN`` on every call. The token never reaches a log
  record (it is registered as a secret).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import grpc

from runtime.logs import register_secret
from shared.errors import ConfigurationError

TOKEN_ENV: Final = "REPLYWIRE_AUTH_TOKEN"
MAX_TOKEN_CHARS: Final = 512


@dataclass(frozen=True, slots=True, kw_only=True)
class Security:
    """TLS material (PEM bytes) and the token a channel and its calls carry."""

    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None
    server_name: str | None = None
    token: str | None = None

    @property
    def tls(self) -> bool:
        return self.ca is not None

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )

    def channel_options(self) -> list[tuple[str, str]]:
        if self.server_name:
            return [("grpc.ssl_target_name_override", self.server_name)]
        return []

    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()


def _read(path: Path | None, flag: str) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as error:
        raise ConfigurationError(f"cannot read {flag} {path}: {error.strerror}") from error


def load_security(
    *,
    tls_ca: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    tls_server_name: str | None = None,
    auth_token_file: Path | None = None,
) -> Security:
    """Read the files once, before anything runs; a bad combination is a usage error."""
    if (tls_cert is None) != (tls_key is None):
        raise ConfigurationError("--tls-cert and --tls-key go together")
    if tls_ca is None and (tls_cert is not None or tls_server_name is not None):
        raise ConfigurationError("--tls-cert, --tls-key and --tls-server-name need --tls-ca")
    token = _token(auth_token_file)
    return Security(
        ca=_read(tls_ca, "--tls-ca"),
        cert=_read(tls_cert, "--tls-cert"),
        key=_read(tls_key, "--tls-key"),
        server_name=tls_server_name,
        token=token,
    )


def _token(path: Path | None) -> str | None:
    if path is not None:
        raw = _read(path, "--auth-token-file") or b""
        try:
            token = raw.decode("utf-8").strip()
        except UnicodeDecodeError as error:
            raise ConfigurationError("--auth-token-file is not UTF-8") from error
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        return None
    if len(token) > MAX_TOKEN_CHARS or not token.isascii() or not token.isprintable():
        raise ConfigurationError("the auth token must be up to 512 visible ASCII characters")
    register_secret(token)
    return token
