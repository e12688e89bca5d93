"""What the producer opens from its flags: its stores (``--ledger``, ``--reply-log``, each
checked once at start: one that does not answer is one line and exit 2) and its source
(the recording's or Gemini's), for ``producer.cli`` to serve with."""

from __future__ import annotations

import argparse
import os

from replywire.producer.budget.keeper import (
    LedgerPolicy,
)
from replywire.producer.budget.ledger import Ledger, Owner
from replywire.producer.budget.options import RedisOptions
from replywire.producer.budget.stores import open_ledger
from replywire.producer.budget.usage import Rates
from replywire.producer.metrics import ProducerMetrics
from replywire.producer.replylog.durability import Durability, Mode
from replywire.producer.replylog.interface import LogLimits, ReaderLimits, ReplyLog
from replywire.producer.replylog.memory import MemoryReplyLog
from replywire.producer.sources import Source
from replywire.producer.sources.gemini.capture import RunCapture
from replywire.producer.sources.gemini.settings import GeminiSettings
from replywire.producer.sources.gemini.source import GeminiSource
from replywire.producer.sources.recording import RecordingSource
from replywire.producer.store_urls import ClusterNode, Store, StoreError, StoreKind, parse_store
from replywire.runtime.logs import (
    register_secret,
)
from replywire.runtime.recording_file import (
    load_chat_recording_or_explain,
    load_text_recording_or_explain,
)
from replywire.shared.errors import ConfigurationError, RequestRefused
from replywire.shared.recording import Recording


def store_of(flag: str, spec: str) -> Store:
    """``--ledger`` or ``--reply-log`` classified (``producer.store_urls``), its password
    registered with the trace scrubbers first; an unknown scheme is a ConfigurationError
    whose one line names the accepted ones and never the password."""
    try:
        store = parse_store(spec, memory=flag == "--reply-log", files=flag == "--ledger")
    except StoreError as error:
        raise ConfigurationError(f"{flag} {error}") from error
    for secret in store.secrets:
        register_secret(secret)
    return store


def ledger_durability(args: argparse.Namespace) -> Durability:
    """``--ledger-durability`` and its two flags, checked before anything is opened or
    logged: a Redis ledger's, and its wait shorter than ``--ledger-timeout-s`` (the round
    trip it is part of)."""
    durability = Durability(
        Mode(args.ledger_durability),
        args.ledger_durability_replicas,
        args.ledger_durability_timeout_s,
    )
    if durability.mode is Mode.NONE:
        return durability
    if store_of("--ledger", args.ledger).kind is not StoreKind.REDIS:
        raise ConfigurationError(
            "--ledger-durability waits for a Redis ledger's replicas: give --ledger "
            "redis://... or redis+cluster://..."
        )
    try:  # the options' own check: the wait within the round trip --ledger-timeout-s bounds
        RedisOptions(timeout_s=args.ledger_timeout_s, durability=durability)
    except ValueError as error:
        raise ConfigurationError(str(error)) from error
    return durability


def make_ledger(
    args: argparse.Namespace, per_identity: float | None, policy: LedgerPolicy
) -> Ledger:
    """The ledger ``--ledger`` names, checked once: a broken one stops the producer. A Redis
    URL's password is a secret (scrubbed from the trace; never in a message). Its owner is
    this process, with a lease of ``--ledger-lease-s``."""
    store = store_of("--ledger", args.ledger)
    shown_ledger = store.shown
    durability = ledger_durability(args)
    try:
        ledger = open_ledger(
            store.target,
            budget_usd=args.budget_usd,
            budget_per_identity_usd=per_identity,
            rates=Rates(args.input_usd_per_mtok, args.output_usd_per_mtok),
            options=RedisOptions(
                prefix=args.ledger_prefix,
                ttl_s=args.ledger_ttl_s,
                timeout_s=policy.timeout_s,
                durability=durability,
            ),
            owner=Owner.new(policy.lease_s),
        )
        ledger.check()
    except ClusterNode as error:
        raise ConfigurationError(f"--ledger {shown_ledger} {error}") from error
    except OSError as error:
        raise ConfigurationError(f"cannot use --ledger {shown_ledger}: {error.strerror}") from error
    except ValueError as error:  # a Redis URL or a Redis ledger setting it cannot take
        raise ConfigurationError(f"--ledger {shown_ledger}: {store.redact(str(error))}") from error
    except RequestRefused as error:
        raise ConfigurationError(
            f"--ledger {shown_ledger}: {store.redact(error.detail)}"
        ) from error
    return ledger


