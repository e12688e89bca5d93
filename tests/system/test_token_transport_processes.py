"""The consumer's token never goes in clear to another host, and ``--tls`` trusts the
system's store (consumer/security.py).

On this machine: which targets are local (``target_locality``); a token with a
plaintext target elsewhere is refused by ``StreamOptions`` itself, before any
connection; a token to a local target (TCP loopback by address or ``localhost``, a
multi-address target, a Unix socket) arrives as gRPC call credentials; on a real
producer on loopback with tokens every call carries it (a resume, a ``Cancel``); a
trust store named by a variable is checked at start.

Across test hosts (tests/netns.py: root only, skipped elsewhere with the reason; under CI
they must run; select them with ``-m cross_host``), a producer on one, the consumer on
another, over real addresses:

* A producer on a host's LAN address, started with ``--insecure`` and tokens (so it
  would accept a token in clear). The consumer with a token (a file, or only
  ``REPLYWIRE_AUTH_TOKEN`` in its environment) and a plaintext target refuses at start:
  exit 2, one line; its host opened no TCP connection, the producer's host accepted
  none and its trace has no request. With ``--insecure`` it is served as the token's
  caller, and stderr says the token went in clear; every call carries it (a resume, a
  ``Cancel``).
* The producer with TLS (a certificate from a test CA) and tokens, no ``--insecure``.
  The test CA is installed as a system root for the consumer's process (a copy of the
  system's bundle with it added, named by ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``, or by
  ``SSL_CERT_FILE``): ``--tls`` alone connects, and the token goes as call credentials on
  every call. Without the CA installed, with a wrong ``--tls-server-name``, or with
  ``--tls-ca`` narrowing the trust to another CA, the handshake is refused with the reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from replywire.children import stop_process
from replywire.consumer.client import stream_reply
from replywire.consumer.options import StreamOptions
from replywire.consumer.security import (
    Security,
)
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan
from tests.certs import SERVER_NAME, Pki, make_pki
from tests.hostile_input import TOKEN
from tests.netns import Host, hosts
from tests.processes import ROOT, Producer, consumer_command, producer, wait_for

pytestmark = pytest.mark.timeout(240)


#: The tests on test hosts.
CROSS_HOST = pytest.mark.cross_host


CASE = "replace-file"


#: Variables of this machine that would decide what the consumer's process trusts or
#: which token it sends: every run here says what it means instead.
DROPPED = ("REPLYWIRE_AUTH_TOKEN", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "SSL_CERT_FILE")


#: The system's CA bundle the test CA is added to (if this machine has one).
SYSTEM_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    result: dict[str, Any] = field(default_factory=dict)
    trace: list[dict[str, Any]] = field(default_factory=list)

    @property
    def lines(self) -> list[str]:
        """What stderr says that is not a trace record."""
        return [line for line in self.stderr.splitlines() if not line.startswith("{")]

    def events(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.trace if r["event"] == name]


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DROPPED}
    return {**env, **extra}


def consume(host: Host | None, target: str, *args: str, env: dict[str, str] | None = None) -> Run:
    """``python -m consumer stream --case replace-file ARGS`` on ``host`` (None: this
    machine), to its end."""
    done = subprocess.run(
        [*on(host), *consumer_command(target, "--case", CASE, *args)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env=env if env is not None else environment(),
    )  # fmt: skip
    result = json.loads(done.stdout) if done.stdout.strip() else {}
    trace = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    return Run(done.returncode, done.stdout, done.stderr, result, trace)


def on(host: Host | None) -> tuple[str, ...]:
    return () if host is None else host.prefix


def tcp_opens(host: Host) -> tuple[int, int]:
    """The host's TCP connections opened so far (``ActiveOpens``: it connected;
    ``PassiveOpens``: it accepted), from its namespace's own counters."""
    done = subprocess.run(
        host.command("cat", "/proc/net/snmp"), capture_output=True, text=True, timeout=10,
        check=True,
    )  # fmt: skip
    names, values = [
        line.split()[1:] for line in done.stdout.splitlines() if line.startswith("Tcp:")
    ]
    counters = dict(zip(names, values, strict=True))
    return int(counters["ActiveOpens"]), int(counters["PassiveOpens"])


