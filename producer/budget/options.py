"""How a budget ledger is kept: the Redis ledger's key prefix and how long it keeps a finished
call, and how long one operation of either ledger waits. Apart from ``redis_ledger`` so that
a producer that keeps its ledger in a file, or none, never imports the Redis client (a
tenth of a second of every start)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from replywire.producer.budget.ledger import TIMEOUT_S

DEFAULT_PREFIX: Final = "replywire:ledger:"
#: A settled or released call's hash is kept this long (7 days).
DEFAULT_TTL_S: Final = 7 * 24 * 3600


@dataclass(frozen=True, slots=True)
class RedisOptions:
    """Where the ledger's keys live, how long finished calls are kept (Redis only), how long
    one operation waits (both ledgers: a Redis round trip, the file ledger's lock)."""

    prefix: str = DEFAULT_PREFIX
    ttl_s: int = DEFAULT_TTL_S
    timeout_s: float = TIMEOUT_S