def make_source(args: argparse.Namespace, recording: Recording) -> Source:
    if args.source == "recording":
        return RecordingSource(
            recording, load_text_recording_or_explain(), load_chat_recording_or_explain()
        )
    api_key = os.environ.get("GEMINI_API_KEY", "")
    if not api_key:
        raise ConfigurationError("the gemini source needs GEMINI_API_KEY in the environment")
    register_secret(api_key)
    per_identity = args.budget_per_identity_usd  # the flags' validators: both > 0
    try:
        policy = LedgerPolicy(
            lease_s=args.ledger_lease_s,
            timeout_s=args.ledger_timeout_s,
            reconcile_s=args.ledger_reconcile_s,
            retry_s=args.ledger_retry_s,
            retry_cap_s=args.ledger_retry_cap_s,
            retry_jitter=args.ledger_retry_jitter,
            final_try_s=args.ledger_final_try_s,
        )
    except ValueError as error:
        raise ConfigurationError(str(error)) from error
    ledger = make_ledger(args, per_identity, policy)
    try:
        capture = RunCapture(args.record, model=args.model) if args.record else None
    except FileExistsError as error:
        raise ConfigurationError(str(error)) from error
    settings = GeminiSettings(
        model=args.model,
        base_url=args.gemini_base_url,
        max_output_tokens=args.max_output_tokens,
    )
    source = GeminiSource(
        recording, settings, api_key=api_key, ledger=ledger, capture=capture, policy=policy
    )
    # The owner lease, reconciliation (now: what a stopped producer left) and retried settles.
    source.start()
    return source


async def open_reply_log(
    args: argparse.Namespace, limits: LogLimits, metrics: ProducerMetrics | None = None
) -> ReplyLog:
    """The log ``--reply-log`` names, checked once: a Redis that does not answer stops
    the producer (exit 2). A shared log's readers are counted in ``metrics``."""
    store = store_of("--reply-log", args.reply_log)
    if store.kind is StoreKind.MEMORY:
        if args.reply_log_durability != "none":
            raise ConfigurationError(
                "--reply-log-durability waits for a shared log's replicas: give --reply-log "
                "redis://... or redis+cluster://..."
            )
        return MemoryReplyLog(limits)
    # The Redis client, imported when a Redis is asked for: a tenth of a second of a start.
    import redis  # noqa: PLC0415

    from replywire.producer.replylog.redis_log import RedisReplyLog  # noqa: PLC0415

    try:
        # Without tokens every caller is the one identity: its bound would be the whole.
        per_identity = args.reply_log_replies_read_per_identity
        readers = ReaderLimits(
            connections=args.reply_log_connections,
            writer_connections=args.reply_log_writer_connections,
            replies=args.reply_log_replies_read,
            per_identity=per_identity if args.auth_tokens else args.reply_log_replies_read,
        )
        durability = Durability(
            Mode(args.reply_log_durability),
            args.reply_log_durability_replicas,
            args.reply_log_durability_timeout_s,
        )
        log = RedisReplyLog(store, limits, readers=readers, durability=durability)
    except ValueError as error:
        detail = store.redact(str(error))
        raise ConfigurationError(f"--reply-log {store.shown}: {detail}") from error
    try:
        await log.check()
    except ClusterNode as error:
        await log.aclose()
        raise ConfigurationError(f"--reply-log {store.shown} {error}") from error
    except redis.RedisError as error:
        await log.aclose()
        raise ConfigurationError(
            f"cannot use --reply-log {store.shown}: {store.redact(str(error))}"
        ) from error
    if metrics is not None:
        followers = log.followers
        metrics.watch_reply_log(lambda: followers.active, lambda: followers.replies)
    return log
