"""Health ``List`` and reflection over real gRPC on loopback (the producer's own server, in
this process): every method reflection advertises answers something other than
``UNIMPLEMENTED``, and ``List`` answers every registered service's status, at most 100
(gRPC's A90), ``RESOURCE_EXHAUSTED`` / ``health_list_limit`` past that."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from replywire.producer.edge.health import MAX_LIST_SERVICES
from replywire.producer.edge.rpc import HEALTH_SERVICES
from replywire.producer.edge.server import start_server
from replywire.producer.settings import ServerSettings
from replywire.shared.recording import Recording

pytestmark = pytest.mark.timeout(60)
SERVING = health_pb2.HealthCheckResponse.SERVING
#: What a stream's read() returns at its end (grpc-stubs does not know grpc.aio.EOF).
EOF: Any = getattr(grpc.aio, "EOF")  # noqa: B009


@asynccontextmanager
async def served(recording: Recording) -> AsyncIterator[tuple[grpc.aio.Channel, Any]]:
    server, port, servicer = await start_server(
        recording, ServerSettings(host="127.0.0.1", port=0, allow_faults=False)
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel, servicer
    finally:
        await server.stop(0)


async def listed(channel: grpc.aio.Channel) -> dict[str, int]:
    stub = health_pb2_grpc.HealthStub(channel)
    response = await stub.List(health_pb2.HealthListRequest(), timeout=10)
    return {name: answer.status for name, answer in response.statuses.items()}


def test_list_answers_every_registered_service(recording: Recording) -> None:
    async def scenario() -> dict[str, int]:
        async with served(recording) as (channel, _):
            return await listed(channel)

    assert asyncio.run(scenario()) == dict.fromkeys(HEALTH_SERVICES, SERVING)
    assert "" in HEALTH_SERVICES


def test_list_is_bounded_at_and_past_the_edge(recording: Recording) -> None:
    async def scenario() -> tuple[int, grpc.StatusCode, str]:
        async with served(recording) as (channel, servicer):
            extra = MAX_LIST_SERVICES - len(HEALTH_SERVICES)
            for index in range(extra):
                await servicer.health.set(f"extra-{index}", SERVING)
            at_edge = len(await listed(channel))
            await servicer.health.set("one-too-many", SERVING)
            try:
                await listed(channel)
            except grpc.aio.AioRpcError as error:
                return at_edge, error.code(), error.details() or ""
            return at_edge, grpc.StatusCode.OK, ""

    assert asyncio.run(scenario()) == (
        MAX_LIST_SERVICES,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "health_list_limit",
    )


async def advertised(channel: grpc.aio.Channel) -> list[tuple[str, bool, bool]]:
    """Every method of every service reflection lists: (path, client streams, server streams)."""
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    listing = [
        answer
        async for answer in stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
        )
    ]
    names = [service.name for service in listing[0].list_services_response.service]
    requests = [reflection_pb2.ServerReflectionRequest(file_containing_symbol=n) for n in names]
    answers = [answer async for answer in stub.ServerReflectionInfo(iter(requests), timeout=10)]
    methods = []
    for name, answer in zip(names, answers, strict=True):
        files = [
            descriptor_pb2.FileDescriptorProto.FromString(raw)
            for raw in answer.file_descriptor_response.file_descriptor_proto
        ]
        services = [
            service
            for file in files
            for service in file.service
            if f"{file.package}.{service.name}" == name
        ]
        assert len(services) == 1, name
        methods += [
            (f"/{name}/{method.name}", method.client_streaming, method.server_streaming)
            for method in services[0].method
        ]
    return methods


async def answer_to_an_empty_request(
    channel: grpc.aio.Channel, path: str, client_streams: bool, server_streams: bool
) -> grpc.StatusCode:
    """OK once the method answers a message; otherwise the status it ends with."""
    try:
        if not client_streams and not server_streams:
            await channel.unary_unary(path, None, None)(b"", timeout=10)
            return grpc.StatusCode.OK
        if client_streams:
            call: Any = channel.stream_stream(path, None, None)(iter([b""]), timeout=10)
        else:
            call = channel.unary_stream(path, None, None)(b"", timeout=10)
        try:
            message = await call.read()
        finally:
            call.cancel()
        if message is EOF:
            code: grpc.StatusCode = await call.code()
            return code
        return grpc.StatusCode.OK
    except grpc.aio.AioRpcError as error:
        return error.code()


def test_every_method_reflection_advertises_is_implemented(recording: Recording) -> None:
    async def scenario() -> dict[str, grpc.StatusCode]:
        async with served(recording) as (channel, _):
            methods = await advertised(channel)
            return {
                path: await answer_to_an_empty_request(channel, path, client, server)
                for path, client, server in methods
            }

    answers = asyncio.run(scenario())
    assert "/grpc.health.v1.Health/List" in answers
    assert "/replywire.v1.ReplyStream/Open" in answers
    assert len(answers) >= 6
    unimplemented = [
        path for path, code in answers.items() if code is grpc.StatusCode.UNIMPLEMENTED
    ]
    assert unimplemented == []
    assert answers["/grpc.health.v1.Health/List"] is grpc.StatusCode.OK


def test_check_refuses_an_unknown_service_and_watch_streams_service_unknown(
    recording: Recording,
) -> None:
    """gRPC's health protocol: Check answers NOT_FOUND; Watch stays open and says
    SERVICE_UNKNOWN until the service is registered."""

    async def scenario() -> tuple[grpc.StatusCode, int, int]:
        async with served(recording) as (channel, servicer):
            stub = health_pb2_grpc.HealthStub(channel)
            try:
                await stub.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=10)
                checked = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as error:
                checked = error.code()
            call = stub.Watch(health_pb2.HealthCheckRequest(service="nope"), timeout=10)
            try:
                first = await call.read()
                await servicer.health.set("nope", SERVING)
                second = await call.read()
            finally:
                call.cancel()
            return checked, first.status, second.status

    assert asyncio.run(scenario()) == (
        grpc.StatusCode.NOT_FOUND,
        health_pb2.HealthCheckResponse.SERVICE_UNKNOWN,
        SERVING,
    )
