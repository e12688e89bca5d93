"""A text reply (docs/protocol.md#text-reply): the text itself, the empty text included,
with every frame rule of a grounded reply and nothing to validate after them."""

from __future__ import annotations

from typing import Any

import pytest

from replywire.producer.sources import check_kind
from replywire.producer.sources.recording import RecordingSource
from replywire.runtime.recording_file import DEFAULT_TEXT_RECORDING_PATH
from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.digest import canonical_json, digest
from replywire.shared.errors import ConfigurationError, ProtocolFailure, RequestRefused
from replywire.shared.frames import DoneDigest, Frame, content_sha256, frames_from_deltas
from replywire.shared.kinds import ReplyKind, kind_of
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest, check_request
from replywire.shared.status import Status
from replywire.shared.text_recording import TextRecording
from replywire.shared.texts import (
    MAX_ECHO_CHARS,
    build_text_binding,
    check_text_binding,
    text_deltas,
)
from replywire.shared.wire import WireFormat, codec_for

MESSAGES = [["human", "Say something."]]
BINDING: dict[str, Any] = {
    "kind": "text",
    "case_id": "text-0123456789abcdef",
    "request_sha256": digest(MESSAGES),
    "messages": MESSAGES,
}
WIRES = (WireFormat.LENGTH_PREFIXED, WireFormat.NDJSON)


def consumed(frames: list[Frame], wire: WireFormat) -> dict[str, Any]:
    core = ReplyConsumer(BINDING, wire=wire)
    codec = codec_for(wire)
    try:
        for frame in frames:
            core.receive_data(codec.encode_frame(frame))
    except ProtocolFailure:
        return core.result().to_dict()
    return core.end_of_stream().to_dict()


def six(text: str) -> list[str]:
    """Six-code-point deltas, as the 004 lab cuts them."""
    return [text[at : at + 6] for at in range(0, len(text), 6)]


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize(
    "text", ["", "x", "Hello, world: a text reply.", "naïve café \U0001f600 日本語のテキスト"]
)
def test_a_text_reply_is_accepted_as_it_came(wire: WireFormat, text: str) -> None:
    result = consumed(frames_from_deltas(digest(BINDING), six(text)), wire)
    assert (result["status"], result["reason"]) == ("complete", None)
    assert result["accepted_answer"] == {"text": text}
    assert result["citations"] == []
    assert (result["kind"], result["first_output"]) == ("text", text != "")
    assert result["events"][-1] == {"kind": "validated_text", "characters": len(text)}
    assert result["provisional_content"] == text


@pytest.mark.parametrize("wire", WIRES)
def test_the_empty_text_is_one_done_and_nothing_is_fabricated(wire: WireFormat) -> None:
    (done,) = frames_from_deltas(digest(BINDING), [])
    assert done.done_digest == DoneDigest(content_sha256=content_sha256(""), content_frames=0)
    result = consumed([done], wire)
    assert result["stats"]["application_frames"] == 1
    assert [event["kind"] for event in result["events"]] == ["local_terminal", "validated_text"]


@pytest.mark.parametrize("wire", WIRES)
def test_a_text_reply_keeps_every_frame_rule(wire: WireFormat) -> None:
    frames = frames_from_deltas(digest(BINDING), six("abcdefghijklmnop"))
    missing = consumed([frames[0], frames[2], frames[3]], wire)
    assert (missing["status"], missing["reason"]) == ("invalid", "invalid_sequence")
    unterminated = consumed(frames[:-1], wire)
    assert (unterminated["status"], unterminated["reason"]) == ("incomplete", "missing_terminal")
    assert unterminated["provisional_content"] == "abcdefghijklmnop"
    assert unterminated["accepted_answer"] is None
    assert unterminated["first_output"] is True


def test_the_kind_is_the_binding_s() -> None:
    assert kind_of(BINDING) is ReplyKind.TEXT
    assert kind_of({"case_id": "x"}) is ReplyKind.GROUNDED
    assert kind_of({"kind": "chat"}) is ReplyKind.CHAT
    for named in ("grounded", "CHAT", "TEXT", 1):
        with pytest.raises(ConfigurationError):
            kind_of({"kind": named})
    with pytest.raises(ConfigurationError):
        ReplyConsumer({"kind": "grounded"})


def test_a_grounded_result_names_no_kind() -> None:
    result = ReplyConsumer({"case_id": "x"}).end_of_stream().to_dict()
    assert "kind" not in result and "first_output" not in result
    assert result["status"] == Status.INCOMPLETE.value


# --- the text binding, the request's kind, the sources ----------------------------------------


def checked(binding: Any, **fields: Any) -> Any:
    request = pb.OpenRequest(
        case_id=binding.get("case_id", "x") if isinstance(binding, dict) else "x",
        binding_json=canonical_json(binding),
        **fields,
    )
    return check_request(request, allow_faults=True)


def refused(call: Any) -> str:
    with pytest.raises(RequestRefused) as caught:
        call()
    return caught.value.code


