"""The conformance kit without processes: the committed vectors are what the generator writes,
valid under their schema, enough and covering every reason wire content can cause; the
testee answers each as expected; the producer's conformance mode refuses what is not a
vector's request; the runner's comparison, template and table."""

from __future__ import annotations

import base64
import fnmatch
import io
import json
import re
from collections import Counter
from pathlib import Path

import jsonschema
import pytest

from conformance.core_mode import answers_by_id
from conformance.core_mode import testee_line as line_of
from conformance.generate import rendered
from conformance.groups import build_groups
from conformance.line_checks import judged, line_checks
from conformance.mutants import MUTANTS, applied, core_is_compiled
from conformance.report import Outcome, Report, compare, from_result_document
from conformance.testee import answer
from conformance.vectors import SCHEMA, VECTORS_DIR, load_all
from conformance.wire_mode import expand, limit_flags
from replywire.producer.edge.conformance import load_folder, refusal
from replywire.producer.edge.rpc import MalformedRequest
from replywire.shared.digest import digest
from replywire.shared.frames import frames_from_deltas
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.reasons import Reason
from replywire.shared.vectors import (
    FORMAT,
    LIMIT_KEYS,
    Mode,
    VectorError,
    load_vectors,
    parse_vector,
)
from replywire.shared.wire.lp import encode_frame

VECTORS = load_all()
BY_ID = {vector.id: vector for vector in VECTORS}
LINE_CHECKS = line_checks(VECTORS)
WIRES = ("lp", "ndjson", "ndjson-lab")
#: Every reason that the bytes of a stream (and how it ends) can cause in the core.
WIRE_REASONS = {
    Reason.STREAM_BYTE_LIMIT, Reason.INVALID_UTF8, Reason.FRAME_BYTE_LIMIT,
    Reason.FRAME_AFTER_TERMINAL, Reason.INVALID_FRAME_JSON, Reason.INVALID_FRAME_SCHEMA,
    Reason.INVALID_SEQUENCE, Reason.FRAME_REQUEST_MISMATCH, Reason.FRAME_COUNT_LIMIT,
    Reason.INVALID_CONTENT_DELTA, Reason.CONTENT_LIMIT, Reason.INVALID_TERMINAL_REASON,
    Reason.TRUNCATED_UTF8, Reason.TRUNCATED_FRAME, Reason.INVALID_FRAME_HEADER,
    Reason.INVALID_FRAME_PAYLOAD, Reason.UNKNOWN_FRAME_FIELD, Reason.MISSING_FRAME_KIND,
    Reason.CONTENT_DIGEST_MISMATCH, Reason.CONFLICTING_DUPLICATE,
    Reason.UNREGISTERED_ERROR_TERMINAL, Reason.UNREGISTERED_CANCEL_TERMINAL,
    Reason.INVALID_ANSWER_JSON, Reason.INVALID_ANSWER_SCHEMA, Reason.UNKNOWN_CONTEXT_CITATION,
    Reason.STATUS_CITATION_MISMATCH, Reason.MISSING_TERMINAL, Reason.TRANSPORT_IO_ERROR,
    Reason.CONTROLLED_LOCAL_CANCEL, Reason.CONTROLLED_LOCAL_ERROR,
}  # fmt: skip
#: Those the length-prefixed wire cannot cause (JSON and UTF-8 across the stream are NDJSON's).
NOT_ON_LP = {Reason.INVALID_FRAME_JSON, Reason.TRUNCATED_UTF8}
#: Those only the length-prefixed wire can cause (its header and protobuf payload).
LP_ONLY = {
    Reason.INVALID_FRAME_HEADER, Reason.INVALID_FRAME_PAYLOAD, Reason.UNKNOWN_FRAME_FIELD,
    Reason.MISSING_FRAME_KIND,
}  # fmt: skip


