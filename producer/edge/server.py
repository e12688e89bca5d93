"""The grpc.aio server around the ``replywire.v1.ReplyStream`` servicer: its options, its
start and its stop.

Beside ``ReplyStream`` (``producer.edge.servicer``) the server carries the standard health
service (``grpc.health.v1.Health``: SERVING once listening, NOT_SERVING from the start
of shutdown; ``producer.edge.health`` bounds its ``Watch`` streams) and server reflection.
"""

from __future__ import annotations

import asyncio
from typing import Final

import grpc
from grpc_health.v1 import health as grpc_health
from grpc_health.v1 import health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from replywire.producer.edge.rpc import SERVICE_NAME, add_servicer, grpc_metadata_limit
from replywire.producer.edge.servicer import SHUTDOWN_ABORT_S, ReplyStreamServicer
from replywire.producer.settings import (
    DEFAULT_KEEPALIVE_S,
    DEFAULT_KEEPALIVE_TIMEOUT_S,
    DEFAULT_MAX_CONNECTION_AGE_S,
    DEFAULT_MAX_CONNECTION_IDLE_S,
    DEFAULT_MAX_PENDING,
    DEFAULT_MAX_STREAMS,
    MAX_PENDING_S,
    MAX_PING_STRIKES,
    MIN_PING_INTERVAL_S,
    ServerSettings,
)
from replywire.producer.sources import Source
from replywire.producer.sources.recording import RecordingSource
from replywire.shared.recording import Recording
from replywire.shared.requests import DEFAULT_MAX_METADATA_BYTES
from replywire.shared.wire.chunking import MAX_CHUNK_BYTES

MAX_MESSAGE_BYTES: Final = 4 * MAX_CHUNK_BYTES


def server_options(  # noqa: PLR0913 - every bound gRPC's own options carry
    max_connection_age_s: float = DEFAULT_MAX_CONNECTION_AGE_S,
    max_streams: int = DEFAULT_MAX_STREAMS,
    min_ping_interval_s: float = MIN_PING_INTERVAL_S,
    max_pending: int = DEFAULT_MAX_PENDING,
    max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
    *,
    max_connection_idle_s: float = DEFAULT_MAX_CONNECTION_IDLE_S,
    keepalive_s: float = DEFAULT_KEEPALIVE_S,
    keepalive_timeout_s: float = DEFAULT_KEEPALIVE_TIMEOUT_S,
    share_port: bool = False,
) -> list[tuple[str, int]]:
    age_ms = int(max_connection_age_s * 1000)
    keepalive_timeout_ms = round(keepalive_timeout_s * 1000)
    metadata_limit = grpc_metadata_limit(max_metadata_bytes)
    # RPCs that arrive faster than grpc.aio hands them to a handler wait as "pending" (a
    # burst of new streams: grpc.aio takes them one at a time). Past gRPC's soft limit it
    # drops them at random, past the hard one all of them, with a bare CANCELLED, before
    # the servicer sees them: its default (1,000 and 3,000) dropped 5-10 % of a burst of
    # 2,000. One bound, soft and hard alike: nothing is dropped below --max-pending, and
    # the servicer answers the excess of --max-streams itself (stream_limit).
    return [
        # Bounded streams: the servicer refuses a stream beyond max-streams over all
        # connections (stream_limit); one connection opens at most one more than that at
        # once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS). The one more is the stream that
        # hears the refusal: with exactly max-streams, a connection that holds them all
        # would queue its next stream in the client, silently, until its deadline.
        ("grpc.max_concurrent_streams", max_streams + 1),
        ("grpc.server.max_pending_requests", max_pending),
        ("grpc.server.max_pending_requests_hard_limit", max_pending),
        # And one that waits longer than this for the servicer (an event loop too busy to
        # take it: 3,000 paced streams on one core, bench/README.md) is dropped the same way.
        ("grpc.server_max_unrequested_time_in_server", MAX_PENDING_S),
        # One producer per port: with gRPC's default SO_REUSEPORT a second producer would
        # bind the same port silently and split the traffic. The workers of one producer
        # (--workers, producer.workers) share theirs on purpose: the kernel spreads the
        # connections over them.
        ("grpc.so_reuseport", 1 if share_port else 0),
        # Bounded time: a connection older than this is drained (GOAWAY) and closed after
        # the same again, so no stream, even one whose writes are blocked by a consumer
        # that stopped reading without cancelling, outlives twice this.
        ("grpc.max_connection_age_ms", age_ms),
        ("grpc.max_connection_age_grace_ms", age_ms),
        # Bounded metadata, deterministically: gRPC's soft limit (past which it refuses at
        # random; default 8 KiB) and hard one (default 16 KiB) are one, twice
        # --max-metadata-bytes, so the servicer refuses past the bound itself, recorded and
        # counted (metadata_too_large), and gRPC only what is past twice that.
        ("grpc.max_metadata_size", metadata_limit),
        ("grpc.absolute_max_metadata_size", metadata_limit),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        # A connection without a stream this long is closed (GOAWAY): a later stream from
        # its client address is on a new connection (producer.edge.connections).
        ("grpc.max_connection_idle_ms", round(max_connection_idle_s * 1000)),
        # Notice a consumer that vanished or stopped (SIGSTOP) without closing its
        # connection: a ping after keepalive_s of silence, unanswered within the timeout,
        # closes it. gRPC 1.85 waits for a keepalive ping's answer its general ping timeout
        # (grpc.http2.ping_timeout_ms, 1 minute by default), not keepalive_timeout_ms: a
        # stopped consumer's stream was let go after 20 + 60 s. Both are the timeout.
        ("grpc.keepalive_time_ms", round(keepalive_s * 1000)),
        ("grpc.keepalive_timeout_ms", keepalive_timeout_ms),
        ("grpc.http2.ping_timeout_ms", keepalive_timeout_ms),
        # And keep pinging through a stall: by default gRPC sends at most 2 pings while it
        # sends no data, so a consumer stopped later in a long silence went unnoticed.
        ("grpc.http2.max_pings_without_data", 0),
        # A consumer's keepalive pings (how it notices a producer cut off mid-stream) are
        # accepted down to one per min_ping_interval_s, also with no call in flight; a peer
        # that pings faster gets gRPC's GOAWAY (too_many_pings) after its strikes.
        ("grpc.http2.min_ping_interval_without_data_ms", round(min_ping_interval_s * 1000)),
        ("grpc.http2.max_ping_strikes", MAX_PING_STRIKES),
        ("grpc.keepalive_permit_without_calls", 1),
    ]


