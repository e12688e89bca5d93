"""``--ledger`` and ``--reply-log`` URLs: one parser, the accepted schemes in any case, every
other ``scheme://`` a usage error, and a URL's password nowhere: not in a message, a trace
record or a file name.

In-process for the parser; real ``python -m producer`` processes for the flags (each in a
working directory of its own, searched afterwards for the password), and a private Redis
server (tests/redis_server.py) for URLs that must work.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.gemini_runs import API_KEY
from tests.hostile_input import ACCEPTED, PASSWORD, QUOTED
from tests.processes import fake_gemini, producer, run_consumer
from tests.redis_server import redis_server

pytestmark = pytest.mark.timeout(180)


def start(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m producer`` in ``cwd``, its trace in ``cwd/trace.jsonl``; bounded."""
    return subprocess.run(
        [sys.executable, "-m", "replywire.producer", "--port", "0", "--log-format", "json",
         "--trace-file", str(cwd / "trace.jsonl"), *args],
        cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "GEMINI_API_KEY": API_KEY},
    )  # fmt: skip


def assert_nowhere(password: str, cwd: Path, *texts: str) -> None:
    """Not in ``texts`` (stderr, stdout), not in any file name or file under ``cwd``."""
    for text in texts:
        assert password not in text
    for path in cwd.rglob("*"):
        assert password not in path.name
        if path.is_file():
            assert password.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("password", ["pw", PASSWORD], ids=["short", "long"])
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--source", "gemini", "--ledger", "valkey://:{}@h/0"],
            "producer: --ledger 'valkey://h/0': valkey:// is not a scheme this producer "
            f"speaks; {ACCEPTED}",
        ),
        (
            # Accepted as Redis (a scheme in upper case), and nothing answers there.
            ["--source", "gemini", "--ledger", "REDIS://:{}@127.0.0.1:1/0"],
            "producer: --ledger redis://127.0.0.1:1/0: cannot read the ledger "
            "redis://127.0.0.1:1/0: ConnectionError: ",
        ),
        (
            ["--reply-log", "Redis://:{}@127.0.0.1:1/0"],
            "producer: cannot use --reply-log redis://127.0.0.1:1/0: ",
        ),
        (
            ["--reply-log", "valkey://:{}@h/0"],
            "producer: --reply-log 'valkey://h/0': valkey:// is not a scheme this producer "
            "speaks; give redis://, rediss://, unix://, redis+cluster://, rediss+cluster:// "
            "or memory (the scheme in any case)",
        ),
    ],
    ids=["ledger-unknown", "ledger-upper-case", "reply-log-mixed-case", "reply-log-unknown"],
)
def test_a_store_flag_that_cannot_be_used_is_one_line_exit_2_and_no_password(
    tmp_path: Path, args: list[str], message: str, password: str
) -> None:
    quoted = password.replace("@", "%40")
    done = start(tmp_path, *[arg.format(quoted) for arg in args])
    assert done.returncode == 2
    assert done.stderr.startswith(message), done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert "listening on" not in done.stdout
    # Nothing made in the working directory but the (empty) trace file, if even that.
    assert {path.name for path in tmp_path.rglob("*")} <= {"trace.jsonl"}
    for form in {password, quoted}:
        assert_nowhere(form, tmp_path, done.stderr, done.stdout)


def test_help_shows_a_store_default_from_the_environment_without_its_password() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "replywire.producer", "--help"],
        capture_output=True, text=True, timeout=60, check=True,
        env={
            **os.environ,
            "REPLYWIRE_LEDGER": f"Redis://:{QUOTED}@h/0",
            "REPLYWIRE_REPLY_LOG": f"unix://:{QUOTED}@/run/a%20b.sock?db=0",
        },
    )  # fmt: skip
    text = " ".join(done.stdout.split())
    assert "(default: Redis://h/0)" in text
    assert "(default: unix:///run/a%20b.sock?db=0)" in text
    for form in (PASSWORD, QUOTED):
        assert form not in done.stdout + done.stderr


@pytest.mark.parametrize("how", ["Redis-tcp", "unix-socket"])
def test_a_mixed_case_or_unix_url_to_a_real_server_serves_both_flags(
    tmp_path: Path, how: str
) -> None:
    """The ledger and the reply log in one private Redis: a live (fake) Gemini reply is
    reserved and settled in the ledger, logged in the reply log, and the trace names the
    server without its password."""
    with redis_server(password=PASSWORD) as server, fake_gemini(API_KEY) as fake:
        address = f"127.0.0.1:{server.port}/0"
        url, shown = f"Redis://:{QUOTED}@{address}", f"redis://{address}"
        if how == "unix-socket":
            url, shown = f"unix://:{QUOTED}@{server.socket}?db=0", f"unix://{server.socket}?db=0"
        args = (
            "--source", "gemini", "--gemini-base-url", fake.base_url, "--budget-usd", "1.0",
            "--ledger", url, "--reply-log", url,
        )  # fmt: skip
        with producer(tmp_path, *args, env={"GEMINI_API_KEY": API_KEY}) as p:
            run = run_consumer(p.target, "--case", "replace-file", "--stream-id", "stored")
            records = p.trace()
        client = redis.Redis.from_url(server.local_url)
        try:
            ledger_calls = int(client.get("replywire:ledger:seq") or 0)
            logged = client.exists("replywire:replies:{anonymous/stored}:log")
        finally:
            client.close()
    assert run.returncode == 0, run.result
    assert (ledger_calls, logged) == (1, 1)
    (listening,) = [r for r in records if r["event"] == "producer_listening"]
    assert (listening["ledger"], listening["reply_log"]) == (shown, shown)
    assert any(r["event"] == "budget_settled" for r in records)
    assert_nowhere(PASSWORD, tmp_path)
    assert_nowhere(QUOTED, tmp_path)


@pytest.mark.parametrize("flag", ["--reply-log", "--ledger"])
def test_a_redis_cluster_node_is_refused_at_start_in_one_line(tmp_path: Path, flag: str) -> None:
    """A Redis Cluster node named as a lone server answers PING, then redirects (MOVED) the
    store's keys: refused at start, in one line naming the flag and the cluster's scheme,
    exit 2."""
    with redis_server(cluster=True) as server:
        assert redis.Redis(unix_socket_path=str(server.socket)).info("cluster") == {
            "cluster_enabled": 1
        }
        gemini = ["--source", "gemini"] if flag == "--ledger" else []
        done = start(tmp_path, *gemini, flag, server.url)
    assert done.returncode == 2
    assert done.stderr == (
        f"producer: {flag} redis://127.0.0.1:{server.port}/0 is a Redis Cluster node: "
        "name the cluster as redis+cluster://HOST:PORT[,HOST:PORT...]\n"
    )
    assert "listening on" not in done.stdout


def test_a_lone_server_named_as_a_cluster_is_refused_at_start_in_one_line(tmp_path: Path) -> None:
    """``redis+cluster://`` naming a server that is no Cluster node: one line, exit 2."""
    with redis_server() as server:
        done = start(tmp_path, "--reply-log", f"redis+cluster://127.0.0.1:{server.port}")
    assert done.returncode == 2
    assert done.stderr == (
        f"producer: --reply-log redis+cluster://127.0.0.1:{server.port} is not a Redis "
        "Cluster (INFO cluster says cluster_enabled:0)\n"
    )
