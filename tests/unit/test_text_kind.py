"""A text reply (docs/protocol.md#text-reply): the text itself, the empty text included,
with every frame rule of a grounded reply and nothing to validate after them."""

from __future__ import annotations

from typing import Any

import pytest

from shared.consumer_core import ReplyConsumer
from shared.digest import digest
from shared.errors import ConfigurationError, ProtocolFailure
from shared.frames import DoneDigest, Frame, content_sha256, frames_from_deltas
from shared.kinds import ReplyKind, kind_of
from shared.status import Status
from shared.wire import WireFormat, codec_for

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
    for named in ("grounded", "chat", "TEXT", 1):
        with pytest.raises(ConfigurationError):
            kind_of({"kind": named})
    with pytest.raises(ConfigurationError):
        ReplyConsumer({"kind": "chat"})


def test_a_grounded_result_names_no_kind() -> None:
    result = ReplyConsumer({"case_id": "x"}).end_of_stream().to_dict()
    assert "kind" not in result and "first_output" not in result
    assert result["status"] == Status.INCOMPLETE.value
