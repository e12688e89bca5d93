"""Safe to expose, the parts that need no process: the token file (callers named, bad lines
refused without echoing them, names and tokens unique), a token identifying its caller or
nobody, loopback addresses, and the request's bounds (ids, binding depth and size, question
passages). (tests/system/test_security_processes.py runs TLS, tokens and the exposure rule
on real processes.)"""

from __future__ import annotations

import json

import pytest

from replywire.producer.edge.security import TokenAuthenticator, is_loopback, parse_token_lines
from replywire.shared.errors import ConfigurationError, RequestRefused
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.questions import build_question_binding, check_question_binding
from replywire.shared.reasons import Reason
from replywire.shared.requests import (
    MAX_BINDING_BYTES,
    MAX_BINDING_DEPTH,
    MAX_CASE_ID_CHARS,
    MAX_STREAM_ID_CHARS,
    check_envelope,
    parse_binding,
)
from tests.hostile_input import TOKEN_A, TOKEN_B, nested_brackets

pytestmark = pytest.mark.timeout(180)


def test_the_token_file_names_callers() -> None:
    entries = parse_token_lines(f"# c\n alice {TOKEN_A} \n\nbob {TOKEN_B}\n")
    assert entries == [("alice", TOKEN_A), ("bob", TOKEN_B)]


@pytest.mark.parametrize(
    "text",
    [
        f"alice {TOKEN_A} extra",
        "alice short-token",  # under 16 characters
        f"al ice {TOKEN_A}",
        f"{TOKEN_A}",
        f"-alice {TOKEN_A}",
        "alice " + "x" * 513,
    ],
)
def test_a_bad_token_line_is_refused_without_echoing_it(text: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        parse_token_lines(text)
    assert TOKEN_A not in str(refused.value)
    assert "line 1" in str(refused.value)


def test_names_and_tokens_are_unique() -> None:
    with pytest.raises(ConfigurationError, match="twice"):
        TokenAuthenticator([("alice", TOKEN_A), ("alice", TOKEN_B)])
    with pytest.raises(ConfigurationError, match="same token"):
        TokenAuthenticator([("alice", TOKEN_A), ("bob", TOKEN_A)])
    with pytest.raises(ConfigurationError, match="no caller"):
        TokenAuthenticator([])


@pytest.mark.parametrize(
    ("metadata", "caller"),
    [
        ((("authorization", f"Bearer {TOKEN_A}"),), "alice"),
        ((("authorization", f"bearer {TOKEN_B}"),), "bob"),
        ((("Authorization", f"Bearer {TOKEN_A}"),), "alice"),
        ((("authorization", f"Bearer {TOKEN_A}x"),), None),
        ((("authorization", TOKEN_A),), None),
        ((("authorization", f"Basic {TOKEN_A}"),), None),
        ((), None),
        (None, None),
        ((("authorization", f"Bearer {TOKEN_A}"), ("authorization", f"Bearer {TOKEN_B}")), None),
        ((("authorization", "Bearer " + "x" * 600),), None),
        ((("authorization", f"Bearer {TOKEN_A}".encode()),), None),
    ],
)
def test_a_token_identifies_its_caller_or_nobody(
    metadata: tuple[tuple[str, str | bytes], ...] | None, caller: str | None
) -> None:
    authenticator = TokenAuthenticator([("alice", TOKEN_A), ("bob", TOKEN_B)])
    assert authenticator.identify(metadata) == caller


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("example.com", False),
    ],
)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    ("stream_id", "case_id", "refused"),
    [
        ("s" * MAX_STREAM_ID_CHARS, "replace-file", False),
        ("s" * (MAX_STREAM_ID_CHARS + 1), "replace-file", True),
        ("x", "c" * MAX_CASE_ID_CHARS, False),  # passes the envelope; not a development case
        ("x", "c" * (MAX_CASE_ID_CHARS + 1), True),
    ],
)
def test_id_bounds_at_and_past_the_edge(stream_id: str, case_id: str, refused: bool) -> None:
    request = pb.OpenRequest(case_id=case_id, stream_id=stream_id)
    if refused:
        with pytest.raises(RequestRefused) as error:
            check_envelope(request)
        assert error.value.reason is Reason.INVALID_REQUEST
    else:
        check_envelope(request)


@pytest.mark.parametrize("depth", [MAX_BINDING_DEPTH, MAX_BINDING_DEPTH + 1, 977, 50_000])
def test_binding_depth_is_bounded(depth: int) -> None:
    text = '{"a":' + nested_brackets(depth - 1) + "}"
    if depth <= MAX_BINDING_DEPTH:
        assert parse_binding(text.encode()) == {"a": json.loads(nested_brackets(depth - 1))}
    elif len(text) <= MAX_BINDING_BYTES:
        with pytest.raises(RequestRefused) as error:
            parse_binding(text.encode())
        assert error.value.reason is Reason.INVALID_REQUEST  # a bound, as the size is
    else:
        with pytest.raises(RequestRefused):
            parse_binding(text.encode())


def test_binding_size_is_bounded_at_the_edge() -> None:
    at_edge = b'"' + b"x" * (MAX_BINDING_BYTES - 2) + b'"'
    assert len(at_edge) == MAX_BINDING_BYTES
    assert parse_binding(at_edge) == "x" * (MAX_BINDING_BYTES - 2)
    with pytest.raises(RequestRefused):
        parse_binding(at_edge + b" ")


def test_the_producer_holds_question_passages_to_the_consumer_s_limits() -> None:
    passages = [{"id": f"p{n}", "text": "text", "url": "https://x"} for n in range(21)]
    binding = build_question_binding("why?", passages)  # past MAX_PASSAGES, built by hand
    with pytest.raises(RequestRefused) as error:
        check_question_binding(binding)
    assert error.value.reason is Reason.REQUEST_BINDING_MISMATCH
    ok = build_question_binding("why?", passages[:20])
    assert check_question_binding(ok) == ok
