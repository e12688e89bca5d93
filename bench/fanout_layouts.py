"""The deployments ``bench.fanout`` reads one live reply through: each a layout.

A layout is a function: given a working folder, the producers' flags (the source, its tokens,
the bounds) and their environment, it starts a reply log and the producers that share it,
yields them as a ``Deployed`` (their gRPC targets, their pids, the reply log's URL, and the
Redis servers whose commands are counted), and stops them after. ``LAYOUTS`` names them in
the table's order: one producer on a private Redis server, two replicas sharing one, and
two replicas sharing a Redis Cluster of three masters and three replicas
(tests/redis_cluster.py; ``counted``: every master).

Every producer has a file ledger of its own (``REPLICA/ledger.json``) and is pinned to the
servers' CPU (``bench.common.SERVER_CPU``, both replicas on it); the Redis server may run on
either CPU, whatever the process that starts it was pinned to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bench.common import SERVER_CPU, pin, unpin
from tests.processes import Producer, producer
from tests.redis_cluster import redis_cluster
from tests.redis_server import redis_server


@dataclass(frozen=True)
class Deployed:
    """Producers sharing one reply log, as the readers and the counters see them."""

    #: The producers' gRPC targets: the readers are spread over them in turn.
    targets: tuple[str, ...]
    #: Their processes: the CPU they spent is read from the kernel.
    pids: tuple[int, ...]
    #: The ``--reply-log`` URL they share.
    reply_log: str
    #: The Redis servers whose ``INFO commandstats`` count the layout's commands.
    counted: tuple[str, ...]


#: (working folder, producer flags, producer environment) → the deployment, while entered.
Layout = Callable[[Path, Sequence[str], Mapping[str, str]], AbstractContextManager[Deployed]]


@contextmanager
def replicas(
    workdir: Path, reply_log: str, count: int, flags: Sequence[str], env: Mapping[str, str]
) -> Iterator[list[Producer]]:
    """``count`` producers with ``flags`` on the reply log ``reply_log``, each with a ledger
    of its own, pinned to the servers' CPU."""
    with ExitStack() as stack:
        running = []
        for index in range(count):
            name = f"replica-{index}"
            folder = workdir / name
            folder.mkdir(parents=True)
            args = (*flags, "--ledger", str(folder / "ledger.json"), "--reply-log", reply_log)
            started = producer(folder, *args, name=name, env=dict(env))
            running.append(stack.enter_context(started))
        for replica in running:
            pin(replica.process.pid, SERVER_CPU)
        yield running


def _on_one_server(count: int) -> Layout:
    @contextmanager
    def layout(workdir: Path, flags: Sequence[str], env: Mapping[str, str]) -> Iterator[Deployed]:
        with redis_server() as server:
            unpin(server.process.pid)
            with replicas(workdir, server.url, count, flags, env) as running:
                yield Deployed(
                    targets=tuple(p.target for p in running),
                    pids=tuple(p.process.pid for p in running),
                    reply_log=server.url,
                    counted=(server.url,),
                )

    return layout


def _on_a_cluster(count: int) -> Layout:
    @contextmanager
    def layout(workdir: Path, flags: Sequence[str], env: Mapping[str, str]) -> Iterator[Deployed]:
        with redis_cluster() as cluster:
            for node in cluster.nodes:
                unpin(node.process.pid)
            masters = cluster.masters()
            with replicas(workdir, cluster.url, count, flags, env) as running:
                yield Deployed(
                    targets=tuple(p.target for p in running),
                    pids=tuple(p.process.pid for p in running),
                    reply_log=cluster.url,
                    counted=tuple(f"redis://{m.host}:{m.port}/0" for m in masters),
                )

    return layout


#: The layouts, by the name the table gives them, in its order.
LAYOUTS: Final[dict[str, Layout]] = {
    "one producer": _on_one_server(1),
    "two replicas, one Redis": _on_one_server(2),
    "two replicas, a Redis Cluster (3 masters, 3 replicas)": _on_a_cluster(2),
}
