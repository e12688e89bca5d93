"""The Redis clients a store's URL makes (``producer.store_urls``): a lone server's pool, or
a Redis Cluster's client, for the reply log (asyncio) and the ledger (blocking).

A lone server (``redis://``, ``rediss://``, ``unix://``): one ``BlockingConnectionPool`` of
``size`` connections; a command that finds none free waits at most ``timeout_s``.

A Redis Cluster (``redis+cluster://HOST:PORT[,HOST:PORT...]``): redis-py's ``RedisCluster``,
given every seed node; it asks them for the cluster's slots and nodes (``CLUSTER SLOTS``),
sends each command to the master of its key's slot, follows ``MOVED`` / ``ASK``, and after a
failover (a node that stops answering, ``CLUSTERDOWN``) reads the slots again and retries
(its ``Retry``: ``retries`` attempts, exponential backoff with jitter). Its pool is per
node, and it fails a command at once (``MaxConnectionsError``) when the node's
connections are all in use; ``Gated`` puts the lone server's rule back: at most ``size``
commands of a client in flight at once, a command past them waiting at most
``timeout_s`` for its turn. Every script the producer runs names keys of one slot (a
reply's keys share its hash tag; the ledger's, its prefix's): ``CROSSSLOT`` never
happens. Pub/sub is plain ``PUBLISH`` (a cluster carries it to every node) heard on one
connection to a master chosen at random (``open_pubsub``), another after it fails.

A failover (a master killed, its replica promoted once ``cluster-node-timeout`` passed)
takes a few seconds in which the master's slots answer nothing or ``CLUSTERDOWN``: the
reply log rides it (``through_failover``) with commands that are safe to send again,
each bounded by a window of the lease's (a write, a follower's read); what the promoted
replica lacks (asynchronous replication: writes the old master acknowledged) is found by
the write script's order rule (``reply_log_behind``).
"""

from __future__ import annotations

import asyncio
import inspect
import random
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import redis
import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio import BlockingConnectionPool
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.cluster import ClusterNode
from redis.commands.core import AsyncScript
from redis.retry import Retry

from replywire.producer.store_urls import Store, cluster_nodes

#: The backoff a cluster client sleeps between its retries (base and cap, seconds): the
#: slots read again each time, so that a promoted replica is found once it is master.
CLUSTER_BACKOFF_BASE_S: Final = 0.05
CLUSTER_BACKOFF_CAP_S: Final = 0.5


def async_client(
    store: Store, *, name: str, size: int, timeout_s: float, retries: int, **options: Any
) -> Any:
    """The asyncio client of a Redis store: ``size`` connections named ``name``, every
    command bounded by ``timeout_s``; a lone server's retried ``retries`` times at once on a
    new connection, a cluster's ``retries`` times with backoff (at least once: a failover
    is met by reading the slots again)."""
    common: dict[str, Any] = {
        "client_name": name,
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        **options,
    }
    if not store.cluster:
        return aioredis.Redis(
            connection_pool=BlockingConnectionPool.from_url(
                store.target, max_connections=size, timeout=timeout_s,
                retry=AsyncRetry(NoBackoff(), retries), **common,
            )
        )  # fmt: skip
    url, seeds = cluster_nodes(store.target)
    client = aioredis.RedisCluster.from_url(
        url,
        startup_nodes=[AsyncClusterNode(host, port) for host, port in seeds],
        max_connections=size,
        retry=AsyncRetry(
            ExponentialWithJitterBackoff(CLUSTER_BACKOFF_CAP_S, CLUSTER_BACKOFF_BASE_S),
            max(retries, 1),
        ),
        **common,
    )
    return Gated(client, size, timeout_s)


def sync_client(store: Store, *, timeout_s: float, **options: Any) -> Any:
    """The blocking client of a Redis store (the ledger's): no retry of its own on a lone
    server (the ledger's scripts make its retries safe, and it retries them itself); a
    cluster's client reads the slots again once after a node fails."""
    common: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        **options,
    }
    if not store.cluster:
        pool = redis.ConnectionPool.from_url(store.target, retry=Retry(NoBackoff(), 0), **common)
        return redis.Redis(connection_pool=pool)
    url, seeds = cluster_nodes(store.target)
    return redis.RedisCluster.from_url(
        url,
        startup_nodes=[ClusterNode(host, port) for host, port in seeds],  # type: ignore[no-untyped-call]
        retry=Retry(ExponentialWithJitterBackoff(CLUSTER_BACKOFF_CAP_S, CLUSTER_BACKOFF_BASE_S), 1),
        **common,
    )


