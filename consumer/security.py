"""How the consumer proves who it is and checks whom it talks to: TLS and a bearer token.

* ``--tls``: TLS, the producer's certificate checked against the system's trust store
  (``system_roots``); ``--tls-ca PATH`` narrows the trust to that one CA (with or
  without ``--tls``). ``--tls-server-name`` overrides the name checked (default: the
  target's host), with either.
* ``--tls-cert`` / ``--tls-key``: a client certificate, for mutual TLS (with either).
* ``--auth-token-file PATH`` (the token alone) or ``REPLYWIRE_AUTH_TOKEN``: the bearer
  token. It never reaches a log record (it is registered as a secret).

**How the token travels** (``TokenRoute``): as gRPC call credentials
(``grpc.access_token_call_credentials``, ``authorization: Bearer TOKEN``) composed with
the channel's own, which gRPC sends only over a channel secure enough for them:

* a TLS channel (``--tls`` or ``--tls-ca``): anywhere;
* a plaintext channel to a loopback target or a Unix socket (``target_locality``):
  gRPC's local credentials, which check at every connection that the peer really is a
  loopback address or a Unix socket (a ``localhost`` that resolves elsewhere fails to
  connect; the token is never sent);
* a plaintext channel to any other target: refused before any connection (a usage
  error, ``check``), unless ``--insecure``: then the token goes as plain metadata, in
  clear, on every call, and the consumer says so at every start (``insecure_warning``).

The rule is the same for every call of the channel (``Open``, every resume, ``Cancel``)
and for a token from the environment. Without a token nothing changes: a plaintext
channel is plaintext.
"""

from __future__ import annotations

import enum
import ipaddress
import os
import ssl
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final, Literal

import grpc

from replywire.runtime.logs import register_secret
from replywire.shared.errors import ConfigurationError

TOKEN_ENV: Final = "REPLYWIRE_AUTH_TOKEN"
MAX_TOKEN_CHARS: Final = 512
#: gRPC's own variable naming its default roots (a PEM bundle): ``--tls`` honours it first.
GRPC_ROOTS_ENV: Final = "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"
#: OpenSSL's variable naming the system's CA bundle (Python's ssl module honours it too).
OPENSSL_ROOTS_ENV: Final = "SSL_CERT_FILE"
#: Where the system's CA bundle is when no variable names one and OpenSSL's own default
#: file is missing: Debian/Ubuntu/Alpine, Fedora/RHEL, openSUSE, BSD-like.
SYSTEM_BUNDLES: Final = (
    Path("/etc/ssl/certs/ca-certificates.crt"),
    Path("/etc/pki/tls/certs/ca-bundle.crt"),
    Path("/etc/ssl/ca-bundle.pem"),
    Path("/etc/ssl/cert.pem"),
)
GRPC_BUNDLED: Final = "gRPC's bundled roots"
#: The largest CA bundle read (a system bundle is ~200 KiB).
MAX_ROOTS_BYTES: Final = 16 << 20
PEM_CERTIFICATE: Final = b"-----BEGIN CERTIFICATE-----"
#: gRPC target schemes whose addresses are Unix sockets (always local).
UNIX_SCHEMES: Final = frozenset({"unix", "unix-abstract"})
#: gRPC target schemes that list addresses (literals only: no names).
ADDRESS_SCHEMES: Final = frozenset({"ipv4", "ipv6"})

Locality = Literal["unix", "loopback", "remote"]


class TokenRoute(enum.StrEnum):
    """How a channel's calls carry the token."""

    NONE = "none"  # no token
    TLS = "tls"  # call credentials on the TLS channel
    LOCAL = "local"  # call credentials on gRPC's local credentials (loopback or Unix socket)
    CLEAR = "clear"  # plain metadata on a plaintext channel: only with --insecure


