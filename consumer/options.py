"""What one consumer stream may do: ``StreamOptions``, its bounds and their defaults.

Time is bounded twice: an overall deadline and an idle timeout (no chunk for
that long). Either cancels the RPC and ends ``incomplete`` with the partial
content kept. A peer that went silent without closing (its host cut off: no reset
ever comes) is found sooner by gRPC's keepalive: a ping every ``keepalive_s`` of
silence, unanswered within ``keepalive_timeout_s``, closes the connection, and the
call ends ``UNAVAILABLE``, a transport failure that a resume repairs (up to
``resume_attempts``, after a capped, jittered backoff: ``consumer/session.py``).

The queue and the window bound memory: ``queue_size`` chunks wait for the core,
``window_bytes`` more may sit in the consumer's transport (``consumer/channels.py``).
Options are checked when made: a bad value is a ``ValueError`` before any connection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from replywire.consumer.security import Security
from replywire.shared.requests import DEFAULT_MAX_METADATA_BYTES

DEFAULT_WINDOW_BYTES: Final = 64 * 1024
DEFAULT_QUEUE_SIZE: Final = 8
DEFAULT_DEADLINE_S: Final = 300.0
DEFAULT_IDLE_TIMEOUT_S: Final = 120.0
DEFAULT_RESUME_BACKOFF_S: Final = 0.25
DEFAULT_RESUME_BACKOFF_MAX_S: Final = 2.0
#: gRPC keepalive: a ping after this much silence on the connection ...
DEFAULT_KEEPALIVE_S: Final = 10.0
#: ... unanswered within this, and the connection is closed (UNAVAILABLE).
DEFAULT_KEEPALIVE_TIMEOUT_S: Final = 5.0
#: The shortest keepalive: gRPC's own client sends no more than a ping a second, and a
#: producer accepts that by default (its --min-ping-interval-s, producer.settings).
MIN_KEEPALIVE_S: Final = 1.0
#: Resumes of `consumer stream` (the StreamOptions default, 0, is today's behaviour: none).
DEFAULT_RESUME_ATTEMPTS: Final = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamOptions:
    target: str
    queue_size: int = DEFAULT_QUEUE_SIZE
    process_delay_s: float = 0.0
    mode: Literal["stream", "buffered"] = "stream"
    window_bytes: int = DEFAULT_WINDOW_BYTES
    max_message_bytes: int = 4 << 20
    deadline_s: float | None = None
    idle_timeout_s: float | None = None
    #: TLS material and the bearer token (none: plaintext, no token). A token with a
    #: plaintext channel to a target that is not local is refused unless ``insecure``.
    security: Security = field(default_factory=Security)
    #: Resumes after a transport failure (0: none, the stream ends transport_io_error).
    resume_attempts: int = 0
    #: The first backoff before a resume; it doubles per attempt up to the cap, with jitter.
    resume_backoff_s: float = DEFAULT_RESUME_BACKOFF_S
    resume_backoff_max_s: float = DEFAULT_RESUME_BACKOFF_MAX_S
    #: A ping after this much silence; unanswered within the timeout, the call ends
    #: UNAVAILABLE (resumable). A cut-off producer is found within about their sum.
    keepalive_s: float = DEFAULT_KEEPALIVE_S
    keepalive_timeout_s: float = DEFAULT_KEEPALIVE_TIMEOUT_S
    #: The producer's headers and trailers read (HTTP/2's count, as the producer's own
    #: --max-metadata-bytes): past it gRPC ends the call RESOURCE_EXHAUSTED.
    max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES

    def __post_init__(self) -> None:
        if not MIN_KEEPALIVE_S <= self.keepalive_s < float("inf"):
            raise ValueError(
                f"keepalive must be >= {MIN_KEEPALIVE_S:g} s (gRPC pings no faster; nor does a "
                "producer accept it by default)"
            )
        if not 0 < self.keepalive_timeout_s < float("inf"):
            raise ValueError("keepalive timeout must be > 0")
        # A token never goes in clear to another host unless the security says --insecure:
        # refused here, before any connection (a ConfigurationError: a usage error).
        self.security.check(self.target)
        if self.resume_attempts < 0:
            raise ValueError("resume attempts must be >= 0")
        if not 0 <= self.resume_backoff_s <= self.resume_backoff_max_s:
            raise ValueError("resume backoff must be >= 0 and at most its cap")
        if self.queue_size < 1:
            raise ValueError("queue size must be >= 1")
        if self.window_bytes < 1024:
            raise ValueError("window must be >= 1024 bytes")
        for name in ("deadline_s", "idle_timeout_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0")