class NoConnectionFree(redis.ConnectionError):
    """No command slot of a cluster client came free within its timeout (a lone server's
    ``BlockingConnectionPool`` says the same with its own ``ConnectionError``)."""


class Gated:
    """A cluster client whose commands wait for one of ``size`` turns (``timeout_s`` at
    most, then ``NoConnectionFree``): what a lone server's blocking pool does. Every command
    method, ``pipeline().execute()`` and a script registered here take a turn; anything
    else is the client's own."""

    def __init__(self, client: Any, size: int, timeout_s: float) -> None:
        self.client = client
        self._turns = asyncio.Semaphore(size)
        self._timeout_s = timeout_s

    async def in_turn(self, command: Awaitable[Any]) -> Any:
        """Await ``command`` in one of the client's turns."""
        try:
            await asyncio.wait_for(self._turns.acquire(), self._timeout_s)
        except TimeoutError:
            if inspect.iscoroutine(command):
                command.close()
            raise NoConnectionFree("no connection free") from None
        try:
            return await command
        finally:
            self._turns.release()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.client, name)
        if not callable(attribute):
            return attribute

        def command(*args: Any, **kwargs: Any) -> Any:
            answer = attribute(*args, **kwargs)
            return self.in_turn(answer) if inspect.isawaitable(answer) else answer

        return command

    def register_script(self, script: str) -> AsyncScript:
        # Its EVALSHA (and SCRIPT LOAD) take turns here.
        return AsyncScript(self, script)  # type: ignore[arg-type]

    def pipeline(self, transaction: bool = True) -> _GatedPipeline:
        return _GatedPipeline(self, self.client.pipeline(transaction=transaction))

    async def aclose(self) -> None:
        await self.client.aclose()


class _GatedPipeline:
    """A cluster pipeline whose ``execute`` takes one turn of its client."""

    def __init__(self, gated: Gated, pipe: Any) -> None:
        self._gated = gated
        self._pipe = pipe

    async def __aenter__(self) -> _GatedPipeline:
        await self._pipe.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._pipe.__aexit__(*exc)

    def execute(self) -> Awaitable[Any]:
        return self._gated.in_turn(self._pipe.execute())

    def __getattr__(self, name: str) -> Callable[..., Any]:
        attribute: Callable[..., Any] = getattr(self._pipe, name)
        return attribute


#: What a Cluster answers while a master is failed over: the node gone (a refused or reset
#: connection, a timeout), the cluster down until a replica takes its slots
#: (``CLUSTERDOWN``, ``TRYAGAIN``), a write that reached a node which is a replica now
#: (``READONLY``), a slot that moved (``MOVED`` once redis-py gave up following it).
FAILOVER_ERRORS: Final = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.ClusterError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.MovedError,
)
FAILOVER_RETRY_MIN_S: Final = 0.05
FAILOVER_RETRY_MAX_S: Final = 0.5

T = TypeVar("T")


async def through_failover(client: Any, command: Callable[[], Awaitable[T]], window_s: float) -> T:
    """``command()``, retried on a Cluster through a failover (``FAILOVER_ERRORS``, backing
    off from ``FAILOVER_RETRY_MIN_S`` doubling to ``FAILOVER_RETRY_MAX_S``) for at most
    ``window_s``, then its error raised; on a lone server, once (there is no replica to
    wait for). Only for commands that are safe to send again: the reply log's writes are
    idempotent (``producer.replylog.scripts``), its reads change nothing. A command that
    found no connection free (``NoConnectionFree``) has waited already: not retried."""
    if not isinstance(client, Gated):
        return await command()
    loop = asyncio.get_running_loop()
    until = loop.time() + window_s
    delay = FAILOVER_RETRY_MIN_S
    while True:
        try:
            return await command()
        except NoConnectionFree:
            raise
        except FAILOVER_ERRORS:
            if loop.time() + delay > until:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, FAILOVER_RETRY_MAX_S)


async def open_pubsub(client: Any) -> Any:
    """A pub/sub connection of the client (not yet connected). A cluster's: to a master it
    knows, chosen at random from the slots read afresh each time (a plain message reaches
    every node, and a node that failed is left at the next reconnect)."""
    if not isinstance(client, Gated):
        return client.pubsub()
    cluster = client.client
    await cluster.initialize()
    await cluster.nodes_manager.initialize()
    return cluster.pubsub(node=random.choice(cluster.get_primaries()))


async def cluster_state(client: Any) -> str:
    """``CLUSTER INFO``'s ``cluster_state`` as a node of the cluster answers it (``ok``
    once every slot is served)."""
    info = await client.cluster_info()
    return str(info.get("cluster_state", ""))
