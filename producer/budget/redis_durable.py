"""``--ledger-durability``: a Redis ledger write that waits for replicas before it counts.

Redis replicates asynchronously: a reservation its master acknowledged may be missing from
the replica promoted when that master fails. Without a wait (``none``, the default) a
call reserved and marked sending in that gap is paid but not counted: the budget can be
overspent by the calls in the gap (docs/operations.md#redis-cluster). With ``replica``
(``WAIT R T``) or ``aof`` (``WAITAOF 1 R T``, the master's and the replicas' append-only
files), the two writes a call makes *before its request is sent*, the reservation and the
mark that it is sending, each wait until ``R`` replicas have them: a failover that
promotes one of them keeps every call that was let through. A wait answered short is
``ledger_unavailable`` (the reserve is asked again, then abandoned; a mark not confirmed
sends nothing and releases the reservation).

The settle and the other moves out of ``reserved`` do not wait: one lost at a failover
leaves the call reserved (or, if it was sent, failed at reconciliation), which counts its
worst case: the budget over-counted, never under.

The wait counts its own connection's writes, so the script, a fence write (``INCR`` of a
key in the ledger's hash tag: a re-asked reserve that finds its reservation written may
write nothing new) and the wait go down one connection in one pipeline: a lone server's,
or on a Redis Cluster the slot master's own.
"""

from __future__ import annotations

import contextlib
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from replywire.producer.replylog.durability import Durability
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason


def write_and_wait(
    client: Any, script: str, keys: list[str], args: list[Any], fence: str, durability: Durability
) -> Any:
    """Run ``script`` (``EVAL``), ``INCR fence`` and the durability's wait on one
    connection; return the script's answer, refuse ``ledger_unavailable`` when fewer
    replicas than asked had it in time, and raise the first error any of the three met
    (a Cluster's slots are read again first, so the next try finds a promoted master)."""
    cluster = isinstance(client, redis.RedisCluster)
    node = client.get_redis_connection(client.get_node_from_key(keys[0])) if cluster else client
    try:
        with node.pipeline(transaction=False) as pipe:
            pipe.execute_command("EVAL", script, len(keys), *keys, *args)
            pipe.execute_command("INCR", fence)
            pipe.execute_command(*durability.wait_command())
            answer, _, waited = pipe.execute()
    except redis.RedisError:
        if cluster:
            with contextlib.suppress(redis.RedisError, RedisClusterException):
                client.nodes_manager.initialize()
        raise
    confirmed = durability.confirmed(waited)
    if confirmed < durability.replicas:
        raise RequestRefused(
            Reason.LEDGER_UNAVAILABLE,
            f"{confirmed} of {durability.replicas} replicas had the write within "
            f"{durability.timeout_s:g} s (--ledger-durability {durability.mode})",
        )
    return answer
