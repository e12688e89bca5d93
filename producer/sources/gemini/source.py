"""Live Gemini as a source: ``streamGenerateContent?alt=sse`` through the validated pipeline.

Per request: verify the binding (a development case's, equal to the
recording's; or a question binding that hashes to itself), reserve the call's
worst-case cost in the budget ledger (charged to the caller's identity and to
the total), mark the entry sending, POST the documented body with the API key in
the ``x-goog-api-key`` header, and map the SSE events to frames with the lab's
adapter (``protocol.ProviderFrames``). An HTTP error before the stream refuses the
request with the provider's status mapped to a gRPC code
(``protocol.provider_error``).
Nothing is retried: a paid request is made at most once.

Every reservation leaves ``reserved`` exactly once (``GeminiSource.settle``):
settled from the reported usage (the ledger checks it), kept once the request
may have reached the provider (its headers started to be sent: httpcore's
``trace`` hook), released before that. Ledger writes run in a thread and are
waited for to their end even when the consumer cancels meanwhile (a thread
cannot be stopped: abandoning it would leave a reservation nobody records); the
cancellation is passed on afterwards.

A ledger that fails does not hold a reservation for good (``keeper``): a reserve
whose answer did not come back is asked again (it is idempotent) up to
``RESERVE_REREADS`` times, and if the stream is refused ``ledger_unavailable`` after
all, the reservation is ``abandon``-ed in the background (released if it was
written, or a tombstone a late copy of it finds). The entry is marked sending before
the request goes: if that fails, nothing is sent and the reservation is released.
A settle that fails is tried again in the background (the stream's end does not
wait for it); at shutdown (``aclose``) every plan still open is closed, and pending
moves get a last bounded try.

When the consumer cancels or vanishes, ``close()`` closes the upstream response
at once, so the provider stops generating (and billing) for it.

The provider's base URL must be ``https://`` (plain ``http://`` only to a
loopback address, e.g. the tests' fake server): the API key travels in a header.

Why one file: a paid call's whole life (reserve, mark sending, send, stream, close, settle,
capture) is in one place, so that every path that starts a call can be seen to settle it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import random
import uuid
from collections.abc import AsyncGenerator, Awaitable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

import httpx
import structlog

from producer.budget.entry_states import FAILED, RELEASED, SETTLED
from producer.budget.keeper import RESERVE_REREADS, Job, LedgerKeeper, LedgerPolicy, detail_of
from producer.budget.ledger import ANONYMOUS, AlreadyLeft, Ledger, NotWritten, Settlement
from producer.budget.usage import estimate_prompt_tokens, shown
from producer.metrics import record_ledger_spend
from producer.replylog import Entry, LogEnded
from producer.sources import Stall
from producer.sources.gemini.call_span import end_call_span, start_call_span
from producer.sources.gemini.capture import CallCapture, RunCapture
from producer.sources.gemini.protocol import (
    DEFAULT_BASE_URL,
    DEFAULT_MAX_OUTPUT_TOKENS,
    DEFAULT_MODEL,
    ProviderStream,
    provider_error,
    request_body,
)
from runtime.tracing import active
from shared.digest import digest
from shared.errors import ConfigurationError, RequestRefused
from shared.frames import Frame
from shared.questions import check_question_binding, is_question
from shared.reasons import Reason, registered
from shared.recording import Recording
from shared.requests import CheckedRequest, parse_binding
from shared.wire import codec_for
from shared.wire.chunking import Chunker

MAX_ERROR_BODY_BYTES: Final = 64 * 1024
LOOPBACK_NAMES: Final = frozenset({"localhost"})
T = TypeVar("T")


def check_base_url(url: str) -> str:
    """The provider's base URL, if the API key may be sent to it: ``https://``, or plain
    ``http://`` to a loopback address (127.0.0.0/8, ::1, localhost). Otherwise a
    ``ConfigurationError`` (the producer does not start). The URL is not echoed."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port  # a malformed port raises here
    except ValueError:
        raise ConfigurationError("--gemini-base-url is not a valid URL") from None
    if parts.scheme not in {"https", "http"} or not host:
        raise ConfigurationError("--gemini-base-url must be an https:// URL")
    if parts.scheme == "http" and not _is_loopback(host):
        raise ConfigurationError(
            "--gemini-base-url must be https:// (plain http:// only to a loopback address:"
            " 127.0.0.0/8, ::1, localhost): the API key travels in a header"
        )
    return url