@pytest.fixture(scope="module")
def token_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The producer's token file (alice) and the consumer's (her token alone)."""
    directory = tmp_path_factory.mktemp("tokens")
    (directory / "tokens").write_text(f"alice {TOKEN}\n")
    (directory / "alice.token").write_text(TOKEN + "\n")
    return directory / "tokens", directory / "alice.token"


@contextmanager
def producer_on(
    tmp_path: Path, host: Host, *args: str, name: str = "producer"
) -> Iterator[Producer]:
    with producer(
        tmp_path, "--host", host.address, "--allow-faults", "--log-level", "debug", *args,
        name=name,
        prefix=host.prefix,
    ) as running:  # fmt: skip
        yield running


def requests_seen(running: Producer) -> list[dict[str, Any]]:
    """Every trace record the producer wrote about a request (authenticated or not)."""
    return [r for r in running.trace() if r.get("stream_id") or "peer" in r or "caller" in r]


def callers(running: Producer, stream_id: str) -> list[str]:
    """The caller of each delivery of the stream (its ``received`` record)."""
    return [
        r["caller"]
        for r in running.stream_trace(stream_id)
        if r["event"] == "state_changed" and r["to_state"] == "received"
    ]


async def _serve_refusing(addresses: list[str], seen: list[str | None]) -> grpc.aio.Server:
    """A stand-in producer that records each Open's ``authorization`` and refuses it."""

    async def open_stream(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> None:
        seen.append(dict(context.invocation_metadata() or ()).get("authorization"))
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "invalid_token")

    handler = grpc.method_handlers_generic_handler(
        "replywire.v1.ReplyStream", {"Open": grpc.unary_stream_rpc_method_handler(open_stream)}
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    ports = [server.add_insecure_port(address) for address in addresses]
    addresses[:] = [str(port) for port in ports]
    await server.start()
    return server


@pytest.mark.parametrize(
    "target",
    [
        "127.0.0.1:{port}",
        "localhost:{port}",
        "[::1]:{port}",
        "dns:///localhost:{port}",
        "ipv4:127.0.0.1:{port},127.0.0.2:{port}",
        "unix:{socket}",
        "unix-abstract:{abstract}",
    ],
)
def test_a_token_reaches_a_local_target_as_call_credentials(
    tmp_path: Path, recording: Recording, target: str
) -> None:
    socket, abstract = tmp_path / "producer.sock", f"replywire-{secrets.token_hex(6)}"

    async def run() -> tuple[str, list[str | None]]:
        seen: list[str | None] = []
        addresses = ["[::]:0", f"unix:{socket}", f"unix-abstract:{abstract}"]
        server = await _serve_refusing(addresses, seen)
        try:
            where = target.format(port=addresses[0], socket=socket, abstract=abstract)
            options = StreamOptions(target=where, deadline_s=20, security=Security(token=TOKEN))
            case = recording.case(CASE)
            request = ReplyRequest(
                case_id=CASE, binding=case.binding, wire=WireFormat.LENGTH_PREFIXED,
                plan=ChunkPlan.parse("frame"), stream_id="local",
            )  # fmt: skip
            result = await stream_reply(request, options)
        finally:
            await server.stop(None)
        return str(result.reason), seen

    reason, seen = asyncio.run(run())
    assert (reason, seen) == ("invalid_token", [f"Bearer {TOKEN}"])


def test_on_loopback_every_call_carries_the_token(
    tmp_path: Path, token_files: tuple[Path, Path]
) -> None:
    """gRPC's local credentials carry it (the token file and the variable alike)."""
    tokens, alice = token_files
    args = ("--allow-faults", "--log-level", "debug", "--auth-tokens", str(tokens))
    with producer(tmp_path, *args) as p:
        every_call_carries_the_token(tmp_path, p, None, p.target, ("--auth-token-file", str(alice)))
    with producer(tmp_path, *args, name="second") as p:
        every_call_carries_the_token(
            tmp_path, p, None, p.target, (), environment(REPLYWIRE_AUTH_TOKEN=TOKEN)
        )


MISSING = "cannot read {v} {path}: No such file or directory"


NOT_PEM = "{v} {path} holds no PEM certificate (or is over 16 MiB)"


@pytest.mark.parametrize(
    ("variable", "contents", "message"),
    [
        ("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", None, MISSING),
        ("SSL_CERT_FILE", None, MISSING),
        ("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", b"not a PEM", NOT_PEM),
    ],
)
def test_a_trust_store_named_by_a_variable_is_checked_at_start(
    tmp_path: Path, variable: str, contents: bytes | None, message: str
) -> None:
    """Never a silent fallback to other roots: a usage error, before any connection."""
    named = tmp_path / "roots.pem"
    if contents is not None:
        named.write_bytes(contents)
    run = consume(None, "127.0.0.1:9", "--tls", env=environment(**{variable: str(named)}))
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr.splitlines() == ["consumer: " + message.format(v=variable, path=named)]


@CROSS_HOST
def test_a_token_never_goes_in_clear_to_another_host_unless_insecure(
    tmp_path: Path, token_files: tuple[Path, Path]
) -> None:
    tokens, alice = token_files
    with hosts("producer", "consumer") as lan:
        server_host, client_host = lan["producer"], lan["consumer"]
        with producer_on(tmp_path, server_host, "--insecure", "--auth-tokens", str(tokens)) as p:
            target = f"{server_host.address}:{p.port}"
            before = tcp_opens(client_host), tcp_opens(server_host)
            by_file = consume(client_host, target, "--auth-token-file", str(alice))
            by_env = consume(
                client_host, target, "--stream-id", "by-env",
                env=environment(REPLYWIRE_AUTH_TOKEN=TOKEN),
            )  # fmt: skip
            after = tcp_opens(client_host), tcp_opens(server_host)
            refused_seen = requests_seen(p)
            served = consume(
                client_host, target, "--auth-token-file", str(alice), "--insecure",
                "--stream-id", "in-clear",
            )  # fmt: skip
            served_env = consume(
                client_host, target, "--insecure", "--stream-id", "in-clear-env",
                env=environment(REPLYWIRE_AUTH_TOKEN=TOKEN),
            )  # fmt: skip
            without_token = consume(client_host, target, "--stream-id", "no-token")
            wait_for(lambda: bool(callers(p, "in-clear-env")))
            in_clear = tcp_opens(client_host), tcp_opens(server_host)
            served_callers = [callers(p, s) for s in ("in-clear", "in-clear-env")]
            trace_text = p.trace_path.read_text()
    # Refused at start, in one line that says why and what to do; nothing left the host.
    for run, source, unset in (
        (by_file, "--auth-token-file", ""),
        (by_env, "REPLYWIRE_AUTH_TOKEN", ", unset REPLYWIRE_AUTH_TOKEN"),
    ):
        assert (run.returncode, run.stdout) == (2, "")
        assert run.stderr.splitlines() == [
            f"consumer: refusing to send the token from {source} in clear to {target} (not a "
            f"loopback address or a Unix socket): give --tls or --tls-ca{unset}, or --insecure"
        ]
    assert after == before, "a refused consumer opened a TCP connection"
    assert refused_seen == []
    print(f"TCP opens (consumer host active, producer host passive) before/after the refusals: "
          f"{before[0][0]}/{before[1][1]} -> {after[0][0]}/{after[1][1]}; after the "
          f"--insecure runs: {in_clear[0][0]}/{in_clear[1][1]}")  # fmt: skip
    # With --insecure: served as alice, and said on stderr and in the trace, every start.
    for run, source in ((served, "--auth-token-file"), (served_env, "REPLYWIRE_AUTH_TOKEN")):
        assert (run.returncode, run.result["status"]) == (0, "complete"), run.stderr
        warning = (
            f"INSECURE: sending the token from {source} in clear to {target} (not a loopback "
            "address or a Unix socket): anyone on the path can read it and use it"
        )
        assert run.lines == [f"consumer: {warning}"]
        assert [r["detail"] for r in run.events("consumer_insecure")] == [warning]
        assert TOKEN not in run.stderr
    assert served_callers == [["alice"], ["alice"]]
    assert in_clear[0][0] > after[0][0] and in_clear[1][1] > after[1][1]
    # No token, no rule: plaintext as before (this producer checks tokens: refused by it).
    assert (without_token.returncode, without_token.result["reason"]) == (7, "invalid_token")
    assert without_token.lines == []
    assert TOKEN not in trace_text


@CROSS_HOST
def test_under_insecure_every_call_carries_the_token_a_resume_and_a_cancel(
    tmp_path: Path, token_files: tuple[Path, Path]
) -> None:
    tokens, alice = token_files
    with hosts("producer", "consumer") as lan:
        server_host, client_host = lan["producer"], lan["consumer"]
        with producer_on(tmp_path, server_host, "--insecure", "--auth-tokens", str(tokens)) as p:
            target = f"{server_host.address}:{p.port}"
            flags = ("--auth-token-file", str(alice), "--insecure")
            every_call_carries_the_token(tmp_path, p, client_host, target, flags)


def every_call_carries_the_token(
    tmp_path: Path,
    p: Producer,
    host: Host | None,
    target: str,
    flags: tuple[str, ...],
    env: dict[str, str] | None = None,
) -> None:
    """A resume (the first delivery aborted by the producer) and a ``Cancel`` (Ctrl-C
    mid-stream): the producer knows the caller at every call, and refuses none."""
    resumed = consume(
        host, target, *flags, "--fault", "transport-abort", "--stream-id", "resumed",
        "--resume-backoff-s", "0.05", env=env,
    )  # fmt: skip
    assert (resumed.returncode, resumed.result["status"]) == (0, "complete"), resumed.stderr
    assert resumed.result["stats"]["reconnects"] == 1
    wait_for(lambda: len(callers(p, "resumed")) == 2)
    stopped = stop_with_ctrl_c(tmp_path, p, host, target, flags, env)
    assert (stopped.returncode, stopped.result["reason"]) == (3, "consumer_cancelled")
    # Answered (a recorded reply has no generation to stop): not cancel_unconfirmed.
    assert len(stopped.events("cancel_sent")) == 1, stopped.stderr
    assert not stopped.events("cancel_unconfirmed")
    wait_for(lambda: p.logged("stream_cancel_requested"))
    records = p.trace()
    assert callers(p, "resumed") == ["alice", "alice"]
    cancels = [r for r in records if r["event"] == "stream_cancel_requested"]
    assert [(r["stream_id"], r["caller"]) for r in cancels] == [("stopped", "alice")]
    assert not [r for r in records if r["event"] == "request_unauthenticated"]


def stop_with_ctrl_c(
    tmp_path: Path,
    p: Producer,
    host: Host | None,
    target: str,
    flags: tuple[str, ...],
    env: dict[str, str] | None,
) -> Run:
    """A slow stream, interrupted once its first chunk was sent: the consumer sends Cancel."""
    out, err = tmp_path / "stopped.out", tmp_path / "stopped.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(
            [*on(host), *consumer_command(
                target, "--case", CASE, *flags, "--stream-id", "stopped",
                "--chunk-interval-ms", "500",
            )],
            cwd=ROOT, stdout=stdout, stderr=stderr, text=True,
            env=env if env is not None else environment(),
        )  # fmt: skip
        try:
            wait_for(
                lambda: any(r["event"] == "chunk_sent" for r in p.stream_trace("stopped")),
                timeout=30,
            )
            process.send_signal(signal.SIGINT)
            code = process.wait(timeout=30)
        finally:
            stop_process(process, signal.SIGKILL)
    text = err.read_text()
    trace = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    result = json.loads(out.read_text()) if out.read_text().strip() else {}
    return Run(code, out.read_text(), text, result, trace)


