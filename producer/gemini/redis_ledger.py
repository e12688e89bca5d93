"""The budget ledger in Redis (``--ledger redis://HOST:PORT/DB``): one ledger for producers
on several hosts, with the file ledger's rules (``ledger.py``).

Atomicity: every operation that reads and changes the ledger is **one Lua script**
(``register_script``: EVALSHA, EVAL when the server lost it), so the check and the
write of a reservation, or the one move of a call out of ``reserved`` with its
adjustment of the sums, happen with no other client's command in between, across
processes and hosts. The usage a provider reports is judged in Python first
(``check_usage``, the same code as the file ledger) from the call's immutable
fields; the script then charges it only if the call is still ``reserved`` (and
never more than the reservation, never less than 0), so a call leaves
``reserved`` exactly once however many settlers race.

Money is counted in integer **pico-dollars** (1e-12 USD; a token at 0.25 USD per
million is 250,000): no float drift, and every amount stays below 2**53, where Lua's
numbers are exact (a budget is at most ``MAX_BUDGET_USD``). A rate is rounded to
1e-6 USD per million tokens.

Key layout, every key under a configurable prefix (default ``replywire:ledger:``)::

    PREFIX committed     hash  total -> pico-USD committed by everyone
                               identity:NAME -> pico-USD committed by NAME
                               (settled costs + reservations still held; never expire)
    PREFIX seq           string, the number of reservations ever granted (never expires)
    PREFIX call:CALL_ID  hash  one call: call_id, identity, seq, state
                               (reserved | settled | failed | released), reserved_pusd,
                               cost_pusd, prompt_tokens_estimate, max_output_tokens,
                               reserved_at, settled_at, meta (JSON), usage (JSON),
                               usage_rejected, reported_usage (JSON), failure, released

A settled or released call's hash expires ``ttl_s`` after it left ``reserved``
(``--ledger-ttl-s``); the sums keep counting it. A reserved or failed call's hash
does not expire: it holds money nobody knows the final cost of.

Redis that cannot be reached, or answers garbage (a script error, a key of the
wrong type, a value that is not a number, not Redis at all), fails closed with
``ledger_unavailable``: the detail (for the producer's trace) names the server
without its password. The client does not retry: a lost reply to a reservation
must not be replayed into a second one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from producer.gemini.ledger import (
    ANONYMOUS,
    FAILED,
    RELEASED,
    RESERVED,
    SETTLED,
    Rates,
    Settlement,
    charged_tokens,
    check_usage,
    estimate_prompt_tokens,
    shown,
)
from producer.store_urls import redacted as safe_location
from shared.errors import Reason, RequestRefused

DEFAULT_PREFIX: Final = "replywire:ledger:"
#: A settled or released call's hash is kept this long (7 days).
DEFAULT_TTL_S: Final = 7 * 24 * 3600
PICO_PER_USD: Final = 10**12
#: Sums below 2**53 (exact in Lua), even with a reservation as large as the budget on top.
MAX_BUDGET_USD: Final = 4000.0
TIMEOUT_S: Final = 5.0

T = TypeVar("T")

# KEYS: call hash, committed hash, seq. ARGV: worst, budget, per-identity budget, identity,
# then field/value pairs for the call hash.
RESERVE: Final = """
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists', 0} end
local total = tonumber(redis.call('HGET', KEYS[2], 'total') or '0')
local own = tonumber(redis.call('HGET', KEYS[2], 'identity:' .. ARGV[4]) or '0')
local worst = tonumber(ARGV[1])
if total + worst > tonumber(ARGV[2]) then return {'total', total} end
if own + worst > tonumber(ARGV[3]) then return {'identity', own} end
redis.call('HINCRBY', KEYS[2], 'total', ARGV[1])
redis.call('HINCRBY', KEYS[2], 'identity:' .. ARGV[4], ARGV[1])
local seq = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], 'seq', seq, 'state', 'reserved', unpack(ARGV, 5))
return {'ok', seq}
"""

# KEYS: call hash, committed hash. ARGV: the final state, the cost (settled), the TTL in
# seconds (0: none), then field/value pairs for the call hash.
LEAVE_RESERVED: Final = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing', ''} end
if state ~= 'reserved' then return {'already', state} end
local reserved = tonumber(redis.call('HGET', KEYS[1], 'reserved_pusd'))
local identity = redis.call('HGET', KEYS[1], 'identity')
local delta = 0
if ARGV[1] == 'settled' then
  local cost = tonumber(ARGV[2])
  if cost < 0 or cost > reserved then cost = reserved end
  delta = cost - reserved
  redis.call('HSET', KEYS[1], 'cost_pusd', string.format('%d', cost))
elseif ARGV[1] == 'released' then
  delta = -reserved
end
if delta ~= 0 then
  redis.call('HINCRBY', KEYS[2], 'total', string.format('%d', delta))
  redis.call('HINCRBY', KEYS[2], 'identity:' .. identity, string.format('%d', delta))
end
redis.call('HSET', KEYS[1], 'state', ARGV[1], unpack(ARGV, 4))
if tonumber(ARGV[3]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
local charged = tonumber(redis.call('HGET', KEYS[1], 'cost_pusd') or '-1')
return {'ok', charged, reserved}
"""


