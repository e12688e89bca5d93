"""``--ledger``: a path is the file ledger; ``redis://``, ``rediss://`` or ``unix://`` (the
scheme in any case, see ``producer.store_urls``) the Redis ledger; any other ``scheme://``
is refused, never taken for a file name."""

from __future__ import annotations

from pathlib import Path

from replywire.producer.budget.file_ledger import BudgetLedger
from replywire.producer.budget.ledger import Ledger, Owner
from replywire.producer.budget.options import RedisOptions
from replywire.producer.budget.usage import Rates
from replywire.producer.store_urls import StoreKind, parse_store


def is_redis_url(spec: str) -> bool:
    """Whether ``spec`` names the Redis ledger (raises ``StoreError`` for an unknown scheme)."""
    return parse_store(spec, files=True).kind is StoreKind.REDIS


def open_ledger(
    spec: str,
    *,
    budget_usd: float,
    budget_per_identity_usd: float | None = None,
    rates: Rates | None = None,
    options: RedisOptions | None = None,
    owner: Owner | None = None,
) -> Ledger:
    """``redis://HOST:PORT/DB`` (``rediss://``, ``unix://``): the Redis ledger; a path: the
    file ledger (``options``' prefix and TTL apply to Redis only, its timeout to both: a
    Redis round trip, the file's lock). Any other ``scheme://`` is a ``StoreError`` (a
    ``ValueError``) whose message has no password in it. ``owner``: the process whose
    reservations these are (a new one by default)."""
    options = options or RedisOptions()
    store = parse_store(spec, files=True)
    if store.kind is StoreKind.REDIS:
        # The Redis client, imported when a Redis is asked for: a tenth of a second of a start.
        from replywire.producer.budget.redis_ledger import RedisLedger  # noqa: PLC0415

        return RedisLedger(
            store.target,
            budget_usd=budget_usd,
            budget_per_identity_usd=budget_per_identity_usd,
            rates=rates,
            options=options,
            owner=owner,
        )
    return BudgetLedger(
        Path(store.target),
        budget_usd=budget_usd,
        budget_per_identity_usd=budget_per_identity_usd,
        rates=rates,
        owner=owner,
        timeout_s=options.timeout_s,
    )