def _is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True, kw_only=True)
class GeminiSettings:
    """What every call of a source shares (the API key is passed apart: it is a secret)."""

    model: str = DEFAULT_MODEL
    base_url: str = DEFAULT_BASE_URL
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    http_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        check_base_url(self.base_url)


@dataclass(slots=True)
class Call:
    """One paid provider call: its id, its evidence (``--record``) and its bound logger."""

    call_id: str
    capture: CallCapture | None
    log: structlog.typing.FilteringBoundLogger
    identity: str = ANONYMOUS
    #: Set (before any await) by the one ``GeminiSource.settle`` of the call.
    recorded: bool = False
    #: What settling charged (once it landed), and why the usage was not believed.
    charged: float | None = None
    usage_rejected: str | None = None
    #: The call's span when tracing is on (``producer/sources/gemini/call_span.py``), ended when
    #: the call is recorded.
    span: Any = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.identity, self.call_id)


def _answer_lost(error: BaseException | None) -> bool:
    """Whether ``error`` is the ledger failing in a way that may have changed it (its
    answer lost), not one that certainly changed nothing (``NotWritten``)."""
    return (
        isinstance(error, RequestRefused)
        and error.reason is Reason.LEDGER_UNAVAILABLE
        and not isinstance(error, NotWritten)
    )


