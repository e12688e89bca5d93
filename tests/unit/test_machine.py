"""The consumer state machine: every reason code, every limit at and past its edge.

One file past 500 lines: every reason and limit is driven through the one state machine,
from the same builders.
"""

from __future__ import annotations

import json
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import replace
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from replywire.shared.consumer_core import (
    FINAL_STATES,
    SPEC,
    TRANSITIONS,
    ConsumerState,
    Input,
    ReplyConsumer,
)
from replywire.shared.consumer_limits import Limits
from replywire.shared.errors import ProtocolFailure
from replywire.shared.frames import (
    DoneDigest,
    Frame,
    FrameKind,
    content_frames,
    derive_frames,
    terminal_frame,
)
from replywire.shared.reasons import Reason
from replywire.shared.recording import BoundCase, Recording
from replywire.shared.replay import replay
from replywire.shared.requests import ReplyRequest
from replywire.shared.result import LAB_RESULT_KEYS
from replywire.shared.wire import DEFAULT_WIRES, WireCodec, WireFormat, codec_for, lp, ndjson

WIRES = list(WireFormat)


@pytest.fixture
def case(recording: Recording) -> BoundCase:
    return recording.case("replace-file")


def encode(frames: Sequence[Frame], wire: WireFormat) -> bytes:
    codec = codec_for(wire)
    return b"".join(codec.encode_frame(frame) for frame in frames)


def run(
    case: BoundCase,
    frames: Sequence[Frame] | bytes,
    wire: WireFormat,
    *,
    limits: Limits | None = None,
    ignore_duplicates: bool = False,
    chunk: int | None = None,
) -> dict[str, Any]:
    data = frames if isinstance(frames, bytes) else encode(frames, wire)
    consumer = ReplyConsumer(
        case.binding,
        wire=wire,
        limits=limits,
        ignore_duplicates=ignore_duplicates,
        logger=structlog.get_logger(),  # the tests capture its records
    )
    pieces = [data] if chunk is None else [data[i : i + chunk] for i in range(0, len(data), chunk)]
    for piece in pieces:
        try:
            consumer.receive_data(piece)
        except ProtocolFailure:
            break
    return consumer.end_of_stream().to_dict()


def reply_frames(case: BoundCase, reply: object, *, raw: str | None = None) -> list[Frame]:
    content = raw if raw is not None else json.dumps(reply)
    return derive_frames(case.binding_sha256, content)


def assert_refused(result: dict[str, Any], status: str, reason: str) -> None:
    assert (result["status"], result["reason"]) == (status, reason)
    assert result["accepted_answer"] is None
    assert result["citations"] == []


# --- the table --------------------------------------------------------------------


def test_the_only_path_to_complete_is_done_then_validation() -> None:
    # Every state x input pair (80) is tested in tests/unit/test_fsm.py, which has SPEC in SPECS.
    assert SPEC.table is TRANSITIONS and SPEC.final == FINAL_STATES
    for (state, _), target in TRANSITIONS.items():
        assert target is not state
    into_complete = [key for key, target in TRANSITIONS.items() if target is ConsumerState.COMPLETE]
    assert into_complete == [(ConsumerState.VALIDATING, Input.REPLY_ACCEPTED)]
    into_validating = [
        key for key, target in TRANSITIONS.items() if target is ConsumerState.VALIDATING
    ]
    assert into_validating == [(ConsumerState.TERMINAL_RECEIVED, Input.END_AFTER_DONE)]


def test_a_missing_transition_is_a_bug(case: BoundCase) -> None:
    consumer = ReplyConsumer(case.binding)
    with pytest.raises(RuntimeError, match="no transition"):
        consumer._transition(Input.REPLY_ACCEPTED)
    assert consumer.state is ConsumerState.STREAMING


