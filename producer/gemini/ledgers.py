"""``--ledger``: a path is the file ledger, ``redis://HOST:PORT/DB`` the Redis ledger."""

from __future__ import annotations

from pathlib import Path

from producer.gemini.ledger import BudgetLedger, Ledger, Rates
from producer.gemini.redis_ledger import DEFAULT_PREFIX, DEFAULT_TTL_S, RedisLedger, RedisOptions


def is_redis_url(spec: str) -> bool:
    return spec.startswith(("redis://", "rediss://"))


def open_ledger(
    spec: str,
    *,
    budget_usd: float,
    budget_per_identity_usd: float | None = None,
    rates: Rates | None = None,
    prefix: str | None = None,
    ttl_s: int | None = None,
) -> Ledger:
    """``redis://HOST:PORT/DB`` (or ``rediss://``): the Redis ledger; anything else is the
    path of the file ledger (``prefix`` and ``ttl_s`` apply to Redis only)."""
    if is_redis_url(spec):
        return RedisLedger(
            spec,
            budget_usd=budget_usd,
            budget_per_identity_usd=budget_per_identity_usd,
            rates=rates,
            options=RedisOptions(
                prefix=DEFAULT_PREFIX if prefix is None else prefix,
                ttl_s=DEFAULT_TTL_S if ttl_s is None else ttl_s,
            ),
        )
    return BudgetLedger(
        Path(spec),
        budget_usd=budget_usd,
        budget_per_identity_usd=budget_per_identity_usd,
        rates=rates,
    )