@dataclass(frozen=True, slots=True, kw_only=True)
class Security:
    """TLS material (PEM bytes) and the token a channel and its calls carry."""

    #: The roots the producer's certificate is checked against: ``--tls-ca``'s CA, or the
    #: system's bundle (``--tls``). None with ``grpc_default_roots``: gRPC's bundled roots.
    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None
    server_name: str | None = None
    token: str | None = field(default=None, repr=False)
    #: ``--tls`` found no system bundle: TLS with gRPC's default roots.
    grpc_default_roots: bool = False
    #: ``--insecure``: a token may travel in clear to a target that is not local.
    insecure: bool = False
    #: Where the token came from, for messages (never the token itself).
    token_from: str = field(default="", compare=False)
    #: Where the roots came from, for the trace.
    roots_from: str | None = field(default=None, compare=False)

    @property
    def tls(self) -> bool:
        return self.ca is not None or self.grpc_default_roots

    def token_route(self, target: str) -> TokenRoute:
        if self.token is None:
            return TokenRoute.NONE
        if self.tls:
            return TokenRoute.TLS
        if target_locality(target) != "remote":
            return TokenRoute.LOCAL
        return TokenRoute.CLEAR

    def check(self, target: str) -> None:
        """Refuse (before any connection) to send the token in clear without --insecure."""
        if self.token_route(target) is TokenRoute.CLEAR and not self.insecure:
            unset = f", unset {TOKEN_ENV}" if self.token_from == TOKEN_ENV else ""
            raise ConfigurationError(
                f"refusing to send {self._the_token} in clear to {target} (not a loopback "
                f"address or a Unix socket): give --tls or --tls-ca{unset}, or --insecure"
            )

    @property
    def _the_token(self) -> str:
        return f"the token from {self.token_from}" if self.token_from else "the token"

    def insecure_warning(self, target: str) -> str | None:
        """What to say at every start when the token goes in clear (None: it does not)."""
        if self.token_route(target) is not TokenRoute.CLEAR:
            return None
        return (
            f"INSECURE: sending {self._the_token} in clear to {target} (not a loopback "
            "address or a Unix socket): anyone on the path can read it and use it"
        )

    def credentials(self, target: str) -> grpc.ChannelCredentials | None:
        """The channel's credentials, the token's call credentials composed in; None: a
        plaintext channel (no token, or a token in clear: ``call_metadata``)."""
        self.check(target)  # every channel, whoever made these options
        route = self.token_route(target)
        if self.tls:
            channel = grpc.ssl_channel_credentials(
                root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
            )
        elif route is TokenRoute.LOCAL:
            unix = target_locality(target) == "unix"
            kind = grpc.LocalConnectionType.UDS if unix else grpc.LocalConnectionType.LOCAL_TCP
            channel = grpc.local_channel_credentials(kind)
        else:
            return None
        if self.token is None:
            return channel
        return grpc.composite_channel_credentials(
            channel, grpc.access_token_call_credentials(self.token)
        )

    def channel_options(self) -> list[tuple[str, str]]:
        if self.server_name:
            return [("grpc.ssl_target_name_override", self.server_name)]
        return []

    def call_metadata(self, target: str) -> tuple[tuple[str, str], ...]:
        """The token as plain metadata: only when it goes in clear (``--insecure``); else
        the channel's call credentials carry it, and this is empty."""
        if self.token is not None and self.token_route(target) is TokenRoute.CLEAR:
            return (("authorization", f"Bearer {self.token}"),)
        return ()


def target_locality(target: str) -> Locality:
    """Whether every address of a gRPC target is on this host, judged from its text alone
    (no name is looked up):

    * ``unix:`` / ``unix-abstract:``: a Unix socket;
    * ``ipv4:A,B`` / ``ipv6:A,B``: loopback only if every address is a loopback literal;
    * ``dns:NAME``, ``dns:///NAME``, or no scheme (``HOST:PORT``, ``[V6]:PORT``, as gRPC
      reads a target without a known scheme): loopback only for a loopback literal
      (127.0.0.0/8, ``::1``) or the name ``localhost``; any other name is remote,
      whatever it resolves to, and so is a ``dns://SERVER/`` that names its resolver.
    * anything else (``vsock:``, ``xds:``...): remote.
    """
    scheme, colon, rest = target.partition(":")
    if colon and scheme in UNIX_SCHEMES:
        return "unix"
    if colon and scheme in ADDRESS_SCHEMES:
        path = _uri_path(rest)
        if path is None or not all(
            _loopback_host(_host(address), names=False) for address in path.split(",")
        ):
            return "remote"
        return "loopback"
    if colon and scheme == "dns":
        path = _uri_path(rest)
        return "loopback" if path is not None and _loopback_host(_host(path)) else "remote"
    return "loopback" if _loopback_host(_host(target)) else "remote"


def _uri_path(rest: str) -> str | None:
    """A target's addresses after ``SCHEME:``; None when it names an authority."""
    if not rest.startswith("//"):
        return rest
    authority, _, path = rest[2:].partition("/")
    return None if authority else path