@pytest.mark.parametrize("wire", WIRES)
def test_complete_stream_logs_each_transition_once(case: BoundCase, wire: WireFormat) -> None:
    with capture_logs() as logs:
        result = run(case, derive_frames(case.binding_sha256, case.content), wire)
    assert result["status"] == "complete"
    changes = [
        (entry["from_state"], entry["to_state"])
        for entry in logs
        if entry["event"] == "state_changed"
    ]
    assert changes == [
        ("streaming", "terminal_received"),
        ("terminal_received", "validating"),
        ("validating", "complete"),
    ]
    assert all(entry["log_level"] == "info" for entry in logs if entry["event"] == "state_changed")
    assert sum(1 for entry in logs if entry["event"] == "frame_applied") == 10


def test_result_is_only_available_at_the_end(case: BoundCase) -> None:
    consumer = ReplyConsumer(case.binding)
    with pytest.raises(RuntimeError):
        consumer.result().to_dict()


# --- the lab's input checks -------------------------------------------------------------


def test_input_after_finish_is_refused(case: BoundCase) -> None:
    consumer = ReplyConsumer(case.binding)
    consumer.end_of_stream().to_dict()
    with pytest.raises(ProtocolFailure) as info:
        consumer.receive_data(b"x")
    assert info.value.reason is Reason.CONSUMER_ALREADY_FINISHED
    for finish in (consumer.end_of_stream, consumer.transport_error):
        with pytest.raises(ProtocolFailure) as again:
            finish()
        assert again.value.reason is Reason.CONSUMER_ALREADY_FINISHED
    assert consumer.result().to_dict()["reason"] == "missing_terminal"


def test_non_bytes_are_refused(case: BoundCase) -> None:
    consumer = ReplyConsumer(case.binding)
    with pytest.raises(ProtocolFailure) as info:
        consumer.receive_data(bytearray(b"{}"))
    assert info.value.reason is Reason.TRANSPORT_REQUIRES_BYTES
    assert_refused(consumer.end_of_stream().to_dict(), "invalid", "transport_requires_bytes")


def test_a_failed_consumer_repeats_its_failure(case: BoundCase) -> None:
    consumer = ReplyConsumer(case.binding, wire=WireFormat.NDJSON)
    with pytest.raises(ProtocolFailure):
        consumer.receive_data(b"\xff")
    with pytest.raises(ProtocolFailure) as info:
        consumer.receive_data(b"{}")
    assert info.value.reason is Reason.INVALID_UTF8
    assert consumer.stats.transport_fragments == 1
    assert_refused(consumer.end_of_stream().to_dict(), "invalid", "invalid_utf8")


@pytest.mark.parametrize("wire", WIRES)
def test_stream_byte_limit_at_and_past_the_edge(case: BoundCase, wire: WireFormat) -> None:
    data = encode(derive_frames(case.binding_sha256, case.content), wire)
    at_edge = run(case, data, wire, limits=Limits(max_stream_bytes=len(data)), chunk=7)
    assert at_edge["status"] == "complete"
    past = run(case, data, wire, limits=Limits(max_stream_bytes=len(data) - 1), chunk=7)
    assert_refused(past, "invalid", "stream_byte_limit")
    assert past["stats"]["bytes_received"] == len(data)  # the chunk that crossed the limit counts


@pytest.mark.parametrize("wire", WIRES)
def test_frame_byte_limit_at_and_past_the_edge(case: BoundCase, wire: WireFormat) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    codec = codec_for(wire)
    overhead = lp.HEADER_BYTES if wire is WireFormat.LENGTH_PREFIXED else 1
    largest = max(len(codec.encode_frame(frame)) - overhead for frame in frames)
    assert run(case, frames, wire, limits=Limits(max_frame_bytes=largest))["status"] == "complete"
    past = run(case, frames, wire, limits=Limits(max_frame_bytes=largest - 1))
    assert_refused(past, "invalid", "frame_byte_limit")


@pytest.mark.parametrize("wire", WIRES)
def test_frame_count_limit_at_and_past_the_edge(case: BoundCase, wire: WireFormat) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    assert run(case, frames, wire, limits=Limits(max_frames=10))["status"] == "complete"
    past = run(case, frames, wire, limits=Limits(max_frames=9))
    assert_refused(past, "invalid", "frame_count_limit")
    assert past["stats"]["application_frames"] == 10  # counted, then refused (the lab's order)


