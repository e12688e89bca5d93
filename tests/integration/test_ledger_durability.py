"""``--ledger-durability``: a call's reservation and its sending mark wait for a replica.

A real primary and its replica (two private servers, tests/redis_server.py, the second
``REPLICAOF`` the first). A write that waited is on the replica when its answer comes; a
primary cut off from its replica (it drops the link and refuses the resync, as
tests/integration/test_redis_cluster_log.py does) answers every such write short, and the
ledger refuses it ``ledger_unavailable``; the link back, the same call's reserve is
answered again. The failover itself, on a Cluster, is in test_redis_cluster_log.py.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from replywire.producer.budget.options import RedisOptions
from replywire.producer.budget.redis_ledger import RedisLedger
from replywire.producer.replylog.durability import Durability, Mode
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason
from tests.budget_values import BODY
from tests.redis_server import RedisServer, cut_off, link_back, local_client, replicated_pair

pytestmark = pytest.mark.timeout(60)

#: Short waits keep each refusal to a fraction of a second; the ledger's own timeout (5 s)
#: stays longer than the wait, as the options require.
WAIT_S = 0.3
_prefixes = itertools.count()


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[RedisServer, RedisServer]]:
    with replicated_pair() as servers:
        yield servers


@pytest.fixture
def primary(pair: tuple[RedisServer, RedisServer]) -> Iterator[RedisServer]:
    """The primary, its replica linked again after the test (whatever the test cut)."""
    yield pair[0]
    link_back(pair[0])


def ledger_on(server: RedisServer, mode: Mode = Mode.REPLICA) -> RedisLedger:
    durability = Durability(mode, 1, WAIT_S)
    options = RedisOptions(prefix=f"durable-{next(_prefixes)}:", durability=durability)
    ledger = RedisLedger(server.url, budget_usd=1.0, options=options)
    ledger.check()
    return ledger


def reserve(ledger: RedisLedger, call_id: str) -> float:
    return ledger.reserve(call_id, body=BODY, max_output_tokens=100, identity="alice")


def refused(operation: object) -> RequestRefused:
    assert callable(operation)
    with pytest.raises(RequestRefused) as caught:
        operation()
    assert caught.value.reason is Reason.LEDGER_UNAVAILABLE
    return caught.value


def test_what_a_call_wrote_before_it_is_sent_is_on_the_replica_when_answered(
    pair: tuple[RedisServer, RedisServer], primary: RedisServer
) -> None:
    ledger = ledger_on(primary)
    key = ledger.call_key("call-1", "alice")
    try:
        reserve(ledger, "call-1")
        with local_client(pair[1]) as on_replica:
            assert on_replica.hget(key, "state") == "reserved"
            ledger.mark_sending("call-1", identity="alice")
            assert on_replica.hgetall(key) == ledger.client.hgetall(key)
            assert on_replica.hget(key, "sending_at") is not None
    finally:
        ledger.close()


def test_a_primary_alone_refuses_the_writes_before_a_call_and_the_link_back_answers_them(
    primary: RedisServer,
) -> None:
    ledger = ledger_on(primary)
    try:
        reserve(ledger, "before")
        cut_off(primary)
        short = refused(lambda: reserve(ledger, "alone"))
        assert short.detail == (
            f"0 of 1 replicas had the write within {WAIT_S:g} s (--ledger-durability replica)"
        )
        # A reservation made while linked cannot be marked sending: nothing would be sent.
        refused(lambda: ledger.mark_sending("before", identity="alice"))
        # The moves out of reserved do not wait: one lost at a failover leaves the worst
        # case counted. So the call that could not be marked is released at once.
        ledger.release("before", "not marked", identity="alice")
        assert ledger.totals()["committed_usd"] > 0  # the reservation the primary took alone
        link_back(primary)
        # The reserve asked again answers the same reservation, now on the replica too.
        assert reserve(ledger, "alone") > 0
        ledger.mark_sending("alone", identity="alice")
    finally:
        ledger.close()


def test_aof_durability_without_an_append_only_file_is_ledger_unavailable(
    primary: RedisServer,
) -> None:
    ledger = ledger_on(primary, Mode.AOF)
    try:
        error = refused(lambda: reserve(ledger, "call-1"))
        assert "appendonly" in error.detail
    finally:
        ledger.close()


def test_the_durability_wait_must_be_shorter_than_the_ledger_s_timeout() -> None:
    with pytest.raises(ValueError, match="--ledger-durability-timeout-s"):
        RedisOptions(timeout_s=2.0, durability=Durability(Mode.REPLICA, 1, 2.0))
    assert RedisOptions(timeout_s=2.0, durability=Durability(Mode.NONE, 1, 2.0))
