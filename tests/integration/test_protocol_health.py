"""docs/protocol.md#health, on a real producer server in this process (loopback gRPC):
``Check`` and ``Watch`` say SERVING for "" and ``replywire.v1.ReplyStream``; for a service
the producer does not know, ``Check`` answers the status NOT_FOUND and ``Watch`` streams
SERVICE_UNKNOWN (gRPC's health protocol) and stays open."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from replywire.producer.edge.server import start_server, stop_server
from replywire.producer.settings import ServerSettings
from replywire.shared.recording import Recording

SERVING = health_pb2.HealthCheckResponse.SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


def test_health_check_and_watch_of_known_and_unknown_services(recording: Recording) -> None:
    async def scenario() -> None:
        settings = ServerSettings(host="127.0.0.1", port=0, allow_faults=False)
        server, port, servicer = await start_server(recording, settings)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                for known in ("", "replywire.v1.ReplyStream"):
                    request = health_pb2.HealthCheckRequest(service=known)
                    answer = await stub.Check(request, timeout=10)
                    assert answer.status == SERVING
                    watch = stub.Watch(request, timeout=10)
                    assert (await asyncio.wait_for(watch.read(), 10)).status == SERVING
                    watch.cancel()
                unknown = health_pb2.HealthCheckRequest(service="no.such.Service")
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.Check(unknown, timeout=10)
                assert refused.value.code() == grpc.StatusCode.NOT_FOUND
                watch = stub.Watch(unknown, timeout=10)
                first = await asyncio.wait_for(watch.read(), 10)
                assert first.status == SERVICE_UNKNOWN
                assert not watch.done()  # the Watch stays open
                watch.cancel()
        finally:
            await stop_server(server, servicer, 1.0, asyncio.Event())

    asyncio.run(scenario())
