"""``--ledger`` and ``--reply-log`` URLs: one parser, the accepted schemes in any case, every
other ``scheme://`` a usage error, and a URL's password nowhere: not in a message, a trace
record or a file name.

In-process for the parser; real ``python -m producer`` processes for the flags (each in a
working directory of its own, searched afterwards for the password), and a private Redis
server (tests/redis_server.py) for URLs that must work.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest
import redis

from replywire.producer.budget.stores import open_ledger
from replywire.producer.store_urls import (
    HIDDEN,
    StoreError,
    StoreKind,
    cluster_nodes,
    parse_store,
    redacted,
)
from tests.hostile_input import ACCEPTED, PASSWORD, QUOTED

pytestmark = pytest.mark.timeout(180)


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
        accepted = (
            "give redis://, rediss://, unix://, redis+cluster://, rediss+cluster:// or memory"
        )
        with pytest.raises(StoreError, match=re.escape(accepted) + "$"):
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
        # A cluster's seeds: the user info is the cluster's, shown nowhere.
        (f"redis+cluster://:{QUOTED}@a:7000,b:7001", "redis+cluster://a:7000,b:7001", QUOTED),
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


@pytest.mark.parametrize(
    ("url", "node", "seeds"),
    [
        ("redis+cluster://h:7000", "redis://h:7000/0", [("h", 7000)]),
        ("Rediss+Cluster://:pw@a:1,b:2/0?ssl_cert_reqs=none",
         "rediss://:pw@a:1/0?ssl_cert_reqs=none", [("a", 1), ("b", 2)]),
        ("redis+cluster://[::1]:7000,10.0.0.2:7001", "redis://[::1]:7000/0",
         [("::1", 7000), ("10.0.0.2", 7001)]),
    ],
)  # fmt: skip
def test_a_cluster_url_names_its_seed_nodes(
    url: str, node: str, seeds: list[tuple[str, int]]
) -> None:
    store = parse_store(url)
    assert (store.kind, store.cluster) == (StoreKind.REDIS, True)
    assert cluster_nodes(store.target) == (node, seeds)
    assert not parse_store("redis://h:1/0").cluster


@pytest.mark.parametrize(
    "url",
    ["redis+cluster://h", "redis+cluster://h:x", "redis+cluster://h:1,", "redis+cluster://:0",
     "redis+cluster://h:70000", "redis+cluster://h:1/2"],
)  # fmt: skip
def test_a_cluster_url_without_readable_seeds_is_refused_in_one_line(url: str) -> None:
    with pytest.raises(StoreError) as refused:
        parse_store(url, memory=True)
    assert "\n" not in str(refused.value)
    assert "HOST:PORT" in str(refused.value) or "database 0" in str(refused.value)


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
