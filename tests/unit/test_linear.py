"""The decoders and the consumer stay linear in the number of frames and of chunks.

These tests assert results, never times: a quadratic buffer or re-scan shows
up as a test that runs into its timeout, not as a flaky timing assertion.
Linear code runs each of them in a few seconds.
"""

from __future__ import annotations

from typing import Any, Final

import pytest
import structlog

from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.consumer_limits import Limits
from replywire.shared.frames import FrameKind, content_frames, terminal_frame
from replywire.shared.recording import Recording
from replywire.shared.wire import WireFormat, codec_for

# Not traced by coverage: tens of thousands of frames and chunks per test run the same
# lines again and again, five times slower under the tracer (make test); the wire, machine
# and SSE tests measure those lines.
pytestmark = pytest.mark.no_cover

CASE_ID: Final = "utf8-write"
HEAD: Final = '{"status": "not_in_docs", "answer": "'
TAIL: Final = '", "source_ids": []}'
#: Raised far enough that only the decoders' own work is measured.
LIMITS: Final = Limits(max_stream_bytes=1 << 30, max_frames=1_000_000, max_content_chars=1_000_000)


def reply_deltas(count: int) -> tuple[str, list[str]]:
    """A valid ``not_in_docs`` reply cut into exactly ``count`` deltas of one or two characters."""
    total = count + count // 2
    content = HEAD + "x" * (total - len(HEAD) - len(TAIL)) + TAIL
    pairs = total - count  # the first deltas carry two characters, the rest one
    deltas = [content[2 * index : 2 * index + 2] for index in range(pairs)]
    deltas += list(content[2 * pairs :])
    assert len(deltas) == count and "".join(deltas) == content
    assert all(1 <= len(delta) <= 2 for delta in deltas)
    return content, deltas


def build_wire(recording: Recording, wire: WireFormat, count: int) -> tuple[str, bytes]:
    """``count`` content frames and a done terminal, encoded in ``wire``."""
    sha = recording.case(CASE_ID).binding_sha256
    content, deltas = reply_deltas(count)
    frames = content_frames(sha, deltas)
    frames.append(terminal_frame(sha, count + 1, FrameKind.DONE, deltas))
    codec = codec_for(wire)
    return content, b"".join(codec.encode_frame(frame) for frame in frames)


def assert_complete(doc: dict[str, Any], content: str, count: int, wire_bytes: int) -> None:
    assert (doc["status"], doc["reason"]) == ("complete", None)
    assert doc["provisional_content"] == content
    assert doc["accepted_answer"] == {
        "status": "not_in_docs",
        "answer": content[len(HEAD) : -len(TAIL)],
        "source_ids": [],
    }
    assert doc["stats"]["application_frames"] == count + 1
    assert doc["stats"]["bytes_received"] == wire_bytes
    # One provisional_content event per delta, the terminal, the validated answer.
    assert len(doc["events"]) == count + 2


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("ignore_duplicates", [False, True], ids=["strict", "ignore-duplicates"])
@pytest.mark.parametrize("wire", list(WireFormat), ids=str)
def test_100k_frames_in_one_chunk(
    recording: Recording,
    quiet_logger: structlog.typing.FilteringBoundLogger,
    wire: WireFormat,
    ignore_duplicates: bool,
) -> None:
    count = 100_000
    content, data = build_wire(recording, wire, count)
    consumer = ReplyConsumer(
        recording.case(CASE_ID).binding,
        wire=wire,
        limits=LIMITS,
        ignore_duplicates=ignore_duplicates,
        logger=quiet_logger,
    )

    consumer.receive_data(data)
    doc = consumer.end_of_stream().to_dict()

    assert_complete(doc, content, count, len(data))
    assert doc["stats"]["transport_fragments"] == 1


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("wire", list(WireFormat), ids=str)
def test_10k_frames_in_one_byte_chunks(
    recording: Recording, quiet_logger: structlog.typing.FilteringBoundLogger, wire: WireFormat
) -> None:
    count = 10_000
    content, data = build_wire(recording, wire, count)
    consumer = ReplyConsumer(
        recording.case(CASE_ID).binding, wire=wire, limits=LIMITS, logger=quiet_logger
    )

    for offset in range(len(data)):
        consumer.receive_data(data[offset : offset + 1])
    doc = consumer.end_of_stream().to_dict()

    assert_complete(doc, content, count, len(data))
    assert doc["stats"]["transport_fragments"] == len(data)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("wire", list(WireFormat), ids=str)
def test_one_large_multibyte_frame_in_one_byte_chunks(
    recording: Recording, quiet_logger: structlog.typing.FilteringBoundLogger, wire: WireFormat
) -> None:
    """A frame that stays partial for ~1 MB of 1-byte chunks is not re-scanned per chunk."""
    answer = "é€𝄞" * 100_000  # 2-, 3- and 4-byte UTF-8: most chunks end inside a character
    content = HEAD + answer + TAIL
    sha = recording.case(CASE_ID).binding_sha256
    frames = [*content_frames(sha, [content]), terminal_frame(sha, 2, FrameKind.DONE, [content])]
    codec = codec_for(wire)
    data = b"".join(codec.encode_frame(frame) for frame in frames)
    assert len(data) > 900_000
    limits = Limits(max_stream_bytes=1 << 30, max_frame_bytes=1 << 21, max_content_chars=1 << 21)
    consumer = ReplyConsumer(
        recording.case(CASE_ID).binding, wire=wire, limits=limits, logger=quiet_logger
    )

    for offset in range(len(data)):
        consumer.receive_data(data[offset : offset + 1])
    doc = consumer.end_of_stream().to_dict()

    assert (doc["status"], doc["reason"]) == ("complete", None)
    assert doc["accepted_answer"]["answer"] == answer
    assert doc["stats"] == {
        "bytes_received": len(data),
        "transport_fragments": len(data),
        "application_frames": 2,
        "reconnects": 0,
        "discarded_bytes": 0,
    }
