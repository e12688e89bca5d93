"""A private Redis Cluster for a test: several servers of tests/redis_server.py joined.

``redis_cluster()`` starts ``masters * (1 + replicas)`` nodes (``--cluster-enabled yes``,
``cluster-node-timeout`` short: a master that stops answering is failed over in a few
seconds), joins them (``CLUSTER MEET``), gives each master an equal share of the 16,384
slots (``CLUSTER ADDSLOTSRANGE``) and each master its replicas (``CLUSTER REPLICATE``),
and waits (bounded) until every node says ``cluster_state:ok`` and every replica is in
sync. The test talks to each node through its Unix socket (a file, reachable from the
test whatever network namespace the node listens in: on a test host, tests/netns.py,
every node listens on the host's address, ports ``FIRST_HOST_PORT`` on). ``url`` is the
cluster's as the producer takes it (``redis+cluster://`` and every master as a seed).

``master_of(key)`` finds the master serving a key's slot now, ``replicas_of`` its
replicas; ``kill`` SIGKILLs a node by its pid; ``wait_promoted`` waits (bounded) until
one of the killed master's replicas serves its slots and the cluster is ``ok`` again.
Every node is stopped by its pid at the end.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import redis
from redis.crc import key_slot

from tests.redis_server import RedisServer, redis_server

SLOTS = 16384
#: A master that answers nothing for this long is failed (its replica promoted).
NODE_TIMEOUT_MS = 1000
FIRST_HOST_PORT = 7000
FORM_TIMEOUT_S = 30.0
FAILOVER_TIMEOUT_S = 30.0


@dataclass
class Cluster:
    nodes: list[RedisServer]
    host: str
    #: Node id of each node (``CLUSTER MYID``), in ``nodes``' order.
    ids: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        seeds = ",".join(f"{self.host}:{node.port}" for node in self.masters())
        return f"redis+cluster://{seeds}"

    def local(self, node: RedisServer) -> redis.Redis:
        """A client of one node, through its Unix socket (close it after use)."""
        return redis.Redis(unix_socket_path=str(node.socket), socket_timeout=5)

    def alive(self) -> list[RedisServer]:
        return [node for node in self.nodes if node.process.poll() is None]

    def _view(self) -> list[dict[str, object]]:
        """``CLUSTER NODES`` as a live node sees it: id, role, master id, slots, failed."""
        with ExitStack() as stack:
            for node in self.alive():
                client = stack.enter_context(self.local(node))
                try:
                    parsed = client.execute_command("CLUSTER NODES")  # redis-py parses it
                except redis.RedisError:
                    continue
                return [_node_entry(entry) for entry in parsed.values()]
        raise RuntimeError("no node of the cluster answers")

    def _node(self, node_id: str) -> RedisServer:
        return self.nodes[self.ids.index(node_id)]

    def masters(self) -> list[RedisServer]:
        return [
            self._node(str(entry["id"]))
            for entry in self._view()
            if entry["master"] and not entry["failed"]
        ]

    def master_of(self, key: str) -> RedisServer:
        slot = key_slot(key.encode())
        for entry in self._view():
            ranges = entry["slots"]
            assert isinstance(ranges, list)
            if entry["master"] and not entry["failed"] and any(a <= slot <= b for a, b in ranges):
                return self._node(str(entry["id"]))
        raise RuntimeError(f"no master serves slot {slot}")

    def replicas_of(self, master: RedisServer) -> list[RedisServer]:
        master_id = self.ids[self.nodes.index(master)]
        return [self._node(str(e["id"])) for e in self._view() if e["of"] == master_id]

    def kill(self, node: RedisServer) -> None:
        node.kill()

    def wait_promoted(self, killed: RedisServer) -> RedisServer:
        """The replica that took the killed master's slots, once the cluster is ok again."""
        killed_id = self.ids[self.nodes.index(killed)]
        deadline = time.monotonic() + FAILOVER_TIMEOUT_S
        while time.monotonic() < deadline:
            view = self._view()
            gone = [e for e in view if e["id"] == killed_id]
            if gone and gone[0]["failed"] and self._ok():
                # The killed master's replica (by its id, as nodes.conf remembers it).
                for entry in view:
                    if (
                        entry["master"]
                        and not entry["failed"]
                        and entry["id"] in self._ids_of(killed_id)
                    ):
                        return self._node(str(entry["id"]))
            time.sleep(0.1)
        raise RuntimeError("no replica was promoted in time")

    def _ids_of(self, master_id: str) -> set[str]:
        return {self.ids[i] for i in self._replica_indexes.get(master_id, ())}

    _replica_indexes: dict[str, list[int]] = field(default_factory=dict)

    def _ok(self) -> bool:
        for node in self.alive():
            with self.local(node) as client:
                try:
                    if client.cluster("INFO").get("cluster_state") != "ok":
                        return False
                except redis.RedisError:
                    return False
        return True


