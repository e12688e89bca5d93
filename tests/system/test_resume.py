"""Resume: a broken stream is delivered again from the producer's reply log, across
real processes: the consumer's connection reset by a proxy after every N bytes of the
stream, and the producer killed (SIGKILL) mid-stream and started again on its port.

With resume on, every run ends ``complete`` with the result of an unbroken run; with
``--resume-attempts 0`` every one ends ``error / transport_io_error`` as before.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replywire.children import stop_process
from replywire.consumer.client import stream_reply
from replywire.consumer.options import StreamOptions
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import Reason
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan
from tests.processes import (
    consumer_process,
    producer,
    run_consumer,
    wait_for,
)
from tests.reset_proxy import ResetProxy
from tests.runs import CASE, essence


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with producer(tmp_path_factory.mktemp("resume"), "--allow-faults") as p:
        yield p


def stream_once(
    recording: Recording, target: str, stream_id: str, *, attempts: int, chunks: str = "frame"
) -> dict[str, Any]:
    """One stream through the consumer's own client (in this process; the producer and the
    proxy are real): a sweep of hundreds of cuts would take minutes as processes."""
    request = ReplyRequest(
        case_id=CASE,
        binding=recording.case(CASE).binding,
        wire=WireFormat.LENGTH_PREFIXED,
        plan=ChunkPlan.parse(chunks),
        fault=None,
        stream_id=stream_id,
    )
    options = StreamOptions(
        target=target,
        deadline_s=30,
        idle_timeout_s=10,
        resume_attempts=attempts,
        resume_backoff_s=0.01,
        resume_backoff_max_s=0.05,
    )
    return asyncio.run(stream_reply(request, options)).to_dict()


def cuts(
    proxy_upstream: int, recording: Recording, chunks: str
) -> tuple[list[int], int, dict[str, Any]]:
    """Every place to cut the first connection: each end of an upstream read (the frame
    boundaries: one gRPC message per frame) and one byte either side, and points inside
    each read; with where the call is committed (its response headers end) and the
    unbroken result."""
    with ResetProxy(proxy_upstream, None) as proxy:
        unbroken = stream_once(
            recording, proxy.target, f"whole-{chunks}", attempts=0, chunks=chunks
        )
        ends = proxy.first_read_ends
    # Reads coalesce under load (fewer read ends): 40 evenly spaced cuts as well, so the
    # sweep covers the whole stream however the bytes happened to arrive.
    points = {0, 1, *range(0, ends[-1], max(1, ends[-1] // 40))}
    start = 0
    for end in ends:
        points |= {end - 1, end, end + 1, (start + end) // 2, start + (end - start) // 4}
        start = end
    return (
        sorted(p for p in points if 0 <= p < ends[-1]),
        response_headers_end(bytes(proxy.first_downlink)),
        unbroken,
    )


def response_headers_end(downlink: bytes) -> int:
    """The offset just past the call's response HEADERS frame (HTTP/2 frames: a 9-byte
    header, 3-byte length, type 0x1 for HEADERS, a non-zero stream id). A cut before it may
    come before the call was committed, which gRPC then retries on a new connection itself
    (no resume needed, none counted); a cut after it is one the consumer must resume."""
    offset = 0  # a server sends no preface of its own: its bytes are frames from byte 0
    while offset + 9 <= len(downlink):
        length = int.from_bytes(downlink[offset : offset + 3], "big")
        kind = downlink[offset + 3]
        stream = int.from_bytes(downlink[offset + 5 : offset + 9], "big") & 0x7FFFFFFF
        offset += 9 + length
        if kind == 0x1 and stream != 0:
            return offset
    raise AssertionError("no response HEADERS in the producer's bytes")


@pytest.mark.parametrize("chunks", ["frame", "1,2,7,3,11"])
def test_a_reset_anywhere_in_the_stream_resumes_to_the_unbroken_result(
    served: Any, recording: Recording, chunks: str
) -> None:
    points, committed, unbroken = cuts(served.port, recording, chunks)
    assert unbroken["status"] == "complete"
    assert len(points) > 20
    if chunks != "frame":  # 1-11 byte chunks: hundreds of reads, so every 5th cut
        points = points[::5]
    discarded = 0
    uncut = []
    for n in points:
        with ResetProxy(served.port, n) as proxy:
            result = stream_once(
                recording, proxy.target, f"cut-{chunks}-{n}", attempts=3, chunks=chunks
            )
            if not proxy.reset_done:
                # This run's connection carried fewer bytes than the measured one (its
                # HTTP/2 control frames, a PING or a WINDOW_UPDATE, vary from run to run;
                # seen once in CI at the last bytes): a cut past its end cuts nothing.
                assert proxy.first_bytes < n, n
                uncut.append(n)
        assert essence(result) == essence(unbroken), n
        # A cut before the response headers may come before the call was committed, which
        # gRPC then sends on the next connection itself (no resume needed, none counted).
        resumed = 1 if n >= committed and proxy.reset_done else 0
        assert result["stats"]["reconnects"] >= resumed, n
        discarded += result["stats"]["discarded_bytes"]
    assert len(uncut) <= len(points) // 10, uncut  # the tail's few bytes, never the stream
    if chunks != "frame":  # a frame cut across chunks: its first part is dropped
        assert discarded > 0


def test_without_resume_a_reset_anywhere_is_a_transport_error(
    served: Any, recording: Recording
) -> None:
    points, committed, _ = cuts(served.port, recording, "frame")
    for n in (point for point in points if point >= committed):
        with ResetProxy(served.port, n) as proxy:
            result = stream_once(recording, proxy.target, f"noresume-{n}", attempts=0)
        assert (result["status"], result["reason"]) == ("error", "transport_io_error"), n
        assert result["accepted_answer"] is None
        assert result["stats"]["reconnects"] == 0


def test_the_consumer_process_resumes_and_both_traces_say_so(
    served: Any, recording: Recording
) -> None:
    points, _, unbroken = cuts(served.port, recording, "frame")
    n = points[len(points) // 2]
    with ResetProxy(served.port, n) as proxy:
        run = run_consumer(proxy.target, "--case", CASE, "--stream-id", "cli-resume")
    assert run.returncode == 0
    assert essence(run.result) == essence(unbroken)
    assert run.result["stats"]["reconnects"] == 1
    resumed = [r for r in run.trace if r["event"] == "transport_resumed"]
    assert [r["attempt"] for r in resumed] == [1]
    second_reader = [
        (r["from_state"], r["to_state"])
        for r in run.trace
        if r["event"] == "state_changed" and r.get("component") == "reader" and r.get("attempt")
    ]
    assert second_reader[-1] == ("streaming", "ended")

    # The producer: two deliveries under one stream id, each its own machine and final state.
    # (The broken delivery's end may be logged after the consumer exits: a bounded wait.)
    def finals() -> list[str]:
        return [
            r["to_state"]
            for r in served.stream_trace("cli-resume")
            if r["event"] == "state_changed"
            and r["to_state"] in ("completed", "cancelled_by_consumer")
        ]

    wait_for(lambda: len(finals()) >= 2)
    assert len(finals()) == 2 and "completed" in finals()
    records = [r for r in served.stream_trace("cli-resume") if r["event"] == "state_changed"]
    attach = [r for r in records if r.get("input") == "attach"]
    assert len(attach) == 1 and attach[0]["attempt"] == 2
    resuming = [r for r in run.trace if r["event"] == "stream_resuming"]
    assert attach[0]["resume_after"] == resuming[0]["resume_after"]
    with ResetProxy(served.port, n) as proxy:
        run = run_consumer(proxy.target, "--case", CASE, "--resume-attempts", "0")
    assert run.returncode == 5
    assert (run.result["status"], run.result["reason"]) == ("error", "transport_io_error")


@pytest.mark.parametrize("fault", ["transport-abort", "abort-after-done"])
def test_a_transport_fault_hits_the_first_delivery_only(served: Any, fault: str) -> None:
    run = run_consumer(served.target, "--case", CASE, "--fault", fault)
    assert run.returncode == 0
    assert run.result["status"] == "complete"
    assert run.result["stats"]["reconnects"] == 1


def test_a_resume_with_another_binding_or_of_nothing_is_refused(
    served: Any, recording: Recording
) -> None:
    assert stream_once(recording, served.target, "known", attempts=0)["status"] == "complete"
    request = ReplyRequest(
        case_id="utf8-write",
        binding=recording.case("utf8-write").binding,
        wire=WireFormat.LENGTH_PREFIXED,
        plan=ChunkPlan.parse("frame"),
        fault=None,
        stream_id="known",
    )
    options = StreamOptions(target=served.target, deadline_s=30)
    result = asyncio.run(stream_reply(request, options))
    assert (result.status.value, result.reason) == ("refused", "resume_binding_mismatch")
    assert result.transport is not None
    assert result.transport["grpc_code"] == REASONS[Reason.RESUME_BINDING_MISMATCH].grpc_code


def test_a_killed_producer_restarted_on_its_port_completes_the_stream(
    tmp_path: Path, recording: Recording
) -> None:
    """The recording is deterministic: a restarted producer that has no log of the stream
    regenerates the recorded reply when the binding matches, and delivers it from
    resume_after + 1 (a live source cannot: resume_unavailable)."""
    with producer(tmp_path, "--log-level", "debug", name="first") as first:
        port = first.port
        unbroken = run_consumer(first.target, "--case", CASE)
        with consumer_process(
            tmp_path,
            first.target,
            "--case",
            CASE,
            "--chunk-interval-ms",
            "150",
            "--resume-attempts",
            "8",
            "--stream-id",
            "killed",
            "--result",
            str(tmp_path / "result.json"),
        ) as consumer:
            wait_for(
                lambda: (
                    sum(1 for r in first.stream_trace("killed") if r["event"] == "chunk_sent") >= 4
                ),
                timeout=30,
            )
            stop_process(first.process, signal.SIGKILL)
            with producer(tmp_path, "--port", str(port), name="second") as second:
                assert consumer.wait(timeout=60) == 0
                records = second.stream_trace("killed")
    result = json.loads((tmp_path / "result.json").read_text())
    assert essence(result) == essence(unbroken.result)
    assert result["stats"]["reconnects"] >= 1
    verify = [r for r in records if r.get("input") == "verify"]
    assert verify and verify[0]["resume_after"] >= 3
    assert records[-1]["to_state"] == "completed"