def test_the_committed_vectors_are_what_the_generator_writes() -> None:
    files = rendered(build_groups())
    committed = {path.name: path.read_bytes() for path in VECTORS_DIR.glob("*.json")}
    assert set(committed) == set(files), "run: make vectors"
    changed = [name for name, data in files.items() if committed[name] != data]
    assert not changed, f"run make vectors: {changed} differ from what the generator writes"


@pytest.mark.parametrize("path", sorted(VECTORS_DIR.glob("*.json")), ids=lambda p: p.name)
def test_every_vector_file_is_valid_under_its_schema(path: Path) -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    errors = list(
        jsonschema.Draft202012Validator(schema).iter_errors(json.loads(path.read_bytes()))
    )
    assert not errors, errors[0].message


def test_every_vectors_rule_is_a_section_of_the_protocol() -> None:
    """A vector cites the rule it exercises by its anchor in docs/protocol.md: each cited
    anchor is one the document sets (``<a id="...">``), so a renamed section fails here."""
    protocol = (Path(__file__).parents[2] / "docs" / "protocol.md").read_text(encoding="utf-8")
    anchors = set(re.findall(r'<a id="([\w-]+)"></a>', protocol))
    cited = Counter(vector.rule for vector in VECTORS)
    assert {rule.removeprefix("#") for rule in cited} <= anchors, sorted(cited)
    assert len(cited) >= 10


def test_there_are_enough_vectors_with_unique_ids() -> None:
    assert len(VECTORS) >= 500
    assert len(BY_ID) == len(VECTORS)
    assert {vector.stream_id for vector in VECTORS} == set(BY_ID)
    assert {vector.wire for vector in VECTORS} == set(WIRES)


@pytest.mark.parametrize("wire", WIRES)
def test_every_reason_wire_content_can_cause_is_expected_on_every_wire(wire: str) -> None:
    found = {vector.expected["reason"] for vector in VECTORS if vector.wire == wire}
    wanted = WIRE_REASONS - (NOT_ON_LP if wire == "lp" else LP_ONLY)
    if wire == "ndjson-lab":  # its done carries no digest
        wanted -= {Reason.CONTENT_DIGEST_MISMATCH}
    assert {reason.value for reason in wanted} <= found
    assert None in found  # complete


def test_every_rule_has_vectors_and_precedence_on_every_wire() -> None:
    rules = Counter((vector.rule, vector.wire) for vector in VECTORS)
    for wire in WIRES:
        for rule in ("#precedence", "#limits", "#reply-schema", "#frame-rules", "#reasons"):
            assert rules[rule, wire] > 0, (rule, wire)


def test_utf8_is_cut_at_every_byte_of_every_width_on_every_wire() -> None:
    for wire in WIRES:
        for width in (2, 3, 4):
            for offset in range(width + 1):
                assert f"utf8.split-{width}-byte-at-{offset}.{wire}" in BY_ID


def test_limits_run_at_and_past_each_edge() -> None:
    for wire in WIRES:
        for limit in ("max_stream_bytes", "max_frame_bytes", "max_content_chars", "max_frames"):
            at = BY_ID[f"limits.{limit}.plain.at-edge.{wire}"]
            past = BY_ID[f"limits.{limit}.plain.past-edge.{wire}"]
            assert at.expected["status"] == "complete"
            assert past.expected["status"] == "invalid"
            assert at.limits is not None and past.limits is not None
            assert past.limits[limit] == at.limits[limit] - 1


def test_only_what_grpc_cannot_carry_is_core_only() -> None:
    for vector in VECTORS:
        reason_limit = bool(vector.limits and "max_reason_chars" in vector.limits)
        nothing_then_break = vector.end.value == "transport_error" and not vector.chunks
        assert (Mode.WIRE not in vector.modes) == (reason_limit or nothing_then_break), vector.id


