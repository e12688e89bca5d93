"""The health service with a bound on its ``Watch`` streams (``--max-health-watches``).

``grpc.health.v1.Health`` answers without a token, by design (a load balancer asks
before it holds one), so every ``Watch`` a stranger opens would be held, with its
request, until the producer stops. :class:`BoundedHealthServicer` is grpc_health's own
asyncio servicer (``set``, ``enter_graceful_shutdown``, ``Check`` and ``Watch`` as it
has them) that serves at most ``max_watches`` Watch streams at once: one more is refused
``RESOURCE_EXHAUSTED`` with the details ``health_watch_limit`` before it is registered
anywhere. A refusal is counted (``refused``; and by ``on_refused``, the producer's
``replywire_requests_refused_total{reason="health_watch_limit"}``) and logged as
``health_watch_refused`` with the running count, at most one record a second, so a flood
of refused watches cannot flood the trace; ``producer_stopped`` carries the final count.

``List`` (gRPC's A90, in grpcio-health-checking's proto and so advertised by reflection)
answers a snapshot of every registered service's status, at most ``MAX_LIST_SERVICES``
(the bound A90 sets): past it, ``RESOURCE_EXHAUSTED`` with the details
``health_list_limit`` and no partial list (told ``on_refused`` too). The producer
registers two services.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

import grpc
import structlog
from grpc_health.v1 import health as grpc_health
from grpc_health.v1 import health_pb2

from replywire.producer.edge.connections import peer_of
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import Reason

DEFAULT_MAX_HEALTH_WATCHES: Final = 100
#: The most services ``List`` answers (gRPC's A90: more is ``RESOURCE_EXHAUSTED``).
MAX_LIST_SERVICES: Final = 100
#: At most one ``health_watch_refused`` record this often (each carries the running count).
REFUSAL_RECORD_INTERVAL_S: Final = 1.0


# grpc-stubs 1.53 predates the asyncio servicer: its base class is untyped here.
class BoundedHealthServicer(grpc_health.aio.HealthServicer):  # type: ignore[misc,name-defined]
    """grpc_health's asyncio ``HealthServicer`` with at most ``max_watches`` open Watches."""

    def __init__(
        self,
        max_watches: int = DEFAULT_MAX_HEALTH_WATCHES,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_refused: Callable[[Reason], None] | None = None,
    ) -> None:
        if max_watches < 1:
            raise ValueError("max_watches must be at least 1")
        super().__init__()
        self.max_watches = max_watches
        #: Watch streams open now, and the ones refused since the start.
        self.watches = 0
        self.refused = 0
        self._clock = clock
        #: Told of every refusal, by its reason (the producer's metrics).
        self._on_refused = on_refused
        self._last_record: float | None = None

    async def Watch(  # noqa: N802 - the RPC's name in the .proto
        self, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        # Counted before the first await: the event loop's one thread admits in order.
        if self.watches >= self.max_watches:
            self.refused += 1
            self._log_refusal(context)
            reason = Reason.HEALTH_WATCH_LIMIT
            self._told(reason)
            await context.abort(grpc.StatusCode[REASONS[reason].grpc_code], reason.value)
        self.watches += 1
        try:
            await super().Watch(request, context)
        finally:
            self.watches -= 1

    async def List(  # noqa: N802 - the RPC's name in the .proto
        self, request: health_pb2.HealthListRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> health_pb2.HealthListResponse:
        """Every registered service's status now (a snapshot, no side effect), or
        ``RESOURCE_EXHAUSTED`` / ``health_list_limit`` past ``MAX_LIST_SERVICES``."""
        statuses = dict(self._server_status)
        if len(statuses) > MAX_LIST_SERVICES:
            reason = Reason.HEALTH_LIST_LIMIT
            self._told(reason)
            await context.abort(grpc.StatusCode[REASONS[reason].grpc_code], reason.value)
        response = health_pb2.HealthListResponse()
        for name, status in statuses.items():
            response.statuses[name].status = status
        return response

    def _told(self, reason: Reason) -> None:
        if self._on_refused is not None:
            self._on_refused(reason)

    def _log_refusal(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        now = self._clock()
        if self._last_record is not None and now - self._last_record < REFUSAL_RECORD_INTERVAL_S:
            return
        self._last_record = now
        structlog.get_logger().warning(
            "health_watch_refused",
            reason=Reason.HEALTH_WATCH_LIMIT.value,
            peer=peer_of(context),
            open_watches=self.watches,
            max_health_watches=self.max_watches,
            refused=self.refused,
        )
