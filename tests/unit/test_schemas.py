"""The JSON Schemas of protos/schemas/ (docs/protocol.md#binding, #text-binding,
#reply-schema, #result-document) hold for real documents and refuse crafted bad ones.

Real documents: the recording's bindings, a question binding, a text binding, the
development cases' replies, and result documents the Python code makes in one process
(every development case and every fault, on every wire; a refusal; a stream over the
duplicate policy; text replies, the empty one included, and broken ones)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.digest import digest
from replywire.shared.errors import ProtocolFailure, RequestRefused
from replywire.shared.faults import Fault, FaultKind
from replywire.shared.frames import FrameKind, frames_from_deltas
from replywire.shared.questions import build_question_binding
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import Reason
from replywire.shared.recording import Recording
from replywire.shared.replay import replay
from replywire.shared.requests import ReplyRequest
from replywire.shared.result import StreamResult
from replywire.shared.status import Status
from replywire.shared.wire import WireFormat, codec_for
from replywire.shared.wire.chunking import ChunkPlan

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "protos" / "schemas"


def load(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    return schema


REGISTRY: Registry[Any] = Registry().with_resources(
    (load(name)["$id"], Resource.from_contents(load(name)))
    for name in (
        "binding.schema.json",
        "text-binding.schema.json",
        "reply.schema.json",
        "result.schema.json",
    )
)


def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(load(name), registry=REGISTRY)


BINDING, TEXT_BINDING, REPLY, RESULT = (
    validator("binding.schema.json"),
    validator("text-binding.schema.json"),
    validator("reply.schema.json"),
    validator("result.schema.json"),
)


@pytest.mark.parametrize("name", sorted(path.name for path in SCHEMAS.glob("*.json")))
def test_each_schema_is_a_valid_draft_2020_12_schema(name: str) -> None:
    schema = load(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


# --- bindings ----------------------------------------------------------------------------


def test_the_recordings_bindings_and_a_question_binding_are_valid(recording: Recording) -> None:
    for case_id in recording.case_ids:
        BINDING.validate(json.loads(json.dumps(recording.case(case_id).binding)))
    question = build_question_binding(
        "Does it?", [{"id": "a", "text": "It does.", "url": "https://example.org/a"}]
    )
    BINDING.validate(question)


@pytest.mark.parametrize(
    "change",
    [
        lambda b: b.pop("selected_context"),
        lambda b: b.update(extra=1),
        lambda b: b.update(request_sha256=b["request_sha256"].upper()),
        lambda b: b.update(case_id="replace-file "),
        lambda b: b.update(case_id=""),
        lambda b: b.update(messages=[["system"]]),
        lambda b: b["selected_context"][0].pop("url"),
        lambda b: b["selected_context"][0].update(source_id=""),
        lambda b: b.update(selected_context=[]),
    ],
    ids=[
        "no selected_context",
        "extra key",
        "upper-case digest",
        "case id with a space",
        "empty case id",
        "message without text",
        "passage without url",
        "empty source id",
        "no passage",
    ],
)
def test_bad_bindings_are_refused(recording: Recording, change: Any) -> None:
    binding = json.loads(json.dumps(recording.case("replace-file").binding))
    change(binding)
    assert not BINDING.is_valid(binding)


MESSAGES = [["system", "Be brief."], ["human", "Say something."]]
TEXT: dict[str, Any] = {
    "kind": "text",
    "case_id": "text-0123456789abcdef",
    "request_sha256": digest(MESSAGES),
    "messages": MESSAGES,
}


def test_a_text_binding_is_valid_and_not_a_grounded_one() -> None:
    TEXT_BINDING.validate(TEXT)
    assert not BINDING.is_valid(TEXT)


@pytest.mark.parametrize(
    "change",
    [
        lambda b: b.pop("kind"),
        lambda b: b.update(kind="grounded"),
        lambda b: b.update(extra=1),
        lambda b: b.update(request_sha256=b["request_sha256"].upper()),
        lambda b: b.update(case_id=""),
        lambda b: b.update(case_id="x" * 129),
        lambda b: b.update(messages=[]),
        lambda b: b.update(messages=[["human", "x"]] * 65),
        lambda b: b.update(messages=[["model", "x"]]),
        lambda b: b.update(messages=[["human"]]),
        lambda b: b.update(messages=[["human", 1]]),
    ],
    ids=[
        "no kind",
        "grounded kind",
        "extra key",
        "upper-case digest",
        "empty case id",
        "case id over 128",
        "no message",
        "65 messages",
        "unknown role",
        "message without text",
        "text not a string",
    ],
)
def test_bad_text_bindings_are_refused(change: Any) -> None:
    binding = json.loads(json.dumps(TEXT))
    change(binding)
    assert not TEXT_BINDING.is_valid(binding)


# --- replies ---------------------------------------------------------------------------


def test_the_development_cases_replies_are_valid(recording: Recording) -> None:
    for case_id in recording.case_ids:
        REPLY.validate(json.loads(recording.case(case_id).content))


GOOD_REPLY = {"status": "answered", "answer": "Yes.", "source_ids": ["path-write"]}


@pytest.mark.parametrize(
    "reply",
    [
        {**GOOD_REPLY, "extra": 1},
        {key: GOOD_REPLY[key] for key in ("status", "answer")},
        {**GOOD_REPLY, "status": "maybe"},
        {**GOOD_REPLY, "answer": ""},
        {**GOOD_REPLY, "answer": " \t\n\u3000\u2028\x1c\x85"},
        {**GOOD_REPLY, "answer": 1},
        {**GOOD_REPLY, "source_ids": ["path-write", "path-write"]},
        {**GOOD_REPLY, "source_ids": [""]},
        {**GOOD_REPLY, "source_ids": [1]},
        {**GOOD_REPLY, "source_ids": []},
        {**GOOD_REPLY, "status": "not_in_docs"},
        [],
    ],
    ids=[
        "extra key",
        "missing key",
        "unknown status",
        "empty answer",
        "white-space answer",
        "answer not text",
        "duplicate citation",
        "empty source id",
        "source id not text",
        "answered without citations",
        "not_in_docs with citations",
        "not an object",
    ],
)
def test_bad_replies_are_refused(reply: Any) -> None:
    assert not REPLY.is_valid(reply)


def test_an_answer_of_a_character_strip_keeps_is_valid() -> None:
    """U+200B and U+FEFF are not white space to str.strip(): such an answer is accepted."""
    for answer in ("\u200b", "\ufeff", " x "):
        REPLY.validate({**GOOD_REPLY, "answer": answer})


# --- result documents ----------------------------------------------------------------------


def results(recording: Recording) -> list[dict[str, Any]]:
    """Real result documents, made in one process by the Python code."""
    documents = []
    for case_id in recording.case_ids:
        for wire in WireFormat:
            documents.append(
                replay(recording, ReplyRequest.for_case(recording, case_id, wire=wire)).to_dict()
            )
            for kind in FaultKind:
                request = ReplyRequest.for_case(
                    recording, case_id, wire=wire, plan=ChunkPlan.parse("1,2,7,3,11"),
                    fault=Fault(kind=kind),
                )  # fmt: skip
                documents.append(replay(recording, request).to_dict())
    duplicates = ReplyRequest.for_case(
        recording, "replace-file", fault=Fault(kind=FaultKind.REPEAT), ignore_duplicates=True
    )
    documents.append(replay(recording, duplicates).to_dict())
    refusal = StreamResult.refused(
        RequestRefused(Reason.REQUEST_BINDING_MISMATCH, "binding is for another case"),
        case_id="replace-file",
        wire_format="lp",
    )
    documents.append(refusal.to_dict())
    return documents


def test_real_result_documents_are_valid(recording: Recording) -> None:
    documents = results(recording)
    statuses = {document["status"] for document in documents}
    assert statuses >= {"complete", "incomplete", "cancelled", "error", "invalid", "refused"}
    kinds = {event["kind"] for document in documents for event in document["events"]}
    assert kinds >= {
        "provisional_content",
        "local_terminal",
        "validated_answer",
        "duplicate_dropped",
        "transport_error",
    }
    for document in documents:
        RESULT.validate(json.loads(json.dumps(document)))


def text_results() -> list[dict[str, Any]]:
    """Result documents of text replies, made by the Python core on every wire: accepted
    texts (the empty one included), a gap, no terminal, a cancel and a broken transport."""
    sha = digest(TEXT)
    replies = [frames_from_deltas(sha, []), frames_from_deltas(sha, ["x \U0001f600"])]
    frames = frames_from_deltas(sha, ["abc", "def", "ghi"])
    cancel = frames_from_deltas(sha, ["half"], FrameKind.CANCEL, "controlled_local_cancel")
    documents = []
    for wire in WireFormat:
        codec = codec_for(wire)
        for sent, clean in (
            *((reply, True) for reply in replies),
            ([frames[0], *frames[2:]], True),
            (frames[:-1], True),
            (cancel, True),
            (frames, False),
        ):
            consumer = ReplyConsumer(TEXT, wire=wire)
            try:
                for frame in sent:
                    consumer.receive_data(codec.encode_frame(frame))
            except ProtocolFailure:
                documents.append(consumer.result().to_dict())
                continue
            ended = consumer.end_of_stream() if clean else consumer.transport_error()
            documents.append(ended.to_dict())
    return documents


def test_text_result_documents_are_valid() -> None:
    documents = text_results()
    statuses = {document["status"] for document in documents}
    assert statuses == {"complete", "invalid", "incomplete", "cancelled", "error"}
    assert {document["first_output"] for document in documents} == {True, False}
    for document in documents:
        assert document["kind"] == "text"
        RESULT.validate(json.loads(json.dumps(document)))


def text_complete() -> dict[str, Any]:
    """The empty text, accepted on the length-prefixed wire."""
    document = text_results()[0]
    assert (document["wire_format"], document["accepted_answer"]) == ("lp", {"text": ""})
    return document


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(kind="chat"),
        lambda d: d.pop("first_output"),
        lambda d: d.pop("kind"),
        lambda d: d.update(first_output=None),
        lambda d: d["accepted_answer"].update(extra=1),
        lambda d: d.update(accepted_answer={"text": 1}),
        lambda d: d.update(accepted_answer=GOOD_REPLY),
        lambda d: d["events"].append({"kind": "validated_text", "characters": -1}),
        lambda d: d["events"].append({"kind": "validated_text"}),
        lambda d: d["citations"].append({"source_id": "a", "chunk_id": "b", "url": "c"}),
    ],
    ids=[
        "unknown kind",
        "kind without first_output",
        "first_output without kind",
        "null first_output",
        "text answer with an extra key",
        "text answer not text",
        "grounded answer under the text kind",
        "negative characters",
        "validated_text without characters",
        "a text reply citing",
    ],
)
def test_bad_text_result_documents_are_refused(change: Any) -> None:
    document = text_complete()
    RESULT.validate(document)
    change(document)
    assert not RESULT.is_valid(document)


def test_a_grounded_result_cannot_hold_a_text_answer(recording: Recording) -> None:
    document = complete(recording)
    document["accepted_answer"] = {"text": "Yes."}
    assert not RESULT.is_valid(document)
    document = complete(recording)
    document["events"].append({"kind": "validated_text", "characters": 1})
    assert not RESULT.is_valid(document)


def test_every_registered_code_is_a_reason_the_result_schema_accepts() -> None:
    for reason, info in REASONS.items():
        assert info.status is not Status.COMPLETE
        document = StreamResult(
            status=info.status, reason=reason.value, case_id=None, wire_format="lp"
        ).to_dict()
        RESULT.validate(document)


def complete(recording: Recording) -> dict[str, Any]:
    document: dict[str, Any] = replay(
        recording, ReplyRequest.for_case(recording, "replace-file")
    ).to_dict()
    loaded: dict[str, Any] = json.loads(json.dumps(document))
    return loaded


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(reason="reply_accepted because"),
        lambda d: d.update(status="invalid"),
        lambda d: d.update(accepted_answer=None),
        lambda d: d.pop("events"),
        lambda d: d.update(extra=1),
        lambda d: d.update(integrity=None),
        lambda d: d.update(binding_sha256=d["binding_sha256"].upper()),
        lambda d: d["stats"].update(bytes_received=-1),
        lambda d: d.update(wire_format="json"),
        lambda d: d.update(detail="x" * 257),
        lambda d: d["events"].append({"kind": "provisional_content", "sequence": 0}),
        lambda d: d["citations"][0].pop("url"),
    ],
    ids=[
        "free-text reason",
        "invalid without a reason, with an answer",
        "complete without an answer",
        "no events",
        "extra key",
        "null optional key",
        "upper-case binding digest",
        "negative count",
        "unknown wire",
        "detail over 256",
        "bad event",
        "citation without url",
    ],
)
def test_bad_result_documents_are_refused(recording: Recording, change: Any) -> None:
    document = complete(recording)
    RESULT.validate(document)
    change(document)
    assert not RESULT.is_valid(document)