def pico_rate(usd_per_mtok: float) -> int:
    """pico-USD per token."""
    return round(usd_per_mtok * 1_000_000)


@dataclass(frozen=True, slots=True)
class RedisOptions:
    """Where the ledger's keys live, how long finished calls are kept, how long to wait."""

    prefix: str = DEFAULT_PREFIX
    ttl_s: int = DEFAULT_TTL_S
    timeout_s: float = TIMEOUT_S


class RedisLedger:
    def __init__(
        self,
        url: str,
        *,
        budget_usd: float,
        budget_per_identity_usd: float | None = None,
        rates: Rates | None = None,
        options: RedisOptions | None = None,
    ) -> None:
        options = options or RedisOptions()
        prefix, ttl_s, timeout_s = options.prefix, options.ttl_s, options.timeout_s
        per_identity = budget_usd if budget_per_identity_usd is None else budget_per_identity_usd
        if not budget_usd > 0 or not per_identity > 0:
            raise ValueError("the budget (and the per-identity budget) must be > 0")
        if budget_usd > MAX_BUDGET_USD or per_identity > MAX_BUDGET_USD:
            raise ValueError(f"the Redis ledger counts budgets up to {MAX_BUDGET_USD} USD")
        if ttl_s < 0:
            raise ValueError("the ledger TTL must be >= 0 seconds")
        self.url = url
        self.location = safe_location(url)
        self._password = urlsplit(url).password
        self.budget_usd = budget_usd
        self.budget_per_identity_usd = per_identity
        self.rates = rates or Rates()
        self._input_rate = pico_rate(self.rates.input_usd_per_mtok)
        self._output_rate = pico_rate(self.rates.output_usd_per_mtok)
        self._budget = round(budget_usd * PICO_PER_USD)
        self._per_identity = round(per_identity * PICO_PER_USD)
        self.prefix = prefix
        self.ttl_s = ttl_s
        pool = redis.ConnectionPool.from_url(
            url,
            decode_responses=True,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
        )
        self.client = redis.Redis(connection_pool=pool)
        self._reserve = self.client.register_script(RESERVE)
        self._leave = self.client.register_script(LEAVE_RESERVED)

    # --- keys and errors ------------------------------------------------------------------

    def _call_key(self, call_id: str) -> str:
        return f"{self.prefix}call:{call_id}"

    @property
    def _committed_key(self) -> str:
        return f"{self.prefix}committed"

    @property
    def _seq_key(self) -> str:
        return f"{self.prefix}seq"

    def _redis(self, what: str, operation: Callable[[], T]) -> T:
        """One round trip; anything but an answer is ``ledger_unavailable``."""
        try:
            return operation()
        except (redis.RedisError, OSError, ValueError, TypeError) as error:
            raise self._unavailable(what, error) from error

    def _unavailable(self, what: str, error: object) -> RequestRefused:
        detail = f"cannot {what} the ledger {self.location}: {type(error).__name__}: {error}"
        if self._password:
            detail = detail.replace(self._password, "***")
        return RequestRefused(Reason.LEDGER_UNAVAILABLE, detail)

    def _garbage(self, what: str, answer: object) -> RequestRefused:
        return self._unavailable(what, f"unexpected answer {shown(answer)}")

    def close(self) -> None:
        self.client.close()

    # --- the Ledger interface -------------------------------------------------------------

    def check(self) -> None:
        """Reach Redis once (at start) and read the sums: a broken ledger stops the producer."""
        sums = self._redis("read", lambda: self.client.hgetall(self._committed_key))
        seq = self._redis("read", lambda: self.client.get(self._seq_key))
        try:
            for value in [*sums.values(), seq or "0"]:
                int(value)
        except (TypeError, ValueError) as error:
            raise self._unavailable("read", error) from error

    def reserve(
        self,
        call_id: str,
        *,
        body: Mapping[str, Any],
        max_output_tokens: int,
        identity: str = ANONYMOUS,
        **meta: Any,
    ) -> float:
        """Reserve the worst case of one call, or refuse with ``budget_exhausted``."""
        prompt_estimate = estimate_prompt_tokens(body)
        worst = prompt_estimate * self._input_rate + max_output_tokens * self._output_rate
        worst_usd = worst / PICO_PER_USD
        if worst > self._budget or worst > self._per_identity:
            # Refused before Redis is asked: the sums stay far below 2**53.
            which = "budget" if worst > self._budget else "per-identity budget"
            raise RequestRefused(
                Reason.BUDGET_EXHAUSTED, f"worst case {worst_usd:.6f} > the {which} itself"
            )
        fields: dict[str, str | int] = {
            "call_id": call_id,
            "identity": identity,
            "reserved_pusd": worst,
            "prompt_tokens_estimate": prompt_estimate,
            "max_output_tokens": max_output_tokens,
            "reserved_at": repr(time.time()),
            "meta": json.dumps(meta, default=str),
        }
        args: list[str | int] = [worst, self._budget, self._per_identity, identity]
        for key, value in fields.items():
            args += [key, value]
        keys = [self._call_key(call_id), self._committed_key, self._seq_key]
        answer = self._redis("write", lambda: self._reserve(keys=keys, args=args))
        match answer:
            case ["ok", int()]:
                return worst_usd
            case ["total", int(total)]:
                raise RequestRefused(
                    Reason.BUDGET_EXHAUSTED,
                    f"committed {total / PICO_PER_USD:.6f} + worst case {worst_usd:.6f}"
                    f" > budget {self.budget_usd}",
                )
            case ["identity", int(own)]:
                raise RequestRefused(
                    Reason.BUDGET_EXHAUSTED,
                    f"identity committed {own / PICO_PER_USD:.6f} + worst case {worst_usd:.6f}"
                    f" > per-identity budget {self.budget_per_identity_usd}",
                )
            case ["exists", _]:
                raise ValueError(f"call {call_id} is already in the ledger")
        raise self._garbage("write", answer)

    def _entry(self, call_id: str) -> dict[str, str]:
        raw = self._redis("read", lambda: self.client.hgetall(self._call_key(call_id)))
        entry = {_text(key): _text(value) for key, value in raw.items()}
        if not entry:
            raise KeyError(call_id)
        if entry.get("state") != RESERVED:
            raise ValueError(f"call {call_id} is already {entry.get('state')}")
        return entry

    def _leave_reserved(
        self, call_id: str, state: str, cost: int = 0, **fields: str
    ) -> tuple[int, int | None]:
        """Move one ``reserved`` call to ``state`` (atomically: exactly once); its reservation
        and what it was charged (settled), in pico-USD."""
        ttl = self.ttl_s if state in {SETTLED, RELEASED} else 0
        args: list[str | int] = [state, cost, ttl, "settled_at", repr(time.time())]
        for key, value in fields.items():
            args += [key, value]
        keys = [self._call_key(call_id), self._committed_key]
        answer = self._redis("write", lambda: self._leave(keys=keys, args=args))
        match answer:
            case ["ok", int(charged), int(reserved)]:
                return reserved, None if charged < 0 else charged
            case ["missing", _]:
                raise KeyError(call_id)
            case ["already", str(now)]:
                raise ValueError(f"call {call_id} is already {now}")
        raise self._garbage("write", answer)

    def settle(self, call_id: str, usage: Mapping[str, object]) -> Settlement:
        """Charge the reported usage if it is plausible (``check_usage``), else the reservation."""
        entry = self._entry(call_id)
        try:
            reserved = int(entry["reserved_pusd"])
            rejected = check_usage(
                usage,
                prompt_estimate=int(entry["prompt_tokens_estimate"]),
                max_output_tokens=int(entry["max_output_tokens"]),
            )
        except (KeyError, ValueError) as error:
            raise self._unavailable("read", error) from error
        if rejected is None:
            prompt, output = charged_tokens(usage)
            cost = prompt * self._input_rate + output * self._output_rate
            fields = {"usage": json.dumps(dict(usage))}
        else:
            cost = reserved
            reported = {key: shown(value) for key, value in usage.items()}
            fields = {"usage_rejected": rejected, "reported_usage": json.dumps(reported)}
        reserved, charged = self._leave_reserved(call_id, SETTLED, cost, **fields)
        return Settlement(
            cost_usd=(reserved if charged is None else charged) / PICO_PER_USD,
            reserved_usd=reserved / PICO_PER_USD,
            usage_rejected=rejected,
        )

    def keep_reservation(self, call_id: str, why: str) -> None:
        """The request may have reached the provider but no usage came back: the worst case
        stays committed."""
        self._leave_reserved(call_id, FAILED, failure=why)

    def release(self, call_id: str, why: str) -> None:
        """The request never started to be sent: nothing was spent, the reservation goes."""
        self._leave_reserved(call_id, RELEASED, released=why)

    def totals(self, identity: str | None = None) -> dict[str, Any]:
        field = "total" if identity is None else f"identity:{identity}"
        committed = self._redis("read", lambda: self.client.hget(self._committed_key, field))
        seq = self._redis("read", lambda: self.client.get(self._seq_key))
        try:
            committed_pusd, entries = int(committed or 0), int(seq or 0)
        except ValueError as error:
            raise self._unavailable("read", error) from error
        return {
            "budget_usd": self.budget_usd,
            "budget_per_identity_usd": self.budget_per_identity_usd,
            "committed_usd": committed_pusd / PICO_PER_USD,
            "entries": entries,
        }

    def entries(self) -> list[dict[str, Any]]:
        """The calls whose hashes have not expired, oldest first (a SCAN: not a snapshot)."""
        pattern = _glob_escape(self.prefix) + "call:*"

        def read() -> list[dict[str, str]]:
            keys = list(self.client.scan_iter(match=pattern, count=500))
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.hgetall(key)
            return [row for row in pipe.execute() if row]

        try:
            rows = sorted((_decoded(row) for row in self._redis("read", read)), key=_seq)
        except (KeyError, ValueError) as error:
            raise self._unavailable("read", error) from error
        return rows


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _seq(entry: Mapping[str, Any]) -> int:
    return int(entry["seq"])


def _glob_escape(text: str) -> str:
    return "".join(f"\\{char}" if char in "*?[]\\" else char for char in text)


def _decoded(row: Mapping[str, str]) -> dict[str, Any]:
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
    for key in ("reserved_at", "settled_at"):
        if key in row:
            entry[key] = float(row[key])
    return entry