def test_the_testee_answers_every_vector_as_expected() -> None:
    failed = []
    for vector in VECTORS:
        got = answer(json.dumps(vector.to_object()))
        if not compare(vector, got).passed:
            failed.append(vector.id)
    assert not failed


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("not json", "not a JSON line"),
        ('{"id": "x"}', "wire must be one of lp, ndjson, ndjson-lab"),
        ('{"id": 1, "wire": "lp"}', "id must be a string"),
        ('{"id": "x", "wire": "lp", "binding": [], "chunks": [], "end": "eof"}', "binding"),
        ('{"id": "x", "wire": "lp", "binding": {}, "chunks": ["!"], "end": "eof"}', "base64"),
        ('{"id": "x", "wire": "lp", "binding": {}, "chunks": [], "end": "later"}', "end"),
        (
            '{"id": "x", "wire": "lp", "binding": {}, "chunks": [], "end": "eof",'
            ' "limits": {"max_frames": 0}}',
            "max_frames must be a positive integer",
        ),
        (
            '{"id": "x", "wire": "lp", "binding": {}, "chunks": [], "end": "eof",'
            ' "limits": {"max_lines": 3}}',
            "limits",
        ),
    ],
)
def test_the_testee_answers_bad_input_with_an_error(line: str, error: str) -> None:
    got = answer(line)
    assert set(got) == {"id", "error"}
    assert error in got["error"]


def test_a_binding_the_core_cannot_use_is_an_error() -> None:
    binding = {"case_id": "replace-file"}  # no selected_context to resolve citations in
    content = '{"status": "answered", "answer": "Yes.", "source_ids": ["a"]}'
    frames = frames_from_deltas(digest(binding), [content])
    chunks = [base64.b64encode(encode_frame(frame)).decode() for frame in frames]
    line = {"id": "x", "wire": "lp", "binding": binding, "chunks": chunks, "end": "eof"}
    got = answer(json.dumps(line))
    assert got["id"] == "x"
    assert "the binding cannot be used" in got["error"]


@pytest.mark.skipif(
    core_is_compiled(), reason="mutants patch the pure core: make test-pure runs this test"
)
def test_every_mutant_is_caught_in_process() -> None:
    """The same as tests/system/test_conformance_processes.py's, without processes: every mutant's
    core fails some vector, and the core is itself again afterwards."""
    for name in MUTANTS:
        with applied(name):
            failed = [
                v.id for v in VECTORS if not compare(v, answer(json.dumps(v.to_object()))).passed
            ]
            failed += [c.id for c in LINE_CHECKS if not judged(c, answer(line_of(c))).passed]
        assert failed, f"mutant {name} passed every vector and line check"
    vector = BY_ID["frames.swapped-2-3.lp"]
    assert compare(vector, answer(json.dumps(vector.to_object()))).passed


@pytest.mark.skipif(not core_is_compiled(), reason="the compiled build is not imported")
def test_a_mutant_of_the_compiled_core_is_refused() -> None:
    """Patching the compiled core would leave it as it is: the mutant is refused instead."""
    with pytest.raises(RuntimeError, match="REPLYWIRE_PURE=1"), applied("sequence"):
        pass


def test_a_vector_round_trips_and_a_bad_one_is_refused() -> None:
    vector = BY_ID["lp.sequence-10-byte-varint.lp"]
    assert parse_vector(json.loads(json.dumps(vector.to_object()))) == vector
    obj = vector.to_object()
    for key, value in (
        ("wire", "json"),
        ("chunks", ["***"]),
        ("end", "later"),
        ("limits", {"x": 1}),
    ):
        with pytest.raises(VectorError):
            parse_vector({**obj, key: value})
    with pytest.raises(VectorError):
        load_vectors(b'{"format": "other", "vectors": []}')
    assert load_vectors(json.dumps({"format": FORMAT, "vectors": []}).encode()) == ()