def test_a_text_binding_is_built_and_checked_back() -> None:
    binding = build_text_binding("héllo 😀", system="be brief")
    assert binding["case_id"] == "text-" + binding["request_sha256"][:16]
    assert binding["messages"] == [["system", "be brief"], ["human", "héllo 😀"]]
    assert check_text_binding(binding, binding["case_id"]) == (binding, "héllo 😀")
    assert text_deltas("abcdefghijklmn") == ("abcdef", "ghijkl", "mn")
    assert text_deltas("") == ()


def altered(**changes: Any) -> dict[str, Any]:
    return {**build_text_binding("hi"), **changes}


@pytest.mark.parametrize(
    "binding",
    [
        altered(kind="grounded"),
        altered(case_id="text-0000000000000000"),
        altered(request_sha256="0" * 64),
        altered(messages=[["human", "hi"], ["system", "no"]]),
        altered(messages=[["robot", "hi"]]),
        altered(messages=[]),
        altered(messages=[["human", 1]]),
        {**build_text_binding("hi"), "extra": 1},
        ["not", "an", "object"],
    ],
)
def test_anything_else_is_a_binding_mismatch(binding: Any) -> None:
    case_id = build_text_binding("hi")["case_id"]
    assert refused(lambda: check_text_binding(binding, case_id)) == "request_binding_mismatch"


def test_the_echoed_text_is_bounded() -> None:
    at_edge = build_text_binding("x" * MAX_ECHO_CHARS)
    assert check_text_binding(at_edge, at_edge["case_id"])[1] == "x" * MAX_ECHO_CHARS
    past = build_text_binding("x" * (MAX_ECHO_CHARS + 1))
    assert refused(lambda: check_text_binding(past, past["case_id"])) == "invalid_request"


def test_the_request_names_its_kind_and_the_lab_wire_is_grounded_only() -> None:
    binding = build_text_binding("hi")
    assert checked(binding, kind=pb.REPLY_KIND_TEXT).kind is ReplyKind.TEXT
    assert checked(binding).kind is ReplyKind.GROUNDED  # 0: the default
    assert refused(lambda: checked(binding, kind=7)) == "invalid_request"
    lab = {"kind": pb.REPLY_KIND_TEXT, "wire_format": pb.NDJSON_LAB}
    assert refused(lambda: checked(binding, **lab)) == "invalid_request"
    assert ReplyRequest(case_id="x", binding=binding).open_request().kind == pb.REPLY_KIND_TEXT
    with pytest.raises(ConfigurationError):
        ReplyRequest(case_id="x", binding=binding, wire=WireFormat.NDJSON_LAB)


def test_the_recording_source_serves_a_text_and_refuses_a_mismatch(recording: Recording) -> None:
    source = RecordingSource(recording)
    binding = build_text_binding("abcdefghijklm")
    case = source.case_of(checked(binding, kind=pb.REPLY_KIND_TEXT))
    assert (case.content, case.provider_events) == ("abcdefghijklm", ("abcdef", "ghijkl", "m"))
    grounded = checked(binding)  # a text binding sent as a grounded request
    assert refused(lambda: source.case_of(grounded)) == "development_case_required"
    recorded = recording.case("replace-file").binding
    asked_as_text = checked(recorded, kind=pb.REPLY_KIND_TEXT)
    assert refused(lambda: source.case_of(asked_as_text)) == "development_case_required"


def test_a_source_that_serves_no_text_refuses_the_kind() -> None:
    request = checked(build_text_binding("hi"), kind=pb.REPLY_KIND_TEXT)
    assert refused(lambda: check_kind(request, frozenset({ReplyKind.GROUNDED}))) == (
        "kind_unsupported"
    )


def test_the_text_recording_is_verified_and_bound_by_case(recording: Recording) -> None:
    raw = DEFAULT_TEXT_RECORDING_PATH.read_bytes()
    texts = TextRecording.from_bytes(raw)
    assert set(texts.case_ids) == set(recording.case_ids)
    case = texts.case("replace-file")
    assert case.binding["kind"] == "text" and case.binding["case_id"] == "replace-file"
    assert "".join(case.provider_events or ()) == case.content
    assert refused(lambda: TextRecording.from_bytes(raw + b" ")) == "recording_hash_mismatch"
    other = texts.case("utf8-write").binding
    assert refused(lambda: texts.bind_request("replace-file", other)) == "request_binding_mismatch"
    assert refused(lambda: texts.case("nope")) == "development_case_required"


def test_a_recorded_text_and_its_grounded_twin_are_two_replies(recording: Recording) -> None:
    texts = TextRecording.from_bytes(DEFAULT_TEXT_RECORDING_PATH.read_bytes())
    source = RecordingSource(recording, texts)
    text = source.case_of(checked(texts.case("utf8-write").binding, kind=pb.REPLY_KIND_TEXT))
    grounded = source.case_of(checked(recording.case("utf8-write").binding))
    assert text.content != grounded.content
    assert text.binding_sha256 != grounded.binding_sha256