async def start_server(
    source: Source | Recording, settings: ServerSettings
) -> tuple[grpc.aio.Server, int, ReplyStreamServicer]:
    """Start a server; returns it with the bound port (``port=0`` picks a free one).
    Its health service says SERVING for "" and ``replywire.v1.ReplyStream`` once it
    listens; reflection lists ReplyStream, Health and itself."""
    exposure = settings.exposure
    max_connection_age_s, max_streams = settings.max_connection_age_s, settings.max_streams
    server = grpc.aio.server(
        options=server_options(
            max_connection_age_s,
            max_streams,
            settings.min_ping_interval_s,
            settings.max_pending,
            settings.max_metadata_bytes,
            max_connection_idle_s=settings.max_connection_idle_s,
            keepalive_s=settings.keepalive_s,
            keepalive_timeout_s=settings.keepalive_timeout_s,
            share_port=settings.share_port,
        )
    )
    if isinstance(source, Recording):
        source = RecordingSource(source)
    servicer = ReplyStreamServicer(source, settings)
    add_servicer(servicer, server)
    health_pb2_grpc.add_HealthServicer_to_server(servicer.health, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, grpc_health.SERVICE_NAME,
         reflection.SERVICE_NAME),
        server,
    )  # fmt: skip
    await servicer.set_serving(False)
    address = f"{settings.host}:{settings.port}"
    try:
        if exposure.credentials is not None:
            bound = server.add_secure_port(address, exposure.credentials)
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError as error:  # grpc's way of saying the bind failed
        raise OSError("the address is in use or not an address of this host") from error
    if bound == 0:
        raise OSError("the address is in use or not an address of this host")
    await server.start()
    await servicer.set_serving(True)
    return server, bound, servicer


async def stop_server(
    server: grpc.aio.Server,
    servicer: ReplyStreamServicer,
    grace_s: float,
    stop_now: asyncio.Event,
) -> None:
    """Stop accepting at once; let open streams finish within the grace (or until
    ``stop_now`` is set); end the rest as ``shutdown`` with ``UNAVAILABLE``."""
    # server.stop() refuses new streams at once and waits; our own shutdown ends the
    # streams still open before grpc's would cancel them with a bare status.
    stopping = asyncio.create_task(server.stop(grace_s + SHUTDOWN_ABORT_S + 1.0))
    await servicer.shutdown(grace_s, stop_now)
    await stopping