@pytest.mark.parametrize("wire", WIRES)
def test_content_limit_at_and_past_the_edge(case: BoundCase, wire: WireFormat) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    size = len(case.content)
    assert run(case, frames, wire, limits=Limits(max_content_chars=size))["status"] == "complete"
    past = run(case, frames, wire, limits=Limits(max_content_chars=size - 1))
    assert_refused(past, "invalid", "content_limit")
    assert past["provisional_content"] == case.content  # kept, and shown as partial
    assert past["events"][-1]["sequence"] == 8  # the over-limit delta has no event


def test_limits_must_be_positive_integers() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError):
            Limits(max_frames=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("wire", WIRES)
def test_frame_after_terminal(case: BoundCase, wire: WireFormat) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    extra = Frame(
        sequence=11, kind=FrameKind.CONTENT_DELTA, binding_sha256=case.binding_sha256, text="x"
    )
    assert_refused(run(case, [*frames, extra], wire), "invalid", "frame_after_terminal")
    # Even a second copy of the terminal itself.
    assert_refused(run(case, [*frames, frames[-1]], wire), "invalid", "frame_after_terminal")


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("sequence", [0, 2, 3, 100])
def test_invalid_sequence(case: BoundCase, wire: WireFormat, sequence: int) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    frames[0] = replace(frames[0], sequence=sequence)
    result = run(case, frames, wire)
    assert_refused(result, "invalid", "invalid_sequence")
    assert result["stats"]["application_frames"] == 0


@pytest.mark.parametrize("sequence", [True, "1", 1.0, None])
def test_ndjson_sequence_must_be_an_int(case: BoundCase, sequence: object) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    frames[0] = replace(frames[0], sequence=sequence)
    assert_refused(run(case, frames, WireFormat.NDJSON), "invalid", "invalid_sequence")


@pytest.mark.parametrize("wire", WIRES)
def test_frame_request_mismatch(case: BoundCase, wire: WireFormat) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    frames[4] = replace(frames[4], binding_sha256="f" * 64)
    result = run(case, frames, wire)
    assert_refused(result, "invalid", "frame_request_mismatch")
    assert result["stats"]["application_frames"] == 4


def test_ndjson_binding_of_the_wrong_type(case: BoundCase) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    frames[0] = replace(frames[0], binding_sha256=None)
    assert_refused(run(case, frames, WireFormat.NDJSON), "invalid", "frame_request_mismatch")


@pytest.mark.parametrize("wire", WIRES)
def test_empty_content_delta(case: BoundCase, wire: WireFormat) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    frames[1] = replace(frames[1], text="")
    assert_refused(run(case, frames, wire), "invalid", "invalid_content_delta")


@pytest.mark.parametrize("text", [5, None, ["a"], "\ud800"])
def test_ndjson_content_delta_must_be_utf8_text(case: BoundCase, text: object) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    frames[1] = replace(frames[1], text=text)
    line = json.dumps(ndjson.frame_object(frames[1]), ensure_ascii=True, separators=(",", ":"))
    data = ndjson.encode_frames(frames[:1]) + line.encode() + b"\n"
    assert_refused(run(case, data, WireFormat.NDJSON), "invalid", "invalid_content_delta")


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("kind", [FrameKind.ERROR, FrameKind.CANCEL])
def test_terminal_reason_at_and_past_the_edge(
    case: BoundCase, wire: WireFormat, kind: FrameKind
) -> None:
    deltas = ["{"]
    frames = content_frames(case.binding_sha256, deltas)
    at_edge = [*frames, terminal_frame(case.binding_sha256, 2, kind, deltas, "r" * 256)]
    result = run(case, at_edge, wire)
    expected = "cancelled" if kind is FrameKind.CANCEL else "error"
    # Valid, but not a code: the terminal's status, a code that says so, the text as detail.
    assert (result["status"], result["reason"]) == (expected, f"unregistered_{kind}_terminal")
    assert result["detail"] == "r" * 256
    past = [*frames, replace(at_edge[-1], reason="r" * 257)]
    assert_refused(run(case, past, wire), "invalid", "invalid_terminal_reason")
    empty = [*frames, replace(at_edge[-1], reason="")]
    assert_refused(run(case, empty, wire), "invalid", "invalid_terminal_reason")


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("kind", [FrameKind.ERROR, FrameKind.CANCEL])
def test_a_terminal_reason_that_is_a_code_is_the_result_reason(
    case: BoundCase, wire: WireFormat, kind: FrameKind
) -> None:
    frames = content_frames(case.binding_sha256, ["{"])
    for code in (Reason.CONTROLLED_LOCAL_ERROR, Reason.PROVIDER_FINISH_MAX_TOKENS):
        stop = terminal_frame(case.binding_sha256, 2, kind, ["{"], code.value)
        result = run(case, [*frames, stop], wire)
        status = "cancelled" if kind is FrameKind.CANCEL else "error"
        assert (result["status"], result["reason"]) == (status, code.value)
        assert "detail" not in result


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize(
    ("kind", "status", "reason"),
    [
        (FrameKind.ERROR, "error", Reason.UNREGISTERED_ERROR_TERMINAL),
        (FrameKind.CANCEL, "cancelled", Reason.UNREGISTERED_CANCEL_TERMINAL),
    ],
)
def test_a_terminal_reason_that_is_not_a_code_goes_to_detail_scrubbed(
    case: BoundCase, wire: WireFormat, kind: FrameKind, status: str, reason: Reason
) -> None:
    frames = content_frames(case.binding_sha256, ["{"])
    for text, detail in [
        ("because I said so", "because I said so"),
        ("Controlled_Local_Error", "Controlled_Local_Error"),  # codes are exact
        ("a\x1b[31mred\nline\u202eevil", "a\\x1b[31mred\\nline\\u202eevil"),
        ("\x00" * 256, "\\x00" * 63 + "\u2026"),  # 1024 characters escaped: cut, marked
    ]:
        stop = terminal_frame(case.binding_sha256, 2, kind, ["{"], text)
        with capture_logs() as logs:
            result = run(case, [*frames, stop], wire)
        assert (result["status"], result["reason"], result["detail"]) == (
            status,
            reason.value,
            detail,
        )
        assert result["local_terminal"] == kind.value
        assert result["provisional_content"] == "{"
        (final,) = [r for r in logs if r.get("to_state") == status]
        assert (final["reason"], final["detail"]) == (reason.value, detail)


@pytest.mark.parametrize("reason", [None, 7, "\udc80"])
def test_ndjson_terminal_reason_must_be_text(case: BoundCase, reason: object) -> None:
    frame = Frame(
        sequence=1, kind=FrameKind.ERROR, binding_sha256=case.binding_sha256, reason=reason
    )
    line = json.dumps(ndjson.frame_object(frame), ensure_ascii=True, separators=(",", ":"))
    result = run(case, line.encode() + b"\n", WireFormat.NDJSON)
    assert_refused(result, "invalid", "invalid_terminal_reason")


def test_reason_limit_is_configurable(case: BoundCase) -> None:
    frames = [terminal_frame(case.binding_sha256, 1, FrameKind.CANCEL, [], "abcd")]
    limits = Limits(max_reason_chars=3)
    assert_refused(
        run(case, frames, WireFormat.NDJSON, limits=limits), "invalid", "invalid_terminal_reason"
    )


# --- how the input ends ---------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_truncated_frame(case: BoundCase, wire: WireFormat) -> None:
    data = encode(derive_frames(case.binding_sha256, case.content), wire)
    result = run(case, data[:-1], wire)
    assert_refused(result, "invalid", "truncated_frame")
    assert result["provisional_content"] == case.content
    assert result["local_terminal"] is None


def test_truncated_utf8(recording: Recording) -> None:
    case = recording.case("replace-file")
    frames = content_frames(case.binding_sha256, ["é"])
    data = ndjson.encode_frames(frames)
    result = run(case, data + "é".encode()[:1], WireFormat.NDJSON)
    assert_refused(result, "invalid", "truncated_utf8")


@pytest.mark.parametrize("wire", WIRES)
def test_missing_terminal(case: BoundCase, wire: WireFormat) -> None:
    frames = derive_frames(case.binding_sha256, case.content)[:-1]
    result = run(case, frames, wire)
    assert_refused(result, "incomplete", "missing_terminal")
    assert result["provisional_content"] == case.content


def test_nothing_at_all_is_incomplete(case: BoundCase) -> None:
    result = run(case, b"", WireFormat.LENGTH_PREFIXED)
    assert_refused(result, "incomplete", "missing_terminal")
    assert result["stats"] == {
        "bytes_received": 0,
        "transport_fragments": 1,
        "application_frames": 0,
        "reconnects": 0,
        "discarded_bytes": 0,
    }


@pytest.mark.parametrize("wire", WIRES)
def test_transport_error_after_done_is_not_accepted(case: BoundCase, wire: WireFormat) -> None:
    consumer = ReplyConsumer(case.binding, wire=wire)
    consumer.receive_data(encode(derive_frames(case.binding_sha256, case.content), wire))
    assert consumer.state is ConsumerState.TERMINAL_RECEIVED
    result = consumer.transport_error({"grpc_code": "UNAVAILABLE"}).to_dict()
    assert_refused(result, "error", "transport_io_error")
    assert result["local_terminal"] == "done"
    assert result["transport"] == {"grpc_code": "UNAVAILABLE"}
    assert result["events"][-1] == {"kind": "transport_error", "reason": "transport_io_error"}


@pytest.mark.parametrize("state", ["streaming", "terminal_received"])
def test_abort_keeps_partial_content(case: BoundCase, state: str) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    consumer = ReplyConsumer(case.binding)
    consumer.receive_data(
        encode(frames if state == "terminal_received" else frames[:3], WireFormat.LENGTH_PREFIXED)
    )
    result = consumer.abort(Reason.MISSING_TERMINAL).to_dict()
    assert_refused(result, "incomplete", "missing_terminal")
    assert result["events"][-1]["kind"] == "consumer_abort"
    assert result["provisional_content"]


def test_a_failure_is_not_overwritten_by_a_later_transport_error(case: BoundCase) -> None:
    consumer = ReplyConsumer(case.binding)
    with pytest.raises(ProtocolFailure):
        consumer.receive_data(b"\x01\x00\x00\x00\x00")
    assert_refused(consumer.transport_error().to_dict(), "invalid", "invalid_frame_header")


# --- the content digest (done on the default wires: lp and ndjson) -------------------------


@pytest.mark.parametrize("wire", DEFAULT_WIRES, ids=str)
@pytest.mark.parametrize("wrong", ["sha256", "frames"])
def test_content_digest_mismatch(case: BoundCase, wire: WireFormat, wrong: str) -> None:
    """A claim of the right form that is not the content applied."""
    frames = derive_frames(case.binding_sha256, case.content)
    claim = frames[-1].done_digest
    assert claim is not None
    if wrong == "sha256":
        digest = replace(claim, content_sha256="0" * 64)
    else:
        digest = replace(claim, content_frames=claim.content_frames + 1)
    frames[-1] = replace(frames[-1], done_digest=digest)
    assert_refused(run(case, frames, wire), "invalid", "content_digest_mismatch")


MALFORMED_CLAIMS = {
    "empty": ("", None),
    "upper case": ("A" * 64, None),
    "63 characters": ("0" * 63, None),
    "65 characters": ("0" * 65, None),
    "not hex": ("g" * 64, None),
    "a trailing newline": ("0" * 64 + "\n", None),
    "negative frames": (None, -1),
}


@pytest.mark.parametrize("wire", DEFAULT_WIRES, ids=str)
@pytest.mark.parametrize("claim", list(MALFORMED_CLAIMS))
def test_a_done_whose_claim_is_not_of_its_form_is_a_schema_failure(
    case: BoundCase, wire: WireFormat, claim: str
) -> None:
    """content_sha256 is exactly 64 lowercase hex characters, content_frames a non-negative
    integer: anything else is the frame's shape (invalid_frame_schema), never compared."""
    sha256, count = MALFORMED_CLAIMS[claim]
    if count is not None and wire is WireFormat.LENGTH_PREFIXED:
        pytest.skip("content_frames is a uint64 on the length-prefixed wire")
    frames = derive_frames(case.binding_sha256, case.content)
    digest = frames[-1].done_digest
    assert digest is not None
    if sha256 is not None:
        digest = replace(digest, content_sha256=sha256)
    if count is not None:
        digest = replace(digest, content_frames=count)
    frames[-1] = replace(frames[-1], done_digest=digest)
    assert_refused(run(case, frames, wire), "invalid", "invalid_frame_schema")


@pytest.mark.parametrize("wire", DEFAULT_WIRES, ids=str)
def test_a_done_claim_of_the_wrong_form_is_refused_before_its_sequence(
    case: BoundCase, wire: WireFormat
) -> None:
    """Its form is the frame's shape: checked before the sequence and the binding."""
    frames = derive_frames(case.binding_sha256, case.content)
    frames[-1] = replace(
        frames[-1],
        sequence=len(frames) + 5,
        binding_sha256="f" * 64,
        done_digest=DoneDigest(content_sha256="", content_frames=0),
    )
    assert_refused(run(case, frames, wire), "invalid", "invalid_frame_schema")


@pytest.mark.parametrize("wire", DEFAULT_WIRES, ids=str)
def test_a_done_without_its_digest_is_refused(case: BoundCase, wire: WireFormat) -> None:
    """lp: an empty Done message (proto3 cannot tell it from an empty claim); ndjson: the
    lab's done, its keys missing. Both are the frame's shape."""
    frames = derive_frames(case.binding_sha256, case.content)
    frames[-1] = replace(frames[-1], done_digest=None)
    assert_refused(run(case, frames, wire), "invalid", "invalid_frame_schema")


class DigestDroppingCodec:
    """A codec that loses done's claim: the consumer must still require it."""

    def __init__(self, inner: WireCodec) -> None:
        self.inner = inner

    def parse_frame(self, payload: bytes) -> Frame:
        return replace(self.inner.parse_frame(payload), done_digest=None)


@pytest.mark.parametrize("wire", DEFAULT_WIRES, ids=str)
def test_the_digest_is_required_not_only_checked_when_present(
    case: BoundCase, wire: WireFormat
) -> None:
    consumer = ReplyConsumer(case.binding, wire=wire)
    consumer._codec = DigestDroppingCodec(consumer._codec)  # type: ignore[assignment]
    with pytest.raises(ProtocolFailure) as info:
        consumer.receive_data(encode(derive_frames(case.binding_sha256, case.content), wire))
    assert info.value.reason is Reason.INVALID_FRAME_SCHEMA
    result = consumer.end_of_stream().to_dict()
    assert_refused(result, "invalid", "invalid_frame_schema")
    assert result["local_terminal"] is None
    assert result["integrity"] == "sha256"


def test_the_lab_wire_accepts_done_without_a_digest_and_says_so(case: BoundCase) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    result = run(case, frames, WireFormat.NDJSON_LAB)
    assert (result["status"], result["integrity"]) == ("complete", "none")
    assert b"content_sha256" not in encode(frames, WireFormat.NDJSON_LAB)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_result_keys_are_the_labs_then_ours_with_integrity(
    case: BoundCase, wire: WireFormat
) -> None:
    result = run(case, derive_frames(case.binding_sha256, case.content), wire)
    assert list(result)[: len(LAB_RESULT_KEYS)] == list(LAB_RESULT_KEYS)
    assert list(result)[len(LAB_RESULT_KEYS) :] == [
        "case_id",
        "request_sha256",
        "binding_sha256",
        "wire_format",
        "integrity",
    ]
    assert result["integrity"] == ("none" if wire is WireFormat.NDJSON_LAB else "sha256")


def test_content_frame_count_mismatch(case: BoundCase) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    good = frames[-1].done_digest
    assert good is not None
    frames[-1] = replace(frames[-1], done_digest=replace(good, content_frames=8))
    for wire in DEFAULT_WIRES:
        assert_refused(run(case, frames, wire), "invalid", "content_digest_mismatch")


# --- duplicate policy -------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_exact_duplicate_is_refused_by_default_and_dropped_by_policy(
    case: BoundCase, wire: WireFormat
) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    repeated = [*frames[:5], frames[2], *frames[5:]]
    assert_refused(run(case, repeated, wire), "invalid", "invalid_sequence")
    with capture_logs() as logs:
        result = run(case, repeated, wire, ignore_duplicates=True)
    assert result["status"] == "complete"
    assert {"kind": "duplicate_dropped", "sequence": 3} in result["events"]
    assert result["stats"]["application_frames"] == 10
    assert result["provisional_content"] == case.content
    assert [entry["sequence"] for entry in logs if entry["event"] == "duplicate_dropped"] == [3]


