"""Safe to expose: TLS, mutual TLS, bearer tokens, the exposure rule, a consumer that cannot hang.

Real producer processes on loopback with certificates made at test time
(tests/certs.py); real consumer processes. Only what a test started is
signalled; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from replywire.shared.digest import canonical_json
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.recording import Recording
from replywire.shared.requests import (
    MAX_CASE_ID_CHARS,
    MAX_REQUEST_BYTES,
    MAX_STREAM_ID_CHARS,
)
from tests.certs import SERVER_NAME, Pki, make_pki
from tests.hostile_input import TOKEN_A, TOKEN_B, nested_brackets
from tests.processes import ROOT, Producer, producer, run_consumer, wait_for
from tests.runs import until

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tokens") / "tokens"
    path.write_text(f"# callers\nalice {TOKEN_A}\n\nbob {TOKEN_B}\n")
    return path


def test_tokens_let_callers_in_and_keep_others_out(tmp_path: Path, token_file: Path) -> None:
    token_path = tmp_path / "alice.token"
    token_path.write_text(TOKEN_A + "\n")
    wrong_path = tmp_path / "wrong.token"
    wrong_path.write_text("not-a-known-token-000000\n")
    with producer(tmp_path, "--auth-tokens", str(token_file)) as p:
        served = run_consumer(
            p.target, "--case", "replace-file", "--stream-id", "with-token",
            "--auth-token-file", str(token_path),
        )  # fmt: skip
        by_env = _run_with_env(p.target, {"REPLYWIRE_AUTH_TOKEN": TOKEN_B}, "by-env")
        missing = run_consumer(p.target, "--case", "replace-file", "--stream-id", "no-token")
        wrong = run_consumer(
            p.target, "--case", "replace-file", "--stream-id", "wrong-token",
            "--auth-token-file", str(wrong_path),
        )  # fmt: skip
        trace = p.trace()
    assert (served.returncode, served.result["status"]) == (0, "complete")
    assert by_env == (0, "complete")
    for refused in (missing, wrong):
        assert refused.returncode == 7
        assert (refused.result["status"], refused.result["reason"]) == ("refused", "invalid_token")
        assert refused.result["transport"]["grpc_code"] == "UNAUTHENTICATED"
    # Refused before any work: one record with the peer only, and no stream.
    unauthenticated = [r for r in trace if r["event"] == "request_unauthenticated"]
    assert len(unauthenticated) == 2
    for record in unauthenticated:
        assert set(record) == {"event", "peer", "level", "timestamp", "side", "stream_id"}
        assert record["stream_id"] is None
    assert not [r for r in trace if r.get("stream_id") in {"no-token", "wrong-token"}]
    streams = [r for r in trace if r["event"] == "state_changed" and r["to_state"] == "received"]
    assert sorted(r["caller"] for r in streams) == ["alice", "bob"]
    text = p.trace_path.read_text()
    assert TOKEN_A not in text
    assert TOKEN_B not in text


def _run_with_env(target: str, env: dict[str, str], stream_id: str) -> tuple[int, str]:
    done = subprocess.run(
        [
            sys.executable, "-m", "replywire.consumer", "stream", "--target", target,
            "--case", "replace-file", "--stream-id", stream_id, "--log-format", "json",
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, **env},
    )  # fmt: skip
    assert TOKEN_B not in done.stderr
    return done.returncode, json.loads(done.stdout)["status"]


@pytest.fixture(scope="module")
def tls_producer(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("tls")
    args = ("--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key))
    with producer(directory, *args) as p:
        yield p.target


def test_tls_serves_a_consumer_that_trusts_its_ca(tls_producer: str, pki: Pki) -> None:
    for extra in ([], ["--tls-server-name", SERVER_NAME]):
        run = run_consumer(tls_producer, "--case", "replace-file", "--tls-ca", str(pki.ca), *extra)
        assert (run.returncode, run.result["status"]) == (0, "complete"), run.result


@pytest.mark.parametrize("how", ["plaintext", "other-ca", "wrong-name"])
def test_tls_refuses_what_it_cannot_verify(tls_producer: str, pki: Pki, how: str) -> None:
    extra = {
        "plaintext": [],
        "other-ca": ["--tls-ca", str(pki.other_ca)],
        "wrong-name": ["--tls-ca", str(pki.ca), "--tls-server-name", "not.replywire.test"],
    }[how]
    run = run_consumer(tls_producer, "--case", "replace-file", "--deadline-s", "20", *extra)
    assert (run.returncode, run.result["status"], run.result["reason"]) == (
        5,
        "error",
        "transport_io_error",
    )
    assert run.result["accepted_answer"] is None
    assert run.result["transport"]["grpc_code"] == "UNAVAILABLE"


def test_mutual_tls_needs_a_client_certificate(tmp_path: Path, pki: Pki) -> None:
    args = (
        "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
        "--tls-client-ca", str(pki.ca),
    )  # fmt: skip
    with producer(tmp_path, *args) as p:
        without = run_consumer(p.target, "--case", "replace-file", "--tls-ca", str(pki.ca))
        with_cert = run_consumer(
            p.target, "--case", "replace-file", "--tls-ca", str(pki.ca),
            "--tls-cert", str(pki.client_cert), "--tls-key", str(pki.client_key),
        )  # fmt: skip
    assert (without.result["status"], without.result["reason"]) == ("error", "transport_io_error")
    assert (with_cert.returncode, with_cert.result["status"]) == (0, "complete")


@pytest.mark.parametrize(
    "args",
    [
        ["--tls-cert", "x.pem"],
        ["--tls-key", "x.key"],
        ["--tls-server-name", "replywire.test"],
        ["--tls-ca", "/nonexistent/ca.pem"],
        ["--tls-ca", "pyproject.toml"],  # no PEM certificate in it
        ["--auth-token-file", "/nonexistent/token"],
    ],
)
def test_consumer_security_flags_are_checked_before_anything_runs(args: list[str]) -> None:
    run = run_consumer("127.0.0.1:9", "--case", "replace-file", *args, timeout=30)
    assert run.returncode == 2
    assert run.result == {}


def _start(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "replywire.producer", "--port", "0", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--auth-tokens", "TOKENS"],
        ["--tls-cert", "CERT", "--tls-key", "KEY"],
    ],
)
def test_an_exposed_producer_needs_tls_and_tokens(
    args: list[str], pki: Pki, token_file: Path
) -> None:
    files = {"TOKENS": str(token_file), "CERT": str(pki.server_cert), "KEY": str(pki.server_key)}
    done = _start("--host", "0.0.0.0", *[files.get(arg, arg) for arg in args])
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "producer: refusing to listen on 0.0.0.0 (not a loopback address) without TLS and "
        "tokens: give --tls-cert, --tls-key and --auth-tokens, or --insecure"
    ]
    assert "listening on" not in done.stdout


def test_insecure_says_so_at_every_start(tmp_path: Path) -> None:
    with producer(tmp_path, "--host", "0.0.0.0", "--insecure") as p:
        assert p.process.stdout is not None
        records = p.trace()
    warnings = [r for r in records if r["event"] == "producer_insecure"]
    assert [r["detail"] for r in warnings] == [
        "INSECURE: listening on 0.0.0.0 without TLS and tokens: "
        "anyone who reaches the port can use it"
    ]


def test_tls_and_tokens_may_listen_anywhere(tmp_path: Path, pki: Pki, token_file: Path) -> None:
    args = (
        "--host", "0.0.0.0", "--tls-cert", str(pki.server_cert),
        "--tls-key", str(pki.server_key), "--auth-tokens", str(token_file),
    )  # fmt: skip
    with producer(tmp_path, *args) as p:
        records = p.trace()
    listening = [r for r in records if r["event"] == "producer_listening"]
    assert [(r["tls"], r["tokens"]) for r in listening] == [(True, 2)]
    assert not [r for r in records if r["event"] == "producer_insecure"]


METRICS_EVERYWHERE = ("--metrics-port", "0", "--metrics-host", "0.0.0.0")


def _metrics_port(p: Producer) -> int:
    wait_for(lambda: p.logged("metrics_listening"))
    return int(next(r["port"] for r in p.trace() if r["event"] == "metrics_listening"))


def _scrape(url: str, context: ssl.SSLContext | None = None) -> str:
    with urllib.request.urlopen(url, timeout=10, context=context) as response:
        text: str = response.read().decode()
    return text


def test_exposed_metrics_need_tls_or_insecure() -> None:
    done = _start(*METRICS_EVERYWHERE)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "producer: refusing to serve metrics on 0.0.0.0 (not a loopback address) without "
        "TLS: give --tls-cert and --tls-key, or --insecure"
    ]
    assert "listening on" not in done.stdout


def test_insecure_metrics_say_so_at_every_start_and_serve(tmp_path: Path) -> None:
    """The gRPC port stays on loopback: --insecure is only what the metrics port needs."""
    with producer(tmp_path, *METRICS_EVERYWHERE, "--insecure") as p:
        text = _scrape(f"http://127.0.0.1:{_metrics_port(p)}/metrics")
        records = p.trace()
    warning = (
        "INSECURE: serving metrics on 0.0.0.0 without TLS: anyone who reaches the port can "
        "read them"
    )
    assert "replywire_streams_open 0.0" in text
    assert [r["detail"] for r in records if r["event"] == "metrics_insecure"] == [warning]
    assert f"producer: {warning}\n" in p.trace_path.read_text()  # stderr: the trace's file here
    (listening,) = [r for r in records if r["event"] == "metrics_listening"]
    assert (listening["tls"], listening["mutual_tls"]) == (False, False)


def test_metrics_with_the_producer_s_certificate_are_https_only(tmp_path: Path, pki: Pki) -> None:
    """Exposed without --insecure, over TLS; plain HTTP gets nothing; a peer that connects
    and says nothing holds no other scrape (the handshake runs in its own thread)."""
    tls = ("--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key))
    trusting = ssl.create_default_context(cafile=pki.ca)
    with producer(tmp_path, *METRICS_EVERYWHERE, *tls) as p:
        port = _metrics_port(p)
        with socket.create_connection(("127.0.0.1", port)):  # silent: no handshake
            text = _scrape(f"https://127.0.0.1:{port}/metrics", trusting)
        with pytest.raises((OSError, http.client.HTTPException)):
            _scrape(f"http://127.0.0.1:{port}/metrics")
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            _scrape(f"https://127.0.0.1:{port}/metrics", ssl.create_default_context())
        records = p.trace()
    assert "replywire_streams_open 0.0" in text
    (listening,) = [r for r in records if r["event"] == "metrics_listening"]
    assert (listening["tls"], listening["mutual_tls"]) == (True, False)
    assert not [r for r in records if r["event"] == "metrics_insecure"]
    assert "Traceback" not in p.trace_path.read_text()


def test_metrics_with_a_client_ca_need_a_client_certificate(tmp_path: Path, pki: Pki) -> None:
    tls = (
        "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
        "--tls-client-ca", str(pki.ca),
    )  # fmt: skip
    with producer(tmp_path, *METRICS_EVERYWHERE, *tls) as p:
        url = f"https://127.0.0.1:{_metrics_port(p)}/metrics"
        anonymous = ssl.create_default_context(cafile=pki.ca)
        with pytest.raises((OSError, http.client.HTTPException)):
            _scrape(url, anonymous)
        known = ssl.create_default_context(cafile=pki.ca)
        known.load_cert_chain(pki.client_cert, pki.client_key)
        assert "replywire_streams_open 0.0" in _scrape(url, known)


async def _serve_malformed(port_holder: list[int], stop: asyncio.Event) -> None:
    """A server of ReplyStream.Open whose one message does not parse as a Chunk."""

    async def open_stream(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> None:
        await context.write(b"\x0a\xff")  # field 1, length 255, and nothing after it
        await asyncio.sleep(600)

    handler = grpc.method_handlers_generic_handler(
        "replywire.v1.ReplyStream",
        {"Open": grpc.unary_stream_rpc_method_handler(open_stream)},
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port_holder.append(server.add_insecure_port("127.0.0.1:0"))
    await server.start()
    await stop.wait()
    await server.stop(None)


def test_a_message_that_is_not_a_chunk_ends_the_stream_at_once() -> None:
    """Not the deadline (default 300 s; the subprocess is given 60): a named reason."""

    async def run() -> subprocess.CompletedProcess[bytes]:
        ports: list[int] = []
        stop = asyncio.Event()
        server = asyncio.create_task(_serve_malformed(ports, stop))
        await until(lambda: bool(ports) or server.done())
        if not ports:
            await server  # it failed to start: its error
        consumer = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "replywire.consumer", "stream",
            "--target", f"127.0.0.1:{ports[0]}",
            "--case", "replace-file", "--log-format", "json",
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(consumer.communicate(), 60)
        finally:
            stop.set()
            await server
        return subprocess.CompletedProcess([], consumer.returncode or 0, out, err)

    done = asyncio.run(run())
    result = json.loads(done.stdout)
    assert done.returncode == 5
    assert (result["status"], result["reason"]) == ("error", "invalid_transport_message")
    assert result["accepted_answer"] is None


async def _open_raw(target: str, payload: bytes) -> tuple[str, str]:
    """Send ``payload`` as the serialized request of ReplyStream.Open; the final status."""
    async with grpc.aio.insecure_channel(target) as channel:
        open_rpc = channel.unary_stream("/replywire.v1.ReplyStream/Open", None, None)
        call = open_rpc(payload, timeout=30)
        try:
            while await call.read() is not grpc.aio.EOF:  # type: ignore[attr-defined]
                pass
        except grpc.aio.AioRpcError as error:
            return error.code().name, error.details() or ""
    return "OK", ""


def _binding_bytes(recording: Recording, case_id: str = "replace-file") -> bytes:
    return canonical_json(recording.case(case_id).binding)


@pytest.fixture(scope="module")
def plain_producer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Producer]:
    with producer(tmp_path_factory.mktemp("bounded")) as p:
        yield p


def _malformed_requests(recording: Recording) -> dict[str, bytes]:
    binding = _binding_bytes(recording)
    valid = pb.OpenRequest(case_id="replace-file", binding_json=binding, stream_id="ok")
    return {
        "megabyte stream id": pb.OpenRequest(
            case_id="replace-file", binding_json=binding, stream_id="s" * 1_000_000
        ).SerializeToString(),
        "stream id past the edge": pb.OpenRequest(
            case_id="replace-file", stream_id="s" * (MAX_STREAM_ID_CHARS + 1)
        ).SerializeToString(),
        "case id past the edge": pb.OpenRequest(
            case_id="c" * (MAX_CASE_ID_CHARS + 1), stream_id="x"
        ).SerializeToString(),
        "a newline in the stream id": pb.OpenRequest(
            case_id="replace-file", stream_id='x\n{"event":"state_changed"}'
        ).SerializeToString(),
        "invalid UTF-8 in a string field": b"\x0a\x02\xff\xfe",
        "not protobuf": b"\xff\xff\xff\xff",
        "a request over the size bound": pb.OpenRequest(
            case_id="replace-file", binding_json=b" " * (MAX_REQUEST_BYTES + 1)
        ).SerializeToString(),
        "valid (control)": valid.SerializeToString(),
    }


def test_malformed_requests_are_refused_before_anything_is_logged(
    plain_producer: Producer, recording: Recording
) -> None:
    before = plain_producer.trace_path.stat().st_size
    outcomes = {
        name: asyncio.run(_open_raw(plain_producer.target, payload))
        for name, payload in _malformed_requests(recording).items()
    }
    assert outcomes.pop("valid (control)") == ("OK", "")
    assert set(outcomes.values()) == {("INVALID_ARGUMENT", "invalid_request")}
    wait_for(
        lambda: (
            len([r for r in plain_producer.trace() if r["event"] == "request_malformed"])
            >= len(outcomes)
        )
    )
    written = plain_producer.trace_path.read_bytes()[before:].decode()
    # One short record each (peer, why), nothing of the ids: no amplification, no injection.
    assert len(written) < 8_000
    assert "sssssssss" not in written
    assert "ccccccccc" not in written
    records = [json.loads(line) for line in written.splitlines()]
    malformed = [r for r in records if r["event"] == "request_malformed"]
    assert len(malformed) == len(outcomes)
    assert all(r["stream_id"] is None and "case_id" not in r for r in malformed)
    assert not [r for r in records if r.get("to_state") == "failed"]


def test_a_deep_binding_over_grpc_is_a_refusal_not_a_failure(
    plain_producer: Producer,
) -> None:
    deep = ('{"a":' + nested_brackets(976) + "}").encode()
    request = pb.OpenRequest(case_id="replace-file", binding_json=deep, stream_id="deep-binding")
    outcome = asyncio.run(_open_raw(plain_producer.target, request.SerializeToString()))
    assert outcome == ("INVALID_ARGUMENT", "invalid_request")
    wait_for(lambda: bool(plain_producer.states("deep-binding")))
    assert plain_producer.states("deep-binding")[-1] == ("received", "refused")


def test_the_consumer_refuses_a_deep_binding_file(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"a":' + nested_brackets(976) + "}")
    run = run_consumer("127.0.0.1:9", "--case", "replace-file", "--binding", str(path))
    assert run.returncode == 2
    assert run.result == {}


def test_the_consumer_trace_can_go_to_its_own_file(tmp_path: Path) -> None:
    trace = tmp_path / "consumer.jsonl"
    done = subprocess.run(
        [
            sys.executable, "-m", "replywire.consumer", "replay", "--case", "replace-file",
            "--stream-id", "to-file", "--trace-file", str(trace), "--log-format", "console",
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert {r["side"] for r in records} == {"consumer"}
    assert records[-1]["event"] == "stream_finished"
    assert records[-1]["stream_id"] == "to-file"