def _host(address: str) -> str:
    """The host of ``HOST``, ``HOST:PORT``, ``[V6]`` or ``[V6]:PORT`` (a bare IPv6 address,
    as gRPC reads it, has no port); empty when it cannot be read."""
    if address.startswith("["):
        end = address.find("]")
        after = address[end + 1 :]
        if end < 0 or (after and not after.startswith(":")):
            return ""
        return address[1:end]
    if address.count(":") > 1:
        return address
    return address.partition(":")[0]


def _loopback_host(host: str, *, names: bool = True) -> bool:
    if names and host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _read(path: Path | None, flag: str) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as error:
        raise ConfigurationError(f"cannot read {flag} {path}: {error.strerror}") from error


def _roots(path: Path, what: str) -> bytes:
    """A PEM bundle of CA certificates, read once; a file that holds none is a usage error
    (else every handshake would fail with a less telling message)."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_ROOTS_BYTES + 1)
    except OSError as error:
        raise ConfigurationError(f"cannot read {what} {path}: {error.strerror}") from error
    if len(data) > MAX_ROOTS_BYTES or PEM_CERTIFICATE not in data:
        raise ConfigurationError(f"{what} {path} holds no PEM certificate (or is over 16 MiB)")
    return data


def system_roots() -> tuple[bytes | None, str]:
    """The trust store of ``--tls`` and where it came from, the first found of:
    ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` (gRPC's own variable; read here, so that it counts
    whenever it was set), ``SSL_CERT_FILE`` (OpenSSL's), the system's CA bundle
    (OpenSSL's default file, else ``SYSTEM_BUNDLES``); else None: gRPC's default roots (in
    Python, the copy of Mozilla's roots bundled with grpcio). A variable that names an
    unreadable file, or one without a certificate, is a usage error, never a silent
    fallback."""
    for variable in (GRPC_ROOTS_ENV, OPENSSL_ROOTS_ENV):
        named = os.environ.get(variable, "")
        if named:
            return _roots(Path(named), variable), f"{variable}={named}"
    for bundle in (Path(ssl.get_default_verify_paths().openssl_cafile), *SYSTEM_BUNDLES):
        if bundle.is_file():
            return _roots(bundle, "the system's CA bundle"), str(bundle)
    return None, GRPC_BUNDLED


@dataclass(frozen=True, slots=True, kw_only=True)
class SecurityFlags:
    """The consumer's security flags, as given."""

    tls: bool = False
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_server_name: str | None = None
    auth_token_file: Path | None = None
    insecure: bool = False


def load_security(flags: SecurityFlags) -> Security:
    """Read the files once, before anything runs; a bad combination is a usage error."""
    tls = load_tls(flags)
    token, token_from = _token(flags.auth_token_file)
    return replace(tls, token=token, insecure=flags.insecure, token_from=token_from)


def load_tls(flags: SecurityFlags) -> Security:
    """``load_security`` without the token: the roots, a client certificate for mutual TLS,
    the name checked (what ``replywire health`` and ``services`` take: the producer's health
    and reflection answer without a token)."""
    if (flags.tls_cert is None) != (flags.tls_key is None):
        raise ConfigurationError("--tls-cert and --tls-key go together")
    tls = flags.tls or flags.tls_ca is not None
    if not tls and (flags.tls_cert is not None or flags.tls_server_name is not None):
        raise ConfigurationError(
            "--tls-cert, --tls-key and --tls-server-name need --tls or --tls-ca"
        )
    roots: bytes | None = None
    roots_from: str | None = None
    if flags.tls_ca is not None:
        roots, roots_from = _roots(flags.tls_ca, "--tls-ca"), f"--tls-ca {flags.tls_ca}"
    elif flags.tls:
        roots, roots_from = system_roots()
    return Security(
        ca=roots,
        cert=_read(flags.tls_cert, "--tls-cert"),
        key=_read(flags.tls_key, "--tls-key"),
        server_name=flags.tls_server_name,
        grpc_default_roots=tls and roots is None,
        roots_from=roots_from,
    )


def _token(path: Path | None) -> tuple[str | None, str]:
    """The token and where it came from (``--auth-token-file`` wins over the variable)."""
    if path is not None:
        raw = _read(path, "--auth-token-file") or b""
        try:
            token = raw.decode("utf-8").strip()
        except UnicodeDecodeError as error:
            raise ConfigurationError("--auth-token-file is not UTF-8") from error
        source = "--auth-token-file"
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        source = TOKEN_ENV
    if not token:
        return None, source
    if len(token) > MAX_TOKEN_CHARS or not token.isascii() or not token.isprintable():
        raise ConfigurationError("the auth token must be up to 512 visible ASCII characters")
    register_secret(token)
    return token, source