@pytest.mark.parametrize("wire", WIRES)
def test_conflicting_duplicate(case: BoundCase, wire: WireFormat) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    conflicting = replace(frames[2], text="something else")
    result = run(case, [*frames[:4], conflicting, *frames[4:]], wire, ignore_duplicates=True)
    assert_refused(result, "invalid", "conflicting_duplicate")


@pytest.mark.parametrize("wire", WIRES)
def test_a_gap_is_never_repaired(case: BoundCase, wire: WireFormat) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    gap = [*frames[:2], *frames[3:]]
    assert_refused(run(case, gap, wire, ignore_duplicates=True), "invalid", "invalid_sequence")
    # A late copy of the missing frame does not fill the gap either.
    late = [*frames[:2], *frames[3:5], frames[2]]
    assert_refused(run(case, late, wire, ignore_duplicates=True), "invalid", "invalid_sequence")


# --- the final reply ---------------------------------------------------------------------------

REPLY_CASES: list[tuple[str, Callable[[BoundCase], str], str]] = [
    ("not json", lambda c: "{not json", "invalid_answer_json"),
    ("duplicate key", lambda c: '{"status":"answered","status":"answered"}', "invalid_answer_json"),
    ("nan", lambda c: '{"status": NaN}', "invalid_answer_json"),
    ("array", lambda c: "[]", "invalid_answer_schema"),
    (
        "extra key",
        lambda c: json.dumps(
            {"status": "answered", "answer": "a", "source_ids": ["path-write"], "x": 1}
        ),
        "invalid_answer_schema",
    ),
    (
        "bad status",
        lambda c: json.dumps({"status": "maybe", "answer": "a", "source_ids": []}),
        "invalid_answer_schema",
    ),
    (
        "blank answer",
        lambda c: json.dumps({"status": "not_in_docs", "answer": "  ", "source_ids": []}),
        "invalid_answer_schema",
    ),
    (
        "answer not text",
        lambda c: json.dumps({"status": "not_in_docs", "answer": 1, "source_ids": []}),
        "invalid_answer_schema",
    ),
    (
        "surrogate answer",
        lambda c: '{"status": "not_in_docs", "answer": "\\ud800", "source_ids": []}',
        "invalid_answer_schema",
    ),
    (
        "ids not list",
        lambda c: json.dumps({"status": "answered", "answer": "a", "source_ids": "path-write"}),
        "invalid_answer_schema",
    ),
    (
        "empty id",
        lambda c: json.dumps({"status": "answered", "answer": "a", "source_ids": [""]}),
        "invalid_answer_schema",
    ),
    (
        "repeated id",
        lambda c: json.dumps(
            {"status": "answered", "answer": "a", "source_ids": ["path-write", "path-write"]}
        ),
        "invalid_answer_schema",
    ),
    (
        "unknown id",
        lambda c: json.dumps({"status": "answered", "answer": "a", "source_ids": ["json-text"]}),
        "unknown_context_citation",
    ),
    (
        "answered no ids",
        lambda c: json.dumps({"status": "answered", "answer": "a", "source_ids": []}),
        "status_citation_mismatch",
    ),
    (
        "not_in_docs with ids",
        lambda c: json.dumps(
            {"status": "not_in_docs", "answer": "a", "source_ids": ["path-write"]}
        ),
        "status_citation_mismatch",
    ),
]


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize(
    ("label", "content", "reason"), REPLY_CASES, ids=[c[0] for c in REPLY_CASES]
)
def test_reply_validation(
    case: BoundCase, wire: WireFormat, label: str, content: Callable[[BoundCase], str], reason: str
) -> None:
    with capture_logs() as logs:
        result = run(case, reply_frames(case, None, raw=content(case)), wire)
    assert_refused(result, "invalid", reason)
    assert result["local_terminal"] == "done"
    assert result["provisional_content"] == content(case)
    changes = [entry["to_state"] for entry in logs if entry["event"] == "state_changed"]
    assert changes == ["terminal_received", "validating", "invalid"]


