"""The result document's exact JSON, pinned as text (captured before it became a dataclass).

Every result a consumer command can print is one ``StreamResult``; the golden documents
in tests/golden/result/ are what ``python -m consumer`` printed before the result was
typed, so its shape (keys, their order, which are present) can never drift.
"""

from __future__ import annotations

import io
from pathlib import Path

import grpc
import pytest
import structlog

from replywire.consumer.cli import main
from replywire.consumer.client import ReplyClient
from replywire.consumer.options import StreamOptions
from replywire.consumer.reader import StreamEnded
from replywire.consumer.session import StreamSession
from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.errors import RequestRefused
from replywire.shared.frames import FrameKind, content_frames, derive_frames, terminal_frame
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import Reason
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest
from replywire.shared.result import Flow, StreamResult
from replywire.shared.wire import WireFormat, codec_for
from replywire.shared.wire.chunking import ChunkPlan

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "result"

CLI = {
    "complete": ["replay", "--case", "replace-file", "--wire", "ndjson", "--chunks", "whole"],
    "invalid": ["replay", "--case", "replace-file", "--fault", "corrupt"],
    "transport_error": [
        "replay", "--case", "replace-file", "--fault", "transport-abort", "--wire", "ndjson-lab",
    ],
    "cancelled": ["replay", "--case", "replace-file", "--fault", "cancel"],
    "refused": ["replay", "--case", "held-out-case"],
}  # fmt: skip


@pytest.mark.parametrize("name", list(CLI))
def test_the_cli_prints_the_pinned_document(name: str) -> None:
    out = io.StringIO()
    main([*CLI[name], "--log-level", "critical"], out)
    assert out.getvalue() == PINNED[name]


def test_an_abort_gives_the_pinned_document(recording: Recording) -> None:
    case = recording.case("replace-file")
    codec = codec_for(WireFormat.LENGTH_PREFIXED)
    frames = derive_frames(case.binding_sha256, case.content)
    consumer = ReplyConsumer(case.binding)
    consumer.receive_data(b"".join(codec.encode_frame(frame) for frame in frames[:2]))
    assert consumer.abort(Reason.DEADLINE_EXCEEDED).to_json() == PINNED["aborted"]


def session(recording: Recording, wire: WireFormat) -> StreamSession:
    case = recording.case("replace-file")
    request = ReplyRequest(
        case_id=case.case_id,
        binding=case.binding,
        wire=WireFormat.NDJSON,
        plan=ChunkPlan.parse("frame"),
        fault=None,
        stream_id="s-1",
    ).open_request()
    consumer = ReplyConsumer(case.binding, wire=wire)
    options = StreamOptions(target="x")
    return StreamSession(request, consumer, options, structlog.get_logger(), ReplyClient(options))


def test_a_refusal_by_the_producer_gives_the_pinned_document(recording: Recording) -> None:
    end = StreamEnded(
        grpc.StatusCode.FAILED_PRECONDITION,
        "faults_not_allowed",
        metadata=(("retry-delay", "3"), ("other", "x")),
    )
    document = session(recording, WireFormat.NDJSON)._ended(end)
    assert document.to_json() == PINNED["stream_refused"]


def test_a_broken_call_gives_the_pinned_document(recording: Recording) -> None:
    end = StreamEnded(grpc.StatusCode.UNAVAILABLE, "gone")
    document = session(recording, WireFormat.LENGTH_PREFIXED)._ended(end)
    assert document.to_json() == PINNED["stream_transport_error"]


def test_an_unregistered_terminal_reason_gives_the_pinned_document(recording: Recording) -> None:
    """The reproduction: an error terminal's free text was the result's reason."""
    case = recording.case("replace-file")
    codec = codec_for(WireFormat.LENGTH_PREFIXED)
    frames = [
        *content_frames(case.binding_sha256, ['{\n"status"']),
        terminal_frame(case.binding_sha256, 2, FrameKind.ERROR, [], "because I said so"),
    ]
    consumer = ReplyConsumer(case.binding)
    consumer.receive_data(b"".join(codec.encode_frame(frame) for frame in frames))
    assert consumer.end_of_stream().to_json() == PINNED["unregistered_error_terminal"]


def test_a_detail_is_scrubbed_and_bounded_whoever_makes_it() -> None:
    refusal = RequestRefused(Reason.DEVELOPMENT_CASE_REQUIRED, "unknown case 'a\x1b[2J\u202e'")
    result = StreamResult.refused(refusal, case_id="a", wire_format="lp")
    assert result.detail == "unknown case 'a\\x1b[2J\\u202e'"
    assert result.to_dict()["detail"] == result.detail
    long = StreamResult(status=REASONS[Reason.INTERNAL_ERROR].status, reason="internal_error",
                        case_id=None, wire_format="lp", detail="\n" * 1000)  # fmt: skip
    assert long.detail == "\\n" * 127 + "\u2026" and len(long.detail) == 255


def test_the_peers_grpc_details_are_kept_scrubbed_never_as_the_reason(
    recording: Recording,
) -> None:
    end = StreamEnded(
        grpc.StatusCode.UNAVAILABLE,
        "because I said so\x1b[0m" + "!" * 300,
        metadata=(("retry-delay", "7s\r\nx"),),
    )
    document = session(recording, WireFormat.LENGTH_PREFIXED)._ended(end).to_dict()
    assert (document["status"], document["reason"]) == ("error", "transport_io_error")
    details = document["transport"]["grpc_details"]
    assert details.startswith("because I said so\\x1b[0m!!!") and details.endswith("!\u2026")
    assert len(details) == 256
    assert document["transport"]["retry-delay"] == "7s\\r\\nx"


#: The pinned documents, by name: tests/golden/result/NAME.json, each byte as printed.
PINNED = {path.stem: path.read_text(encoding="utf-8") for path in sorted(GOLDEN.glob("*.json"))}


def test_a_stream_adds_its_id_and_flow_last(recording: Recording) -> None:
    end = StreamEnded(grpc.StatusCode.FAILED_PRECONDITION, "faults_not_allowed")
    flow = Flow(mode="stream", queue_size=8, window_bytes=65536, reads_paused=2, paused_ms=1.5)
    document = session(recording, WireFormat.NDJSON)._ended(end).with_stream("s-1", flow)
    assert list(document.to_dict())[-4:] == ["detail", "transport", "stream_id", "flow"]
    assert document.to_dict()["flow"] == {
        "mode": "stream",
        "queue_size": 8,
        "window_bytes": 65536,
        "reads_paused": 2,
        "paused_ms": 1.5,
    }
