"""Across test hosts (Linux network namespaces on one LAN, tests/netns.py; root only,
skipped elsewhere with the reason, never skipped in CI): Redis, two producer replicas
and the consumer each on their own host, over real addresses.

* A replica's host is cut off mid-stream (the cable pulled: its process runs on, and
  no reset ever reaches the consumer). The consumer's gRPC keepalive finds it within
  about ``--keepalive-s`` plus ``--keepalive-timeout-s``; the call ends UNAVAILABLE, a
  transport failure, and the resume reaches the other replica through the same
  multi-address target: the stream completes with an unbroken run's result. With a
  keepalive slower than the idle timeout, the idle timeout ends it first: honest, named,
  not resumed.
* Two Gemini producers on two hosts share one Redis ledger on a third; 50 consumers at
  once from a fourth against a budget of a few calls: the committed total never passes
  the budget and every refusal is ``budget_exhausted``.

Select them with ``-m cross_host``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from replywire.producer.budget.options import RedisOptions
from replywire.producer.budget.redis_ledger import RedisLedger
from replywire.producer.states import FINAL_STATES
from replywire.shared.recording import Recording
from tests.budget_values import worst_case
from tests.certs import make_pki
from tests.gemini_runs import API_KEY
from tests.netns import Host, hosts
from tests.processes import (
    ROOT,
    Producer,
    consumer_process,
    fake_gemini,
    producer,
    read_trace,
    run_consumer,
    wait_for,
)
from tests.redis_server import RedisServer, redis_server
from tests.runs import CASE, essence

pytestmark = [pytest.mark.cross_host, pytest.mark.timeout(120)]

#: The consumer's keepalive in the cut test: a ping after 1 s of silence, 1 s to answer.
KEEPALIVE = ("--keepalive-s", "1", "--keepalive-timeout-s", "1")


def on_host(tmp_path: Path, host: Host, name: str, *args: str, **kwargs: Any) -> Any:
    """A producer on ``host``, listening on its address (plaintext: a private test LAN)."""
    return producer(
        tmp_path, "--host", host.address, "--insecure", *args,
        name=name, prefix=host.prefix, **kwargs,
    )  # fmt: skip


def target(replicas: list[tuple[Host, Producer]]) -> str:
    """One gRPC target for every replica: ``ipv4:A:PORT,B:PORT`` (round_robin)."""
    return "ipv4:" + ",".join(f"{host.address}:{p.port}" for host, p in replicas)


def sent(running: Producer, stream_id: str) -> int:
    return sum(1 for r in running.stream_trace(stream_id) if r["event"] == "chunk_sent")


@contextmanager
def replicas_sharing_redis(
    tmp_path: Path, *extra: str
) -> Iterator[tuple[dict[str, Host], RedisServer, list[tuple[Host, Producer]]]]:
    """Hosts redis, a, b, consumer; Redis on its host; a producer on a and on b."""
    with hosts("redis", "a", "b", "consumer") as lan, ExitStack() as stack:
        redis_host = lan["redis"]
        server = stack.enter_context(
            redis_server(host=redis_host.address, prefix=redis_host.prefix)
        )
        shared = ("--reply-log", server.url, "--reply-log-lease-s", "2", "--log-level", "debug")
        running = [
            (lan[name], stack.enter_context(on_host(tmp_path, lan[name], name, *shared, *extra)))
            for name in ("a", "b")
        ]
        yield lan, server, running


def final_state(running: Producer, stream_id: str) -> str | None:
    """The final state the producer's first stream record under this id reached."""
    for record in running.stream_trace(stream_id):
        if record.get("to_state") in FINAL_STATES:
            return str(record["to_state"])
    return None


