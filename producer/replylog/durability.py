"""``--reply-log-durability``: what a shared log's write waits for before it counts as done.

Redis replicates asynchronously: a write its master acknowledged may not have reached a
replica when the master fails, and a replica promoted then lacks it. What each setting
guarantees, for every entry the generation writes (a frame, the end):

``none`` (the default)
    Nothing is waited for. A failover can lose the last entries the old master took;
    the next write of the generation finds the log behind and ends the reply
    ``reply_log_behind`` (``producer.replylog.scripts``): its readers get the frames the
    log kept, then that ending, never a gap or a different continuation.
``replica``
    After each write batch (a recorded reply's frames are one batch; a live reply's
    frames are written, and waited for, one by one as they come) the generation sends
    ``WAIT R T`` on the same connection as the batch's last write (``R``:
    ``--reply-log-durability-replicas``, ``T``: ``--reply-log-durability-timeout-s``): the
    batch is in the memory of at least ``R`` replicas before the next one is written
    (replication keeps the master's order: a replica that has the last entry has all). A
    failover that promotes one of them loses nothing the generation had counted as
    written; the entry being written then is written again on the new master (the write
    is idempotent) and waited for again.
``aof``
    The same with ``WAITAOF 1 R T``: the entry is in the master's append-only file and in
    that of at least ``R`` replicas (each fsynced by its ``appendfsync`` policy), so it
    also outlives a restart of them all. The master must have ``appendonly yes``.

A wait that is answered by fewer replicas within ``T`` ends the reply
``reply_log_unavailable`` (one ``reply_log_wait_short`` record says how many answered):
the guarantee cannot be kept, and the generation stops rather than go on without it.
Readers may still read an entry before its wait is over (they read the master); what the
setting bounds is what a failover can take from the log, not what a reader saw first.
A shard whose master was failed over has one replica fewer until one joins it: with
``R`` = 1 and one replica per master, its writes wait in vain until then.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

#: A replica acknowledges its append-only file's progress about once a second: ``aof``
#: needs more than a second to hear it.
DEFAULT_TIMEOUT_S: Final = 2.0


class Mode(StrEnum):
    NONE = "none"
    REPLICA = "replica"
    AOF = "aof"


@dataclass(frozen=True, slots=True)
class Durability:
    mode: Mode = Mode.NONE
    #: Replicas that must have each entry (``WAIT`` / ``WAITAOF``'s numreplicas).
    replicas: int = 1
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError("the durability replicas must be >= 1")
        if not self.timeout_s > 0:
            raise ValueError("the durability timeout must be > 0 seconds")

    def wait_command(self) -> tuple[Any, ...]:
        timeout_ms = max(int(self.timeout_s * 1000), 1)
        if self.mode is Mode.AOF:
            return ("WAITAOF", 1, self.replicas, timeout_ms)
        return ("WAIT", self.replicas, timeout_ms)

    def confirmed(self, answer: Any) -> int:
        """How many replicas the wait's answer says have the entry (``WAITAOF``: 0 unless
        the master's own file has it too)."""
        if self.mode is Mode.AOF:
            local, replicas = answer
            return int(replicas) if int(local) >= 1 else 0
        return int(answer)


class WaitShort(Exception):
    """Fewer replicas than asked had the entry within the timeout."""

    def __init__(self, confirmed: int) -> None:
        super().__init__(f"{confirmed} replicas confirmed")
        self.confirmed = confirmed


async def eval_and_wait(
    client: Any, script: str, keys: list[str], args: list[Any], durability: Durability
) -> Any:
    """Run ``script`` (``EVAL``) and then the durability's wait on the same connection (a
    wait counts the writes of its own connection): on a lone server one pipeline of its
    pool; on a Cluster the master of the keys' slot, one pipeline of that node. Returns
    the script's answer; raises ``WaitShort`` when the wait fell short, and the first
    error either command met."""
    # Imported here: the flags import this module, and a producer that starts without a
    # Redis store imports no Redis client (tests/system/test_imports.py).
    from replywire.producer.redis_clients import Gated  # noqa: PLC0415

    command = ("EVAL", script, len(keys), *keys, *args)
    if not isinstance(client, Gated):
        async with client.pipeline(transaction=False) as pipe:
            pipe.execute_command(*command)
            pipe.execute_command(*durability.wait_command())
            answer, waited = await pipe.execute()
    else:
        answer, waited = await client.in_turn(
            _on_master(client.client, keys[0], command, durability)
        )
    confirmed = durability.confirmed(waited)
    if confirmed < durability.replicas:
        raise WaitShort(confirmed)
    return answer


async def _on_master(
    cluster: Any, key: str, command: tuple[Any, ...], durability: Durability
) -> tuple[Any, Any]:
    from redis.asyncio.cluster import PipelineCommand  # noqa: PLC0415

    await cluster.initialize()
    node = cluster.get_node_from_key(key)
    commands = [PipelineCommand(0, *command), PipelineCommand(1, *durability.wait_command())]
    if await node.execute_pipeline(commands):  # an error: the slots are read again first
        await cluster.nodes_manager.initialize()
        for done in commands:
            if isinstance(done.result, Exception):
                raise done.result
    return commands[0].result, commands[1].result
