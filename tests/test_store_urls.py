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
from urllib.parse import unquote

import pytest
import redis

from producer.gemini.ledgers import open_ledger
from producer.store_urls import HIDDEN, StoreError, StoreKind, parse_store, redacted
from tests.helpers import API_KEY
from tests.processes import fake_gemini, producer, run_consumer
from tests.redis_server import redis_server

pytestmark = pytest.mark.timeout(180)

#: Long enough for the trace scrubbers (4 characters or more), percent-encoded in the URL.
PASSWORD = "st0re-Secret@42"
QUOTED = "st0re-Secret%4042"
ACCEPTED = "give redis://, rediss://, unix:// or a file path (the scheme in any case)"


# --- the parser ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "target"),
    [
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("REDIS://h:1/0", "redis://h:1/0"),
        ("Rediss://h/0", "rediss://h/0"),
        ("UNIX:///run/redis.sock?db=0", "unix:///run/redis.sock?db=0"),
    ],
)
def test_the_redis_schemes_in_any_case_are_lower_cased_for_redis_py(spec: str, target: str) -> None:
    for memory, files in ((True, False), (False, True)):
        store = parse_store(spec, memory=memory, files=files)
        assert (store.kind, store.target) == (StoreKind.REDIS, target)
    redis.ConnectionPool.from_url(target)  # what the Redis ledger hands redis-py


def test_redis_py_s_synchronous_parser_knows_only_lower_case_schemes() -> None:
    """Why the scheme is lower-cased: the Redis ledger's parser refuses anything else."""
    with pytest.raises(ValueError, match="Redis URL must specify"):
        redis.ConnectionPool.from_url("REDIS://h:1/0")


@pytest.mark.parametrize(
    "spec",
    ["valkey://:pw@h/0", "file:///tmp/ledger.json", "http://h/", "memcached://h", "a+b.c-d://x"],
)
def test_any_other_scheme_is_refused_naming_the_accepted_ones(spec: str) -> None:
    with pytest.raises(StoreError) as refused:
        parse_store(spec, files=True)
    message = str(refused.value)
    assert message.endswith(ACCEPTED)
    assert ":pw@" not in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        ("runs/gemini-ledger.json", StoreKind.FILE),
        ("/var/lib/replywire/ledger.json", StoreKind.FILE),
        ("ledger@2.json", StoreKind.FILE),
        ("memory", None),  # --ledger: a file named memory; --reply-log: the memory log
    ],
)
def test_a_path_is_the_file_ledger_and_memory_the_memory_log(
    spec: str, kind: StoreKind | None
) -> None:
    assert parse_store(spec, files=True).kind == (kind or StoreKind.FILE)
    if kind is None:
        assert parse_store(spec, memory=True).kind is StoreKind.MEMORY
    else:
        with pytest.raises(StoreError, match=r"give redis://, rediss://, unix:// or memory$"):
            parse_store(spec, memory=True)


@pytest.mark.parametrize("spec", ["redis:/:pw@h/0", "valkey:/h", "Redis:h:6379", "unix:/x.sock"])
def test_a_url_with_its_slashes_mistyped_is_not_a_file(spec: str) -> None:
    with pytest.raises(StoreError) as refused:
        parse_store(spec, files=True)
    assert "pw" not in str(refused.value)


@pytest.mark.parametrize(
    ("url", "shown", "written"),
    [
        (f"redis://:{QUOTED}@h:6379/0", "redis://h:6379/0", QUOTED),
        (f"redis://user:{QUOTED}@h/0", "redis://h/0", QUOTED),
        # User info alone: taken for a secret too (a slip for ":PASSWORD@").
        (f"rediss://{QUOTED}@h/0", "rediss://h/0", QUOTED),
        (f"unix://:{QUOTED}@/run/redis.sock?db=0", "unix:///run/redis.sock?db=0", QUOTED),
        (f"redis://h/0?password={QUOTED}&db=1", f"redis://h/0?password={HIDDEN}&db=1", QUOTED),
        # Unescaped "/" and "@" in the password: still all of it hidden.
        (f"redis://:{PASSWORD}/x@h/0", "redis://h/0", f"{PASSWORD}/x"),
        (f"redis://:a/{PASSWORD}@h/0", "redis://h/0", f"a/{PASSWORD}"),
    ],
)
def test_what_is_shown_never_has_the_password(url: str, shown: str, written: str) -> None:
    store = parse_store(url)
    assert store.shown == redacted(url) == shown
    assert {written, unquote(written)} <= set(store.secrets)
    # A library's error text that quotes the URL, or the password, comes out clean.
    text = store.redact(f"Error connecting to {url} (auth {unquote(written)} / {written})")
    assert PASSWORD not in text and QUOTED not in text
    assert store.shown in text


def test_a_short_password_is_redacted_though_too_short_for_the_trace_scrubbers() -> None:
    store = parse_store("Redis://:pw@h/0")
    assert (store.shown, store.redact("auth pw refused")) == ("redis://h/0", "auth *** refused")


def test_open_ledger_refuses_an_unknown_scheme_and_makes_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="valkey:// is not a scheme"):
        open_ledger(f"valkey://:{PASSWORD}@h/0", budget_usd=1.0)
    assert list(tmp_path.rglob("*")) == []


# --- the flags, in real producer processes --------------------------------------------------


def start(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m producer`` in ``cwd``, its trace in ``cwd/trace.jsonl``; bounded."""
    return subprocess.run(
        [sys.executable, "-m", "producer", "--port", "0", "--log-format", "json",
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
            "speaks; give redis://, rediss://, unix:// or memory (the scheme in any case)",
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
        [sys.executable, "-m", "producer", "--help"],
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
