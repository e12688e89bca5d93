"""Every refusal before a stream is admitted is counted in the producer's ``/metrics`` by
its registered reason code, as the trace counts it: bytes that are no request, ids that
break the protocol's rule (``Open`` and ``Cancel``), and a health ``Watch`` past
``--max-health-watches``.

A real producer process on an ephemeral loopback port, real gRPC calls (the malformed
ones with raw bytes, no serializer), its ``/metrics`` scraped over HTTP and checked as
Prometheus reads it (``promtool check metrics`` where it is installed).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from replywire.shared.pb import replywire_pb2 as pb
from tests.processes import producer
from tests.producer_records import (
    check_exposition,
    exposition,
    metrics_port,
    samples,
    stopped_record,
)

pytestmark = pytest.mark.timeout(120)

OPEN = "/replywire.v1.ReplyStream/Open"
CANCEL = "/replywire.v1.ReplyStream/Cancel"
#: A field tag with wire type 7, which protobuf does not have: no message parses from it.
NOT_A_MESSAGE = b"\x0f\xff\xff\xff"


async def refused_open(channel: grpc.aio.Channel, payload: bytes) -> tuple[str, str]:
    call = channel.unary_stream(OPEN, None, None)(payload, timeout=30)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        async for _ in call:
            pass
    return refused.value.code().name, refused.value.details() or ""


async def refused_cancel(channel: grpc.aio.Channel, payload: bytes) -> tuple[str, str]:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await channel.unary_unary(CANCEL, None, None)(payload, timeout=30)
    return refused.value.code().name, refused.value.details() or ""


async def refusals(target: str) -> list[tuple[str, str]]:
    """Four malformed requests, then a second Watch past a limit of one."""
    async with grpc.aio.insecure_channel(target) as channel:
        said = [
            await refused_open(channel, NOT_A_MESSAGE),
            await refused_open(
                channel, pb.OpenRequest(stream_id="has a space").SerializeToString()
            ),
            await refused_open(channel, pb.OpenRequest(stream_id="x" * 200).SerializeToString()),
            await refused_cancel(channel, NOT_A_MESSAGE),
        ]
        health = health_pb2_grpc.HealthStub(channel)
        held = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)
        await held.read()  # the first Watch is served: its first status
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            second = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)
            await second.read()
        said.append((refused.value.code().name, refused.value.details() or ""))
        held.cancel()
    return said


def test_every_refusal_before_a_stream_is_counted_by_its_reason(tmp_path: Path) -> None:
    with producer(tmp_path, "--metrics-port", "0", "--max-health-watches", "1") as p:
        port = metrics_port(p)
        said = asyncio.run(refusals(p.target))
        text = exposition(port)
        stopped = stopped_record(p)
    assert said == [
        *[("INVALID_ARGUMENT", "invalid_request")] * 4,
        ("RESOURCE_EXHAUSTED", "health_watch_limit"),
    ]
    check_exposition(text)
    values = samples(text)
    refused = {
        labels: value
        for (name, labels), value in values.items()
        if name == "replywire_requests_refused_total"
    }
    assert refused == {
        (("reason", "invalid_request"),): 4,
        (("reason", "health_watch_limit"),): 1,
    }
    # What the trace counts, the metrics count: and none of these was a stream.
    assert stopped["requests_malformed"] == 4
    assert stopped["health_watches_refused"] == 1
    assert stopped["streams_opened"] == 0
    assert not [name for (name, _), _v in values.items() if name == "replywire_streams_ended_total"]
    malformed = [r for r in p.trace() if r["event"] == "request_malformed"]
    assert len(malformed) == 4
    assert not any("has a space" in str(r) for r in malformed)  # its ids are never logged
