"""The consumer's network edge: one gRPC stream, flow-controlled, fed to the sans-IO core.

``ReplyClient`` is where a caller starts (``stream_reply`` for a single stream): it runs
each stream as a ``StreamSession`` on the channels it keeps. The edge, a job a module:

* ``consumer/options.py``: ``StreamOptions``, a stream's bounds and their defaults;
* ``consumer/channels.py``: the channel pool, and the channel options that bound the
  HTTP/2 window;
* ``consumer/reader.py``: the reader (the call into the bounded queue) and the idle timeout;
* ``consumer/session.py``: one stream: the call, the processor, the verdict, the resumes;
* ``consumer/interrupt.py``: Ctrl-C and SIGTERM as an event a stream watches;
* ``consumer/spans.py``: the stream's span, when tracing is on (``runtime/tracing.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from replywire.consumer.channels import ChannelPool
from replywire.consumer.options import StreamOptions
from replywire.consumer.session import StreamSession
from replywire.consumer.spans import ConsumeSpan
from replywire.runtime.tracing import active
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.requests import ReplyRequest
from replywire.shared.result import StreamResult

if TYPE_CHECKING:
    from replywire.runtime.otel import Tracing


class ReplyClient(ChannelPool):
    """Streams bound replies over the channels it keeps: one per target and channel
    options (``channel_key``), shared by every stream it runs, closed with the client.

        async with ReplyClient(options) as client:
            result = await client.stream(request)

    Each stream is its own HTTP/2 stream with its own window, so backpressure is what it
    is with a channel per stream. A stream that ends with a broken transport retires its
    channel: the resume and later streams open a new one (``ChannelPool``). A stream the
    producer's HTTP/2 layer refuses at its per-connection stream bound is ``stream_limit``.
    """

    def __init__(
        self,
        options: StreamOptions,
        *,
        logger: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        super().__init__(options)
        self._logger = logger

    async def stream(
        self,
        request: ReplyRequest,
        options: StreamOptions | None = None,
        *,
        logger: structlog.typing.FilteringBoundLogger | None = None,
        interrupted: asyncio.Event | None = None,
        observer: Callable[[StreamSession], None] | None = None,
    ) -> StreamResult:
        """Ask for one bound reply and consume it: the request, the core, the session, the
        verdict. ``options``: this stream's (the client's by default); ``observer`` is
        handed the session before it runs."""
        options = options or self.options
        structlog.contextvars.bind_contextvars(stream_id=request.stream_id)
        log = (logger or self._logger or structlog.get_logger()).bind(case_id=request.case_id)
        tracing = active()  # the one check: off, no span is made
        if tracing is not None:
            return await self._traced(tracing, request, options, log, interrupted, observer)
        sent = request.open_request()
        return await self._session(sent, request, options, log, observer).run(interrupted)

    def _session(
        self,
        sent: pb.OpenRequest,
        request: ReplyRequest,
        options: StreamOptions,
        log: structlog.typing.FilteringBoundLogger,
        observer: Callable[[StreamSession], None] | None,
    ) -> StreamSession:
        """The session of ``request`` (sent as ``sent``; its core logging to ``log`` too),
        handed to ``observer``."""
        consumer = request.consumer(log.bind(component="core"), sent=sent)
        session = StreamSession(sent, consumer, options, log, self)
        if observer is not None:
            observer(session)
        return session

    async def _traced(
        self,
        tracing: Tracing,
        request: ReplyRequest,
        options: StreamOptions,
        log: structlog.typing.FilteringBoundLogger,
        interrupted: asyncio.Event | None,
        observer: Callable[[StreamSession], None] | None,
    ) -> StreamResult:
        """``stream`` under the stream's span (``consumer/spans.py``): its state changes,
        the core's and the reader's, are events of the span too."""
        sent = request.open_request()
        span = ConsumeSpan(tracing, sent, options.target, wire=request.wire.value)
        log = span.events_of(log)
        return await span.run(self._session(sent, request, options, log, observer), interrupted)


async def stream_reply(
    request: ReplyRequest,
    options: StreamOptions,
    *,
    logger: structlog.typing.FilteringBoundLogger | None = None,
    interrupted: asyncio.Event | None = None,
    observer: Callable[[StreamSession], None] | None = None,
) -> StreamResult:
    """One stream on a channel of its own (``ReplyClient`` keeps channels for many).
    ``observer`` is handed the session before it runs (the live view reads it as it goes)."""
    async with ReplyClient(options) as client:
        return await client.stream(
            request, logger=logger, interrupted=interrupted, observer=observer
        )