def installed(ca: Path, directory: Path) -> Path:
    """The system's CA bundle with ``ca`` added: the test CA installed as a system root."""
    system = SYSTEM_BUNDLE.read_bytes() if SYSTEM_BUNDLE.is_file() else b""
    bundle = directory / "system-roots-with-test-ca.pem"
    bundle.write_bytes(system + b"\n" + ca.read_bytes())
    return bundle


def not_installed(pki: Pki, directory: Path) -> Path:
    """The system's bundle as it is (another CA alone where this machine has none)."""
    if SYSTEM_BUNDLE.is_file():
        return SYSTEM_BUNDLE
    bundle = directory / "system-roots.pem"
    bundle.write_bytes(pki.other_ca.read_bytes())
    return bundle


@CROSS_HOST
def test_tls_alone_trusts_the_system_store_and_refuses_what_it_cannot_verify(
    tmp_path: Path, token_files: tuple[Path, Path]
) -> None:
    tokens, alice = token_files
    token = ("--auth-token-file", str(alice))
    with hosts("producer", "consumer") as lan:
        server_host, client_host = lan["producer"], lan["consumer"]
        pki = make_pki(tmp_path / "pki", server_ips=[server_host.address])
        roots = installed(pki.ca, tmp_path)
        by_grpc = environment(GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=str(roots))
        by_openssl = environment(SSL_CERT_FILE=str(roots))
        without = environment(GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=str(not_installed(pki, tmp_path)))
        tls = ("--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key))
        # TLS and tokens: this producer needs no --insecure on its LAN address.
        with producer_on(tmp_path, server_host, *tls, "--auth-tokens", str(tokens)) as p:
            target = f"{server_host.address}:{p.port}"
            served = {
                "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": consume(
                    client_host, target, "--tls", *token, "--stream-id", "tls-grpc", env=by_grpc
                ),
                "SSL_CERT_FILE": consume(
                    client_host, target, "--tls", *token, "--stream-id", "tls-openssl",
                    env=by_openssl,
                ),
                "--tls-server-name": consume(
                    client_host, target, "--tls", "--tls-server-name", SERVER_NAME, *token,
                    "--stream-id", "tls-name", env=by_grpc,
                ),
                "--tls-ca alone": consume(
                    client_host, target, "--tls-ca", str(pki.ca), *token,
                    "--stream-id", "tls-ca", env=without,
                ),
            }  # fmt: skip
            refused = {
                "the CA not installed": consume(client_host, target, "--tls", *token, env=without),
                "a wrong server name": consume(
                    client_host, target, "--tls", "--tls-server-name", "wrong.replywire.test",
                    *token, env=by_grpc,
                ),
                "--tls-ca narrowing to another CA": consume(
                    client_host, target, "--tls", "--tls-ca", str(pki.other_ca), *token,
                    env=by_grpc,
                ),
            }  # fmt: skip
            wait_for(lambda: all(callers(p, s) for s in ("tls-grpc", "tls-openssl", "tls-name")))
            served_callers = {
                s: callers(p, s) for s in ("tls-grpc", "tls-openssl", "tls-name", "tls-ca")
            }
            every_call_carries_the_token(
                tmp_path, p, client_host, target, ("--tls", *token), by_grpc
            )
            trace_text = p.trace_path.read_text()
    for how, run in served.items():
        assert (run.returncode, run.result["status"]) == (0, "complete"), (how, run.stderr)
        assert run.lines == [], how  # nothing insecure to say
    assert [[r["roots"] for r in run.events("tls_roots")] for run in served.values()] == [
        [f"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH={roots}"], [f"SSL_CERT_FILE={roots}"],
        [f"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH={roots}"], [f"--tls-ca {pki.ca}"],
    ]  # fmt: skip
    assert set(map(tuple, served_callers.values())) == {("alice",)}
    for how, run in refused.items():
        details = run.result["transport"]["grpc_details"]
        print(f"{how}: {run.result['status']} / {run.result['reason']}: {details}")
        assert (run.returncode, run.result["status"], run.result["reason"]) == (
            5, "error", "transport_io_error",
        ), how  # fmt: skip
        assert run.result["accepted_answer"] is None
        assert run.result["transport"]["grpc_code"] == "UNAVAILABLE"
    # The reason, in gRPC's words (the pinned grpcio's), kept in the result document.
    reasons = {how: run.result["transport"]["grpc_details"] for how, run in refused.items()}
    assert "Hostname Verification Check failed" in reasons.pop("a wrong server name")
    assert all("CERTIFICATE_VERIFY_FAILED" in reason for reason in reasons.values())
    assert TOKEN not in trace_text
