"""The consumer's channels: their options (a bounded HTTP/2 window) and the pool that keeps them.

Channels are kept by a ``ChannelPool`` (a ``ReplyClient`` is one): one per target and
channel options, shared by every stream it runs (a new TCP connection and HTTP/2
handshake per stream cost more than the stream). The HTTP/2 window is per stream, so
backpressure is unchanged. A stream whose connection broke retires the channel: its
resume, and the next stream, get a new connection, never the broken one's reconnect
backoff.

The channel's window is bounded (``grpc.http2.lookahead_bytes`` with BDP probing off):
with gRPC's defaults a reader that stops lets the server push megabytes into one
stream. gRPC's transport returns window once more after the reader's last ``read()``
(see ``announced_window``), so the channel announces half of ``window_bytes``: a paused
stream holds at most ``window_bytes`` in the consumer's transport.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final, Self

import grpc

from replywire.consumer.options import StreamOptions
from replywire.consumer.security import Security
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc


def announced_window(window_bytes: int) -> int:
    """The HTTP/2 stream window the channel announces so that a paused stream holds at
    most ``window_bytes`` in the consumer's transport: half of it.

    gRPC's chttp2 transport counts a stream's unread bytes only while a ``read()`` is
    pending (the stream's "pending size", set when a read completes). Once the reader
    stops, the bytes that arrive after its last read look consumed, and the transport
    returns them to the producer in one WINDOW_UPDATE: at once if it exceeds
    max(announced / 2, 8 KiB), else with the connection's next write (a keepalive ping,
    another stream, the ``Cancel`` of a stop). Sending the update forgets the pending
    size, so it happens once per pause. The producer can therefore get twice the
    announced window past the chunks the consumer has read; announcing half keeps that
    to ``window_bytes`` (measured on the wire: bench.memory,
    tests/system/test_flow_window_processes.py).
    """
    return window_bytes // 2


def channel_options(options: StreamOptions) -> list[tuple[str, int | str]]:
    return [
        *options.security.channel_options(),
        # A bounded stream window: a paused reader really stops the producer, after at
        # most window_bytes (half announced, half the one update gRPC re-grants).
        ("grpc.http2.lookahead_bytes", announced_window(options.window_bytes)),
        ("grpc.http2.bdp_probe", 0),
        ("grpc.max_receive_message_length", options.max_message_bytes),
        ("grpc.max_send_message_length", options.max_message_bytes),
        # Bounded response metadata, deterministically (gRPC refuses at random between its
        # soft and hard limit: one limit, both). What the consumer sends is far below any
        # producer's --max-metadata-bytes (shared.requests.MIN_MAX_METADATA_BYTES).
        ("grpc.max_metadata_size", options.max_metadata_bytes),
        ("grpc.absolute_max_metadata_size", options.max_metadata_bytes),
        # A paid or partial stream is never retried behind our back.
        ("grpc.enable_retries", 0),
        # Each channel its own connection: a resume's new channel must not share the broken
        # connection's subchannel (gRPC's global pool), which is in reconnect backoff.
        ("grpc.use_local_subchannel_pool", 1),
        # A target of several producers (``ipv4:A,B``, ``dns:///name:port``): gRPC's own
        # round_robin picks among the connected ones, so a resume goes to a live producer.
        ("grpc.lb_policy_name", "round_robin"),
        # A producer cut off mid-stream sends no reset: an unanswered ping is how the call
        # learns it (UNAVAILABLE), bounded. Pings also while the consumer sends nothing
        # (a server stream: the consumer never does), and with no call in flight.
        ("grpc.keepalive_time_ms", round(options.keepalive_s * 1000)),
        ("grpc.keepalive_timeout_ms", round(options.keepalive_timeout_s * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]


def open_channel(options: StreamOptions) -> grpc.aio.Channel:
    """A channel to the producer: TLS with --tls or --tls-ca, plaintext otherwise. The token
    is the channel's call credentials (every call carries it: Open, resumes, Cancel), over
    TLS or gRPC's local credentials (a loopback target or a Unix socket); only under
    --insecure does a plaintext channel to another host carry it, as each call's metadata
    (consumer.security)."""
    credentials = options.security.credentials(options.target)
    if credentials is not None:
        return grpc.aio.secure_channel(
            options.target, credentials, options=channel_options(options)
        )
    return grpc.aio.insecure_channel(options.target, options=channel_options(options))


#: What makes two streams' channels interchangeable: target, TLS material, channel options.
ChannelKey = tuple[str, Security, tuple[tuple[str, int | str], ...]]


def channel_key(options: StreamOptions) -> ChannelKey:
    return (options.target, options.security, tuple(channel_options(options)))


#: How long a new channel's first streams wait for its connection before they are sent.
CONNECT_WAIT_S: Final = 5.0
_SETTLED: Final = frozenset(
    {
        grpc.ChannelConnectivity.READY,
        grpc.ChannelConnectivity.TRANSIENT_FAILURE,
        grpc.ChannelConnectivity.SHUTDOWN,
    }
)


async def _connected(channel: grpc.aio.Channel) -> None:
    """Wait (bounded) until a new channel is connected or has failed. Streams sent on it
    before the producer's HTTP/2 SETTINGS arrive are not held to its concurrent-stream
    bound: a burst past the bound is refused (RST_STREAM REFUSED_STREAM, UNAVAILABLE to
    the caller); once connected, gRPC queues the excess until streams end. A channel that
    failed, or is still connecting after the bound, is used as it is (its call fails or
    waits as it would have)."""
    loop = asyncio.get_running_loop()
    ends_at = loop.time() + CONNECT_WAIT_S
    state = channel.get_state(try_to_connect=True)
    while state not in _SETTLED and loop.time() < ends_at:
        try:
            await asyncio.wait_for(channel.wait_for_state_change(state), ends_at - loop.time())
        except TimeoutError:
            return
        state = channel.get_state()


@dataclass(slots=True, eq=False)
class _Kept:
    """A channel the pool keeps, how many streams use it now, and its first connection."""

    channel: grpc.aio.Channel
    connecting: asyncio.Task[None]
    #: The channel's stub, made once (a stub per call makes its callables per call).
    stub: pb_grpc.ReplyStreamAsyncStub
    users: int = 0
    retired: bool = False


class ChannelPool:
    """The channels streams run on: one per target and channel options (``channel_key``),
    opened on first use, shared by every stream, closed with the pool.

    A stream that ends with a broken transport retires its channel: the resume and later
    streams open a new one (the old one, in gRPC's reconnect backoff, is closed once its
    last stream ends). Many concurrent streams on one channel share one connection, and
    so the producer's per-connection stream bound (``--max-streams`` + 1): beyond it gRPC
    queues them in the client (a new channel's first streams wait for its connection, so
    they are held to the bound too).
    """

    def __init__(self, options: StreamOptions) -> None:
        self.options = options
        self._kept: dict[ChannelKey, _Kept] = {}
        #: The key of the pool's own options, made once (every stream would make it).
        self._own_key = channel_key(options)
        #: Retired channels still in use: closed by their last stream, or by close().
        self._retired: list[_Kept] = []

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def channels(self) -> int:
        """Channels open now (kept, or retired and still in use)."""
        return len(self._kept) + len(self._retired)

    def _key(self, options: StreamOptions) -> ChannelKey:
        return self._own_key if options is self.options else channel_key(options)

    @asynccontextmanager
    async def channel(self, options: StreamOptions) -> AsyncIterator[grpc.aio.Channel]:
        """The kept channel for ``options`` (opened on first use), for one call."""
        kept = await self.checkout(options)
        try:
            yield kept.channel
        finally:
            await self.checkin(kept)

    async def checkout(self, options: StreamOptions) -> _Kept:
        """The kept channel for ``options`` (opened on first use), counted as in use until
        ``checkin``: what ``channel()`` does, without a context manager per stream."""
        key = self._key(options)
        kept = self._kept.get(key)
        if kept is None:
            channel = open_channel(options)
            connecting = asyncio.create_task(_connected(channel))
            kept = self._kept[key] = _Kept(channel, connecting, pb_grpc.ReplyStreamStub(channel))
        kept.users += 1
        if not kept.connecting.done():
            try:
                await asyncio.shield(kept.connecting)
            except BaseException:
                await self.checkin(kept)
                raise
        return kept

    async def checkin(self, kept: _Kept) -> None:
        """The call on ``kept`` ended; a retired channel's last call closes it."""
        kept.users -= 1
        if kept.retired and not kept.users:
            self._retired.remove(kept)
            await kept.channel.close(None)

    def retire(self, options: StreamOptions, channel: grpc.aio.Channel) -> None:
        """The transport under ``channel`` broke: the next call opens a new channel."""
        key = self._key(options)
        kept = self._kept.get(key)
        if kept is None or kept.channel is not channel:
            return  # already retired by another stream of the same connection
        del self._kept[key]
        kept.retired = True
        self._retired.append(kept)

    async def close(self) -> None:
        """Close every channel (a stream still running on one ends ``CANCELLED``)."""
        kept = [*self._kept.values(), *self._retired]
        self._kept.clear()
        self._retired.clear()
        for each in kept:
            each.connecting.cancel()
            await each.channel.close(None)