def test_citations_resolve_only_from_the_bound_context(case: BoundCase) -> None:
    reply = {
        "status": "answered",
        "answer": "see https://evil.example/",
        "source_ids": ["path-write"],
    }
    result = run(case, reply_frames(case, reply), WireFormat.LENGTH_PREFIXED)
    assert result["status"] == "complete"
    assert result["citations"] == [
        {
            "source_id": "path-write",
            "chunk_id": "path-write:b71a2d18a53d86bf",
            "url": "https://docs.python.org/3.12/library/pathlib.html#pathlib.Path.write_text",
        }
    ]


def test_logger_is_injected(case: BoundCase) -> None:
    seen: list[str] = []

    def keep(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> str:
        seen.append(event_dict["event"])
        raise structlog.DropEvent

    logger = structlog.wrap_logger(None, processors=[keep])
    consumer = ReplyConsumer(case.binding, logger=logger)
    consumer.end_of_stream().to_dict()
    assert seen == ["state_changed"]


def test_an_unconfigured_replay_prints_nothing(
    recording: Recording, capsys: pytest.CaptureFixture[str]
) -> None:
    # structlog is unconfigured here (reset by conftest): its default would print
    # debug records to stdout, where the result document goes.
    result = replay(recording, ReplyRequest.for_case(recording, "replace-file")).to_dict()
    assert result["status"] == "complete"
    assert capsys.readouterr() == ("", "")


# --- the reported case: one byte of a content frame flipped on the way ---------------------


@pytest.mark.parametrize(
    ("wire", "status", "reason"),
    [
        (WireFormat.NDJSON, "invalid", "content_digest_mismatch"),
        (WireFormat.LENGTH_PREFIXED, "invalid", "content_digest_mismatch"),
        # The lab's wire cannot see it: accepted, and the result says it was not checked.
        (WireFormat.NDJSON_LAB, "complete", None),
    ],
    ids=str,
)
def test_yes_flipped_to_xes(
    case: BoundCase, wire: WireFormat, status: str, reason: str | None
) -> None:
    data = encode(derive_frames(case.binding_sha256, case.content), wire)
    assert data.count(b"Yes") == 1  # "Yes, an existing file..." (cut across 13-char deltas)
    flipped = data.replace(b"Yes", b"Xes")
    result = run(case, flipped, wire)
    assert (result["status"], result["reason"]) == (status, reason)
    if status == "complete":
        assert "Xes, an existing" in result["accepted_answer"]["answer"]
        assert result["integrity"] == "none"
    else:
        assert result["accepted_answer"] is None