def _request(vector_id: str, **changes: object) -> pb.OpenRequest:
    vector = BY_ID[vector_id]
    wires = {"lp": pb.LENGTH_PREFIXED, "ndjson": pb.NDJSON, "ndjson-lab": pb.NDJSON_LAB}
    request = pb.OpenRequest(
        stream_id=vector.stream_id,
        case_id=vector.case_id,
        binding_json=vector.binding_bytes,
        wire_format=wires[vector.wire],
    )
    for key, value in changes.items():
        setattr(request, key, value)
    return request


def test_the_conformance_producer_serves_only_a_vectors_own_request() -> None:
    vectors = load_folder(VECTORS_DIR)
    lp, ndjson = "recording.replace-file.frame.lp", "recording.replace-file.frame.ndjson"
    assert refusal(_request(lp), vectors[lp]) is None
    unspecified = _request(lp, wire_format=pb.WIRE_FORMAT_UNSPECIFIED)
    assert refusal(unspecified, vectors[lp]) is None
    assert refusal(_request(lp), None) is Reason.INVALID_REQUEST
    assert refusal(MalformedRequest("x"), vectors[lp]) is Reason.INVALID_REQUEST
    assert refusal(_request(ndjson, wire_format=pb.LENGTH_PREFIXED), vectors[ndjson]) is (
        Reason.INVALID_REQUEST
    )
    assert refusal(_request(lp, case_id="utf8-write"), vectors[lp]) is (
        Reason.REQUEST_BINDING_MISMATCH
    )
    pretty = json.dumps(vectors[lp].binding, indent=1).encode()
    assert refusal(_request(lp, binding_json=pretty), vectors[lp]) is (
        Reason.REQUEST_BINDING_MISMATCH
    )
    assert refusal(_request(lp, resume_after=3), vectors[lp]) is Reason.RESUME_UNAVAILABLE
    faulted = _request(lp)
    faulted.fault.kind = pb.OMIT
    assert refusal(faulted, vectors[lp]) is Reason.FAULTS_NOT_ALLOWED


def test_the_template_is_filled_word_by_word() -> None:
    vector = BY_ID["frames.duplicate-1-after-3.lp"]
    limited = BY_ID["limits.max_frames.plain.past-edge.ndjson"]
    assert limit_flags(vector) == ["--ignore-duplicates"]
    assert limit_flags(limited) == ["--max-frames", str(limited.limits["max_frames"])]  # type: ignore[index]
    values = {"{target}": "127.0.0.1:1", "{result_file}": "/tmp/a b/r.json"}
    argv = expand(
        "cli --target {target} --result {result_file} {limit_flags} --x={target}",
        values,
        ["--f", "1"],
    )
    assert argv == [
        "cli",
        "--target",
        "127.0.0.1:1",
        "--result",
        "/tmp/a b/r.json",
        "--f",
        "1",
        "--x=127.0.0.1:1",
    ]


def test_a_result_document_compares_by_its_stats() -> None:
    vector = BY_ID["recording.replace-file.frame.lp"]
    expected = vector.expected
    document = {key: expected[key] for key in ("status", "reason", "detail", "citations")}
    document["accepted_answer"] = expected["accepted_answer"]
    document["provisional_content"] = expected["provisional_content"]
    document["stats"] = {
        "bytes_received": expected["bytes"],
        "application_frames": expected["frames"],
    }
    assert compare(vector, from_result_document(document)).passed
    document["stats"] = {"bytes_received": expected["bytes"], "application_frames": True}
    assert not compare(vector, from_result_document(document)).passed


def test_the_table_counts_by_expected_reason_and_lists_failures() -> None:
    passed = BY_ID["recording.replace-file.frame.lp"]
    failed = BY_ID["frames.swapped-2-3.lp"]
    report = Report(
        "core", [Outcome(passed), Outcome(failed, (("reason", "invalid_sequence", None),))]
    )
    out = io.StringIO()
    report.write(out)
    lines = out.getvalue().splitlines()
    assert lines[1].split() == ["reason", "vectors", "passed", "failed"]
    assert lines[2].split() == ["complete", "1", "1", "0"]
    assert lines[3].split() == ["invalid_sequence", "1", "0", "1"]
    assert lines[4].split() == ["total", "2", "1", "1"]
    assert lines[5] == "FAIL frames.swapped-2-3.lp"
    assert lines[6] == '  reason: expected "invalid_sequence", got null'
    assert not report.passed


