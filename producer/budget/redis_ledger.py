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

Money is counted in integer pico-dollars, under the key layout of ``redis_values``.

A settled or released call's hash expires ``ttl_s`` after it left ``reserved``
(``--ledger-ttl-s``); the sums keep counting it. A reserved or failed call's hash
does not expire: it holds money nobody knows the final cost of.

Redis that cannot be reached, or answers garbage (a script error, a key of the
wrong type, a value that is not a number, not Redis at all), fails closed with
``ledger_unavailable``: the detail (for the producer's trace) names the server
without its password. The client itself never retries a command; what makes a retry
safe is in the scripts: a reserve is idempotent per call (a lost answer is asked for
again, never turned into a second reservation), a move out of ``reserved`` happens
once (a retried one finds its own earlier move: ``AlreadyLeft``), and a reserve given
up on is ``abandon``-ed (released, or a tombstone that a late copy of it finds).

The scripts are in ``redis_scripts``; the moves they make are the table of
``entry_states``, which ``tests/integration/test_ledger_lifecycle.py`` checks them against.
The writes before a call is sent wait for replicas with ``--ledger-durability``
(``redis_durable``).

One file past 500 lines: one ledger, whose operations share its key layout, its client and
its error mapping; its scripts, values and durable writes are modules of their own.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

import redis
from redis.exceptions import RedisClusterException

from replywire.producer.budget.entry_states import FAILED, RELEASED, RESERVED, SETTLED
from replywire.producer.budget.ledger import ANONYMOUS, AlreadyLeft, Owner, Settlement
from replywire.producer.budget.options import RedisOptions
from replywire.producer.budget.redis_durable import write_and_wait
from replywire.producer.budget.redis_scripts import (
    ABANDON,
    LEAVE_RESERVED,
    MARK_SENDING,
    RECONCILE,
    RESERVE,
)
from replywire.producer.budget.redis_values import (
    MAX_BUDGET_USD,
    PICO_PER_USD,
    decoded,
    glob_escape,
    key_part,
    pico_rate,
    seq_of,
    text,
)
from replywire.producer.budget.usage import (
    Rates,
    charged_tokens,
    check_usage,
    estimate_prompt_tokens,
    shown,
)
from replywire.producer.redis_clients import sync_client
from replywire.producer.replylog.durability import Mode
from replywire.producer.store_urls import NOT_A_CLUSTER, ClusterNode, parse_store, refuse_cluster
from replywire.producer.store_urls import redacted as safe_location
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason

T = TypeVar("T")
SCRIPTS = (RESERVE, MARK_SENDING, LEAVE_RESERVED, RECONCILE, ABANDON)


class RedisLedger:
    def __init__(
        self,
        url: str,
        *,
        budget_usd: float,
        budget_per_identity_usd: float | None = None,
        rates: Rates | None = None,
        options: RedisOptions | None = None,
        owner: Owner | None = None,
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
        if not timeout_s > 0:
            raise ValueError("the ledger timeout must be > 0 seconds")
        self.url = url
        self.location = safe_location(url)
        self._password = urlsplit(url).password
        self.budget_usd = budget_usd
        self.budget_per_identity_usd = per_identity
        self.rates = rates or Rates()
        self.owner = owner or Owner.new()
        self._input_rate = pico_rate(self.rates.input_usd_per_mtok)
        self._output_rate = pico_rate(self.rates.output_usd_per_mtok)
        self._budget = round(budget_usd * PICO_PER_USD)
        self._per_identity = round(per_identity * PICO_PER_USD)
        self.store = parse_store(url)
        # On a Redis Cluster every key of the ledger is inside one hash tag, the prefix's:
        # a reserve checks and moves the sums and the call's entry in one script, so they
        # share a slot (and the ledger's load is one master's).
        self.prefix = f"{{{prefix}}}" if self.store.cluster else prefix
        self.ttl_s = ttl_s
        self._timeout_s = timeout_s
        self.durability = options.durability
        self._client: Any = None
        self._scripts: dict[str, Any] = {}

    @property
    def client(self) -> Any:
        """The Redis client, made at its first use (a cluster's reads the cluster's slots
        then: what fails there is ``ledger_unavailable`` as any other round trip)."""
        if self._client is None:
            client = sync_client(self.store, timeout_s=self._timeout_s, decode_responses=True)
            self._scripts = {text: client.register_script(text) for text in SCRIPTS}
            self._client = client
        return self._client

    def _script(self, text: str) -> Any:
        """One of ``SCRIPTS``, registered on the client (made first if need be)."""
        return self._scripts[text] if self.client is not None else None

    # --- keys and errors ------------------------------------------------------------------

    def call_key(self, call_id: str, identity: str = ANONYMOUS) -> str:
        return f"{self.prefix}call:{key_part(identity)}:{key_part(call_id)}"

    def lease_key(self, owner_id: str) -> str:
        return f"{self.prefix}owner:{key_part(owner_id)}"

    @property
    def _committed_key(self) -> str:
        return f"{self.prefix}committed"

    @property
    def _seq_key(self) -> str:
        return f"{self.prefix}seq"

    @property
    def _reserved_key(self) -> str:
        return f"{self.prefix}reserved"

    @property
    def _lease_ms(self) -> int:
        return max(1, round(self.owner.lease_s * 1000))

    @property
    def _lease_value(self) -> str:
        return json.dumps(self.owner.describe())

    def _redis(self, what: str, operation: Callable[[], T]) -> T:
        """One round trip; anything but an answer is ``ledger_unavailable``."""
        try:
            return operation()
        except (redis.RedisError, RedisClusterException, OSError, ValueError, TypeError) as error:
            raise self._unavailable(what, error) from error

    def _durable_write(self, script: str, keys: list[str], args: list[Any]) -> Any:
        """A write before a call is sent: with ``--ledger-durability``, on its replicas too
        (``redis_durable``: a wait answered short is ``ledger_unavailable``)."""
        if self.durability.mode is Mode.NONE:
            return self._redis("write", lambda: self._script(script)(keys=keys, args=args))
        fence, wanted = f"{self.prefix}durable", self.durability
        return self._redis(
            "write", lambda: write_and_wait(self.client, script, keys, args, fence, wanted)
        )

    def _unavailable(self, what: str, error: object) -> RequestRefused:
        detail = f"cannot {what} the ledger {self.location}: {type(error).__name__}: {error}"
        if self._password:
            detail = detail.replace(self._password, "***")
        return RequestRefused(Reason.LEDGER_UNAVAILABLE, detail)

    def _garbage(self, what: str, answer: object) -> RequestRefused:
        return self._unavailable(what, f"unexpected answer {shown(answer)}")

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    # --- the Ledger interface -------------------------------------------------------------

    def check(self) -> None:
        """Reach Redis once (at start) and read the sums: a broken ledger stops the producer,
        and so does a Redis Cluster node named as a lone server, or a lone server named as
        a cluster (``ClusterNode``)."""
        if self.store.cluster:
            try:
                self.client.ping(target_nodes="all")
            except RedisClusterException as error:  # "Cluster mode is not enabled on this node"
                raise ClusterNode(NOT_A_CLUSTER) from error
            except redis.RedisError as error:
                raise self._unavailable("read", error) from error
        else:
            refuse_cluster(self._redis("read", lambda: self.client.info("cluster")))
        sums = self._redis("read", lambda: self.client.hgetall(self._committed_key))
        seq = self._redis("read", lambda: self.client.get(self._seq_key))
        try:
            for value in [*sums.values(), seq or "0"]:
                int(value)
        except (TypeError, ValueError) as error:
            raise self._unavailable("read", error) from error

    def _reservation(
        self, call_id: str, body: Mapping[str, Any], max_output_tokens: int, identity: str
    ) -> tuple[int, dict[str, str | int]]:
        """The worst case (pico-USD) and the fields of a reservation of this call."""
        prompt_estimate = estimate_prompt_tokens(body)
        worst = prompt_estimate * self._input_rate + max_output_tokens * self._output_rate
        return worst, {
            "call_id": call_id,
            "identity": identity,
            "owner": self.owner.id,
            "reserved_pusd": worst,
            "prompt_tokens_estimate": prompt_estimate,
            "max_output_tokens": max_output_tokens,
            "reserved_at": repr(time.time()),
        }

    def reserve(
        self,
        call_id: str,
        *,
        body: Mapping[str, Any],
        max_output_tokens: int,
        identity: str = ANONYMOUS,
        **meta: Any,
    ) -> float:
        """Reserve the worst case of one call, or refuse with ``budget_exhausted``; the same
        call asked again answers the same reservation."""
        worst, fields = self._reservation(call_id, body, max_output_tokens, identity)
        worst_usd = worst / PICO_PER_USD
        if worst > self._budget or worst > self._per_identity:
            # Refused before Redis is asked: the sums stay far below 2**53.
            which = "budget" if worst > self._budget else "per-identity budget"
            raise RequestRefused(
                Reason.BUDGET_EXHAUSTED, f"worst case {worst_usd:.6f} > the {which} itself"
            )
        fields["meta"] = json.dumps(meta, default=str)
        args: list[str | int] = [
            worst, self._budget, self._per_identity, identity, self.owner.id, self._lease_ms,
            self._lease_value, fields["prompt_tokens_estimate"], max_output_tokens,
        ]  # fmt: skip
        for key, value in fields.items():
            args += [key, value]
        keys = [
            self.call_key(call_id, identity), self._committed_key, self._seq_key,
            self._reserved_key, self.lease_key(self.owner.id),
        ]  # fmt: skip
        answer = self._durable_write(RESERVE, keys, args)
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
            case ["exists", str(state), str(by)]:
                raise AlreadyLeft(call_id, state, by)
        raise self._garbage("write", answer)

    def mark_sending(self, call_id: str, *, identity: str = ANONYMOUS) -> None:
        """Say the request may reach the provider from now on (before it is sent)."""
        keys = [self.call_key(call_id, identity), self.lease_key(self.owner.id)]
        args: list[str | int] = [
            self.owner.id,
            repr(time.time()),
            self._lease_ms,
            self._lease_value,
        ]
        answer = self._durable_write(MARK_SENDING, keys, args)
        match answer:
            case ["ok", _, _]:
                return
            case ["missing", _, _]:
                raise KeyError(call_id)
            case ["already", str(state), str(by)]:
                raise AlreadyLeft(call_id, state, by)
        raise self._garbage("write", answer)

    def _entry(self, call_id: str, identity: str) -> dict[str, str]:
        key = self.call_key(call_id, identity)
        raw = self._redis("read", lambda: self.client.hgetall(key))
        entry = {text(name): text(value) for name, value in raw.items()}
        if not entry:
            raise KeyError(call_id)
        if entry.get("state") != RESERVED:
            raise self._already(call_id, entry)
        return entry

    def _already(self, call_id: str, entry: Mapping[str, str]) -> AlreadyLeft:
        state = entry.get("state", "unreadable")
        settlement = None
        if state == SETTLED:
            try:
                settlement = Settlement(
                    cost_usd=int(entry["cost_pusd"]) / PICO_PER_USD,
                    reserved_usd=int(entry["reserved_pusd"]) / PICO_PER_USD,
                    usage_rejected=entry.get("usage_rejected") or None,
                )
            except (KeyError, ValueError) as error:
                raise self._unavailable("read", error) from error
        return AlreadyLeft(call_id, state, entry.get("settled_by", ""), settlement)

    def _leave_reserved(
        self, call_id: str, identity: str, state: str, cost: int = 0, **fields: str
    ) -> tuple[int, int | None]:
        """Move one ``reserved`` call to ``state`` (atomically: exactly once); its reservation
        and what it was charged (settled), in pico-USD."""
        ttl = self.ttl_s if state in {SETTLED, RELEASED} else 0
        args: list[str | int] = [state, cost, ttl, "settled_at", repr(time.time()),
                                 "settled_by", self.owner.id]  # fmt: skip
        for key, value in fields.items():
            args += [key, value]
        keys = [self.call_key(call_id, identity), self._committed_key, self._reserved_key]
        answer = self._redis("write", lambda: self._script(LEAVE_RESERVED)(keys=keys, args=args))
        match answer:
            case ["ok", int(charged), int(reserved)]:
                return reserved, None if charged < 0 else charged
            case ["missing"]:
                raise KeyError(call_id)
            case ["already", str(now), str(by), str(cost_text), str(held), str(rejected)]:
                raise self._already(
                    call_id,
                    {"state": now, "settled_by": by, "cost_pusd": cost_text,
                     "reserved_pusd": held, "usage_rejected": rejected},
                )  # fmt: skip
        raise self._garbage("write", answer)

    def settle(
        self, call_id: str, usage: Mapping[str, object], *, identity: str = ANONYMOUS
    ) -> Settlement:
        """Charge the reported usage if it is plausible (``check_usage``), else the reservation."""
        entry = self._entry(call_id, identity)
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
        reserved, charged = self._leave_reserved(call_id, identity, SETTLED, cost, **fields)
        return Settlement(
            cost_usd=(reserved if charged is None else charged) / PICO_PER_USD,
            reserved_usd=reserved / PICO_PER_USD,
            usage_rejected=rejected,
        )

    def keep_reservation(self, call_id: str, why: str, *, identity: str = ANONYMOUS) -> None:
        """The request may have reached the provider but no usage came back: the worst case
        stays committed."""
        self._leave_reserved(call_id, identity, FAILED, failure=why)

    def release(self, call_id: str, why: str, *, identity: str = ANONYMOUS) -> None:
        """The request never started to be sent: nothing was spent, the reservation goes."""
        self._leave_reserved(call_id, identity, RELEASED, released=why)

    def abandon(
        self,
        call_id: str,
        *,
        body: Mapping[str, Any],
        max_output_tokens: int,
        why: str,
        identity: str = ANONYMOUS,
    ) -> str:
        """Release a reserve the producer gave up on, or leave a tombstone in its place."""
        _worst, fields = self._reservation(call_id, body, max_output_tokens, identity)
        args: list[str | int] = [self.owner.id, self.ttl_s, repr(time.time()), why]
        fields["tombstone"] = 1
        for key, value in fields.items():
            args += [key, value]
        keys = [self.call_key(call_id, identity), self._committed_key, self._reserved_key,
                self._seq_key]  # fmt: skip
        answer = self._redis("write", lambda: self._script(ABANDON)(keys=keys, args=args))
        match answer:
            case [("tombstoned" | "released") as done]:
                return str(done)
            case ["already", str(now), str(by), str(cost_text), str(held), str(rejected)]:
                raise self._already(
                    call_id,
                    {"state": now, "settled_by": by, "cost_pusd": cost_text,
                     "reserved_pusd": held, "usage_rejected": rejected},
                )  # fmt: skip
        raise self._garbage("write", answer)

    def refresh_lease(self) -> bool:
        key, value, ms = self.lease_key(self.owner.id), self._lease_value, self._lease_ms
        before = self._redis("write", lambda: self.client.set(key, value, px=ms, get=True))
        return before is not None

    def drop_lease(self) -> None:
        key = self.lease_key(self.owner.id)
        self._redis("write", lambda: self.client.delete(key))

    def reconcile(self) -> list[dict[str, Any]]:
        """Move the reserved calls whose owner's lease lapsed (another owner's, never this
        one's): released if never marked sending, failed (kept) if it may have been sent."""
        keys = sorted(self._redis("read", lambda: self.client.smembers(self._reserved_key)))

        def owners_of() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.hmget(key, "owner", "call_id", "identity")
            return list(pipe.execute())

        rows = self._redis("read", owners_of) if keys else []
        others = sorted({row[0] for row in rows if row[0] and row[0] != self.owner.id})

        def leases() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for owner in others:
                pipe.exists(self.lease_key(owner))
            return list(pipe.execute())

        alive = dict(zip(others, self._redis("read", leases), strict=True)) if others else {}
        moved: list[dict[str, Any]] = []
        now = repr(time.time())
        for key, (owner, call_id, identity) in zip(keys, rows, strict=True):
            if owner == self.owner.id or (owner and alive.get(owner)):
                continue
            held_by = owner or ""  # a hash gone (or without an owner): the script forgets it
            script_keys = [key, self._committed_key, self._reserved_key, self.lease_key(held_by)]
            args: list[str | int] = [held_by, self.ttl_s, now, self.owner.reconciler]
            answer = self._redis(
                "write", functools.partial(self._script(RECONCILE), keys=script_keys, args=args)
            )
            match answer:
                case [(str(state)), int(reserved)] if state in {FAILED, RELEASED}:
                    moved.append(
                        {"call_id": call_id, "identity": identity, "owner": held_by,
                         "state": state, "reserved_usd": reserved / PICO_PER_USD}
                    )  # fmt: skip
                case [("gone" | "foreign" | "alive"), int()]:
                    continue
                case _:
                    raise self._garbage("write", answer)
        return moved

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
        pattern = glob_escape(self.prefix) + "call:*"

        def read() -> list[dict[str, str]]:
            keys = list(self.client.scan_iter(match=pattern, count=500))
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.hgetall(key)
            return [row for row in pipe.execute() if row]

        try:
            rows = sorted((decoded(row) for row in self._redis("read", read)), key=seq_of)
        except (KeyError, ValueError) as error:
            raise self._unavailable("read", error) from error
        return rows
