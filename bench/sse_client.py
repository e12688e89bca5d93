"""The SSE client of the paced benchmark's ``sse stack`` side: httpx and httpx-sse.

``bench.paced_client --kind sse`` reads its streams with this side, against
``bench.sse_server``: one ``httpx.AsyncClient`` for every stream (HTTP/1.1, a connection
a stream: its pool unbounded, or streams past httpx's 100 connections would wait for one;
its timeouts httpx's), each stream a ``GET /reply`` read with ``httpx_sse.aconnect_sse``.
Each event is parsed (its ``data`` as JSON) and its sequence checked: ids 1, 2, ... in
order, a gap or a repeat fails the stream (``sequence:gap``, ``sequence:repeat``), as does
an event after ``done``, a ``done`` whose count is not the deltas read, or a stream that
ends without one (``incomplete:*``). An event's arrival is when ``aiter_sse`` hands it over,
as the bare client's is when its ``async for`` hands a chunk over; ``bench.paced_client``
measures the added latency from the arrivals, the same way for every side.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
from httpx_sse import SSEError, aconnect_sse

from bench.paced_side import Stream
from bench.sse_server import DONE_EVENT
from replywire.shared.requests import ReplyRequest


class SseSide:
    """Every stream of a round on one ``httpx.AsyncClient``."""

    def __init__(self, target: str, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.client = httpx.AsyncClient(
            base_url=f"http://{target}",
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
            transport=transport,  # a test's; None: httpx's own, over TCP
        )

    async def read(self, request: ReplyRequest, stream: Stream, after_s: float = 0.0) -> None:
        if after_s:
            await asyncio.sleep(after_s)
        params = {
            "case": request.case_id,
            "interval_ms": str(request.chunk_interval_ms),
            "stream_id": request.stream_id,
        }
        try:
            stream.code = await self._events(params, stream.arrivals)
        except (httpx.HTTPError, SSEError) as error:
            stream.code = f"http:{type(error).__name__}"
        except (ValueError, KeyError, TypeError):  # an id or a data that does not parse
            stream.code = "invalid:event"

    async def _events(self, params: dict[str, str], arrivals: list[float]) -> str:
        """The stream's code: ``ok`` when every event came in order and ``done`` closed it."""
        clock, expected, done = time.perf_counter, 1, False
        async with aconnect_sse(self.client, "GET", "/reply", params=params) as source:
            if source.response.status_code != 200:
                return f"http:{source.response.status_code}"
            async for event in source.aiter_sse():
                if not event.data and event.event == "message":
                    # sse-starlette's keep-alive every 15 s is a comment (": ping - ...");
                    # httpx-sse dispatches the blank line after it as an empty message with
                    # the last id, where the SSE spec dispatches nothing: not an event.
                    continue
                arrivals.append(clock())
                sequence = int(event.id)
                if sequence != expected:
                    return "sequence:gap" if sequence > expected else "sequence:repeat"
                if done:
                    return "sequence:after_done"
                expected += 1
                data = json.loads(event.data)
                if event.event == DONE_EVENT:
                    if data["content_frames"] != sequence - 1:
                        return "incomplete:done_count"
                    done = True
                elif type(data) is not str:
                    return "invalid:event"
        return "ok" if done else "incomplete:no_done"

    async def close(self) -> None:
        await self.client.aclose()