def _node_entry(entry: dict[str, object]) -> dict[str, object]:
    """One node of redis-py's parsed ``CLUSTER NODES``."""
    flags = str(entry["flags"]).split(",")
    ranges = entry["slots"]
    assert isinstance(ranges, list)
    return {
        "id": entry["node_id"],
        "master": "master" in flags,
        "failed": "fail" in flags or "fail?" in flags,
        "of": entry["master_id"] if entry["master_id"] != "-" else None,
        "slots": [(int(r[0]), int(r[-1])) for r in ranges],
    }


@contextmanager
def redis_cluster(
    masters: int = 3,
    replicas: int = 1,
    *,
    host: str = "127.0.0.1",
    prefix: Sequence[str] = (),
    options: Sequence[str] = (),
) -> Iterator[Cluster]:
    """A cluster of ``masters`` masters with ``replicas`` replicas each, formed and ``ok``."""
    count = masters * (1 + replicas)
    tuned = [
        "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--cluster-announce-ip", host,
        "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0", *options,
    ]  # fmt: skip
    with ExitStack() as stack:
        nodes = []
        for index in range(count):
            port = FIRST_HOST_PORT + index if prefix else None
            node = redis_server(host=host, prefix=prefix, cluster=True, options=tuned, port=port)
            nodes.append(stack.enter_context(node))
        cluster = Cluster(nodes, host)
        _form(cluster, masters, replicas)
        yield cluster


def _form(cluster: Cluster, masters: int, replicas: int) -> None:
    nodes = cluster.nodes
    with ExitStack() as stack:
        clients = [stack.enter_context(cluster.local(node)) for node in nodes]
        cluster.ids = [str(c.execute_command("CLUSTER MYID"), "utf-8") for c in clients]
        for client in clients[1:]:
            client.execute_command("CLUSTER MEET", cluster.host, str(nodes[0].port))
        _wait(lambda: all(int(c.cluster("INFO")["cluster_known_nodes"]) == len(nodes)
                          for c in clients), "the nodes to meet")  # fmt: skip
        share = SLOTS // masters
        for index in range(masters):
            first = index * share
            last = SLOTS - 1 if index == masters - 1 else first + share - 1
            clients[index].execute_command("CLUSTER ADDSLOTSRANGE", str(first), str(last))
        # Every node must know the masters' slots before a replica follows one.
        _wait(lambda: all(int(c.cluster("INFO")["cluster_slots_assigned"]) == SLOTS
                          for c in clients), "the slots to be known")  # fmt: skip
        for index in range(masters, len(nodes)):
            master = (index - masters) % masters
            clients[index].execute_command("CLUSTER REPLICATE", cluster.ids[master])
            cluster._replica_indexes.setdefault(cluster.ids[master], []).append(index)
        _wait(lambda: all(c.cluster("INFO")["cluster_state"] == "ok" for c in clients),
              "cluster_state:ok")  # fmt: skip
        _wait(lambda: all(c.info("replication").get("master_link_status") == "up"
                          for c in clients[masters:]), "the replicas to sync")  # fmt: skip
        _wait(lambda: all(int(c.info("replication")["connected_slaves"]) == replicas
                          for c in clients[:masters]), "the masters to see them")  # fmt: skip


def _wait(ready: object, what: str) -> None:
    assert callable(ready)
    deadline = time.monotonic() + FORM_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except (redis.RedisError, KeyError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"the cluster did not form in time: waiting for {what}")
