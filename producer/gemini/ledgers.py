"""``--ledger``: a path is the file ledger, ``redis://HOST:PORT/DB`` the Redis ledger."""

from __future__ import annotations

from pathlib import Path

from producer.gemini.ledger import BudgetLedger, Ledger, Owner, Rates
from producer.gemini.redis_ledger import RedisLedger, RedisOptions


def is_redis_url(spec: str) -> bool:
    return spec.startswith(("redis://", "rediss://"))


def open_ledger(
    spec: str,
    *,
    budget_usd: float,
    budget_per_identity_usd: float | None = None,
    rates: Rates | None = None,
    options: RedisOptions | None = None,
    owner: Owner | None = None,
) -> Ledger:
    """``redis://HOST:PORT/DB`` (or ``rediss://``): the Redis ledger; anything else is the
    path of the file ledger (``options``' prefix and TTL apply to Redis only, its timeout
    to both: a Redis round trip, the file's lock). ``owner``: the process whose
    reservations these are (a new one by default)."""
    options = options or RedisOptions()
    if is_redis_url(spec):
        return RedisLedger(
            spec,
            budget_usd=budget_usd,
            budget_per_identity_usd=budget_per_identity_usd,
            rates=rates,
            options=options,
            owner=owner,
        )
    return BudgetLedger(
        Path(spec),
        budget_usd=budget_usd,
        budget_per_identity_usd=budget_per_identity_usd,
        rates=rates,
        owner=owner,
        timeout_s=options.timeout_s,
    )
