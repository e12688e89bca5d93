"""The producing side of a chat reply, as frames: a turn's frames and their digest
(``shared.chat_frames``), the faults in a chat reply (docs/protocol.md#faults), the chat
recording (``shared.chat_recording``) and the recording source that serves it."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from replywire.producer.sources.recording import SERVED, RecordingSource
from replywire.runtime.recording_file import DEFAULT_CHAT_RECORDING_PATH
from replywire.shared.chat_frames import ChatItem, chat_frames, chat_item_json, chat_item_of
from replywire.shared.chat_parts import ChatDigest, FinishPart, ToolCallPart, UsagePart
from replywire.shared.chat_recording import ChatRecording
from replywire.shared.chats import chat_binding_problem
from replywire.shared.digest import canonical_json
from replywire.shared.errors import RequestRefused
from replywire.shared.faults import Fault, FaultKind, faulted_frames
from replywire.shared.frames import CONTENT_KINDS, FrameKind
from replywire.shared.kinds import ReplyKind
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.recording import Recording
from replywire.shared.requests import check_request
from replywire.shared.wire import WireFormat, codec_for

BINDING_SHA256 = "b" * 64
TURN: tuple[ChatItem, ...] = (
    (FrameKind.CONTENT_DELTA, "Reading "),
    (FrameKind.TOOL_CALL, ToolCallPart(index=0, id="c", name="read_file", arguments='{"p":1}')),
    (FrameKind.FINISH, FinishPart(reason="STOP")),
    (FrameKind.USAGE, UsagePart(prompt_tokens=3, cached_tokens=0, completion_tokens=2,
                                thoughts_tokens=0, tool_use_prompt_tokens=0, total_tokens=5)),
)  # fmt: skip


@pytest.fixture(scope="module")
def chats() -> ChatRecording:
    return ChatRecording.from_bytes(DEFAULT_CHAT_RECORDING_PATH.read_bytes())


def refused(call: Any) -> str:
    with pytest.raises(RequestRefused) as caught:
        call()
    return caught.value.code


def test_a_turn_is_numbered_from_one_and_done_claims_every_content_frame() -> None:
    frames = chat_frames(BINDING_SHA256, TURN)
    assert [frame.sequence for frame in frames] == [1, 2, 3, 4, 5]
    assert [frame.kind for frame in frames] == [kind for kind, _ in TURN] + [FrameKind.DONE]
    assert {frame.binding_sha256 for frame in frames} == {BINDING_SHA256}
    assert frames[0].text == "Reading " and frames[1].part == TURN[1][1]
    running = ChatDigest()
    running.add_text("Reading ")
    for kind, part in TURN[1:]:
        assert not isinstance(part, str)
        running.add_part(kind.value, part)
    claim = frames[-1].done_digest
    assert claim is not None
    assert (claim.content_sha256, claim.content_frames) == running.claim()
    (done,) = chat_frames(BINDING_SHA256, ())
    assert done.done_digest is not None and done.done_digest.content_frames == 0


def test_the_digest_is_of_the_records_the_protocol_shows() -> None:
    (call,) = chat_frames(BINDING_SHA256, [TURN[1]])[:-1]
    record = canonical_json({"kind": "tool_call", "index": 0, "id": "c", "name": "read_file",
                             "arguments": '{"p":1}'}) + b"\n"  # fmt: skip
    claim = chat_frames(BINDING_SHA256, [TURN[1]])[-1].done_digest
    assert call.part == TURN[1][1]
    assert claim is not None and claim.content_sha256 == hashlib.sha256(record).hexdigest()


def test_a_terminal_other_than_done_carries_its_reason() -> None:
    frames = chat_frames(BINDING_SHA256, TURN[:1], FrameKind.ERROR, "controlled_local_error")
    assert (frames[-1].kind, frames[-1].reason) == (FrameKind.ERROR, "controlled_local_error")
    assert refused(lambda: chat_frames(BINDING_SHA256, TURN, FrameKind.CANCEL)) == (
        "invalid_local_terminal"
    )


@pytest.mark.parametrize(
    "item",
    [
        (FrameKind.CONTENT_DELTA, ""),
        (FrameKind.TOOL_CALL, FinishPart(reason="STOP")),
        (FrameKind.FINISH, "STOP"),
        (FrameKind.DONE, FinishPart(reason="STOP")),
    ],
)
def test_an_item_that_is_not_its_kind_s_is_refused(item: ChatItem) -> None:
    with pytest.raises(ValueError, match="item 1"):
        chat_frames(BINDING_SHA256, [item])


def test_an_item_reads_back_from_its_fields() -> None:
    for item in TURN:
        assert chat_item_of(chat_item_json(item)) == item
    for fields in (
        {"kind": "content_delta", "text": ""},
        {"kind": "finish"},
        {"kind": "finish", "reason": 1},
        {"kind": "tool_call", "index": -1, "id": "", "name": "a", "arguments": "{}"},
        {"kind": "tool_call", "index": True, "id": "", "name": "a", "arguments": "{}"},
        {"kind": "done"},
    ):
        with pytest.raises(ValueError):
            chat_item_of(fields)


# --- faults in a chat reply --------------------------------------------------------------------


def frames_of(case: Any, fault: Fault | None, wire: WireFormat = WireFormat.NDJSON) -> Any:
    return faulted_frames(case, codec_for(wire), fault, "f" * 64)


@pytest.mark.parametrize("kind", [FaultKind.CANCEL, FaultKind.ERROR])
def test_cancel_and_error_send_the_first_half_of_the_content_frames(
    chats: ChatRecording, kind: FaultKind
) -> None:
    for case_id in chats.case_ids:
        case = chats.case(case_id)
        items = case.chat_items or ()
        frames = frames_of(case, Fault(kind=kind))
        half = max(1, len(items) // 2)
        assert [(frame.kind, frame.text or frame.part) for frame in frames[:-1]] == [
            (item_kind, value) for item_kind, value in items[:half]
        ]
        assert frames[-1].kind.value == kind.value
        assert frames[-1].reason == f"controlled_local_{kind.value}"


@pytest.mark.parametrize("target", [None, 1, 2, 7])
def test_a_content_frame_k_is_any_of_the_six_kinds(
    chats: ChatRecording, target: int | None
) -> None:
    case = chats.case("chat-interleaved-calls")  # 8 content frames: 2 texts, 4 calls, 2 parts
    whole = frames_of(case, None)
    index = (target or 3) - 1
    omitted = frames_of(case, Fault(kind=FaultKind.OMIT, target_frame=target))
    assert omitted == whole[:index] + whole[index + 1 :]
    repeated = frames_of(case, Fault(kind=FaultKind.REPEAT, target_frame=target))
    assert repeated == [*whole[: index + 1], whole[index], *whole[index + 1 :]]
    foreign = frames_of(case, Fault(kind=FaultKind.FOREIGN_BINDING, target_frame=target))
    assert foreign[index].binding_sha256 == "f" * 64
    assert (foreign[index].kind, foreign[index].text, foreign[index].part) == (
        whole[index].kind,
        whole[index].text,
        whole[index].part,
    )
    assert frames_of(case, Fault(kind=FaultKind.EOF_BEFORE_TERMINAL)) == whole[:-1]


def test_a_target_past_the_last_content_frame_is_refused(chats: ChatRecording) -> None:
    case = chats.case("chat-usage-mismatch")  # 3 content frames: text, finish, usage
    assert len(frames_of(case, Fault(kind=FaultKind.OMIT, target_frame=3))) == 3
    past = Fault(kind=FaultKind.OMIT, target_frame=4)
    assert refused(lambda: frames_of(case, past)) == "fault_parameter_out_of_range"
    # A grounded reply counts its deltas as before.
    assert {frame.kind for frame in frames_of(case, None)[:-1]} <= CONTENT_KINDS


# --- the chat recording and the recording source -----------------------------------------------


def test_the_chat_recording_is_verified_and_bound_by_case(chats: ChatRecording) -> None:
    raw = DEFAULT_CHAT_RECORDING_PATH.read_bytes()
    assert refused(lambda: ChatRecording.from_bytes(raw + b" ")) == "recording_hash_mismatch"
    assert len(chats.case_ids) == 7 and all(case.startswith("chat-") for case in chats.case_ids)
    for case_id in chats.case_ids:
        case = chats.case(case_id)
        assert case.binding["kind"] == "chat" and case.binding["case_id"] == case_id
        assert chat_binding_problem(case.binding, case_id, recorded=True) is None  # the schema
        assert case.chat_items
    other = chats.case("chat-text-only").binding
    assert refused(lambda: chats.bind_request("chat-one-call", other)) == (
        "request_binding_mismatch"
    )
    assert refused(lambda: chats.case("chat-nope")) == "development_case_required"


def test_the_002_lab_s_turn_is_recorded_exactly(chats: ChatRecording) -> None:
    case = chats.case("chat-interleaved-calls")
    assert [chat_item_json(item) for item in case.chat_items or ()] == [
        {"kind": "content_delta", "text": "Reading "},
        {"kind": "tool_call", "index": 0, "id": "call-read", "name": "read_file",
         "arguments": '{"path":"'},
        {"kind": "tool_call", "index": 1, "id": "call-shell", "name": "shell",
         "arguments": '{"command":"'},
        {"kind": "tool_call", "index": 1, "id": "", "name": "", "arguments": 'pwd"}'},
        {"kind": "tool_call", "index": 0, "id": "", "name": "", "arguments": 'notes.py"}'},
        {"kind": "content_delta", "text": "the files."},
        {"kind": "finish", "reason": "tool_calls"},
        {"kind": "usage", "prompt_tokens": 18, "cached_tokens": 4, "completion_tokens": 9,
         "thoughts_tokens": 0, "tool_use_prompt_tokens": 0, "total_tokens": 27},
    ]  # fmt: skip
    assert case.content == "Reading the files."


def test_every_recorded_call_is_begun_as_the_protocol_says(chats: ChatRecording) -> None:
    """Each call's first fragment names it; a later one carries "" or the same id and name;
    a new call's index is the number begun; finish comes after every frame but usage."""
    for case_id in chats.case_ids:
        items = chats.case(case_id).chat_items or ()
        begun: list[ToolCallPart] = []
        finished = False
        for kind, value in items:
            assert not finished or kind is FrameKind.USAGE, case_id
            finished = finished or kind is FrameKind.FINISH
            if isinstance(value, ToolCallPart):
                assert isinstance(value.index, int) and value.index <= len(begun)
                if value.index == len(begun):
                    assert value.name
                    begun.append(value)
                else:
                    first = begun[value.index]
                    assert value.id in ("", first.id) and value.name in ("", first.name)
                    assert value.arguments
        assert finished, case_id