def ended(trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The consumer reader's ends, in order."""
    return [
        r
        for r in trace
        if r["event"] == "state_changed"
        and r.get("component") == "reader"
        and r.get("input") == "ended"
    ]


def seconds_between(start: float, record: dict[str, Any]) -> float:
    """From a wall-clock instant to a trace record's timestamp (reported, never asserted)."""
    return datetime.fromisoformat(record["timestamp"]).timestamp() - start


@pytest.mark.parametrize(
    "keepalive", ["at the minimum", "the defaults", "slower than the idle timeout"]
)
def test_a_replica_cut_off_mid_stream_is_found_by_keepalive_and_the_stream_resumes_on_the_other(
    tmp_path: Path, keepalive: str
) -> None:
    with replicas_sharing_redis(tmp_path) as (lan, _server, running):
        consumer_host = lan["consumer"]
        everyone = target(running)
        unbroken = run_consumer(
            everyone, "--case", CASE, "--stream-id", "unbroken", prefix=consumer_host.prefix
        )
        assert unbroken.returncode == 0, unbroken.result
        bounds = {
            "at the minimum": (*KEEPALIVE, "--idle-timeout-s", "20"),
            # A ping after 10 s of silence, 5 s to answer; the idle timeout comes later.
            "the defaults": ("--idle-timeout-s", "30"),
            # The idle timeout (3 s) comes before the first ping (after 10 s of silence).
            "slower than the idle timeout": ("--keepalive-s", "10", "--idle-timeout-s", "3"),
        }[keepalive]
        result_path = tmp_path / "result.json"
        with consumer_process(
            tmp_path, everyone, "--case", CASE, "--chunk-interval-ms", "150",
            "--resume-attempts", "8", "--stream-id", "cut", "--result", str(result_path),
            *bounds, prefix=consumer_host.prefix,
        ) as consumer:  # fmt: skip
            wait_for(lambda: any(sent(p, "cut") >= 4 for _h, p in running), timeout=30)
            (serving_host, serving), (_other_host, other) = sorted(
                running, key=lambda pair: -sent(pair[1], "cut")
            )
            serving_host.cut()
            cut_at = time.time()
            code = consumer.wait(timeout=60)
            cut_off = serving.process.poll() is None  # cut off, not killed
            serving_host.restore()  # its connection to the consumer is reset now
        # The stream ends in the cut replica's trace too, once it hears of it.
        wait_for(lambda: final_state(serving, "cut") is not None, timeout=30)
        cut_end = final_state(serving, "cut")
        trace = read_trace(tmp_path / "consumer.trace.jsonl")
        other_records = other.stream_trace("cut")
        assert cut_off
    result: dict[str, Any] = json.loads(result_path.read_text())
    first_end = ended(trace)[0]
    detected_s = seconds_between(cut_at, first_end)
    print(
        f"keepalive {keepalive}: the cut was noticed after {detected_s:.2f} s "
        f"({first_end['why']}); the cut replica's stream ended {cut_end}"
    )
    if keepalive != "slower than the idle timeout":
        assert code == 0
        assert essence(result) == essence(unbroken.result)
        assert result["stats"]["reconnects"] == 1  # round_robin picks the replica that answers
        assert first_end["why"] == "UNAVAILABLE"  # keepalive, not the idle timeout
        resumed = [r for r in other_records if r.get("input") == "attach"]
        assert len(resumed) == 1 and resumed[0]["resume_after"] >= 3
        assert other_records[-1]["to_state"] == "completed"
    else:
        assert code == 3
        assert (result["status"], result["reason"]) == ("incomplete", "idle_timeout")
        assert result["accepted_answer"] is None
        assert result["provisional_content"]  # the partial content is kept
        assert result["stats"]["reconnects"] == 0
        assert [r["why"] for r in ended(trace)] == ["idle_timeout"]
        assert other_records == []


# --- Evidence 5: two producers on two hosts, one Redis ledger, 50 consumers at once -------

CONSUMERS = 50
#: Room for this many worst cases (and half of one more): exactly so many are served.
ROOM = 5
PREFIX = "cross-host:"


def test_two_producers_on_two_hosts_sharing_a_redis_ledger_never_exceed_the_budget(
    tmp_path: Path, recording: Recording
) -> None:
    """Redis on one host, the fake Gemini (HTTPS) on another, a producer on each of two
    more, the 50 consumers on a fifth, 25 per producer. Every call is charged its whole
    reservation (``fake-usage-huge``: implausible usage), so the ledger's arithmetic is
    exact: 5 calls fit, 45 are refused ``budget_exhausted``."""
    budget = worst_case(recording) * (ROOM + 0.5)
    with hosts("redis", "gemini", "a", "b", "consumer") as lan, ExitStack() as stack:
        redis_host, gemini_host = lan["redis"], lan["gemini"]
        pki = make_pki(tmp_path / "pki", server_ips=[gemini_host.address])
        server = stack.enter_context(
            redis_server(host=redis_host.address, prefix=redis_host.prefix)
        )
        fake = stack.enter_context(
            fake_gemini(
                API_KEY, "--host", gemini_host.address, "--tls-cert", str(pki.server_cert),
                "--tls-key", str(pki.server_key), prefix=gemini_host.prefix,
            )
        )  # fmt: skip
        args = ["--source", "gemini", "--model", "fake-usage-huge",
                "--gemini-base-url", f"https://{gemini_host.address}:{fake.port}",
                "--ledger", server.url, "--ledger-prefix", PREFIX,
                "--budget-usd", str(budget)]  # fmt: skip
        env = {"GEMINI_API_KEY": API_KEY, "SSL_CERT_FILE": str(pki.ca)}  # trust the test CA
        running = [
            (lan[name], stack.enter_context(on_host(tmp_path, lan[name], name, *args, env=env)))
            for name in ("a", "b")
        ]
        targets = [f"--target={host.address}:{p.port}" for host, p in running]
        done = subprocess.run(
            lan["consumer"].command(
                sys.executable, "-m", "tests.concurrent_consumers", *targets,
                "--count", str(CONSUMERS), "--case", CASE, "--stream-prefix", "budget-",
            ),
            cwd=ROOT, capture_output=True, text=True, timeout=90, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        results: list[dict[str, Any]] = json.loads(done.stdout)
        ledger = RedisLedger(
            server.local_url, budget_usd=budget, options=RedisOptions(prefix=PREFIX)
        )
        wait_for(lambda: all(e["state"] != "reserved" for e in ledger.entries()))
        rows, totals = ledger.entries(), ledger.totals()
        traces = [p.trace() for _host, p in running]
        provider_calls = fake_log(
            lan["consumer"], f"https://{gemini_host.address}:{fake.port}", pki.ca
        )
    outcomes = [(r["status"], r.get("reason")) for r in results]
    completed = outcomes.count(("complete", None))
    refused = outcomes.count(("refused", "budget_exhausted"))
    print(
        f"{CONSUMERS} consumers, budget {budget:.6f} USD ({ROOM}.5 worst cases): "
        f"{completed} complete, {refused} refused budget_exhausted; committed "
        f"{totals['committed_usd']:.6f} USD in {totals['entries']} ledger entries"
    )
    assert len(results) == CONSUMERS
    assert (completed, refused) == (ROOM, CONSUMERS - ROOM), sorted(set(outcomes))
    assert totals["committed_usd"] <= budget
    assert totals["committed_usd"] == pytest.approx(ROOM * worst_case(recording))
    assert [e["state"] for e in rows] == ["settled"] * ROOM
    # Every stream ended once in its producer's trace, in the state its consumer saw: the
    # producers served 25 each, and only they reserved (one reservation per served call).
    finals = [
        {r["stream_id"]: r["to_state"] for r in trace if r.get("to_state") in FINAL_STATES}
        for trace in traces
    ]
    assert [len(streams) for streams in finals] == [CONSUMERS // 2] * 2
    ends = {**finals[0], **finals[1]}
    expected = {"complete": "completed", "refused": "refused"}
    assert ends == {f"budget-{i}": expected[r["status"]] for i, r in enumerate(results)}
    reserved = [sum(r["event"] == "budget_reserved" for r in trace) for trace in traces]
    assert sum(reserved) == ROOM
    # A refusal never reached the provider: it saw exactly the calls that were paid for.
    assert len(provider_calls) == ROOM


#: The fake Gemini server's request log, read over HTTPS (argv: its URL, the CA).
READ_LOG = """
import ssl, sys, urllib.request
context = ssl.create_default_context(cafile=sys.argv[2])
with urllib.request.urlopen(sys.argv[1] + "/_fake/log", timeout=10, context=context) as answer:
    print(answer.read().decode())
"""


def fake_log(host: Host, base_url: str, ca: Path) -> list[dict[str, Any]]:
    """What the fake Gemini server saw, asked from ``host`` (the test process cannot reach
    the test LAN)."""
    done = subprocess.run(
        host.command(sys.executable, "-c", READ_LOG, base_url, str(ca)),
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    entries: list[dict[str, Any]] = json.loads(done.stdout)
    return entries
