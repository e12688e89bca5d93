"""The hashed recording: pinned hash, verification order and codes, bindings."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest

from replywire.runtime.recording_file import DEFAULT_RECORDING_PATH
from replywire.shared.digest import digest
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason
from replywire.shared.recording import (
    DEVELOPMENT_CASES,
    RECORDING_SHA256,
    Recording,
)

#: The published request and binding hashes of the four development cases.
PUBLISHED_HASHES = {
    "utf8-write": (
        "a991e9ebf13290c7725aab2642c1b7468253bdca7835f40593635c94f90fdcc5",
        "279b0d28188a8bc046535402a67210cd64dbc02126d8ac79418707377f0826a7",
    ),
    "replace-file": (
        "776dcc0c6157a6970d2ad2964cecd429173d1a3758ca7b596f6c7ace2d21ef8c",
        "f1a54255dd15ecc6a6a6dc316530f88f204a6e4c48ec5ab0def12f8bddbb2c70",
    ),
    "json-result-type": (
        "31fbf2a45170afd7ffb623b6281debc1817969075c5d5bf49233d2432cf7714d",
        "0b1f78d3f25332ea21628888e572cf2142a74bddee7e6461088b37b82b65d7e7",
    ),
    "backup-schedule": (
        "e13d0483ca5a2b4ec06bea07518a126300443ef3a11ab56d83b3ecccc8aef544",
        "6e19538105bdb7965018b49c078a79883b8ed679d525b42fe427ac2fa3127400",
    ),
}


def raw_document() -> dict[str, Any]:
    return json.loads(DEFAULT_RECORDING_PATH.read_text(encoding="utf-8"))


def load_tampered(document: dict[str, Any]) -> Recording:
    """Load an edited copy under its own hash, so the later checks are reached."""
    raw = json.dumps(document).encode("utf-8")
    return Recording.from_bytes(raw, expected_sha256=hashlib.sha256(raw).hexdigest())


def events_of(document: dict[str, Any], case_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = document["responses"][case_id][0]["metadata"]["trace"]["events"]
    return events


def event(document: dict[str, Any], case_id: str, kind: str) -> dict[str, Any]:
    return next(e for e in events_of(document, case_id) if e["kind"] == kind)


def test_file_has_its_pinned_hash() -> None:
    assert hashlib.sha256(DEFAULT_RECORDING_PATH.read_bytes()).hexdigest() == RECORDING_SHA256


@pytest.mark.parametrize("case_id", DEVELOPMENT_CASES)
def test_bindings_hash_to_the_published_values(recording: Recording, case_id: str) -> None:
    request_sha256, binding_sha256 = PUBLISHED_HASHES[case_id]
    case = recording.case(case_id)
    assert case.request_sha256 == request_sha256
    assert digest(case.binding["messages"]) == request_sha256
    assert case.binding_sha256 == binding_sha256
    assert digest(case.binding) == binding_sha256
    assert list(case.binding) == [
        "case_id",
        "request_sha256",
        "messages",
        "schema",
        "corpus_identity",
        "selected_context",
    ]


def test_only_the_development_cases_are_bound(recording: Recording) -> None:
    assert recording.case_ids == DEVELOPMENT_CASES
    for case_id in ("held-out-case", "", None, 3, ["replace-file"]):
        with pytest.raises(RequestRefused) as info:
            recording.case(case_id)
        assert info.value.reason is Reason.DEVELOPMENT_CASE_REQUIRED


def test_a_changed_byte_fails_the_hash() -> None:
    raw = DEFAULT_RECORDING_PATH.read_bytes().replace(b"overwritten", b"overwriteen", 1)
    with pytest.raises(RequestRefused) as info:
        Recording.from_bytes(raw)
    assert info.value.reason is Reason.RECORDING_HASH_MISMATCH


def test_hash_is_checked_before_anything_else() -> None:
    with pytest.raises(RequestRefused) as info:
        Recording.from_bytes(b"not even json")
    assert info.value.reason is Reason.RECORDING_HASH_MISMATCH


def test_a_case_absent_from_the_file_is_not_served() -> None:
    document = raw_document()
    del document["responses"]["backup-schedule"]
    partial = load_tampered(document)
    assert partial.case_ids == ("utf8-write", "replace-file", "json-result-type")
    with pytest.raises(RequestRefused) as refused:
        partial.case("backup-schedule")
    assert refused.value.reason is Reason.DEVELOPMENT_CASE_REQUIRED
    # A smaller allowlist serves fewer cases from the same file.
    raw = json.dumps(document).encode()
    narrow = Recording.from_bytes(
        raw, expected_sha256=hashlib.sha256(raw).hexdigest(), allowlist=("utf8-write",)
    )
    assert narrow.case_ids == ("utf8-write",)


def test_a_file_without_any_development_case_is_refused() -> None:
    document = raw_document()
    document["responses"] = {"held-out-case": document["responses"]["utf8-write"]}
    with pytest.raises(RequestRefused) as info:
        load_tampered(document)
    assert info.value.reason is Reason.RECORDED_REQUEST_MISMATCH


@pytest.mark.parametrize(
    "edit",
    [
        "message_text",
        "request_hash",
        "metadata_hash",
    ],
)
def test_recorded_request_mismatch(edit: str) -> None:
    document = raw_document()
    request = event(document, "replace-file", "model_request_ready")
    if edit == "message_text":
        request["messages"][0][1] += " "
    elif edit == "request_hash":
        request["request_sha256"] = "0" * 64
    else:
        document["responses"]["replace-file"][0]["metadata"]["request_sha256"] = "0" * 64
    with pytest.raises(RequestRefused) as info:
        load_tampered(document)
    assert info.value.reason is Reason.RECORDED_REQUEST_MISMATCH


def test_recorded_context_mismatch_when_a_passage_differs() -> None:
    document = raw_document()
    retrieval = event(document, "replace-file", "retrieval_completed")
    retrieval["candidates"][0]["text"] += " (edited)"
    with pytest.raises(RequestRefused) as info:
        load_tampered(document)
    assert info.value.reason is Reason.RECORDED_CONTEXT_MISMATCH


def test_recorded_context_mismatch_when_the_selection_is_reordered() -> None:
    document = raw_document()
    selected = event(document, "utf8-write", "context_selected")
    selected["chunk_ids"].reverse()
    with pytest.raises(RequestRefused) as info:
        load_tampered(document)
    assert info.value.reason is Reason.RECORDED_CONTEXT_MISMATCH


def test_checked_binding_accepts_an_equal_binding(recording: Recording) -> None:
    original = recording.case("json-result-type")
    supplied = json.loads(json.dumps(dict(original.binding)))
    assert recording.checked_binding(supplied) is original


@pytest.mark.parametrize(
    "tamper",
    ["schema", "context_url", "corpus", "extra_key", "not_a_dict", "no_case_id", "other_case"],
)
def test_checked_binding_refuses_any_difference(recording: Recording, tamper: str) -> None:
    binding: Any = copy.deepcopy(dict(recording.case("replace-file").binding))
    expected = Reason.REQUEST_BINDING_MISMATCH
    if tamper == "schema":
        binding["schema"]["title"] = "Other"
    elif tamper == "context_url":
        binding["selected_context"][0]["url"] = "https://example.invalid/"
    elif tamper == "corpus":
        binding["corpus_identity"]["corpus_sha256"] = "0" * 64
    elif tamper == "extra_key":
        binding["note"] = "x"
    elif tamper == "not_a_dict":
        binding = [binding]
    elif tamper == "no_case_id":
        del binding["case_id"]
    else:
        binding["case_id"] = "held-out-case"
        expected = Reason.DEVELOPMENT_CASE_REQUIRED
    with pytest.raises(RequestRefused) as info:
        recording.checked_binding(binding)
    assert info.value.reason is expected


def test_foreign_binding_is_another_cases(recording: Recording) -> None:
    for case_id in recording.case_ids:
        foreign = recording.foreign_binding_sha256(case_id)
        assert foreign != recording.case(case_id).binding_sha256
        assert foreign in {recording.case(other).binding_sha256 for other in recording.case_ids}


@pytest.mark.parametrize("provider", ["not an object", {"events": "text"}, {"events": []}])
def test_malformed_provider_events_are_refused(provider: object) -> None:
    document = raw_document()
    document["responses"]["replace-file"][0]["metadata"]["provider"] = provider
    with pytest.raises(RequestRefused) as info:
        load_tampered(document)
    assert info.value.reason is Reason.RECORDED_REQUEST_MISMATCH