def chat_request_for(binding: Any, case_id: str | None = None, **fields: Any) -> Any:
    request = pb.OpenRequest(
        case_id=case_id or binding["case_id"],
        kind=pb.REPLY_KIND_CHAT,
        binding_json=canonical_json(binding),
        **fields,
    )
    return check_request(request, allow_faults=True)


def test_the_recording_source_serves_a_recorded_chat_turn(
    recording: Recording, chats: ChatRecording
) -> None:
    assert ReplyKind.CHAT in SERVED
    source = RecordingSource(recording, chats=chats)
    wanted = chats.case("chat-parallel-calls")
    assert source.case_of(chat_request_for(wanted.binding)) is wanted
    other = chats.case("chat-one-call").binding
    mismatch = chat_request_for(other, "chat-parallel-calls")
    assert refused(lambda: source.case_of(mismatch)) == "request_binding_mismatch"
    unknown = {**wanted.binding, "case_id": "chat-0123456789abcdef"}
    assert refused(lambda: source.case_of(chat_request_for(unknown))) == (
        "development_case_required"
    )
    without = RecordingSource(recording)
    assert refused(lambda: without.case_of(chat_request_for(wanted.binding))) == (
        "development_case_required"
    )
    asked = pb.OpenRequest(
        case_id="chat-parallel-calls", binding_json=canonical_json(wanted.binding)
    )
    grounded = check_request(asked, allow_faults=False)
    assert refused(lambda: source.case_of(grounded)) == "development_case_required"
    assert source._foreign(wanted) == recording.case(recording.case_ids[0]).binding_sha256
