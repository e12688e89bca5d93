"""Live Gemini as a source: ``streamGenerateContent?alt=sse`` through the validated pipeline.

Per request: verify the binding (a development case's, equal to the recording's; a
question binding that hashes to itself; a text binding; or a chat binding, checked in full,
that names this source's model), reserve the call's worst-case cost in the
budget ledger (charged to the caller's identity and to the total), mark the entry
sending (both ``call_ledger``), POST the documented body with the API key in the
``x-goog-api-key`` header, and hand the open response to a ``plan.GeminiPlan``, which
maps the SSE events to frames with the lab's adapter (``protocol.ProviderFrames``). An
HTTP error before the stream refuses the request with the provider's status mapped to
a gRPC code (``protocol.provider_error``). Nothing is retried: a paid request is made
at most once.

Whatever fails after the reservation, the call is recorded (settled, kept or released:
``CallLedger.settle``) before ``prepare`` returns or raises: kept if its request may have
reached the provider. At shutdown (``aclose``) every plan still open is closed (its call
settled), and pending ledger moves get a last bounded try.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any, Final

import httpx
import structlog

from replywire.producer.budget.keeper import LedgerKeeper, LedgerPolicy
from replywire.producer.budget.ledger import ANONYMOUS, Ledger
from replywire.producer.sources import check_kind
from replywire.producer.sources.gemini.call_ledger import Call, CallLedger, cancelled_outcome
from replywire.producer.sources.gemini.call_span import start_call_span
from replywire.producer.sources.gemini.capture import RunCapture
from replywire.producer.sources.gemini.chat import chat_request_body
from replywire.producer.sources.gemini.plan import GeminiPlan
from replywire.producer.sources.gemini.protocol import (
    provider_error,
    request_body,
    text_request_body,
)
from replywire.producer.sources.gemini.settings import GeminiSettings
from replywire.runtime.tracing import active
from replywire.shared.chats import check_chat_binding, is_chat_case
from replywire.shared.errors import RequestRefused
from replywire.shared.kinds import ReplyKind
from replywire.shared.questions import check_question_binding, is_question
from replywire.shared.reasons import Reason
from replywire.shared.recording import Recording
from replywire.shared.requests import CheckedRequest, parse_binding
from replywire.shared.texts import check_text_binding, is_text_case

MAX_ERROR_BODY_BYTES: Final = 64 * 1024


#: The kinds of reply this source serves.
SERVED: Final = frozenset({ReplyKind.GROUNDED, ReplyKind.TEXT, ReplyKind.CHAT})


class GeminiSource:
    """The source of live replies: one paid call per reply, each recorded in the ledger."""

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
        self.calls = CallLedger(ledger, self.keeper, settings)
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
        check_kind(checked, SERVED)
        if checked.fault is not None:
            raise RequestRefused(Reason.INVALID_REQUEST, "faults apply to the recording source")
        if checked.kind is ReplyKind.TEXT:  # the messages as they are: the model answers them
            if not is_text_case(checked.case_id):
                raise RequestRefused(Reason.DEVELOPMENT_CASE_REQUIRED, checked.case_id)
            binding, _ = check_text_binding(parse_binding(checked.binding_json), checked.case_id)
            return binding
        if checked.kind is ReplyKind.CHAT:  # the model request itself, sent as it is
            return self._chat_binding(checked)
        if not is_question(checked.case_id):
            self.recording.case(checked.case_id)  # the allowlist, before the binding
        supplied = parse_binding(checked.binding_json)
        if is_question(checked.case_id):
            binding = check_question_binding(supplied)
            if binding["case_id"] != checked.case_id:
                raise RequestRefused(Reason.REQUEST_BINDING_MISMATCH, "case id differs")
            return binding
        return self.recording.bind_request(checked.case_id, supplied).binding

    def _chat_binding(self, checked: CheckedRequest) -> Mapping[str, Any]:
        """A chat binding of a ``chat-`` case, checked in full; the model it names must be
        the one this source calls (it is what the reservation is priced for)."""
        if not is_chat_case(checked.case_id):
            raise RequestRefused(Reason.DEVELOPMENT_CASE_REQUIRED, checked.case_id)
        supplied = parse_binding(checked.binding_json)
        if not isinstance(supplied, dict):
            raise RequestRefused(Reason.REQUEST_BINDING_MISMATCH, "not a chat binding")
        binding = check_chat_binding(supplied, checked.case_id)
        model = binding["request"]["model"]
        if model != self.settings.model:
            raise RequestRefused(
                Reason.REQUEST_BINDING_MISMATCH,
                f"the binding asks for model {model[:128]!r}; this source calls "
                f"{self.settings.model!r}",
            )
        return binding

    async def prepare(self, checked: CheckedRequest, *, identity: str = ANONYMOUS) -> GeminiPlan:
        """Reserve, mark sending, send, and return the open stream; ``identity`` is the caller
        charged. Whatever fails after the reservation, the call is recorded (settled, kept
        or released) before this returns or raises."""
        self.start()
        binding = self.bind(checked)
        make_body = {
            ReplyKind.GROUNDED: request_body,
            ReplyKind.TEXT: text_request_body,
            ReplyKind.CHAT: chat_request_body,
        }[checked.kind]
        body = make_body(binding, max_output_tokens=self.settings.max_output_tokens)
        call_id = uuid.uuid4().hex
        log = self._log.bind(call_id=call_id, model=self.settings.model, identity=identity)
        call = Call(call_id, None, log, identity)
        await self.calls.reserve(call, body, case_id=checked.case_id)
        await self.calls.mark_sending(call)
        try:
            if self.capture:
                call.capture = self.capture.start(
                    binding=binding, body=body, call_id=call_id, identity=identity
                )
        except BaseException:  # nothing was sent: the reservation goes
            await self.calls.settle(call, usage=None, outcome="internal_error", sent=False)
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
            plan = GeminiPlan(
                response,
                checked=checked,
                binding=binding,
                call=call,
                calls=self.calls,
                forget=self.forget,
            )
        except BaseException as error:
            if not call.recorded:  # anything between the answer and the plan: still recorded
                await response.aclose()
                cancelled = isinstance(error, asyncio.CancelledError)
                outcome = cancelled_outcome(error) if cancelled else "internal_error"
                await self.calls.settle(call, usage=None, outcome=outcome)
            raise
        self._open.add(plan)
        return plan

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
                outcome = cancelled_outcome(error)
            elif isinstance(error, httpx.HTTPError):
                log.warning("provider_unreachable", error=type(error).__name__, request_sent=sent)
                outcome = "unreachable"
            else:
                outcome = "internal_error"
            await self.calls.settle(call, usage=None, outcome=outcome, sent=sent)
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
                await self.calls.settle(call, usage=None, outcome=refusal.code)
                raise refusal
        except BaseException as error:
            if not call.recorded:  # cut short while reading the error body
                await response.aclose()
                cancelled_now = isinstance(error, asyncio.CancelledError)
                outcome = cancelled_outcome(error) if cancelled_now else "internal_error"
                await self.calls.settle(call, usage=None, outcome=outcome)
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
