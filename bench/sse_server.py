"""The SSE server of the paced benchmark's ``sse stack`` side: uvicorn, Starlette, sse-starlette.

The stack a model's reply is often served with over HTTP: uvicorn in this process, one
worker, with its defaults (uvloop's event loop, httptools' HTTP/1.1 parser; the access log
off: it writes a line per request to the stdout ``bench.paced`` reads only for the port),
a Starlette app and ``sse_starlette.EventSourceResponse``. ``GET /reply?case=ID
&interval_ms=MS`` streams the case's reply as the replywire producer streams its frames:
one event per 13-character delta of the recording's reply (``id`` its sequence from 1,
``data`` the delta as JSON), then an ``event: done`` (``id`` the next sequence, ``data``
``{"content_frames": N}``); paced as ``bench.bare_server`` paces (a sleep of the interval
before each event after the first). Its versions are the benchmark's own
(bench/requirements.txt). Prints ``listening on 127.0.0.1:PORT`` like the producer.

    .venv/bin/python -m bench.sse_server [--port 0]
        [--recording PATH --recording-sha256 HEX]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import uvicorn
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from replywire.runtime.recording_file import DEFAULT_RECORDING_PATH, load_recording
from replywire.shared.frames import split_content
from replywire.shared.recording import RECORDING_SHA256, Recording

#: The done event's name (the content events have none: SSE's default, ``message``).
DONE_EVENT = "done"


def deltas_by_case(recording: Recording) -> dict[str, tuple[str, ...]]:
    """Every case's reply cut as the producer cuts it: 13-character deltas."""
    return {
        case_id: tuple(split_content(recording.case(case_id).content))
        for case_id in recording.case_ids
    }


async def events(deltas: tuple[str, ...], interval_s: float) -> AsyncIterator[ServerSentEvent]:
    """One event per delta, then ``done``, a sleep of the interval before each but the first."""
    for sequence, delta in enumerate(deltas, start=1):
        if sequence > 1 and interval_s:
            await asyncio.sleep(interval_s)
        yield ServerSentEvent(data=json.dumps(delta), id=str(sequence))
    if deltas and interval_s:
        await asyncio.sleep(interval_s)
    done = json.dumps({"content_frames": len(deltas)})
    yield ServerSentEvent(data=done, id=str(len(deltas) + 1), event=DONE_EVENT)


def app(recording: Recording) -> Starlette:
    table = deltas_by_case(recording)

    async def reply(request: Request) -> Response:
        deltas = table.get(request.query_params.get("case", ""))
        if deltas is None:
            return PlainTextResponse("no such case", status_code=404)
        interval_s = int(request.query_params.get("interval_ms", "0")) / 1000
        return EventSourceResponse(events(deltas, interval_s))

    return Starlette(routes=[Route("/reply", reply)])


class Server(uvicorn.Server):
    """uvicorn's server, saying its port once it listens."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        port = self.servers[0].sockets[0].getsockname()[1]
        print(f"listening on 127.0.0.1:{port}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--recording", type=Path, default=DEFAULT_RECORDING_PATH)
    parser.add_argument("--recording-sha256", default=RECORDING_SHA256)
    args = parser.parse_args()
    recording = load_recording(args.recording, expected_sha256=args.recording_sha256)
    config = uvicorn.Config(
        app(recording), host="127.0.0.1", port=args.port, workers=1, access_log=False
    )
    Server(config).run()


if __name__ == "__main__":
    main()