async def run_to_the_end(work: Awaitable[T]) -> tuple[asyncio.Future[T], bool]:
    """Await ``work`` to its end even if the awaiting task is cancelled meanwhile; return
    it (done) and whether a cancellation arrived, which the caller must pass on."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            cancelled = True
    return task, cancelled


class GeminiPlan:
    needs_close = True  # the upstream response and the ledger reservation
    fixed_chunks: tuple[bytes, ...] | None = None  # made as the model answers
    reply_entries: tuple[Entry, ...] | None = None

    def __init__(
        self,
        source: GeminiSource,
        response: httpx.Response,
        *,
        checked: CheckedRequest,
        binding: Mapping[str, Any],
        call: Call,
    ) -> None:
        self.source = source
        self.response = response
        self.checked = checked
        self.call = call
        self.capture = call.capture
        # The one events -> frames loop, shared with producer.sources.gemini.convert.
        self.provider = ProviderStream(digest(binding), call.log)
        self.adapter = self.provider.adapter
        self.abort_details: Reason | None = None
        #: Not known in advance: the reply is logged as it is made (live_frames).
        self.reply_frames: tuple[Frame, ...] | None = None
        self.body_ended = False
        self._log = call.log
        self._closed = False
        self.description: dict[str, Any] = {
            "wire": checked.wire.value,
            "chunks": checked.plan.describe(),
            "model": source.settings.model,
            "call_id": call.call_id,
        }

    async def chunks(self) -> AsyncGenerator[bytes | Stall, None]:
        codec = codec_for(self.checked.wire)
        chunker = Chunker(self.checked.plan)
        # aclosing: closing this generator closes the upstream read inside _frames() too.
        async with aclosing(self._frames()) as batches:
            async for frames in batches:
                for frame in frames:
                    for chunk in chunker.feed(codec.encode_frame(frame)):
                        yield chunk
        # An event after the finish: no frame may follow the terminal. End the RPC instead.
        self.abort_details = registered(self.provider.abort)
        for chunk in chunker.flush():
            yield chunk
        if not self.adapter.finished and self.abort_details is None:
            self._log.warning("provider_stream_ended_without_finish")

    def live_frames(self) -> AsyncGenerator[Frame, None]:
        return self._live()

    async def _live(self) -> AsyncGenerator[Frame, None]:
        """The reply's frames for the reply log, as the provider's events complete them."""
        async with aclosing(self._frames()) as batches:
            async for frames in batches:
                for frame in frames:
                    yield frame
        if self.provider.abort is not None:  # an event after the finish: end in error
            raise LogEnded(self.provider.abort)
        if not self.adapter.finished:
            self._log.warning("provider_stream_ended_without_finish")

    async def _frames(self) -> AsyncGenerator[list[Frame], None]:
        """The frames each read of the body completes; a broken connection closes the stream."""
        provider = self.provider
        try:
            async for data in self.response.aiter_bytes():
                if self.capture is not None:
                    self.capture.received(data)
                yield provider.receive_data(data)
                if provider.closed:
                    break
            else:
                self.body_ended = True
                yield provider.end_of_input()
        except httpx.HTTPError as error:
            self._log.warning("provider_connection_lost", error=type(error).__name__)
            yield provider.failure(Reason.PROVIDER_CONNECTION_LOST)

    async def close(self, outcome: str) -> None:
        if self._closed:
            return
        self._closed = True
        self.source.forget(self)
        # Closing the response closes the upstream connection: no more tokens are generated.
        try:
            await self.response.aclose()
        except Exception as error:  # the call is settled whatever closing the response did
            self._log.warning("provider_close_failed", error=type(error).__name__)
        self._log.info(
            "provider_stream_closed",
            outcome=outcome,
            body_ended=self.body_ended,
            finish_reason=self.adapter.finish_reason,
            events=self.adapter.events,
        )
        finish = self.adapter.finish_reason
        await self.source.settle(
            self.call,
            usage=self.adapter.usage if self.adapter.finished else None,
            outcome=f"{outcome} (finish {finish or 'never reported'})",
            finish_reason=finish,
        )


class GeminiSource:
    regenerates = False
    name = "gemini"

    def __init__(
        self,
        recording: Recording,
        settings: GeminiSettings,
        *,
        api_key: str,
        ledger: Ledger,
        capture: RunCapture | None = None,
        policy: LedgerPolicy | None = None,
    ) -> None:
        self.recording = recording
        self.settings = settings
        self.ledger = ledger
        self.keeper = LedgerKeeper(ledger, policy)
        self.capture = capture
        self._api_key = api_key
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(settings.http_timeout_s, connect=10.0),
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=8),
            follow_redirects=False,
        )
        self._log: structlog.typing.FilteringBoundLogger = structlog.get_logger()
        #: Plans prepared and not closed yet: ``aclose`` closes them (and settles their calls).
        self._open: set[GeminiPlan] = set()
        self._jitter = random.Random()

    @property
    def url(self) -> str:
        base_url, model = self.settings.base_url.rstrip("/"), self.settings.model
        return f"{base_url}/v1beta/models/{model}:streamGenerateContent?alt=sse"

    def verify(self, checked: CheckedRequest) -> None:
        self.bind(checked)

    def start(self) -> None:
        """The ledger's background work: the owner lease, reconciliation (at once, then every
        ``--ledger-reconcile-s``), retried settles. Needs the running loop; idempotent."""
        self.keeper.start()

    def forget(self, plan: GeminiPlan) -> None:
        """``plan`` is closing (its call is settled by its own ``close``)."""
        self._open.discard(plan)

    def bind(self, checked: CheckedRequest) -> Mapping[str, Any]:
        if checked.fault is not None:
            raise RequestRefused(Reason.INVALID_REQUEST, "faults apply to the recording source")
        if not is_question(checked.case_id):
            self.recording.case(checked.case_id)  # the allowlist, before the binding
        supplied = parse_binding(checked.binding_json)
        if is_question(checked.case_id):
            binding = check_question_binding(supplied)
            if binding["case_id"] != checked.case_id:
                raise RequestRefused(Reason.REQUEST_BINDING_MISMATCH, "case id differs")
            return binding
        return self.recording.bind_request(checked.case_id, supplied).binding

    async def prepare(self, checked: CheckedRequest, *, identity: str = ANONYMOUS) -> GeminiPlan:
        """Reserve, mark sending, send, and return the open stream; ``identity`` is the caller
        charged. Whatever fails after the reservation, the call is recorded (settled, kept
        or released) before this returns or raises."""
        self.start()
        binding = self.bind(checked)
        body = request_body(binding, max_output_tokens=self.settings.max_output_tokens)
        call_id = uuid.uuid4().hex
        log = self._log.bind(call_id=call_id, model=self.settings.model, identity=identity)
        call = Call(call_id, None, log, identity)
        await self._reserve(call, body, case_id=checked.case_id)
        await self._mark_sending(call)
        try:
            if self.capture:
                call.capture = self.capture.start(
                    binding=binding, body=body, call_id=call_id, identity=identity
                )
        except BaseException:  # nothing was sent: the reservation goes
            await self.settle(call, usage=None, outcome="internal_error", sent=False)
            raise
        tracing = active()
        if tracing is not None:
            call.span = start_call_span(tracing, model=self.settings.model, url=self.url)
        response = await self._send(call, body)
        if call.span is not None:
            call.span.set_attribute("http.response.status_code", response.status_code)
        try:
            await self._check_status(call, response)
            log.info("provider_stream_opened", http_status=response.status_code)
            plan = GeminiPlan(self, response, checked=checked, binding=binding, call=call)
        except BaseException as error:
            if not call.recorded:  # anything between the answer and the plan: still recorded
                await response.aclose()
                cancelled = isinstance(error, asyncio.CancelledError)
                outcome = "cancelled_by_consumer" if cancelled else "internal_error"
                await self.settle(call, usage=None, outcome=outcome)
            raise
        self._open.add(plan)
        return plan

    async def _reserve(self, call: Call, body: Mapping[str, Any], *, case_id: str) -> None:
        """Reserve the call's worst case in the ledger, or raise with nothing held.

        A reserve whose answer did not come back (``ledger_unavailable``) may have been
        written, or may still be (a paused Redis runs it when it wakes): it is asked again,
        which answers the same reservation if there is one. If the stream is refused after
        all, the reservation is abandoned in the background (``_abandon``).
        """
        keeper, log = self.keeper, call.log
        if keeper.full:
            raise RequestRefused(
                Reason.LEDGER_UNAVAILABLE, f"{keeper.pending} ledger writes are still pending"
            )
        model, max_output_tokens = self.settings.model, self.settings.max_output_tokens
        keeper.hold(call.key)
        unanswered = tries = 0
        while True:
            tries += 1
            reserving, cancelled = await run_to_the_end(
                asyncio.to_thread(
                    self.ledger.reserve,
                    call.call_id,
                    body=body,
                    max_output_tokens=max_output_tokens,
                    identity=call.identity,
                    case_id=case_id,
                    model=model,
                )
            )
            error = reserving.exception()
            if error is None:
                break
            lost = _answer_lost(error)
            unanswered += lost
            if lost and not cancelled and tries <= RESERVE_REREADS:
                log.warning("budget_reserve_unanswered", tries=tries, detail=detail_of(error))
                try:
                    await asyncio.sleep(keeper.policy.backoff(tries, self._jitter.random()))
                except asyncio.CancelledError:
                    self._abandon(call, body, "cancelled_by_consumer")
                    raise
                continue
            # No reservation is used: one that may have been written (or still may be) goes.
            if unanswered:
                self._abandon(call, body, "cancelled_by_consumer" if cancelled else "refused")
            else:
                keeper.let_go(call.key)
            if isinstance(error, AlreadyLeft):  # the call id is taken: not this call's to use
                error = RequestRefused(Reason.LEDGER_UNAVAILABLE, str(error))
            if cancelled:
                raise asyncio.CancelledError from error
            raise error
        log.info(
            "budget_reserved",
            reserved_usd=reserving.result(),
            prompt_tokens_estimate=estimate_prompt_tokens(body),
            max_output_tokens=max_output_tokens,
            tries=tries,
        )
        if cancelled:
            # The consumer left while the reservation was being written: nothing was sent.
            await self.settle(call, usage=None, outcome="cancelled_by_consumer", sent=False)
            raise asyncio.CancelledError

    def _abandon(self, call: Call, body: Mapping[str, Any], outcome: str) -> None:
        """The producer gave up on a reserve whose answer was lost: in the background,
        release the reservation if it was written, else leave a tombstone that a late copy
        of the reserve finds (so it reserves nothing)."""
        why = f"reserve_unanswered ({outcome})"
        call.log.warning("budget_reserve_abandoning", outcome=outcome)

        def landed(answer: Any, tries: int) -> None:
            call.log.info("budget_reserve_abandoned", found=answer or RELEASED, tries=tries)

        self.keeper.submit(
            Job(
                "abandon",
                RELEASED,
                call.call_id,
                call.identity,
                lambda: self.ledger.abandon(
                    call.call_id,
                    body=body,
                    max_output_tokens=self.settings.max_output_tokens,
                    why=why,
                    identity=call.identity,
                ),
                landed,
                call.log,
            )
        )

    async def _mark_sending(self, call: Call) -> None:
        """Say in the ledger that the request may reach the provider, before it is sent. If
        that cannot be said, nothing is sent: the reservation is released."""
        marking, cancelled = await run_to_the_end(
            asyncio.to_thread(self.ledger.mark_sending, call.call_id, identity=call.identity)
        )
        error = marking.exception()
        if error is None and not cancelled:
            return
        if error is not None:
            call.log.warning("budget_sending_unmarked", detail=detail_of(error))
        outcome = "cancelled_by_consumer" if cancelled else "ledger_unavailable"
        await self.settle(call, usage=None, outcome=outcome, sent=False)
        if cancelled:
            raise asyncio.CancelledError from error
        assert error is not None  # not cancelled: the mark failed
        raise RequestRefused(
            Reason.LEDGER_UNAVAILABLE, f"the call could not be marked sending: {detail_of(error)}"
        ) from error

    async def _send(self, call: Call, body: Mapping[str, Any]) -> httpx.Response:
        """POST the request; if that fails, record the call (kept if it may have been sent)."""
        log = call.log
        sent = False

        async def on_trace(name: str, info: Mapping[str, Any]) -> None:
            # From here on the request may reach the provider (and be billed).
            nonlocal sent
            if name.endswith("send_request_headers.started"):
                sent = True

        try:
            return await self._client.send(
                self._client.build_request(
                    "POST",
                    self.url,
                    json=body,
                    headers={"x-goog-api-key": self._api_key},
                    extensions={"trace": on_trace},
                ),
                stream=True,
            )
        except BaseException as error:
            if isinstance(error, asyncio.CancelledError):
                log.info("provider_request_abandoned", request_sent=sent)
                outcome = "cancelled_by_consumer"
            elif isinstance(error, httpx.HTTPError):
                log.warning("provider_unreachable", error=type(error).__name__, request_sent=sent)
                outcome = "unreachable"
            else:
                outcome = "internal_error"
            await self.settle(call, usage=None, outcome=outcome, sent=sent)
            if isinstance(error, httpx.HTTPError):
                raise RequestRefused(Reason.PROVIDER_UNAVAILABLE, type(error).__name__) from error
            raise

    async def _check_status(self, call: Call, response: httpx.Response) -> None:
        """Refuse (and record the call) unless the provider answered 200."""
        try:
            if response.status_code != 200:
                body_bytes = await self._read_error(response)
                if call.capture is not None:
                    call.capture.received(body_bytes)
                refusal = provider_error(response.status_code, body_bytes)
                call.log.warning(
                    "provider_refused", http_status=response.status_code, reason=refusal.code
                )
                await self.settle(call, usage=None, outcome=refusal.code)
                raise refusal
        except BaseException as error:
            if not call.recorded:  # cut short while reading the error body
                await response.aclose()
                cancelled_now = isinstance(error, asyncio.CancelledError)
                outcome = "cancelled_by_consumer" if cancelled_now else "internal_error"
                await self.settle(call, usage=None, outcome=outcome)
            raise

    @staticmethod
    async def _read_error(response: httpx.Response) -> bytes:
        body = bytearray()
        try:
            async for data in response.aiter_bytes():
                body += data
                if len(body) > MAX_ERROR_BODY_BYTES:
                    break
        except httpx.HTTPError:
            pass
        finally:
            await response.aclose()
        return bytes(body[:MAX_ERROR_BODY_BYTES])

    async def settle(
        self,
        call: Call,
        *,
        usage: Mapping[str, object] | None,
        outcome: str,
        finish_reason: str | None = None,
        sent: bool = True,
    ) -> None:
        """Record the call exactly once: settle it from its usage; else keep its reservation
        if the request may have reached the provider (``sent``), or release it.

        Runs to its end even if the task is cancelled meanwhile (the cancellation is
        passed on afterwards): a ledger write cut short would leave the entry reserved.
        The ledger is tried once here; if it is unavailable the move is retried in the
        background (``keeper``) and this returns: a stream's end does not wait for it.
        """
        if call.recorded:
            return
        call.recorded = True
        recording, cancelled = await run_to_the_end(
            self._record(call, usage=usage, outcome=outcome, finish_reason=finish_reason, sent=sent)
        )
        tracing = active()
        if call.span is not None and tracing is not None:
            end_call_span(tracing, call, usage=usage, outcome=outcome,
                          finish_reason=finish_reason, sent=sent)  # fmt: skip
        if cancelled:
            raise asyncio.CancelledError
        recording.result()

    async def _record(
        self,
        call: Call,
        *,
        usage: Mapping[str, object] | None,
        outcome: str,
        finish_reason: str | None,
        sent: bool,
    ) -> None:
        await self.keeper.run(self._move(call, usage=usage, outcome=outcome, sent=sent))
        if call.capture is not None:
            await call.capture.finish(
                outcome=outcome if sent else f"{outcome} (never sent: reservation released)",
                finish_reason=finish_reason,
                usage=None if usage is None else {k: shown(v) for k, v in usage.items()},
                usage_rejected=call.usage_rejected,
                estimated_usd=call.charged,
            )

    def _move(
        self, call: Call, *, usage: Mapping[str, object] | None, outcome: str, sent: bool
    ) -> Job:
        """The one move of the call out of ``reserved``, as a job the keeper may retry."""
        ledger, log, call_id, identity = self.ledger, call.log, call.call_id, call.identity
        if usage is not None:

            def settled(settlement: Settlement | None, tries: int) -> None:
                if settlement is None:  # never: a settled entry says what it charged
                    log.info("budget_settled", tries=tries)
                    return
                call.charged, call.usage_rejected = settlement.cost_usd, settlement.usage_rejected
                if settlement.usage_rejected is not None:
                    # Implausible usage (negative, huge, not an integer, missing): the worst
                    # case reserved for the call is what it is charged.
                    log.warning(
                        "budget_usage_rejected",
                        why=settlement.usage_rejected,
                        reported={key: shown(value) for key, value in usage.items()},
                        reserved_usd=settlement.reserved_usd,
                    )
                record_ledger_spend(settlement.cost_usd)
                log.info(
                    "budget_settled",
                    cost_usd=settlement.cost_usd,
                    reserved_usd=settlement.reserved_usd,
                    usage_rejected=settlement.usage_rejected is not None,
                    usage=None if settlement.usage_rejected else dict(usage),
                    tries=tries,
                )

            return Job(
                "settle", SETTLED, call_id, identity,
                lambda: ledger.settle(call_id, usage, identity=identity), settled, log,
            )  # fmt: skip
        if sent:
            return Job(
                "keep", FAILED, call_id, identity,
                lambda: ledger.keep_reservation(call_id, outcome, identity=identity),
                lambda _answer, tries: log.info(
                    "budget_reservation_kept", outcome=outcome, tries=tries
                ),
                log,
            )  # fmt: skip
        return Job(
            "release", RELEASED, call_id, identity,
            lambda: ledger.release(call_id, outcome, identity=identity),
            lambda _answer, tries: log.info("budget_released", outcome=outcome, tries=tries),
            log,
        )  # fmt: skip

    async def aclose(self) -> None:
        """At shutdown (after the server stopped): close every plan still open (its call is
        settled), give pending ledger moves a last bounded try, let go of the ledger."""
        for plan in list(self._open):
            try:
                await plan.close("producer_shutdown")
            except Exception:
                self._log.exception("plan_close_failed", outcome="producer_shutdown")
        await self._client.aclose()
        await self.keeper.aclose()
