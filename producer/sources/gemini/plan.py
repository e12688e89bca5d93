"""An open Gemini call as the plan of a reply: the provider's events read into frames.

``GeminiPlan`` reads the open response's body through the lab's adapter
(``protocol.ProviderStream``, the one ``events -> frames`` loop) and hands the frames on
as the RPC's chunks (``chunks``) or, for the reply log, as frames (``live_frames``). A
broken connection ends the frames with ``provider_connection_lost``; an event after the
finish ends the RPC instead (no frame may follow the terminal).

When the consumer cancels or vanishes, ``close()`` closes the upstream response at once,
so the provider stops generating (and billing) for it; then the call is settled
(``CallLedger.settle``) from the usage the provider reported, if it finished.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from typing import Any

import httpx

from replywire.producer.replylog.interface import Entry, LogEnded
from replywire.producer.sources import Stall
from replywire.producer.sources.gemini.call_ledger import Call, CallLedger
from replywire.producer.sources.gemini.chat import ChatFrames
from replywire.producer.sources.gemini.protocol import ProviderFrames, ProviderStream
from replywire.shared.digest import digest
from replywire.shared.frames import Frame
from replywire.shared.kinds import ReplyKind
from replywire.shared.reasons import Reason, registered
from replywire.shared.requests import CheckedRequest
from replywire.shared.wire import codec_for
from replywire.shared.wire.chunking import Chunker


class GeminiPlan:
    """One open call's reply; ``close`` tells ``forget`` (the source's open plans) and
    settles the call with ``calls``."""

    needs_close = True  # the upstream response and the ledger reservation
    fixed_chunks: tuple[bytes, ...] | None = None  # made as the model answers
    reply_entries: tuple[Entry, ...] | None = None

    def __init__(
        self,
        response: httpx.Response,
        *,
        checked: CheckedRequest,
        binding: Mapping[str, Any],
        call: Call,
        calls: CallLedger,
        forget: Callable[[GeminiPlan], None],
    ) -> None:
        self.response = response
        self.checked = checked
        self.call = call
        self.capture = call.capture
        # The one events -> frames loop, shared with producer.sources.gemini.convert.
        adapter = ChatFrames if checked.kind is ReplyKind.CHAT else ProviderFrames
        self.provider = ProviderStream(digest(binding), call.log, adapter_type=adapter)
        self.adapter = self.provider.adapter
        self.abort_details: Reason | None = None
        #: Not known in advance: the reply is logged as it is made (live_frames).
        self.reply_frames: tuple[Frame, ...] | None = None
        self.body_ended = False
        self._log = call.log
        self._calls = calls
        self._forget = forget
        self._closed = False
        self.description: dict[str, Any] = {
            "wire": checked.wire.value,
            "chunks": checked.plan.describe(),
            "model": calls.settings.model,
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
        self._forget(self)
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
        await self._calls.settle(
            self.call,
            # Cut off here (a part the reply cannot carry): the provider had not finished,
            # so its last usage is not the call's; the reservation is kept.
            usage=self.adapter.usage
            if self.adapter.finished and self.adapter.cut_off is None
            else None,
            outcome=f"{outcome} (finish {finish or 'never reported'})",
            finish_reason=finish,
        )