def test_chunks_are_base64_of_the_exact_bytes() -> None:
    vector = BY_ID["lp.header-flag-1.lp"]
    assert vector.to_object()["chunks"][0] == base64.b64encode(vector.chunks[0]).decode()
    assert vector.chunks[0][0] == 1


# --- the bindings, the line checks, and the rules only a one-rule mutant shows ---------------

SCHEMAS = Path(__file__).parents[2] / "protos" / "schemas"


def test_every_vectors_binding_is_valid_under_the_binding_schema() -> None:
    """docs/protocol.md#binding: exactly six keys, each row of the context its four strings;
    the canonical group's corners ride inside corpus_identity, which the schema leaves open.
    A text reply's binding is valid under the text binding's schema (#text-binding), a chat
    reply's under the chat binding's (#chat-binding)."""
    validators = {
        kind: jsonschema.Draft202012Validator(json.loads((SCHEMAS / name).read_text()))
        for kind, name in (
            (None, "binding.schema.json"),
            ("text", "text-binding.schema.json"),
            ("chat", "chat-binding.schema.json"),
        )
    }
    invalid = [
        vector.id
        for vector in VECTORS
        if not validators[vector.binding.get("kind")].is_valid(vector.binding)
    ]
    assert not invalid
    groups = {
        kind: {vector.id.split(".")[0] for vector in VECTORS if vector.binding.get("kind") == kind}
        for kind in ("text", "chat")
    }
    assert groups == {"text": {"text", "chat"}, "chat": {"chat"}}
    corners = [v for v in VECTORS if v.id.startswith("canonical.") and "digest" not in v.id]
    assert corners
    assert all("conformance_corner" in v.binding["corpus_identity"] for v in corners)


def test_every_limit_below_one_is_a_line_check_the_testee_answers_with_an_error() -> None:
    names = {next(iter(check.limits or {})) for check in LINE_CHECKS}
    assert names == set(LIMIT_KEYS)
    assert {value for check in LINE_CHECKS for value in (check.limits or {}).values()} == {0, -1}
    for check in LINE_CHECKS:
        got = answer(line_of(check))
        assert set(got) == {"id", "error"}, check.id
        assert judged(check, got).passed
    assert not judged(LINE_CHECKS[0], {"id": LINE_CHECKS[0].id, "status": "complete"}).passed


def test_the_runner_reads_an_answer_holding_line_separators_raw() -> None:
    """An answer may hold U+0085, U+2028 or U+2029 raw: only a line feed ends a line."""
    text = '{"id": "a", "provisional_content": "x\x85y\u2028z"}\n{"id": "b"}\n'
    assert set(answers_by_id(text)) == {"a", "b"}


#: Each rule's mutant (conformance/mutants.py) and the vectors made for that rule.
RULE_VECTORS = {
    "duplicate-zero": "frames.duplicate-policy-sequence-0-*",
    "citation-first-row": "reply.repeated-source-id-*",
    "blank-any-space": "reply.answer-[bn]*-*",
    "detail-scrub": "frames.*-detail-*",
    "detail-cut": "frames.*-detail-scrubbed-*",
}


@pytest.mark.skipif(
    core_is_compiled(), reason="mutants patch the pure core: make test-pure runs this test"
)
@pytest.mark.parametrize(("mutant", "pattern"), sorted(RULE_VECTORS.items()))
def test_a_rules_mutant_fails_that_rules_own_vectors_on_every_wire(
    mutant: str, pattern: str
) -> None:
    chosen = [vector for vector in VECTORS if fnmatch.fnmatchcase(vector.id, pattern)]
    with applied(mutant):
        failed = [v for v in chosen if not compare(v, answer(json.dumps(v.to_object()))).passed]
    assert {vector.wire for vector in failed} == set(WIRES)


