"""An OTLP/gRPC collector: a grpc.aio server implementing OpenTelemetry's ``TraceService``
(from ``opentelemetry-proto``), for the tests and the benchmarks.

In a test (``otlp_collector()``), it runs on its own event loop in a thread and keeps every
span it is sent, flattened (``Received``): ids in hex, attributes as Python values, the
resource's ``service.name``. ``answering=False``: a collector that takes the call and never
answers it (the exporter's own deadline ends each call).

As a process of its own (``make bench``'s tracing rounds: the exporters' work is measured
without the collector's in the measured processes), it counts what it is sent and keeps
nothing; it writes its port to ``--ready-file`` once it listens, and on SIGTERM or SIGINT
its counts (``{"calls": N, "spans": M}``) to ``--summary-file``:

    .venv/bin/python -m harness.otlp_collector --port 0 --ready-file F [--summary-file S]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as service_pb
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as service_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    return None if kind is None else getattr(value, kind)


def _attributes(pairs: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for pair in pairs:
        assert isinstance(pair, KeyValue)
        found[pair.key] = _value(pair.value)
    return found


@dataclass(frozen=True)
class Received:
    """One span as the collector got it."""

    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    status_code: int
    status_message: str
    events: list[str]
    links: list[tuple[str, str]]


#: OTLP's status codes and span kinds (opentelemetry-proto's enums, by name).
STATUS_OK, STATUS_ERROR = 1, 2
KIND_INTERNAL, KIND_SERVER, KIND_CLIENT, KIND_PRODUCER, KIND_CONSUMER = 1, 2, 3, 4, 5


@dataclass
class Collector:
    answering: bool = True
    #: False: count the spans (``span_count``), keep none (a collector of its own process).
    keep: bool = True
    port: int = 0
    spans: list[Received] = field(default_factory=list)
    calls: int = 0
    span_count: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def got(self, request: service_pb.ExportTraceServiceRequest) -> None:
        with self._lock:
            self.calls += 1
            if not self.keep:
                self.span_count += sum(
                    len(scope.spans) for rs in request.resource_spans for scope in rs.scope_spans
                )
                return
            for resource_spans in request.resource_spans:
                service = str(_attributes(resource_spans.resource.attributes).get("service.name"))
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append(
                            Received(
                                service=service,
                                name=span.name,
                                kind=span.kind,
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_span_id=span.parent_span_id.hex(),
                                attributes=_attributes(span.attributes),
                                status_code=span.status.code,
                                status_message=span.status.message,
                                events=[event.name for event in span.events],
                                links=[(ln.trace_id.hex(), ln.span_id.hex()) for ln in span.links],
                            )
                        )
                        self.span_count += 1

    def named(self, name: str) -> list[Received]:
        with self._lock:
            return [span for span in self.spans if span.name == name]

    def wait_for(self, *names: str, count: int = 1, timeout: float = 20.0) -> None:
        """Until ``count`` spans of each of ``names`` came (bounded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(len(self.named(name)) >= count for name in names):
                return
            time.sleep(0.05)
        have = sorted({span.name for span in self.spans})
        raise TimeoutError(f"spans {names} x{count} not received within {timeout} s: {have}")


class _TraceService(service_grpc.TraceServiceServicer):
    def __init__(self, collector: Collector, never: asyncio.Event) -> None:
        self.collector = collector
        self.never = never

    async def Export(  # noqa: N802 - the RPC's name
        self,
        request: service_pb.ExportTraceServiceRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> service_pb.ExportTraceServiceResponse:
        if not self.collector.answering:
            with self.collector._lock:
                self.collector.calls += 1
            await self.never.wait()  # set only when the collector stops
        self.collector.got(request)
        return service_pb.ExportTraceServiceResponse()


@contextmanager
def otlp_collector(*, answering: bool = True) -> Iterator[Collector]:
    """A collector on a free loopback port, for the ``with`` block."""
    collector = Collector(answering=answering)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def start() -> None:
        server = grpc.aio.server()
        never = asyncio.Event()
        # opentelemetry-proto's generated stubs are untyped.
        service_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _TraceService(collector, never), server
        )
        collector.port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        state.update(server=server, never=never)
        ready.set()

    thread = threading.Thread(target=loop.run_forever, name="otlp-collector", daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    assert ready.wait(10)
    try:
        yield collector
    finally:

        async def stop() -> None:
            state["never"].set()
            await state["server"].stop(0)

        asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def serve(port: int, ready_file: Path, summary_file: Path | None) -> None:
    """The collector as a process: until SIGTERM or SIGINT, then its counts."""
    collector = Collector(keep=False)
    server = grpc.aio.server()
    service_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
        _TraceService(collector, asyncio.Event()), server
    )
    collector.port = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    written = ready_file.with_name(ready_file.name + ".part")
    written.write_text(str(collector.port), encoding="utf-8")
    os.replace(written, ready_file)  # whole or absent: the reader never sees half a port
    await stop.wait()
    await server.stop(1.0)
    if summary_file is not None:
        counts = {"calls": collector.calls, "spans": collector.span_count}
        summary_file.write_text(json.dumps(counts), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="0: a free loopback port")
    parser.add_argument("--ready-file", type=Path, required=True, help="gets the port")
    parser.add_argument("--summary-file", type=Path, help="gets the counts at the end")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.ready_file, args.summary_file))


if __name__ == "__main__":
    main()
