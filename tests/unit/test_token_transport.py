"""The consumer's token rule without a connection (consumer/security.py): which targets are
local (``target_locality``, from the target's text alone), a token with a plaintext target
elsewhere refused by ``StreamOptions`` itself before any connection, and the order in which
``--tls`` finds the system's trust store. The token on real connections, on loopback and
across test hosts, is tests/system/test_token_transport_processes.py's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from replywire.consumer.options import StreamOptions
from replywire.consumer.security import (
    GRPC_BUNDLED,
    Security,
    TokenRoute,
    system_roots,
    target_locality,
)
from replywire.shared.errors import ConfigurationError
from tests.hostile_input import TOKEN

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize(
    ("target", "locality"),
    [
        ("127.0.0.1:50051", "loopback"),
        ("127.9.9.9:50051", "loopback"),
        ("localhost:50051", "loopback"),
        ("LocalHost", "loopback"),
        ("[::1]:50051", "loopback"),
        ("[::1]", "loopback"),
        ("::1", "loopback"),  # a bare IPv6 address: gRPC reads no port
        ("dns:///localhost:50051", "loopback"),
        ("dns:localhost:50051", "loopback"),
        ("ipv4:127.0.0.1:1,127.0.0.2:2", "loopback"),
        ("ipv4:///127.0.0.1:1", "loopback"),
        ("ipv6:[::1]:1,[::1]:2", "loopback"),
        ("unix:/run/replywire.sock", "unix"),
        ("unix:///run/replywire.sock", "unix"),
        ("unix-abstract:replywire", "unix"),
        # Every address must be local; a name is local only if it is localhost.
        ("ipv4:127.0.0.1:1,10.0.0.1:2", "remote"),
        ("ipv4:localhost:1", "remote"),  # ipv4: takes addresses, not names
        ("10.77.0.2:50051", "remote"),
        ("0.0.0.0:50051", "remote"),
        ("[::]:50051", "remote"),
        ("[::ffff:127.0.0.1]:50051", "remote"),
        ("example.com:50051", "remote"),
        ("localhost.example.com:50051", "remote"),
        ("dns:///example.com:50051", "remote"),
        ("dns://8.8.8.8/localhost:50051", "remote"),  # its resolver is named: not judged
        ("[::1", "remote"),
        ("vsock:3:50051", "remote"),
        ("xds:///replywire", "remote"),
        ("", "remote"),
    ],
)
def test_which_targets_are_local(target: str, locality: str) -> None:
    assert target_locality(target) == locality


def test_a_token_with_a_plaintext_target_elsewhere_is_refused_before_any_connection() -> None:
    """By the options themselves: an in-process consumer follows the CLI's rule."""
    token = Security(token=TOKEN)
    with pytest.raises(ConfigurationError) as refused:
        StreamOptions(target="10.77.0.2:50051", security=token)
    assert str(refused.value) == (
        "refusing to send the token in clear to 10.77.0.2:50051 (not a loopback address or a "
        "Unix socket): give --tls or --tls-ca, or --insecure"
    )
    with pytest.raises(ConfigurationError, match=re.escape("ipv4:127.0.0.1:1,10.0.0.1:2")):
        StreamOptions(target="ipv4:127.0.0.1:1,10.0.0.1:2", security=token)
    routes = {
        (target, security): StreamOptions(target=target, security=security).security
        for target, security in [
            ("10.77.0.2:50051", Security(token=TOKEN, insecure=True)),
            ("10.77.0.2:50051", Security(token=TOKEN, ca=b"-----BEGIN CERTIFICATE-----")),
            ("10.77.0.2:50051", Security(token=TOKEN, grpc_default_roots=True)),
            ("10.77.0.2:50051", Security()),
            ("127.0.0.1:50051", token),
            ("unix:/run/replywire.sock", token),
        ]
    }
    assert [s.token_route(t) for t, s in routes] == [
        TokenRoute.CLEAR, TokenRoute.TLS, TokenRoute.TLS, TokenRoute.NONE, TokenRoute.LOCAL,
        TokenRoute.LOCAL,
    ]  # fmt: skip
    # Plain metadata only in clear; else the channel's call credentials carry the token.
    assert [s.call_metadata(t) for t, s in routes] == [
        (("authorization", f"Bearer {TOKEN}"),), (), (), (), (), (),
    ]  # fmt: skip
    assert [s.credentials(t) is None for t, s in routes] == [True, False, False, True, False, False]
    assert [s.insecure_warning(t) is None for t, s in routes] == [False, *[True] * 5]
    assert TOKEN not in repr(token)


def test_the_system_trust_store_is_found_in_this_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "grpc.pem", tmp_path / "openssl.pem"
    first.write_bytes(b"-----BEGIN CERTIFICATE-----\nfirst\n")
    second.write_bytes(b"-----BEGIN CERTIFICATE-----\nsecond\n")
    monkeypatch.setenv("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", str(first))
    monkeypatch.setenv("SSL_CERT_FILE", str(second))
    assert system_roots() == (first.read_bytes(), f"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH={first}")
    monkeypatch.delenv("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH")
    assert system_roots() == (second.read_bytes(), f"SSL_CERT_FILE={second}")
    monkeypatch.delenv("SSL_CERT_FILE")
    roots, source = system_roots()  # this machine's bundle, or gRPC's own roots
    assert (roots is None) == (source == GRPC_BUNDLED)
