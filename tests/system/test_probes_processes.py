"""``python -m replywire health`` and ``services`` against real processes: a service the
producer does not know, nothing listening, a peer that is no gRPC server and a target that
is wrong each end in one line and their exit code; a producer that asks for a client
certificate (mutual TLS) answers the probes that give one. (The documented recipe, Check, Watch,
reflection and /metrics: tests/system/test_readme.py::test_operator_recipe.)"""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.certs import SERVER_NAME, make_pki
from tests.processes import ROOT, producer
from tests.redis_server import free_port

pytestmark = pytest.mark.timeout(120)


def replywire(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "replywire", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@contextmanager
def http_server() -> Iterator[str]:
    """A plain HTTP/1.1 server on a free port: a peer that answers, but not in HTTP/2."""
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_service_the_producer_does_not_know_is_service_unknown(tmp_path: Path) -> None:
    with producer(tmp_path) as served:
        unknown = replywire("health", "--target", served.target, "--service", "no.Such")
    assert (unknown.returncode, unknown.stdout, unknown.stderr) == (1, "SERVICE_UNKNOWN\n", "")


@pytest.mark.parametrize("command", ["health", "services"])
def test_no_answer_is_one_line_and_exit_5(command: str) -> None:
    nobody = replywire(command, "--target", f"127.0.0.1:{free_port()}", "--timeout-s", "5")
    assert (nobody.returncode, nobody.stdout) == (5, "")
    assert nobody.stderr.startswith("replywire: no answer from 127.0.0.1:")
    assert nobody.stderr.count("\n") == 1
    with http_server() as target:
        not_grpc = replywire(command, "--target", target, "--timeout-s", "5")
    assert (not_grpc.returncode, not_grpc.stdout) == (5, "")
    assert not_grpc.stderr.startswith(f"replywire: no answer from {target}: ")
    assert not_grpc.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "args",
    [
        ["health", "--target", "localhost:99999"],
        ["services", "--target", "garbage"],
        ["health", "--timeout-s", "0"],
        ["services", "--tls-ca", "/nonexistent/ca.pem"],
        ["health", "--tls-ca", "pyproject.toml"],  # no PEM certificate in it
        ["health", "--tls-ca", "pyproject.toml", "--tls-cert", "x.pem"],  # without its key
        ["services", "--tls-server-name", "replywire.test"],  # without TLS
    ],
)
def test_a_wrong_flag_is_one_line_and_exit_2(args: list[str]) -> None:
    wrong = replywire(*args)
    assert (wrong.returncode, wrong.stdout) == (2, "")
    assert wrong.stderr.count("\n") == 1, wrong.stderr


def test_the_probes_speak_mutual_tls_to_a_producer_that_asks_for_a_client_certificate(
    tmp_path: Path,
) -> None:
    pki = make_pki(tmp_path / "pki")
    served_with = (
        "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
        "--tls-client-ca", str(pki.ca),
    )  # fmt: skip
    trusting = ("--tls-ca", str(pki.ca), "--timeout-s", "5")
    client = ("--tls-cert", str(pki.client_cert), "--tls-key", str(pki.client_key))
    with producer(tmp_path, *served_with) as p:
        health = replywire("health", "--target", p.target, *trusting, *client)
        services = replywire(
            "services", "--target", p.target, *trusting, *client, "--tls-server-name", SERVER_NAME
        )
        no_certificate = replywire("health", "--target", p.target, *trusting)
        plaintext = replywire("health", "--target", p.target, "--timeout-s", "5")
        other_ca = replywire(
            "health", "--target", p.target, "--tls-ca", str(pki.other_ca), *client,
            "--timeout-s", "5",
        )  # fmt: skip
    assert (health.returncode, health.stdout, health.stderr) == (0, "SERVING\n", "")
    assert services.stdout.split() == [
        "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection",
        "replywire.v1.ReplyStream",
    ]  # fmt: skip
    for refused in (no_certificate, plaintext, other_ca):
        assert (refused.returncode, refused.stdout) == (5, ""), refused.stderr
        assert refused.stderr.startswith(f"replywire: no answer from {p.target}: UNAVAILABLE")
        assert refused.stderr.count("\n") == 1
