"""How a producer's server listens and what it allows: one value, built by the CLI (or a
test), read by the server and its servicer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import grpc

from replywire.producer.edge.health import DEFAULT_MAX_HEALTH_WATCHES
from replywire.producer.edge.security import TokenAuthenticator
from replywire.producer.metrics import ProducerMetrics
from replywire.producer.replylog.interface import LogLimits, ReplyLog
from replywire.shared.requests import DEFAULT_MAX_METADATA_BYTES

#: Streams served at once by default: 3,000 concurrent streams on one producer complete,
#: and one more than this is refused RESOURCE_EXHAUSTED / stream_limit.
DEFAULT_MAX_STREAMS: Final = 4000
DEFAULT_MAX_CONNECTION_AGE_S: Final = 300.0
#: A connection without a stream this long is closed (GOAWAY): after it, a stream from the
#: same client address is on a new connection (producer.edge.connections).
DEFAULT_MAX_CONNECTION_IDLE_S: Final = 60.0
#: The producer's keepalive: a ping after this much silence from the consumer ...
DEFAULT_KEEPALIVE_S: Final = 20.0
#: ... unanswered within this, and the connection is closed (its streams end).
DEFAULT_KEEPALIVE_TIMEOUT_S: Final = 10.0
#: The most frequent keepalive pings accepted by default: gRPC's own client sends no more
#: than one a second, the consumer's floor (consumer.options.MIN_KEEPALIVE_S).
MIN_PING_INTERVAL_S: Final = 1.0
#: Pings faster than that tolerated before GOAWAY (gRPC's own default).
MAX_PING_STRIKES: Final = 2

#: RPCs gRPC holds for the servicer (``--max-pending``): past it gRPC drops one at once.
DEFAULT_MAX_PENDING: Final = 10_000
#: The longest gRPC holds one of them for the servicer before it drops it (gRPC's own
#: default, stated): an event loop too busy to take a new stream within this long is
#: overloaded, and the consumer hears the same bare CANCELLED (``producer_overloaded``).
MAX_PENDING_S: Final = 30


@dataclass(frozen=True, slots=True)
class Exposure:
    """Who may reach the server: TLS credentials and a token check (none: plaintext, open)."""

    credentials: grpc.ServerCredentials | None = None
    authenticator: TokenAuthenticator | None = None


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """How a server listens and what it allows: one value, built by the CLI (or a test)."""

    host: str
    port: int
    allow_faults: bool
    max_connection_age_s: float = DEFAULT_MAX_CONNECTION_AGE_S
    max_connection_idle_s: float = DEFAULT_MAX_CONNECTION_IDLE_S
    keepalive_s: float = DEFAULT_KEEPALIVE_S
    keepalive_timeout_s: float = DEFAULT_KEEPALIVE_TIMEOUT_S
    exposure: Exposure = field(default_factory=Exposure)
    max_streams: int = DEFAULT_MAX_STREAMS
    #: Each caller's own bound (with tokens; None: not applied).
    max_streams_per_identity: int | None = None
    #: The most frequent keepalive pings a peer may send (faster: GOAWAY too_many_pings).
    min_ping_interval_s: float = MIN_PING_INTERVAL_S
    #: RPCs gRPC holds before the servicer takes them (past it: a bare CANCELLED).
    max_pending: int = DEFAULT_MAX_PENDING
    metrics: ProducerMetrics | None = None
    #: The reply log's bounds (entries, bytes, replies kept, TTL, detach grace).
    log_limits: LogLimits | None = None
    #: A shared reply log (Redis Streams); None: the in-memory log, with ``log_limits``.
    reply_log: ReplyLog | None = None
    #: Health ``Watch`` streams served at once (unauthenticated); one more: health_watch_limit.
    max_health_watches: int = DEFAULT_MAX_HEALTH_WATCHES
    #: Request metadata read (HTTP/2's count); past it: metadata_too_large.
    max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES
    #: One of ``--workers``: the port is shared with the other workers (SO_REUSEPORT).
    share_port: bool = False
