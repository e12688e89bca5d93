"""How a budget ledger is kept: the Redis ledger's key prefix and how long it keeps a finished
call, and how long one operation of either ledger waits. Apart from ``redis_ledger`` so that
a producer that keeps its ledger in a file, or none, never imports the Redis client (a
tenth of a second of every start)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from replywire.producer.budget.ledger import TIMEOUT_S
from replywire.producer.replylog.durability import Durability, Mode

DEFAULT_PREFIX: Final = "replywire:ledger:"
#: A settled or released call's hash is kept this long (7 days).
DEFAULT_TTL_S: Final = 7 * 24 * 3600


@dataclass(frozen=True, slots=True)
class RedisOptions:
    """Where the ledger's keys live, how long finished calls are kept and what a write before
    a call is sent waits for (``redis_durable``; Redis only), how long one operation waits
    (both ledgers: a Redis round trip, the file ledger's lock)."""

    prefix: str = DEFAULT_PREFIX
    ttl_s: int = DEFAULT_TTL_S
    timeout_s: float = TIMEOUT_S
    durability: Durability = field(default_factory=Durability)

    def __post_init__(self) -> None:
        # The wait is one command of the round trip ``timeout_s`` bounds.
        if self.durability.mode is not Mode.NONE and not self.durability.timeout_s < self.timeout_s:
            raise ValueError(
                f"--ledger-durability-timeout-s {self.durability.timeout_s:g} must be shorter "
                f"than the ledger timeout (--ledger-timeout-s {self.timeout_s:g}): the wait is "
                "part of the round trip it bounds"
            )