@pytest.mark.skipif(
    core_is_compiled(), reason="mutants patch the pure core: make test-pure runs this test"
)
def test_the_limits_below_one_mutant_fails_every_line_check() -> None:
    with applied("limits-below-one"):
        answers = [answer(line_of(check)) for check in LINE_CHECKS]
    assert not any(judged(c, got).passed for c, got in zip(LINE_CHECKS, answers, strict=True))


#: The reasons a chat reply's frames and validation can cause (docs/protocol.md#chat-rules,
#: #chat-reply), each some chat vector's on both default wires (part_outside_chat: NDJSON's).
CHAT_REASONS = {
    Reason.FRAME_AFTER_FINISH, Reason.INVALID_TOOL_CALL, Reason.TOOL_CALL_LIMIT,
    Reason.INVALID_THOUGHT, Reason.INVALID_SIGNATURE, Reason.INVALID_FINISH,
    Reason.CHAT_FINISH_MISSING, Reason.TOOL_CALL_MALFORMED, Reason.TOOL_CALL_UNDECLARED,
    Reason.TOOL_CALL_ARGUMENTS_INVALID, Reason.CONTENT_DIGEST_MISMATCH, Reason.CONTENT_LIMIT,
}  # fmt: skip


@pytest.mark.parametrize("wire", ["lp", "ndjson"])
def test_every_chat_reason_is_expected_on_both_default_wires(wire: str) -> None:
    chat = [vector for vector in VECTORS if vector.id.startswith("chat.") and vector.wire == wire]
    found = {vector.expected["reason"] for vector in chat}
    # On lp a chat frame outside a chat reply is an unknown field, and a count is a uint64.
    ndjson_only = {Reason.PART_OUTSIDE_CHAT, Reason.INVALID_USAGE}
    wanted = CHAT_REASONS | (ndjson_only if wire == "ndjson" else set())
    assert {reason.value for reason in wanted} <= found
    assert len(chat) >= 100
    notes = [vector for vector in chat if vector.expected.get("notes")]
    assert notes and all(v.expected["status"] == "complete" for v in notes)


def test_the_002_turn_is_assembled_by_index() -> None:
    """The 002 lab's turn: two calls whose fragments interleave, each assembled by its index."""
    for wire in ("lp", "ndjson"):
        expected = BY_ID[f"chat.002-interleaved.frame.{wire}"].expected
        assert expected["status"] == "complete"
        calls = expected["accepted_answer"]["tool_calls"]
        assert [call["arguments"] for call in calls] == [{"path": "notes.py"}, {"command": "pwd"}]
        assert expected["turn"]["text"] == "Reading the files."
        assert expected["accepted_answer"]["usage"]["total_tokens"] == 27
        assert expected["notes"] == []


#: Each chat mutant (conformance/chat_mutants.py) and the vectors made for its rule.
CHAT_RULE_VECTORS = {
    "chat-calls-dropped": "chat.*call*",
    "chat-usage-summed": "chat.usage-*",
    "chat-fragments-by-arrival": "chat.002-*",
}


@pytest.mark.skipif(
    core_is_compiled(), reason="mutants patch the pure core: make test-pure runs this test"
)
@pytest.mark.parametrize(("mutant", "pattern"), sorted(CHAT_RULE_VECTORS.items()))
def test_a_chat_mutant_fails_its_rules_vectors_on_both_default_wires(
    mutant: str, pattern: str
) -> None:
    chosen = [vector for vector in VECTORS if fnmatch.fnmatchcase(vector.id, pattern)]
    with applied(mutant):
        failed = [v for v in chosen if not compare(v, answer(json.dumps(v.to_object()))).passed]
    assert {vector.wire for vector in failed} == {"lp", "ndjson"}
