"""A deliberate stop (Ctrl-C on the consumer) cancels the reply's generation at once with
``ReplyStream/Cancel``, instead of leaving it generating for ``--detach-grace-s``; across
real processes, with the Gemini source against the fake server's slow-drip script."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from replywire.children import stop_process
from replywire.producer.edge.security import TokenAuthenticator
from replywire.producer.edge.server import start_server
from replywire.producer.settings import Exposure, ServerSettings
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.recording import Recording
from tests.gemini_runs import API_KEY, gemini_producer
from tests.processes import (
    FakeGeminiProcess,
    consumer_process,
    fake_gemini,
    read_trace,
    wait_for,
)

pytestmark = pytest.mark.timeout(180)

#: Far longer than any bounded wait below: whatever stops within them was not the grace.
GRACE_S = "120"
#: A bounded wait for what must happen at once.
PROMPTLY_S = 10.0
TOKEN = "cancel-test-token-0123456789"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGeminiProcess]:
    with fake_gemini(API_KEY) as server:
        yield server


def test_ctrl_c_cancels_the_generation_and_the_provider_call_at_once(
    tmp_path: Path, fake: FakeGeminiProcess
) -> None:
    stream_id = "ctrl-c"
    before = len(fake.log())
    with gemini_producer(
        tmp_path, fake, "--detach-grace-s", GRACE_S, model="fake-slow-drip"
    ) as running:
        with consumer_process(
            tmp_path, running.target, "--case", "backup-schedule", "--stream-id", stream_id,
            "--chunk-interval-ms", "300", "--result", str(tmp_path / "result.json"),
        ) as consumer:  # fmt: skip
            wait_for(
                lambda: any(r["event"] == "chunk_sent" for r in running.stream_trace(stream_id)),
                timeout=30,
            )
            assert stop_process(consumer, signal.SIGINT) == 3
        wait_for(
            lambda: len(fake.log()) > before and bool(fake.log()[-1]["client_disconnected"]),
            timeout=PROMPTLY_S,
        )
        wait_for(running.released_upstream, timeout=PROMPTLY_S)
        records = running.stream_trace(stream_id)
    result = json.loads((tmp_path / "result.json").read_text())
    assert (result["status"], result["reason"]) == ("incomplete", "consumer_cancelled")
    assert fake.log()[-1]["body_completed"] is False
    assert len(fake.log()) == before + 1
    requested = [r for r in records if r["event"] == "stream_cancel_requested"]
    assert [r["cancelled"] for r in requested] == [True]
    consumer_trace = read_trace(tmp_path / "consumer.trace.jsonl")
    assert any(r["event"] in {"cancel_sent", "cancel_unconfirmed"} for r in consumer_trace)
    entries = json.loads((tmp_path / "ledger.json").read_text())["entries"]
    assert len(entries) == 1
    assert entries[0]["state"] != "reserved"


async def cancel(
    recording: Recording, stream_id: str, metadata: tuple[tuple[str, str], ...] = ()
) -> tuple[grpc.StatusCode, str, bool]:
    """One ``Cancel`` on an in-process producer that requires tokens."""
    settings = ServerSettings(
        host="127.0.0.1",
        port=0,
        allow_faults=False,
        exposure=Exposure(authenticator=TokenAuthenticator([("alice", TOKEN)])),
    )
    server, port, _ = await start_server(recording, settings)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call: Any = pb_grpc.ReplyStreamStub(channel).Cancel(
                pb.CancelRequest(stream_id=stream_id), timeout=10, metadata=metadata
            )
            try:
                reply: pb.CancelReply = await call
            except grpc.aio.AioRpcError as error:
                return error.code(), error.details() or "", False
            return grpc.StatusCode.OK, "", reply.cancelled
    finally:
        await server.stop(0)


def test_cancel_is_authenticated_like_open_and_checks_the_stream_id(
    recording: Recording,
) -> None:
    bearer = (("authorization", f"Bearer {TOKEN}"),)
    assert asyncio.run(cancel(recording, "nothing")) == (
        grpc.StatusCode.UNAUTHENTICATED,
        "invalid_token",
        False,
    )
    assert asyncio.run(cancel(recording, "nothing", bearer)) == (grpc.StatusCode.OK, "", False)
    assert asyncio.run(cancel(recording, "not plain", bearer)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "invalid_request",
        False,
    )
