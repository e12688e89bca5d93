"""The request's binding bytes: exactly the canonical JSON of a value, or refused.

The frames of a reply carry the SHA-256 of the binding bytes the client sent; a producer
that accepted another spelling of the value would bind its frames to bytes the client
never sent. So the bytes must be ``canonical_json`` of their own value
(``binding_not_canonical`` otherwise, ``INVALID_ARGUMENT``), checked before the fault
permission, the allowlist and the binding's value."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replywire.shared.digest import canonical_json
from replywire.shared.errors import RequestRefused
from replywire.shared.faults import Fault, FaultKind
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import Reason
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest, binding_sha256, check_request

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"]), max_size=8),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(st.characters(exclude_categories=["Cs"]), max_size=6), children,
                      max_size=4),
    max_leaves=12,
)  # fmt: skip


def refusal(binding_json: bytes, **fields: Any) -> Reason | None:
    request = pb.OpenRequest(case_id="replace-file", binding_json=binding_json, **fields)
    try:
        check_request(request, allow_faults=False)
    except RequestRefused as refused:
        return refused.reason
    return None


def test_the_reason_is_registered_as_a_refusal_with_invalid_argument() -> None:
    info = REASONS[Reason.BINDING_NOT_CANONICAL]
    assert (info.status, info.grpc_code) == ("refused", "INVALID_ARGUMENT")


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_canonical_bytes_are_accepted_and_bound_to_their_own_digest(value: Any) -> None:
    canonical = canonical_json(value)
    assert refusal(canonical) is None
    assert binding_sha256(canonical) == hashlib.sha256(canonical).hexdigest()


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.sampled_from(["indent", "ascii", "space", "newline", "unsorted"]))
def test_any_other_spelling_of_a_value_is_refused(value: Any, how: str) -> None:
    canonical = canonical_json(value)
    if how == "indent":
        other = json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False).encode()
    elif how == "ascii":
        other = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    elif how == "space":
        other = b" " + canonical
    elif how == "newline":
        other = canonical + b"\n"
    else:
        items = list(value.items())[::-1] if isinstance(value, dict) else None
        other = (
            json.dumps(dict(items), separators=(",", ":"), ensure_ascii=False).encode()
            if items is not None
            else canonical
        )
    if other == canonical:
        return  # this value has one spelling here
    assert refusal(other) is Reason.BINDING_NOT_CANONICAL


@pytest.mark.parametrize(
    ("spelled", "canonical"),
    [
        (b"1.0e2", b"100.0"),
        (b"-0", b"0"),
        (b'"\\u00e9"', '"é"'.encode()),
        (b'"\\/"', b'"/"'),
        (b'{"b":1,"a":2}', b'{"a":2,"b":1}'),
        (b"[1, 2]", b"[1,2]"),
    ],
)
def test_corners_of_the_canonical_form(spelled: bytes, canonical: bytes) -> None:
    assert refusal(spelled) is Reason.BINDING_NOT_CANONICAL
    assert refusal(canonical) is None


@pytest.mark.parametrize(
    "binding_json",
    [b"", b"nope", b"\xff", b'{"a":1,"a":1}', b"NaN", b'"\\ud800"', b"\xef\xbb\xbf{}"],
)
def test_bytes_that_are_no_canonical_value_are_refused(binding_json: bytes) -> None:
    assert refusal(binding_json) is Reason.BINDING_NOT_CANONICAL


def test_the_canonical_check_comes_before_the_fault_permission() -> None:
    fault = pb.Fault(kind=pb.OMIT)
    assert refusal(b"{ }", fault=fault) is Reason.BINDING_NOT_CANONICAL
    assert refusal(b"{}", fault=fault) is Reason.FAULTS_NOT_ALLOWED


def test_the_consumer_sends_the_canonical_bytes_of_every_case(recording: Recording) -> None:
    for case_id in recording.case_ids:
        request = ReplyRequest.for_case(recording, case_id, fault=Fault(kind=FaultKind.OMIT))
        sent = request.open_request()
        assert sent.binding_json == canonical_json(request.binding)
        assert refusal(sent.binding_json) is None
        assert request.consumer(sent=sent).binding_sha256 == recording.case(case_id).binding_sha256
