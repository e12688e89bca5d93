"""The result document's exact JSON, pinned as text (captured before it became a dataclass).

Every result a consumer command can print is one ``StreamResult``; these literals
are what ``python -m consumer`` printed before the result was typed, so its shape
(keys, their order, which are present) can never drift.
"""

# ruff: noqa: E501 - the pinned documents are kept exactly as printed

from __future__ import annotations

import io

import grpc
import pytest
import structlog

from consumer.cli import main
from consumer.client import ReplyClient
from consumer.options import StreamOptions
from consumer.reader import StreamEnded
from consumer.session import StreamSession
from shared.consumer_core import ReplyConsumer
from shared.errors import Reason, RequestRefused
from shared.frames import FrameKind, content_frames, derive_frames, terminal_frame
from shared.recording import Recording
from shared.requests import ReplyRequest
from shared.result import Flow, StreamResult
from shared.wire import WireFormat, codec_for
from shared.wire.chunking import ChunkPlan

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
    long = StreamResult(status=Reason.INTERNAL_ERROR.status, reason="internal_error",
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


PINNED = {
    "complete": (
        "{\n"
        '  "status": "complete",\n'
        '  "reason": null,\n'
        '  "accepted_answer": {\n'
        '    "status": "answered",\n'
        '    "answer": "Yes, an existing file is overwritten.",\n'
        '    "source_ids": [\n'
        '      "path-write"\n'
        "    ]\n"
        "  },\n"
        '  "citations": [\n'
        "    {\n"
        '      "source_id": "path-write",\n'
        '      "chunk_id": "path-write:b71a2d18a53d86bf",\n'
        '      "url": "https://docs.python.org/3.12/library/pathlib.html#pathlib.Path.write_text"\n'
        "    }\n"
        "  ],\n"
        '  "provisional_content": "{\\n\\"status\\": \\"answered\\",\\n\\"answer\\": \\"Yes, an existing file is overwritten.\\",\\n\\"source_ids\\": [\\n\\"path-write\\"\\n]\\n}",\n'
        '  "local_terminal": "done",\n'
        '  "stats": {\n'
        '    "bytes_received": 1530,\n'
        '    "transport_fragments": 1,\n'
        '    "application_frames": 10,\n'
        '    "reconnects": 0,\n'
        '    "discarded_bytes": 0\n'
        "  },\n"
        '  "events": [\n'
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 1,\n'
        '      "characters_received": 13\n'
        "    },\n"
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 2,\n'
        '      "characters_received": 26\n'
        "    },\n"
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 3,\n'
        '      "characters_received": 39\n'
        "    },\n"
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 4,\n'
        '      "characters_received": 52\n'
        "    },\n"
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 5,\n'
        '      "characters_received": 65\n'
        "    },\n"
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 6,\n'
        '      "characters_received": 78\n'
        "    },\n"
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 7,\n'
        '      "characters_received": 91\n'
        "    },\n"
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 8,\n'
        '      "characters_received": 104\n'
        "    },\n"
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 9,\n'
        '      "characters_received": 107\n'
        "    },\n"
        "    {\n"
        '      "kind": "local_terminal",\n'
        '      "status": "done",\n'
        '      "sequence": 10\n'
        "    },\n"
        "    {\n"
        '      "kind": "validated_answer",\n'
        '      "status": "answered",\n'
        '      "source_ids": [\n'
        '        "path-write"\n'
        "      ],\n"
        '      "answer": {\n'
        '        "status": "answered",\n'
        '        "answer": "Yes, an existing file is overwritten.",\n'
        '        "source_ids": [\n'
        '          "path-write"\n'
        "        ]\n"
        "      },\n"
        '      "citations": [\n'
        "        {\n"
        '          "source_id": "path-write",\n'
        '          "chunk_id": "path-write:b71a2d18a53d86bf",\n'
        '          "url": "https://docs.python.org/3.12/library/pathlib.html#pathlib.Path.write_text"\n'
        "        }\n"
        "      ]\n"
        "    }\n"
        "  ],\n"
        '  "case_id": "replace-file",\n'
        '  "request_sha256": "776dcc0c6157a6970d2ad2964cecd429173d1a3758ca7b596f6c7ace2d21ef8c",\n'
        '  "binding_sha256": "f1a54255dd15ecc6a6a6dc316530f88f204a6e4c48ec5ab0def12f8bddbb2c70",\n'
        '  "wire_format": "ndjson",\n'
        '  "integrity": "sha256"\n'
        "}\n"
    ),
    "invalid": (
        "{\n"
        '  "status": "invalid",\n'
        '  "reason": "invalid_frame_payload",\n'
        '  "accepted_answer": null,\n'
        '  "citations": [],\n'
        '  "provisional_content": "{\\n\\"status\\": \\"answered\\",\\n\\"a",\n'
        '  "local_terminal": null,\n'
        '  "stats": {\n'
        '    "bytes_received": 270,\n'
        '    "transport_fragments": 3,\n'
        '    "application_frames": 2,\n'
        '    "reconnects": 0,\n'
        '    "discarded_bytes": 0\n'
        "  },\n"
        '  "events": [\n'
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 1,\n'
        '      "characters_received": 13\n'
        "    },\n"
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 2,\n'
        '      "characters_received": 26\n'
        "    }\n"
        "  ],\n"
        '  "case_id": "replace-file",\n'
        '  "request_sha256": "776dcc0c6157a6970d2ad2964cecd429173d1a3758ca7b596f6c7ace2d21ef8c",\n'
        '  "binding_sha256": "f1a54255dd15ecc6a6a6dc316530f88f204a6e4c48ec5ab0def12f8bddbb2c70",\n'
        '  "wire_format": "lp",\n'
        '  "integrity": "sha256"\n'
        "}\n"
    ),
    "transport_error": (
        "{\n"
        '  "status": "error",\n'
        '  "reason": "transport_io_error",\n'
        '  "accepted_answer": null,\n'
        '  "citations": [],\n'
        '  "provisional_content": "{\\n\\"status\\": \\"answered\\",\\n\\"a",\n'
        '  "local_terminal": null,\n'
        '  "stats": {\n'
        '    "bytes_received": 297,\n'
        '    "transport_fragments": 1,\n'
        '    "application_frames": 2,\n'
        '    "reconnects": 0,\n'
        '    "discarded_bytes": 0\n'
        "  },\n"
        '  "events": [\n'
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 1,\n'
        '      "characters_received": 13\n'
        "    },\n"
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 2,\n'
        '      "characters_received": 26\n'
        "    },\n"
        "    {\n"
        '      "kind": "transport_error",\n'
        '      "reason": "transport_io_error"\n'
        "    }\n"
        "  ],\n"
        '  "case_id": "replace-file",\n'
        '  "request_sha256": "776dcc0c6157a6970d2ad2964cecd429173d1a3758ca7b596f6c7ace2d21ef8c",\n'
        '  "binding_sha256": "f1a54255dd15ecc6a6a6dc316530f88f204a6e4c48ec5ab0def12f8bddbb2c70",\n'
        '  "wire_format": "ndjson-lab",\n'
        '  "integrity": "none",\n'
        '  "transport": {\n'
        '    "kind": "controlled_transport_abort"\n'
        "  }\n"
        "}\n"
    ),
    "cancelled": (
        "{\n"
        '  "status": "cancelled",\n'
        '  "reason": "controlled_local_cancel",\n'
        '  "accepted_answer": null,\n'
        '  "citations": [],\n'
        '  "provisional_content": "{\\n\\"status\\": \\"answered\\",\\n\\"answer\\": \\"Yes, an existing f",\n'
        '  "local_terminal": "cancel",\n'
        '  "stats": {\n'
        '    "bytes_received": 538,\n'
        '    "transport_fragments": 6,\n'
        '    "application_frames": 6,\n'
        '    "reconnects": 0,\n'
        '    "discarded_bytes": 0\n'
        "  },\n"
        '  "events": [\n'
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 1,\n'
        '      "characters_received": 13\n'
        "    },\n"
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 2,\n'
        '      "characters_received": 26\n'
        "    },\n"
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 3,\n'
        '      "characters_received": 39\n'
        "    },\n"
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 4,\n'
        '      "characters_received": 52\n'
        "    },\n"
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 5,\n'
        '      "characters_received": 53\n'
        "    },\n"
        "    {\n"
        '      "kind": "local_terminal",\n'
        '      "status": "cancel",\n'
        '      "sequence": 6\n'
        "    }\n"
        "  ],\n"
        '  "case_id": "replace-file",\n'
        '  "request_sha256": "776dcc0c6157a6970d2ad2964cecd429173d1a3758ca7b596f6c7ace2d21ef8c",\n'
        '  "binding_sha256": "f1a54255dd15ecc6a6a6dc316530f88f204a6e4c48ec5ab0def12f8bddbb2c70",\n'
        '  "wire_format": "lp",\n'
        '  "integrity": "sha256"\n'
        "}\n"
    ),
    "refused": (
        "{\n"
        '  "status": "refused",\n'
        '  "reason": "development_case_required",\n'
        '  "accepted_answer": null,\n'
        '  "citations": [],\n'
        '  "provisional_content": "",\n'
        '  "local_terminal": null,\n'
        '  "stats": {\n'
        '    "bytes_received": 0,\n'
        '    "transport_fragments": 0,\n'
        '    "application_frames": 0,\n'
        '    "reconnects": 0,\n'
        '    "discarded_bytes": 0\n'
        "  },\n"
        '  "events": [],\n'
        '  "case_id": "held-out-case",\n'
        '  "request_sha256": null,\n'
        '  "binding_sha256": null,\n'
        '  "wire_format": "lp",\n'
        '  "detail": "unknown case \'held-out-case\'; known: utf8-write, replace-file, json-result-type, backup-schedule"\n'
        "}\n"
    ),
    "aborted": (
        "{\n"
        '  "status": "incomplete",\n'
        '  "reason": "deadline_exceeded",\n'
        '  "accepted_answer": null,\n'
        '  "citations": [],\n'
        '  "provisional_content": "{\\n\\"status\\": \\"answered\\",\\n\\"a",\n'
        '  "local_terminal": null,\n'
        '  "stats": {\n'
        '    "bytes_received": 180,\n'
        '    "transport_fragments": 1,\n'
        '    "application_frames": 2,\n'
        '    "reconnects": 0,\n'
        '    "discarded_bytes": 0\n'
        "  },\n"
        '  "events": [\n'
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 1,\n'
        '      "characters_received": 13\n'
        "    },\n"
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 2,\n'
        '      "characters_received": 26\n'
        "    },\n"
        "    {\n"
        '      "kind": "consumer_abort",\n'
        '      "reason": "deadline_exceeded"\n'
        "    }\n"
        "  ],\n"
        '  "case_id": "replace-file",\n'
        '  "request_sha256": "776dcc0c6157a6970d2ad2964cecd429173d1a3758ca7b596f6c7ace2d21ef8c",\n'
        '  "binding_sha256": "f1a54255dd15ecc6a6a6dc316530f88f204a6e4c48ec5ab0def12f8bddbb2c70",\n'
        '  "wire_format": "lp",\n'
        '  "integrity": "sha256"\n'
        "}\n"
    ),
    "unregistered_error_terminal": (
        "{\n"
        '  "status": "error",\n'
        '  "reason": "unregistered_error_terminal",\n'
        '  "accepted_answer": null,\n'
        '  "citations": [],\n'
        '  "provisional_content": "{\\n\\"status\\"",\n'
        '  "local_terminal": "error",\n'
        '  "stats": {\n'
        '    "bytes_received": 181,\n'
        '    "transport_fragments": 1,\n'
        '    "application_frames": 2,\n'
        '    "reconnects": 0,\n'
        '    "discarded_bytes": 0\n'
        "  },\n"
        '  "events": [\n'
        "    {\n"
        '      "kind": "provisional_content",\n'
        '      "sequence": 1,\n'
        '      "characters_received": 10\n'
        "    },\n"
        "    {\n"
        '      "kind": "local_terminal",\n'
        '      "status": "error",\n'
        '      "sequence": 2\n'
        "    }\n"
        "  ],\n"
        '  "case_id": "replace-file",\n'
        '  "request_sha256": "776dcc0c6157a6970d2ad2964cecd429173d1a3758ca7b596f6c7ace2d21ef8c",\n'
        '  "binding_sha256": "f1a54255dd15ecc6a6a6dc316530f88f204a6e4c48ec5ab0def12f8bddbb2c70",\n'
        '  "wire_format": "lp",\n'
        '  "integrity": "sha256",\n'
        '  "detail": "because I said so"\n'
        "}\n"
    ),
    "stream_refused": (
        "{\n"
        '  "status": "refused",\n'
        '  "reason": "faults_not_allowed",\n'
        '  "accepted_answer": null,\n'
        '  "citations": [],\n'
        '  "provisional_content": "",\n'
        '  "local_terminal": null,\n'
        '  "stats": {\n'
        '    "bytes_received": 0,\n'
        '    "transport_fragments": 0,\n'
        '    "application_frames": 0,\n'
        '    "reconnects": 0,\n'
        '    "discarded_bytes": 0\n'
        "  },\n"
        '  "events": [],\n'
        '  "case_id": "replace-file",\n'
        '  "request_sha256": "776dcc0c6157a6970d2ad2964cecd429173d1a3758ca7b596f6c7ace2d21ef8c",\n'
        '  "binding_sha256": "f1a54255dd15ecc6a6a6dc316530f88f204a6e4c48ec5ab0def12f8bddbb2c70",\n'
        '  "wire_format": "ndjson",\n'
        '  "detail": "producer answered FAILED_PRECONDITION",\n'
        '  "transport": {\n'
        '    "grpc_code": "FAILED_PRECONDITION",\n'
        '    "grpc_details": "faults_not_allowed",\n'
        '    "retry-delay": "3"\n'
        "  }\n"
        "}\n"
    ),
    "stream_transport_error": (
        "{\n"
        '  "status": "error",\n'
        '  "reason": "transport_io_error",\n'
        '  "accepted_answer": null,\n'
        '  "citations": [],\n'
        '  "provisional_content": "",\n'
        '  "local_terminal": null,\n'
        '  "stats": {\n'
        '    "bytes_received": 0,\n'
        '    "transport_fragments": 0,\n'
        '    "application_frames": 0,\n'
        '    "reconnects": 0,\n'
        '    "discarded_bytes": 0\n'
        "  },\n"
        '  "events": [\n'
        "    {\n"
        '      "kind": "transport_error",\n'
        '      "reason": "transport_io_error"\n'
        "    }\n"
        "  ],\n"
        '  "case_id": "replace-file",\n'
        '  "request_sha256": "776dcc0c6157a6970d2ad2964cecd429173d1a3758ca7b596f6c7ace2d21ef8c",\n'
        '  "binding_sha256": "f1a54255dd15ecc6a6a6dc316530f88f204a6e4c48ec5ab0def12f8bddbb2c70",\n'
        '  "wire_format": "lp",\n'
        '  "integrity": "sha256",\n'
        '  "transport": {\n'
        '    "grpc_code": "UNAVAILABLE",\n'
        '    "grpc_details": "gone"\n'
        "  }\n"
        "}\n"
    ),
}


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
