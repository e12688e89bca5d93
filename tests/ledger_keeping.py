"""The ledger keeper as the ledger-fault tests drive it, with a store and without: a fast
policy, a move that never lands, and a settle job."""

from __future__ import annotations

from typing import Any

import structlog

from replywire.producer.budget.keeper import Job, LedgerPolicy
from replywire.producer.budget.ledger import Ledger
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason
from tests.budget_values import GOOD_USAGE

#: Short enough that a paused server makes an operation fail at once, long enough for a
#: loaded machine to answer.
TIMEOUT_S = 0.3


def policy(**overrides: float) -> LedgerPolicy:
    fields: dict[str, Any] = {
        "lease_s": 1.2, "timeout_s": TIMEOUT_S, "reconcile_s": 0.2, "retry_s": 0.02,
        "retry_cap_s": 0.1, "retry_jitter": 0.5, "final_try_s": 3.0, **overrides,
    }  # fmt: skip
    return LedgerPolicy(**fields)


def unavailable() -> None:
    """A move that never lands (the store stays unavailable)."""
    raise RequestRefused(Reason.LEDGER_UNAVAILABLE, "the ledger is gone")


def settle_job(ledger: Ledger, call_id: str, landed: list[tuple[Any, int]]) -> Job:
    return Job(
        "settle", "settled", call_id, "anonymous",
        lambda: ledger.settle(call_id, GOOD_USAGE),
        lambda answer, tries: landed.append((answer, tries)),
        structlog.get_logger().bind(call_id=call_id),
    )  # fmt: skip
