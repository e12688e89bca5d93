"""The Redis ledger's keys and values: names made into key parts, money as integers, and a
call's hash read back as the file ledger's entry.

Money is counted in integer **pico-dollars** (1e-12 USD; a token at 0.25 USD per
million is 250,000): no float drift, and every amount stays below 2**53, where Lua's
numbers are exact (a budget is at most ``MAX_BUDGET_USD``). A rate is rounded to
1e-6 USD per million tokens.

Key layout, every key under a configurable prefix (default ``replywire:ledger:``);
IDENTITY, CALL_ID and OWNER are percent-encoded (``urllib.parse.quote(..., safe='')``),
so no name can reach into another's key::

    PREFIX committed     hash  total -> pico-USD committed by everyone
                               identity:NAME -> pico-USD committed by NAME
                               (settled costs + reservations still held; never expire)
    PREFIX seq           string, the number of reservations ever granted (never expires)
    PREFIX reserved      set   the keys of the calls still ``reserved`` (what a
                               reconciler looks at; never expires)
    PREFIX owner:OWNER   string, a producer's lease (its host, pid and start, JSON),
                               expiring ``--ledger-lease-s`` after its last refresh
    PREFIX call:IDENTITY:CALL_ID
                         hash  one call: call_id, identity, owner, seq, state
                               (reserved | settled | failed | released), reserved_pusd,
                               cost_pusd, prompt_tokens_estimate, max_output_tokens,
                               reserved_at, sending_at, settled_at, settled_by, meta (JSON),
                               usage (JSON), usage_rejected, reported_usage (JSON),
                               failure, released
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote

PICO_PER_USD: Final = 10**12
#: Sums below 2**53 (exact in Lua), even with a reservation as large as the budget on top.
MAX_BUDGET_USD: Final = 4000.0


def pico_rate(usd_per_mtok: float) -> int:
    """pico-USD per token."""
    return round(usd_per_mtok * 1_000_000)


def key_part(name: str) -> str:
    """A name (identity, call id, owner) as one part of a key: percent-encoded, no ``:``."""
    return quote(name, safe="")


def text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def seq_of(entry: Mapping[str, Any]) -> int:
    return int(entry["seq"])


def glob_escape(text: str) -> str:
    return "".join(f"\\{char}" if char in "*?[]\\" else char for char in text)


def decoded(row: Mapping[str, str]) -> dict[str, Any]:
    """A call hash as the file ledger's entry (USD floats, JSON fields parsed)."""
    entry: dict[str, Any] = {**json.loads(row.get("meta", "{}")), **row}
    entry.pop("meta", None)
    entry["seq"] = int(row["seq"])
    entry["reserved_usd"] = int(row["reserved_pusd"]) / PICO_PER_USD
    cost = row.get("cost_pusd")
    entry["cost_usd"] = None if cost is None else int(cost) / PICO_PER_USD
    entry["usage"] = json.loads(row["usage"]) if "usage" in row else None
    if "reported_usage" in row:
        entry["reported_usage"] = json.loads(row["reported_usage"])
    for key in ("prompt_tokens_estimate", "max_output_tokens"):
        entry[key] = int(row[key])
    for key in ("reserved_at", "sending_at", "settled_at"):
        if key in row:
            entry[key] = float(row[key])
    return entry
