"""Every wrong input is one true line, as a user meets it (real processes): the consumer's,
the producer's and ``python -m replywire``'s flags each answered by exactly one line on
stderr and exit 2, before anything is written (the result, the trace, the ready file
absent) or connected (a listening socket that counts its accepts sees none). And what is
not a usage error but is still wrong: a peer that is no gRPC server, said once; a closed
pipe, ended quietly."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GONE = "/nonexistent/dir"
TRY = "(try python -m consumer"
#: The longest line a usage error may be (a flag's value is echoed in it, bounded).
MAX_LINE = 400


class CountingListener:
    """A TCP port that accepts and counts connections: a consumer that connects is seen."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepts = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.accepts += 1
            conn.close()

    def close(self) -> None:
        self.stopped.set()
        self.thread.join()
        self.sock.close()


@pytest.fixture(scope="module")
def listener() -> Iterator[CountingListener]:
    counting = CountingListener()
    yield counting
    counting.close()


def run(
    module: str, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def assert_one_line(done: subprocess.CompletedProcess[str], expected: str) -> None:
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr[:2000]
    assert expected in lines[0] and len(lines[0]) <= MAX_LINE, lines[0][:MAX_LINE]
    assert done.returncode == 2
    assert done.stdout == ""


#: The consumer's wrong inputs: argv after ``python -m consumer`` (``{port}``: the counting
#: listener's; ``{tmp}``: the test's folder), and what the one line says.
CONSUMER_CASES = [
    (
        ["stream", "--result", f"{GONE}/r.json"],
        f"--result {GONE}/r.json: cannot be written (no such dir",
    ),
    (["stream", "--result", "{tmp}"], "cannot be written (is a directory)"),
    (["stream", "--trace-file", f"{GONE}/t.jsonl"], f"--trace-file {GONE}/t.jsonl: cannot"),
    (["stream", "--target", "localhost:99999"], "port '99999' is not 1..65535"),
    (["stream", "--target", "127.0.0.1:0"], "port '0' is not 1..65535"),
    (["stream", "--target", "garbage"], "'garbage' has no port: HOST:PORT"),
    (["stream", "--target", "http://127.0.0.1:{port}"], "unknown scheme 'http'"),
    (["stream", "--target", "ipv4:localhost:{port}"], "'localhost' is not an ipv4 address"),
    (["stream", "--target", "ipv4:127.0.0.1:{port},127.0.0.1:70000"], "port '70000' is not"),
    (["stream", "--target", "[::1:{port}"], "an IPv6 address is [ADDRESS]:PORT"),
    (["stream", "--stream-id", "s" * 200], "--stream-id over 128 characters"),
    (["stream", "--stream-id", "s" * 100_000], "--stream-id over 128 characters"),
    (["stream", "--stream-id", "a b"], "--stream-id is not visible ASCII"),
    (["stream", "--stream-id", "é"], "--stream-id is not visible ASCII"),
    (["stream", "--case", "c" * 129], "--case over 128 characters"),
    (["stream", "--case", "replace file"], "--case is not visible ASCII"),
    (["replay", "--case", "replace-file\x1b[2J"], "--case is not visible ASCII"),
    (["stream", "--queue-size", "0"], f"--queue-size: must be at least 1: 0 {TRY} stream --help)"),
    (["stream", "--wire", "bogus"], "argument --wire: invalid choice: 'bogus'"),
    (["stream", "--deadline-s", "inf"], "argument --deadline-s: must be a finite number > 0"),
    (["stream", "--chunks", "x"], "argument --chunks: --chunks takes frame, whole, N or a,b,c"),
    (["stream", "--keepalive-s", "0.5"], "argument --keepalive-s: must be at least 1"),
    (["stream", "--fault", "bogus"], "argument --fault: invalid choice: 'bogus'"),
    (["stream", "--wire", "x" * 100_000], "argument --wire: invalid choice: 'xxx"),
    (["stream", "--bogus"], f"unrecognized arguments: --bogus {TRY} --help)"),
    (["replay", "--result", f"{GONE}/r.json"], "--result /nonexistent/dir/r.json: cannot"),
    (["replay", "--stream-id", "a\tb"], "--stream-id is not visible ASCII"),
    (["replay", "--max-frames", "x"], "argument --max-frames: not a whole number of frames: 'x'"),
    ([], f"the following arguments are required: command {TRY} --help)"),
]


@pytest.mark.parametrize(("argv", "expected"), CONSUMER_CASES)
def test_a_wrong_consumer_input_is_one_line_before_anything(
    argv: list[str], expected: str, tmp_path: Path, listener: CountingListener
) -> None:
    result, trace = tmp_path / "result.json", tmp_path / "trace.jsonl"
    argv = [arg.format(port=listener.port, tmp=tmp_path) for arg in argv]
    given = set(argv)
    extra = [] if not argv or "--case" in given else ["--case", "utf8-write"]
    if argv and argv[0] == "stream" and "--target" not in given:
        extra += ["--target", f"127.0.0.1:{listener.port}"]
    if argv and "--result" not in given:
        extra += ["--result", str(result)]
    if argv and "--trace-file" not in given:
        extra += ["--trace-file", str(trace)]
    before = listener.accepts
    done = run("consumer", *argv, *extra)
    assert_one_line(done, expected)
    assert not result.exists() and not trace.exists()
    assert sorted(tmp_path.iterdir()) == []
    assert listener.accepts == before, "the consumer connected"


#: The producer's wrong inputs: argv, the environment, and what the one line says.
PRODUCER_CASES = [
    (
        ["--port", "99999"],
        {},
        "a port is 0..65535 (0 picks a free one): 99999 (try python -m producer",
    ),
    (["--port", "x"], {}, "argument --port: not a port number: 'x'"),
    (["--metrics-port", "65536"], {}, "argument --metrics-port: a port is 0..65535"),
    (["--max-streams", "0"], {}, "argument --max-streams: must be at least 1: 0"),
    (["--source", "bogus"], {}, "argument --source: invalid choice: 'bogus'"),
    (["--log-level", "loud"], {}, "argument --log-level: invalid choice: 'loud'"),
    (["--shutdown-grace-s", "-1"], {}, "must be a finite number >= 0: -1"),
    ([], {"REPLYWIRE_SOURCE": "bogus"}, "argument --source: invalid choice: 'bogus'"),
    ([], {"REPLYWIRE_MAX_STREAMS": "x" * 50_000}, "--max-streams: not a whole number of streams"),
    (["--trace-file", f"{GONE}/p.jsonl"], {}, "--trace-file /nonexistent/dir/p.jsonl: cannot"),
    (["--ready-file", f"{GONE}/ready"], {}, "--ready-file /nonexistent/dir/ready: cannot"),
    (["--reply-log", "valkey://x"], {}, "valkey"),
    (["--bogus"], {}, "unrecognized arguments: --bogus (try python -m producer --help)"),
    (["--workers", "0"], {}, "argument --workers: must be at least 1: 0"),
    (["--workers", "x"], {}, "argument --workers: not a whole number of workers: 'x'"),
    (["--workers", "65"], {}, "argument --workers: must be at most 64: 65"),
    (["--workers", "2"], {}, "--workers 2 needs a shared reply log, --reply-log redis://"),
    (
        ["--source", "gemini", "--ledger-durability", "replica"],
        {"GEMINI_API_KEY": "AIzaSy-wrong-inputs"},
        "--ledger-durability waits for a Redis ledger's replicas: give --ledger redis://",
    ),
    (
        [
            "--source",
            "gemini",
            "--ledger",
            "redis://127.0.0.1:9/0",
            "--ledger-durability",
            "aof",
            "--ledger-durability-timeout-s",
            "5",
        ],
        {"GEMINI_API_KEY": "AIzaSy-wrong-inputs"},
        "--ledger-durability-timeout-s 5 must be shorter than the ledger timeout "
        "(--ledger-timeout-s 5)",
    ),
    (
        ["--reply-log", "redis://127.0.0.1:9/0", "--conformance", "fixtures/conformance/vectors"],
        {"REPLYWIRE_WORKERS": "3"},
        "--conformance is served by one process, not --workers 3",
    ),
]


@pytest.mark.parametrize(("argv", "env", "expected"), PRODUCER_CASES)
def test_a_wrong_producer_input_is_one_line_before_it_listens(
    argv: list[str], env: dict[str, str], expected: str, tmp_path: Path
) -> None:
    ready, trace = tmp_path / "ready", tmp_path / "producer.jsonl"
    given = set(argv)
    extra = ["--port", "0"] if "--port" not in given else []
    extra += [] if "--ready-file" in given else ["--ready-file", str(ready)]
    extra += [] if "--trace-file" in given else ["--trace-file", str(trace)]
    done = run("producer", *argv, *extra, env=env)
    assert_one_line(done, expected)
    assert sorted(tmp_path.iterdir()) == [], "the producer wrote (or listened and said so)"


REPLYWIRE_CASES = [
    (
        ["trace", "{tmp}/t.jsonl", "--stream", "s", "--out", f"{GONE}/a.html"],
        f"--out {GONE}/a.html: cannot",
    ),
    (["trace", "{tmp}/t.jsonl", "--out", "{tmp}/t.jsonl"], "(is not a directory)"),
    (
        ["trace", "{tmp}/t.jsonl", "--max-marks", "0"],
        "at least 1: 0 (try python -m replywire trace",
    ),
    (["demo", "--log-level", "loud"], "argument --log-level: invalid choice: 'loud'"),
    (["join-traces"], "the following arguments are required: paths"),
]


@pytest.mark.parametrize(("argv", "expected"), REPLYWIRE_CASES)
def test_a_wrong_replywire_input_is_one_line(
    argv: list[str], expected: str, tmp_path: Path
) -> None:
    (tmp_path / "t.jsonl").write_text("")
    done = run("replywire", *(arg.format(tmp=tmp_path) for arg in argv))
    assert_one_line(done, expected)
    assert [path.name for path in tmp_path.iterdir()] == ["t.jsonl"]


def test_help_is_still_argparse_s_whole_help() -> None:
    done = run("consumer", "stream", "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m consumer stream")
    assert "--queue-size" in done.stdout and done.stderr == ""


class _Http1(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def http1_server() -> Iterator[tuple[int, list[int]]]:
    """An HTTP/1 server on a free port, and the connections it took (counted)."""
    taken: list[int] = []

    class Counting(http.server.ThreadingHTTPServer):
        def process_request(self, request: object, client_address: object) -> None:
            taken.append(1)
            super().process_request(request, client_address)  # type: ignore[arg-type]

    server = Counting(("127.0.0.1", 0), _Http1)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], taken
    finally:
        server.shutdown()
        server.server_close()


def test_a_peer_that_is_no_grpc_server_is_said_once_without_resumes(tmp_path: Path) -> None:
    result_path = tmp_path / "result.json"
    with http1_server() as (port, taken):
        done = run(
            "consumer", "stream", "--case", "utf8-write", "--target", f"127.0.0.1:{port}",
            "--resume-attempts", "3", "--result", str(result_path), "--log-format", "json",
        )  # fmt: skip
    assert done.returncode == 5, done.stderr
    result = json.loads(result_path.read_text())
    assert (result["status"], result["reason"]) == ("error", "transport_io_error")
    assert (
        result["transport"]["message"] == "not a gRPC server: the peer answered, but not in HTTP/2"
    )
    assert result["stats"]["reconnects"] == 0
    records = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert not [r for r in records if r["event"] == "stream_resuming"]
    assert taken, "the consumer never reached the HTTP/1 server"


def test_a_closed_pipe_ends_join_traces_quietly_with_its_code(tmp_path: Path) -> None:
    trace = tmp_path / "big.jsonl"
    record = {"side": "consumer", "stream_id": "s", "event": "chunk_applied", "pad": "p" * 200}
    trace.write_text(
        "".join(
            json.dumps({"timestamp": f"2026-01-01T00:00:{i // 1000:02d}.{i % 1000:06d}Z", **record})
            + "\n"
            for i in range(5000)
        )
    )
    command = [sys.executable, "-m", "replywire", "join-traces", str(trace)]
    with subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()  # as `| head -1` does: over 1 MB is still to come
        code = process.wait(timeout=60)
        stderr = process.stderr.read().decode()
    assert json.loads(first)["stream_id"] == "s"
    assert (code, stderr) == (0, "")


def test_a_closed_pipe_keeps_the_consumer_s_own_exit_code() -> None:
    command = [
        sys.executable,
        "-m",
        "consumer",
        "replay",
        "--case",
        "utf8-write",
        "--trace-file",
        "/dev/null",
    ]
    with subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()  # closed before the result is printed
        code = process.wait(timeout=60)
        stderr = process.stderr.read().decode()
    assert (code, stderr) == (0, "")
