"""docs/protocol.md's rules, one test each, named by the section (anchor) that states them.

Each test calls the Python core directly (``ReplyConsumer``, the codecs, ``shared.digest``,
``shared.reply``; for #grpc-status the consumer's gRPC edge, with no call) with hand-made
bytes, so a rule's exact edge is what is checked. Rules the document states in its own
words (the float form, white space, scrubbing, a question binding's escapes) are rebuilt
here from those words and compared with the code. Rules
already pinned elsewhere (the fault catalogue, the LP scanner's agreement with protobuf,
the lab's published results) are not repeated here. The vectors tables of the document
(canonical JSON, digests) are read from the document itself, so a row that drifts from
the code fails here.

One file past 500 lines: the document's rules in its order, one test each, so a rule's test
is found by its anchor in one place.
"""

from __future__ import annotations

import decimal
import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import grpc
import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from replywire.consumer.client import ReplyClient
from replywire.consumer.options import StreamOptions
from replywire.consumer.reader import StreamEnded
from replywire.consumer.session import StreamSession
from replywire.shared import faults
from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.consumer_limits import Limits
from replywire.shared.digest import canonical_digest, canonical_json, strict_json
from replywire.shared.errors import ProtocolFailure, RequestRefused, scrubbed_detail
from replywire.shared.faults import (
    EXPECTED_OUTCOMES,
    FAULT_PARAMETERS,
    TIMING_FAULTS,
    TRANSPORT_FAULTS,
    Outcome,
)
from replywire.shared.frames import Frame, FrameKind, content_sha256, derive_frames
from replywire.shared.questions import build_question_binding
from replywire.shared.reasons import Reason
from replywire.shared.recording import BoundCase, Recording
from replywire.shared.reply import validate_reply
from replywire.shared.requests import ReplyRequest, binding_sha256
from replywire.shared.result import StreamResult
from replywire.shared.status import Status
from replywire.shared.wire import WireFormat, lp, ndjson

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
LP, NDJSON, LAB = WireFormat.LENGTH_PREFIXED, WireFormat.NDJSON, WireFormat.NDJSON_LAB


@pytest.fixture
def case(recording: Recording) -> BoundCase:
    return recording.case("replace-file")


def feed(
    case: BoundCase,
    chunks: Sequence[bytes],
    wire: WireFormat,
    *,
    limits: Limits | None = None,
    ignore_duplicates: bool = False,
) -> StreamResult:
    """The chunks into a core bound to ``case``, then a clean end: the result."""
    consumer = ReplyConsumer(
        case.binding, wire=wire, limits=limits, ignore_duplicates=ignore_duplicates
    )
    try:
        for chunk in chunks:
            consumer.receive_data(chunk)
    except ProtocolFailure:
        return consumer.result()
    return consumer.end_of_stream()


def verdict(result: StreamResult) -> tuple[str, str | None]:
    return result.status.value, result.reason


def line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def delta(case: BoundCase, sequence: Any, text: Any = "x", **extra: Any) -> dict[str, Any]:
    return {
        "sequence": sequence,
        "kind": "content_delta",
        "binding_sha256": case.binding_sha256,
        "text": text,
        **extra,
    }


def done(case: BoundCase, sequence: int, texts: Sequence[str]) -> dict[str, Any]:
    return {
        "sequence": sequence,
        "kind": "done",
        "binding_sha256": case.binding_sha256,
        "content_sha256": content_sha256("".join(texts)),
        "content_frames": len(texts),
    }


def stop(case: BoundCase, sequence: int, kind: str, reason: Any) -> dict[str, Any]:
    return {
        "sequence": sequence,
        "kind": kind,
        "binding_sha256": case.binding_sha256,
        "reason": reason,
    }


def table(marker: str) -> list[list[str]]:
    """The rows of the document's table between ``<!-- vectors:MARKER -->`` markers."""
    match = re.search(
        rf"<!-- vectors:{marker} -->\n(.*?)<!-- /vectors:{marker} -->", PROTOCOL, re.DOTALL
    )
    assert match, f"docs/protocol.md has no vectors:{marker} table"
    rows = [row.strip().strip("|").split(" | ") for row in match.group(1).splitlines()]
    return [[cell.strip() for cell in row] for row in rows[2:]]


def code(cell: str) -> str:
    assert cell.startswith("`") and cell.endswith("`"), cell
    return cell[1:-1]


# --- #conventions, anchors ----------------------------------------------------------------

STABLE_ANCHORS = [
    "conventions",
    "overview",
    "request",
    "request-checks",
    "binding",
    "canonical-json",
    "canonical-json-vectors",
    "digests",
    "frames",
    "wire-lp",
    "lp-payload",
    "wire-ndjson",
    "wire-ndjson-lab",
    "strict-json",
    "frame-rules",
    "terminal",
    "terminal-reason",
    "precedence",
    "reply-schema",
    "result-document",
    "resume",
    "grpc-status",
    "health",
    "limits",
    "reasons",
    "reason-codes",
    "faults",
    "states",
    "flow-control",
    "latitude",
    "white-space",
    "scrubbed",
]


def test_conventions_every_stable_anchor_exists_once() -> None:
    for anchor in STABLE_ANCHORS:
        assert PROTOCOL.count(f'<a id="{anchor}"></a>') == 1, anchor


def test_conventions_the_bcp_14_boilerplate_is_stated() -> None:
    assert (
        "interpreted as described in BCP 14 [RFC 2119] [RFC 8174] when, and only when, they "
        "appear\nin all capitals"
    ) in PROTOCOL
    assert "`replywire/1`" in PROTOCOL


# --- #canonical-json ----------------------------------------------------------------------


def test_canonical_json_vectors_in_the_document() -> None:
    rows = table("canonical-json")
    assert len(rows) >= 20
    for cells in rows:
        source, expected = code(cells[0]), cells[1]
        try:
            value = strict_json(source)
            canonical: bytes | None = canonical_json(value)
        except (ValueError, UnicodeError):
            canonical = None
        if canonical is not None:
            try:  # Infinity and NaN are written, but they are not JSON: no canonical form
                strict_json(canonical.decode("utf-8"))
            except ValueError:
                canonical = None
        if expected == "refused":
            assert canonical is None, source
        else:
            assert canonical is not None and canonical.hex() == code(expected), source


def test_canonical_json_escapes_exactly_the_listed_code_points() -> None:
    """Every code point but the surrogates, in one string: only `"`, `\\` and U+0000-U+001F
    are escaped, the five two-character escapes where they exist, else lowercase \\u00xx."""
    short = {
        0x22: '\\"',
        0x5C: "\\\\",
        0x08: "\\b",
        0x09: "\\t",
        0x0A: "\\n",
        0x0C: "\\f",
        0x0D: "\\r",
    }
    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    text = "".join(map(chr, points))
    expected = "".join(short.get(c) or (f"\\u{c:04x}" if c < 0x20 else chr(c)) for c in points)
    assert canonical_json(text) == f'"{expected}"'.encode()


@given(st.dictionaries(st.text(max_size=4), st.integers(), max_size=8))
def test_canonical_json_sorts_names_by_code_point_which_is_utf8_byte_order(
    value: dict[str, int],
) -> None:
    names = list(strict_json(canonical_json(value).decode("utf-8")))
    assert names == sorted(value, key=lambda name: [ord(c) for c in name])
    assert names == sorted(value, key=lambda name: name.encode("utf-8", "surrogatepass"))


#: Code points with a UTF-8 form (no surrogate).
TEXT_CHARACTERS = st.characters(exclude_categories=["Cs"])
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(TEXT_CHARACTERS),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(TEXT_CHARACTERS, max_size=4), children, max_size=4)
    ),
    max_leaves=12,
)


@given(JSON_VALUES)
def test_canonical_json_is_a_fixed_point_of_strict_reading(value: Any) -> None:
    """The canonical bytes read back (strict JSON) to a value whose canonical bytes they are:
    a producer that checks a binding's bytes against their canonical form accepts them."""
    canonical = canonical_json(value)
    assert canonical_json(strict_json(canonical.decode("utf-8"))) == canonical


def test_canonical_json_code_point_order_differs_from_jcs_utf16_order() -> None:
    value = {"\U0001f600": 1, "\ue000": 2}
    names = list(strict_json(canonical_json(value).decode("utf-8")))
    assert names == ["\ue000", "\U0001f600"]
    assert sorted(value, key=lambda name: name.encode("utf-16-be")) == ["\U0001f600", "\ue000"]


@pytest.mark.parametrize(
    ("value", "form"),
    [
        (1.0, "1.0"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (1234567890123456.0, "1234567890123456.0"),
        (1e16, "1e+16"),
        (-0.0, "-0.0"),
        (2**64, "18446744073709551616"),
        (-(10**40), "-" + "1" + "0" * 40),
    ],
)
def test_canonical_json_numbers_are_python_repr_and_exact_integers(value: float, form: str) -> None:
    assert canonical_json(value) == form.encode()


# --- #digests -----------------------------------------------------------------------------


def test_digest_vectors_in_the_document(recording: Recording) -> None:
    rows = {cells[0]: code(cells[1]) for cells in table("digests")}
    for case_id in recording.case_ids:
        bound = recording.case(case_id)
        assert rows[f"binding of `{case_id}`"] == bound.binding_sha256
        assert rows[f"binding of `{case_id}`"] == canonical_digest(canonical_json(bound.binding))
    assert rows["content of `replace-file`"] == content_sha256(
        recording.case("replace-file").content
    )
    assert rows["empty content (a `done` after no delta)"] == hashlib.sha256(b"").hexdigest()


def test_digests_a_client_may_hash_the_bytes_it_sent(recording: Recording) -> None:
    """binding_sha256 is the SHA-256 of the request's binding_json, as the producer computes
    it from the bytes it received and as every frame carries it."""
    for case_id in recording.case_ids:
        request = ReplyRequest.for_case(recording, case_id).open_request()
        sent = hashlib.sha256(request.binding_json).hexdigest()
        assert binding_sha256(request.binding_json) == sent
        assert {frame.binding_sha256 for frame in derive_frames(sent, "x")} == {sent}


@pytest.mark.skipif(
    not hasattr(Reason, "BINDING_NOT_CANONICAL"), reason="binding_not_canonical not registered"
)
@pytest.mark.parametrize(
    "spelling",
    [
        lambda b: json.dumps(b, sort_keys=True, indent=2, ensure_ascii=False),
        lambda b: json.dumps(b, sort_keys=True, separators=(",", ":")),  # \\u escapes
        lambda b: json.dumps(b, separators=(",", ":"), ensure_ascii=False),  # not sorted
    ],
    ids=["pretty-printed", "ascii escapes", "keys in insertion order"],
)
def test_request_a_binding_not_in_canonical_bytes_is_refused(spelling: Any) -> None:
    binding = {"question": "Où?", "case_id": "question-0", "context": [{"id": "a"}]}
    text = spelling(binding).encode()
    assert text != canonical_json(binding)
    with pytest.raises(RequestRefused) as refused:
        binding_sha256(text)
    assert refused.value.code == "binding_not_canonical"
    assert binding_sha256(canonical_json(binding)) == canonical_digest(canonical_json(binding))


# --- #wire-lp -----------------------------------------------------------------------------


def lp_payload(case: BoundCase, *fields: bytes) -> bytes:
    return b"".join(fields)


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def ld(number: int, data: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(data)) + data


def vi(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def lp_delta(case: BoundCase, *extra: bytes, sequence: int = 1, text: bytes = b"x") -> bytes:
    return (
        vi(1, sequence) + ld(2, case.binding_sha256.encode()) + ld(3, ld(1, text)) + b"".join(extra)
    )


def test_wire_lp_frame_limit_counts_the_payload_not_the_header(case: BoundCase) -> None:
    frame = lp.frame_with_header(lp_delta(case))
    payload = len(frame) - lp.HEADER_BYTES
    fits = feed(case, [frame], LP, limits=Limits(max_frame_bytes=payload))
    assert verdict(fits) == ("incomplete", "missing_terminal")
    over = feed(case, [frame], LP, limits=Limits(max_frame_bytes=payload - 1))
    assert verdict(over) == ("invalid", "frame_byte_limit")


def test_wire_lp_the_header_is_judged_on_its_five_bytes_flag_first(case: BoundCase) -> None:
    assert verdict(feed(case, [b"\x01\xff\xff\xff\xff"], LP)) == ("invalid", "invalid_frame_header")
    assert verdict(feed(case, [b"\x00\xff\xff\xff\xff"], LP)) == ("invalid", "frame_byte_limit")


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (vi(1, 1), "invalid_frame_schema"),  # sequence twice: not protobuf's last-one-wins
        (ld(2, b"f" * 64), "invalid_frame_schema"),
        (ld(3, ld(1, b"y")), "invalid_frame_schema"),  # the same kind twice
        (ld(6, ld(1, b"r")), "invalid_frame_schema"),  # a second kind
        (varint(7 << 3 | 3), "unknown_frame_field"),  # wire type 3 on an unknown field
        (varint(7 << 3 | 4), "unknown_frame_field"),
        (vi(7, 1), "unknown_frame_field"),
        (varint(1 << 3 | 3), "invalid_frame_payload"),  # wire type 3 on a known field
        (varint(7 << 3 | 7), "invalid_frame_payload"),  # wire type 7, unknown number
        (b"\x00\x01", "invalid_frame_payload"),  # field number 0
        (b"\x1a\x7fx", "invalid_frame_payload"),  # a length past the message
        (b"\x08" + b"\x80" * 9 + b"\x02", "invalid_frame_payload"),  # 2**64
        (b"\x08" + b"\x81" * 10 + b"\x00", "invalid_frame_payload"),  # 11 bytes
    ],
    ids=lambda value: value if isinstance(value, str) else value.hex(),
)
def test_wire_lp_payload_refusals(case: BoundCase, extra: bytes, reason: str) -> None:
    """``extra``, then a valid content delta's fields."""
    frame = lp.frame_with_header(extra + lp_delta(case))
    assert verdict(feed(case, [frame], LP)) == ("invalid", reason)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        # The first offending field in payload order decides.
        ((vi(7, 1), vi(1, 1)), "unknown_frame_field"),
        ((vi(1, 1), vi(1, 1), vi(7, 1)), "invalid_frame_schema"),
        ((vi(1, 1), ld(2, b"\xff"), vi(7, 1)), "invalid_utf8"),
        ((ld(1, b"a"), ld(2, b"\xff")), "invalid_frame_payload"),
        ((varint(1 << 3 | 3), vi(7, 1)), "invalid_frame_payload"),
        # A nested message is walked completely before the next field.
        ((vi(1, 1), ld(3, vi(2, 1)), vi(7, 1)), "unknown_frame_field"),
        ((vi(1, 1), ld(3, ld(1, b"\xff")), vi(1, 1)), "invalid_utf8"),
    ],
    ids=[
        "unknown first",
        "repeated first",
        "utf8 first",
        "wire type first",
        "group wire type on a known field",
        "nested unknown",
        "nested utf8",
    ],
)
def test_wire_lp_fields_are_judged_in_payload_order(
    case: BoundCase, fields: tuple[bytes, ...], reason: str
) -> None:
    frame = lp.frame_with_header(b"".join(fields) + ld(3, ld(1, b"x")))
    assert verdict(feed(case, [frame], LP)) == ("invalid", reason)


def test_wire_lp_any_field_order_and_non_minimal_varints_are_accepted(case: BoundCase) -> None:
    binding = ld(2, case.binding_sha256.encode())
    reordered = ld(3, ld(1, b"x")) + binding + b"\x08\x81\x80\x80\x80\x00"  # sequence 1, 5 bytes
    result = feed(case, [lp.frame_with_header(reordered)], LP)
    assert verdict(result) == ("incomplete", "missing_terminal")
    assert result.provisional_content == "x"


def test_wire_lp_a_tag_or_length_over_five_bytes_is_invalid_payload(case: BoundCase) -> None:
    binding = case.binding_sha256.encode()
    long_tag = b"\x88\x80\x80\x80\x80\x00\x01" + ld(2, binding) + ld(3, ld(1, b"x"))
    long_length = vi(1, 1) + b"\x12\xc0\x80\x80\x80\x80\x00" + binding + ld(3, ld(1, b"x"))
    for payload in (long_tag, long_length):
        result = feed(case, [lp.frame_with_header(payload)], LP)
        assert verdict(result) == ("invalid", "invalid_frame_payload")


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"", "missing_frame_kind"),
        (b"\x08\x01", "missing_frame_kind"),
        (b"\x1a\x03\x0a\x01x", "invalid_sequence"),  # no sequence: 0
        (b"\x08\x01\x1a\x03\x0a\x01x", "frame_request_mismatch"),  # no binding: ""
    ],
    ids=["empty", "no kind", "no sequence", "no binding"],
)
def test_wire_lp_absent_fields_are_their_defaults(
    case: BoundCase, payload: bytes, reason: str
) -> None:
    assert verdict(feed(case, [lp.frame_with_header(payload)], LP)) == ("invalid", reason)


def test_wire_lp_absent_text_and_reason_are_empty(case: BoundCase) -> None:
    binding = ld(2, case.binding_sha256.encode())
    no_text = vi(1, 1) + binding + ld(3, b"")
    no_reason = vi(1, 1) + binding + ld(5, b"")
    assert verdict(feed(case, [lp.frame_with_header(no_text)], LP)) == (
        "invalid",
        "invalid_content_delta",
    )
    assert verdict(feed(case, [lp.frame_with_header(no_reason)], LP)) == (
        "invalid",
        "invalid_terminal_reason",
    )


# --- #wire-ndjson -------------------------------------------------------------------------


def test_wire_ndjson_a_chunk_is_utf8_checked_whole_before_any_line(case: BoundCase) -> None:
    result = feed(case, [line(delta(case, 1)) + b"\xff\n"], NDJSON)
    assert verdict(result) == ("invalid", "invalid_utf8")
    assert result.stats.application_frames == 0  # the complete frame before it: not applied


def test_wire_ndjson_a_character_split_across_chunks_is_fine(case: BoundCase) -> None:
    data = line(delta(case, 1, "é😀"))
    split = data.index("😀".encode()) + 2
    result = feed(case, [data[:split], data[split:]], NDJSON)
    assert verdict(result) == ("incomplete", "missing_terminal")
    assert result.provisional_content == "é😀"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\n", "invalid_frame_json"),
        (b"\xef\xbb\xbf{}\n", "invalid_frame_json"),
        (b'{"a":1,"a":1}\n', "invalid_frame_json"),
        (b"NaN\n", "invalid_frame_json"),
        (b"[]\n", "invalid_frame_schema"),
        (b'{"kind":"foo"}\n', "invalid_frame_schema"),
    ],
    ids=["empty line", "BOM", "duplicate key", "NaN", "not an object", "unknown kind"],
)
def test_wire_ndjson_line_refusals(case: BoundCase, data: bytes, reason: str) -> None:
    assert verdict(feed(case, [data], NDJSON)) == ("invalid", reason)


def test_wire_ndjson_cr_before_lf_and_any_key_order_are_accepted(case: BoundCase) -> None:
    obj = delta(case, 1)
    reordered = json.dumps({key: obj[key] for key in reversed(list(obj))}, indent=1)
    data = reordered.replace("\n", " ").encode() + b"\r\n"
    assert verdict(feed(case, [data], NDJSON)) == ("incomplete", "missing_terminal")


def test_wire_ndjson_frame_limit_counts_the_line_without_its_line_feed(case: BoundCase) -> None:
    data = line(delta(case, 1))
    size = len(data) - 1
    assert verdict(feed(case, [data], NDJSON, limits=Limits(max_frame_bytes=size))) == (
        "incomplete",
        "missing_terminal",
    )
    assert verdict(feed(case, [data], NDJSON, limits=Limits(max_frame_bytes=size - 1))) == (
        "invalid",
        "frame_byte_limit",
    )


def test_wire_ndjson_an_unfinished_line_fails_once_over_the_limit(case: BoundCase) -> None:
    limits = Limits(max_frame_bytes=100)
    assert verdict(feed(case, [b"x" * 100], NDJSON, limits=limits)) == (
        "invalid",
        "truncated_frame",
    )
    consumer = ReplyConsumer(case.binding, wire=NDJSON, limits=limits)
    with pytest.raises(ProtocolFailure) as failure:
        consumer.receive_data(b"x" * 101)
    assert failure.value.reason is Reason.FRAME_BYTE_LIMIT
    # An incomplete UTF-8 sequence at its end is not counted yet.
    consumer = ReplyConsumer(case.binding, wire=NDJSON, limits=limits)
    consumer.receive_data(b"x" * 99 + "😀".encode()[:2])
    assert not consumer.finished


@pytest.mark.parametrize("sequence", ["1.0", "1e0", "true", '"1"', "0", "-1", "1e400"])
def test_wire_ndjson_a_sequence_that_is_not_the_integer_is_invalid_sequence(
    case: BoundCase, sequence: str
) -> None:
    data = line(delta(case, 999)).replace(b'"sequence":999', b'"sequence":' + sequence.encode())
    assert verdict(feed(case, [data], NDJSON)) == ("invalid", "invalid_sequence")


def test_wire_ndjson_integers_up_to_2_64_are_read_exactly(case: BoundCase) -> None:
    data = line(delta(case, 2**64 - 1))
    assert verdict(feed(case, [data], NDJSON)) == ("invalid", "invalid_sequence")


def test_wire_ndjson_truncated_utf8_before_truncated_frame(case: BoundCase) -> None:
    data = line(delta(case, 1)) + b'{"a":"' + "😀".encode()[:3]
    assert verdict(feed(case, [data], NDJSON)) == ("invalid", "truncated_utf8")


def test_wire_ndjson_lab_done_has_no_claim_and_integrity_none(case: BoundCase) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    result = feed(case, [ndjson.encode_frames(frames)], LAB)
    assert verdict(result) == ("complete", None)
    assert result.to_dict()["integrity"] == "none"
    with_claim = ndjson.encode_frames(frames, digest=True)
    assert verdict(feed(case, [with_claim], LAB)) == ("invalid", "invalid_frame_schema")


# --- #strict-json: nesting, surrogates ---------------------------------------------------


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth - 1):
        value = [value]
    return value


def test_strict_json_64_levels_are_read_in_a_frame_and_in_a_reply(case: BoundCase) -> None:
    data = line(delta(case, 1, nested(63)))  # the frame object is the 64th level
    assert verdict(feed(case, [data], NDJSON)) == ("invalid", "invalid_content_delta")
    reply = json.dumps({"status": "answered", "answer": nested(63), "source_ids": ["x"]})
    with pytest.raises(ProtocolFailure) as failure:
        validate_reply(reply, case.binding)
    assert failure.value.reason is Reason.INVALID_ANSWER_SCHEMA


@pytest.mark.parametrize(
    ("where", "reason"),
    [
        ("text", "invalid_content_delta"),
        ("reason", "invalid_terminal_reason"),
        ("answer", "invalid_answer_schema"),
        ("source id", "unknown_context_citation"),
    ],
)
def test_strict_json_a_lone_surrogate_is_refused_where_the_text_is_used(
    case: BoundCase, where: str, reason: str
) -> None:
    source = case.binding["selected_context"][0]["source_id"]
    if where in ("answer", "source id"):
        answer, ids = ("\\ud800", source) if where == "answer" else ("yes", "\\ud800")
        reply = f'{{"status":"answered","answer":"{answer}","source_ids":["{ids}"]}}'
        with pytest.raises(ProtocolFailure) as failure:
            validate_reply(reply, case.binding)
        assert failure.value.reason.value == reason
        return
    obj = delta(case, 1, "@") if where == "text" else stop(case, 1, "error", "@")
    data = line(obj).replace(b'"@"', b'"\\ud800"')
    assert verdict(feed(case, [data], NDJSON)) == ("invalid", reason)


def test_strict_json_an_escaped_pair_is_one_code_point(case: BoundCase) -> None:
    data = line(delta(case, 1, "@")).replace(b'"@"', b'"\\ud83d\\ude00"')
    result = feed(case, [data], NDJSON, limits=Limits(max_content_chars=1))
    assert verdict(result) == ("incomplete", "missing_terminal")
    assert result.provisional_content == "\U0001f600"


# --- #frame-rules and #precedence -------------------------------------------------------------


def test_frame_rules_anything_complete_after_the_terminal_is_refused_before_parsing(
    case: BoundCase,
) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    body = ndjson.encode_frames(frames, digest=True)
    assert verdict(feed(case, [body + b"garbage\n"], NDJSON)) == ("invalid", "frame_after_terminal")
    assert verdict(feed(case, [body + b"garb"], NDJSON)) == ("invalid", "truncated_frame")
    lp_body = lp.encode_frames(frames)
    assert verdict(feed(case, [lp_body + b"\x00\x00\x00\x00\x00"], LP)) == (
        "invalid",
        "frame_after_terminal",
    )
    assert verdict(feed(case, [lp_body + b"\x07\x00\x00\x00\x00"], LP)) == (
        "invalid",
        "invalid_frame_header",
    )


def test_precedence_sequence_before_binding_before_count(case: BoundCase) -> None:
    foreign = "f" * 64
    both = line({**delta(case, 2), "binding_sha256": foreign})
    assert verdict(feed(case, [both], NDJSON)) == ("invalid", "invalid_sequence")
    binding_and_count = line({**delta(case, 1), "binding_sha256": foreign})
    result = feed(case, [binding_and_count], NDJSON, limits=Limits(max_frames=1))
    assert verdict(result) == ("invalid", "frame_request_mismatch")
    assert result.stats.application_frames == 0  # refused at the binding: not counted
    count_and_text = line(delta(case, 1)) + line(delta(case, 2, ""))
    result = feed(case, [count_and_text], NDJSON, limits=Limits(max_frames=1))
    assert verdict(result) == ("invalid", "frame_count_limit")
    assert result.stats.application_frames == 2  # the refused frame counts


def test_frame_rules_the_delta_over_the_content_limit_is_kept(case: BoundCase) -> None:
    data = line(delta(case, 1, "ab")) + line(delta(case, 2, "c😀"))
    result = feed(case, [data], NDJSON, limits=Limits(max_content_chars=3))
    assert verdict(result) == ("invalid", "content_limit")
    assert result.provisional_content == "abc😀"
    assert result.stats.application_frames == 2
    fits = feed(case, [data], NDJSON, limits=Limits(max_content_chars=4))  # code points
    assert verdict(fits) == ("incomplete", "missing_terminal")


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("", ("invalid", "invalid_terminal_reason")),
        ("x" * 256, ("cancelled", "unregistered_cancel_terminal")),
        ("x" * 257, ("invalid", "invalid_terminal_reason")),
        ("😀" * 256, ("cancelled", "unregistered_cancel_terminal")),
        ("😀" * 257, ("invalid", "invalid_terminal_reason")),
        (7, ("invalid", "invalid_terminal_reason")),
        ("controlled_local_cancel", ("cancelled", "controlled_local_cancel")),
        ("invalid_utf8", ("cancelled", "invalid_utf8")),
        ("controlled_local_error", ("cancelled", "controlled_local_error")),
    ],
    ids=lambda value: repr(value)[:24],
)
def test_terminal_reason_rules(case: BoundCase, reason: Any, expected: tuple[str, str]) -> None:
    data = line(delta(case, 1)) + line(stop(case, 2, "cancel", reason))
    result = feed(case, [data], NDJSON)
    assert verdict(result) == expected
    if expected[1] == "unregistered_cancel_terminal":
        assert result.detail == reason
    else:
        assert result.detail is None


def test_terminal_an_error_with_a_registered_code_keeps_the_code(case: BoundCase) -> None:
    data = line(delta(case, 1)) + line(stop(case, 2, "error", "controlled_local_cancel"))
    assert verdict(feed(case, [data], NDJSON)) == ("error", "controlled_local_cancel")


def test_frame_rules_duplicate_policy_compares_payload_bytes(case: BoundCase) -> None:
    first = line(delta(case, 1, "a"))
    spaced = first.replace(b",", b", ")  # the same frame, other bytes
    texts = ["a", "b"]
    tail = line(delta(case, 2, "b")) + line(done(case, 3, texts))
    # Without the policy a replay is a sequence error; with it, identical bytes are dropped.
    assert verdict(feed(case, [first + first + tail], NDJSON)) == ("invalid", "invalid_sequence")
    kept = feed(case, [first + first + tail], NDJSON, ignore_duplicates=True)
    assert verdict(kept) == ("invalid", "invalid_answer_json")  # "ab" is not a reply
    assert [event.to_dict()["kind"] for event in kept.events].count("duplicate_dropped") == 1
    conflict = feed(case, [first + spaced + tail], NDJSON, ignore_duplicates=True)
    assert verdict(conflict) == ("invalid", "conflicting_duplicate")


def test_precedence_the_stream_byte_limit_refuses_the_whole_chunk(case: BoundCase) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    body = lp.encode_frames(frames)  # every byte counts, the 5-byte headers included
    assert verdict(feed(case, [body], LP, limits=Limits(max_stream_bytes=len(body)))) == (
        "complete",
        None,
    )
    over = feed(case, [body], LP, limits=Limits(max_stream_bytes=len(body) - 1))
    assert verdict(over) == ("invalid", "stream_byte_limit")
    assert over.stats.application_frames == 0  # nothing of the chunk was decoded
    assert over.stats.bytes_received == len(body)
    # Before the NDJSON chunk's UTF-8 is looked at.
    bad = line(delta(case, 1)) + b"\xff" * 10
    limits = Limits(max_stream_bytes=len(bad) - 1)
    assert verdict(feed(case, [bad], NDJSON, limits=limits)) == ("invalid", "stream_byte_limit")


def test_precedence_a_done_then_a_broken_call_is_not_an_answer(case: BoundCase) -> None:
    consumer = ReplyConsumer(case.binding, wire=LP)
    consumer.receive_data(lp.encode_frames(derive_frames(case.binding_sha256, case.content)))
    result = consumer.transport_error()
    assert verdict(result) == ("error", "transport_io_error")
    assert result.local_terminal == "done" and result.accepted_answer is None


# --- #reply-schema ---------------------------------------------------------------------------

WHITE_SPACE = [
    *range(0x09, 0x0E), *range(0x1C, 0x21), 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
    0x2028, 0x2029, 0x202F, 0x205F, 0x3000,
]  # fmt: skip


def test_reply_white_space_is_exactly_the_29_listed_code_points() -> None:
    assert len(WHITE_SPACE) == 29
    assert [c for c in range(0x110000) if chr(c).strip() == ""] == WHITE_SPACE


def reply_reason(text: str, binding: Any) -> str | None:
    try:
        validate_reply(text, binding)
    except ProtocolFailure as failure:
        return failure.reason.value
    return None


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (
            '{"status":"answered","status":"answered","answer":"a","source_ids":["S"]}',
            "invalid_answer_json",
        ),
        (' \r\n{"status":"answered","answer":"a","source_ids":["S"]}\n', None),
        ('{"status":"answered","answer":"a","source_ids":["S"]} x', "invalid_answer_json"),
        ('{"status":"answered","answer":"a","source_ids":["S"],"x":1}', "invalid_answer_schema"),
        ('{"status":"answered","answer":"\\u200b","source_ids":["S"]}', None),
        (
            '{"status":"answered","answer":"\\u3000\\u0085","source_ids":["S"]}',
            "invalid_answer_schema",
        ),
        ('{"status":"answered","answer":"a","source_ids":["S","S"]}', "invalid_answer_schema"),
        ('{"status":"answered","answer":"a","source_ids":[""]}', "invalid_answer_schema"),
        ('{"status":"not_in_docs","answer":"a","source_ids":["nope"]}', "unknown_context_citation"),
        ('{"status":"not_in_docs","answer":"a","source_ids":["S"]}', "status_citation_mismatch"),
        ('{"status":"answered","answer":"a","source_ids":[]}', "status_citation_mismatch"),
    ],
    ids=[
        "duplicate key", "white space around", "trailing data", "extra key",
        "zero-width space is text", "only white space", "duplicate citation",
        "empty source id", "unknown before status mismatch", "not_in_docs with ids",
        "answered without ids",
    ],
)  # fmt: skip
def test_reply_rules_in_order(case: BoundCase, reply: str, reason: str | None) -> None:
    source = case.binding["selected_context"][0]["source_id"]
    assert reply_reason(reply.replace('"S"', json.dumps(source)), case.binding) == reason


def test_reply_a_repeated_source_id_in_the_binding_cites_its_last_row(case: BoundCase) -> None:
    row = dict(case.binding["selected_context"][0])
    binding = {**case.binding, "selected_context": [row, {**row, "url": "https://last"}]}
    reply = json.dumps({"status": "answered", "answer": "a", "source_ids": [row["source_id"]]})
    _, citations = validate_reply(reply, binding)
    assert citations == [
        {"source_id": row["source_id"], "chunk_id": row["chunk_id"], "url": "https://last"}
    ]


# --- #resume ------------------------------------------------------------------------------


def test_resume_drops_the_begun_frame_and_expects_the_next_sequence(case: BoundCase) -> None:
    frames = derive_frames(case.binding_sha256, case.content)
    encoded = [lp.encode_frame(frame) for frame in frames]
    consumer = ReplyConsumer(case.binding, wire=LP)
    consumer.receive_data(encoded[0] + encoded[1] + encoded[2][:7])
    assert consumer.resume(1) == 2
    assert consumer.stats.discarded_bytes == 7 and consumer.stats.reconnects == 1
    consumer.receive_data(b"".join(encoded[2:]))
    assert verdict(consumer.end_of_stream()) == ("complete", None)
    # A producer that resent an applied frame after the resume: a replay, refused.
    replayed = ReplyConsumer(case.binding, wire=LP)
    replayed.receive_data(encoded[0] + encoded[1])
    replayed.resume(1)
    with pytest.raises(ProtocolFailure) as failure:
        replayed.receive_data(encoded[1])
    assert failure.value.reason is Reason.INVALID_SEQUENCE


def test_limits_the_documented_defaults_are_the_cores() -> None:
    limits = Limits()
    assert (
        limits.max_stream_bytes,
        limits.max_frame_bytes,
        limits.max_frames,
        limits.max_content_chars,
        limits.max_reason_chars,
    ) == (65536, 8192, 1000, 16384, 256)
    limits_table = PROTOCOL.split('<a id="limits"></a>', 1)[1].split("<a id=", 1)[0]
    for figure in ("65,536", "8,192", "1,000", "16,384", "1–256", "69,632"):
        assert figure in limits_table


def test_frames_lp_and_ndjson_encode_the_same_frames(case: BoundCase) -> None:
    """Both wires carry the same frames: the same verdict, content and frame count."""
    frames: list[Frame] = derive_frames(case.binding_sha256, case.content, FrameKind.CANCEL)
    on_lp = feed(case, [lp.encode_frames(frames)], LP)
    on_ndjson = feed(case, [ndjson.encode_frames(frames, digest=True)], NDJSON)
    assert verdict(on_lp) == verdict(on_ndjson) == ("cancelled", "controlled_local_cancel")
    assert on_lp.provisional_content == on_ndjson.provisional_content


# --- #faults -------------------------------------------------------------------------------


@pytest.mark.skipif(
    not hasattr(faults, "RESUMED_OUTCOMES"), reason="the outcomes over gRPC are not tabled yet"
)
def test_faults_only_transport_faults_are_repaired_by_the_default_resume() -> None:
    """#faults: over gRPC with the default resume, a resume repairs what broke the transport
    of the first delivery (tests/system/test_resume.py runs it), never a fault of the reply."""
    resumed: dict[faults.FaultKind, Outcome] = vars(faults)["RESUMED_OUTCOMES"]
    assert set(resumed) == {faults.FaultKind.TRANSPORT_ABORT, faults.FaultKind.ABORT_AFTER_DONE}
    assert set(resumed) <= TRANSPORT_FAULTS - TIMING_FAULTS
    assert all(outcome == Outcome(Status.COMPLETE, None) for outcome in resumed.values())
    assert all(
        EXPECTED_OUTCOMES[kind][wire].reason == Reason.TRANSPORT_IO_ERROR.value
        for kind in resumed
        for wire in WireFormat
    )


@pytest.mark.parametrize("head", ["e080", "f490", "c0", "c1", "f5", "80", "eda080"])
def test_wire_ndjson_bytes_that_cannot_begin_a_sequence_fail_at_once(
    case: BoundCase, head: str
) -> None:
    """Refused in the chunk that holds them (invalid_utf8), not at the end (truncated_utf8)."""
    consumer = ReplyConsumer(case.binding, wire=NDJSON)
    with pytest.raises(ProtocolFailure) as failure:
        consumer.receive_data(b'{"a":"' + bytes.fromhex(head))
    assert failure.value.reason is Reason.INVALID_UTF8


def test_precedence_a_frame_is_judged_before_the_next_header_is_read(case: BoundCase) -> None:
    wrong_sequence = lp.frame_with_header(lp_delta(case, sequence=2))
    result = feed(case, [wrong_sequence + b"\x09\x00\x00\x00\x00"], LP)
    assert verdict(result) == ("invalid", "invalid_sequence")


# --- the rules restated in language-neutral terms: each from its words, not from Python ----


def test_conventions_white_space_is_the_29_code_points_the_document_lists() -> None:
    """#white-space: the list in the document is the reference's white space."""
    section = PROTOCOL.split('<a id="white-space"></a>', 1)[1].split("(the reference's", 1)[0]
    listed: list[int] = []
    for first, last in re.findall(r"U\+([0-9A-F]{4})(?:–U\+([0-9A-F]{4}))?", section):
        listed.extend(range(int(first, 16), int(last or first, 16) + 1))
    assert listed == WHITE_SPACE


def _read_back_at(magnitude: float, length: int) -> str | None:
    """The ``length``-digit ``d.ddde±xx`` string nearest ``magnitude`` that reads back as it,
    or None: the two candidates are the value's exact decimal cut down and rounded up."""
    exact = decimal.Decimal(magnitude)
    exponent = exact.adjusted()
    quantum = decimal.Decimal(1).scaleb(exponent - length + 1)
    candidates = []
    for rounding in (decimal.ROUND_FLOOR, decimal.ROUND_CEILING):
        cut = exact.quantize(quantum, rounding=rounding)
        digits = str(cut.scaleb(length - 1 - exponent).to_integral_value())
        if len(digits) > length:  # rounded up to the next power of ten
            digits, shift = digits[:length], 1
        else:
            digits, shift = digits.rjust(length, "0"), 0
        fraction = f".{digits[1:]}" if length > 1 else ""
        form = f"{digits[0]}{fraction}e{exponent + shift:+03d}"
        if float(form) == magnitude:
            candidates.append((abs(decimal.Decimal(form) - exact), int(digits) % 2, form))
    return min(candidates)[2] if candidates else None


def stated_float_form(value: float) -> str:
    """#canonical-json's form of a non-integer number, built from the document's words."""
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign, magnitude = ("-" if value < 0 else ""), abs(value)
    # The shortest digit string that reads back; of those at that length, the nearest (on a
    # tie, the even one). At each length only the two strings around the value can be it.
    text = next(form for length in range(1, 18) if (form := _read_back_at(magnitude, length)))
    mantissa, exponent = text.split("e")
    digits, e = mantissa.replace(".", ""), int(exponent)
    if -4 <= e < 16:
        if e >= 0:
            whole, fraction = digits[: e + 1].ljust(e + 1, "0"), digits[e + 1 :] or "0"
        else:
            whole, fraction = "0", "0" * (-e - 1) + digits
        return f"{sign}{whole}.{fraction}"
    rest = "." + digits[1:] if len(digits) > 1 else ""
    return f"{sign}{digits[0]}{rest}e{'+' if e >= 0 else '-'}{abs(e):02d}"


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_canonical_json_a_non_integer_number_is_written_as_the_document_says(value: float) -> None:
    assert canonical_json(value).decode() == stated_float_form(value)


@pytest.mark.parametrize(
    ("value", "form"),
    [(0.5, "0.5"), (1e-5, "1e-05"), (123456789012345680.0, "1.2345678901234568e+17"),
     (1.7976931348623157e308, "1.7976931348623157e+308"), (0.0, "0.0"), (-2.5e-9, "-2.5e-09")],
)  # fmt: skip
def test_canonical_json_the_documents_float_examples(value: float, form: str) -> None:
    assert stated_float_form(value) == canonical_json(value).decode() == form


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (b"\xff", "binding_not_canonical"),  # not UTF-8
        (b"[1,]", "binding_not_canonical"),  # not JSON
        (b"[" * 17 + b"1" + b"]" * 17, "invalid_request"),  # 17 deep, canonical
        (b"[ " * 17 + b"1" + b"]" * 17, "invalid_request"),  # depth before canonical form
        (b"1" * 4301, "binding_not_canonical"),  # an integer token over 4,300 digits
        (b"1e400", "binding_not_canonical"),  # infinity has no canonical form
        (b'"\\ud800"', "binding_not_canonical"),  # a lone surrogate has none
        (b"-0", "binding_not_canonical"),  # -0 is written 0
        (b"1E2", "binding_not_canonical"),  # 100.0
    ],
    ids=["not utf-8", "not json", "17 deep", "17 deep pretty", "4301 digits", "1e400",
         "lone surrogate", "-0", "1E2"],
)  # fmt: skip
def test_request_the_binding_bytes_are_judged_in_the_documented_order(
    text: bytes, reason: str
) -> None:
    with pytest.raises(RequestRefused) as refused:
        binding_sha256(text)
    assert refused.value.code == reason


@pytest.mark.parametrize(
    "text", [b"[" * 16 + b"1" + b"]" * 16, b"1" * 4300, b"100.0", b"0", b"-0.0"]
)
def test_request_bindings_at_the_edges_are_canonical(text: bytes) -> None:
    assert binding_sha256(text) == hashlib.sha256(text).hexdigest()


def stated_ascii_json_string(text: str) -> str:
    """#binding's rule for the strings of a question binding's human turn."""
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
             "\r": "\\r"}  # fmt: skip
    out = []
    for char in text:
        point = ord(char)
        if char in short:
            out.append(short[char])
        elif 0x20 <= point <= 0x7E:
            out.append(char)
        elif point > 0xFFFF:
            high, low = divmod(point - 0x10000, 0x400)
            out.append(f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}")
        else:
            out.append(f"\\u{point:04x}")
    return '"' + "".join(out) + '"'


@given(st.text(max_size=40), st.text(min_size=1, max_size=40))
def test_binding_a_question_bindings_human_turn_is_written_as_the_document_says(
    question: str, passage: str
) -> None:
    if not question.strip() or not passage.strip():
        return
    binding = build_question_binding(question, [{"id": "p", "text": passage, "url": "u"}])
    expected = (
        '{"question": ' + stated_ascii_json_string(question) + ', "context": [{"id": "p", '
        '"text": ' + stated_ascii_json_string(passage) + "}]}"
    )
    assert binding["messages"][1] == ["human", expected]


def test_binding_the_human_turn_escapes_del_and_controls() -> None:
    binding = build_question_binding("a\x7f\x01/é😀", [{"id": "p", "text": "t", "url": "u"}])
    assert '"a\\u007f\\u0001/\\u00e9\\ud83d\\ude00"' in binding["messages"][1][1]


NOT_PRINTABLE: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def stated_scrub(text: str, limit: int = 256) -> str:
    """#scrubbed, from its words."""

    def piece(char: str) -> str:
        category = unicodedata.category(char)
        if category not in NOT_PRINTABLE and (category != "Zs" or char == " "):
            return char
        point = ord(char)
        if char in "\t\n\r":
            return {"\t": "\\t", "\n": "\\n", "\r": "\\r"}[char]
        if point < 0x100:
            return f"\\x{point:02x}"
        return f"\\u{point:04x}" if point < 0x10000 else f"\\U{point:08x}"

    pieces = [piece(char) for char in text]
    if sum(map(len, pieces)) <= limit:
        return "".join(pieces)
    kept: list[str] = []
    size = 0
    for shown in pieces:
        if size + len(shown) > limit - 1:
            break
        kept.append(shown)
        size += len(shown)
    return "".join(kept) + "\u2026"


MUST_ESCAPE: Final = [
    *range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F),
    *range(0x2066, 0x206A), 0x2028, 0x2029, 0xD800, 0xDBFF, 0xDC00, 0xDFFF,
]  # fmt: skip


@given(
    st.text(
        st.one_of(st.characters(), st.sampled_from([chr(point) for point in MUST_ESCAPE])),
        max_size=300,
    )
)
def test_result_document_scrubbing_is_the_stated_algorithm(text: str) -> None:
    assert scrubbed_detail(text) == stated_scrub(text)


def test_result_document_every_implementation_escapes_the_listed_code_points() -> None:
    """#latitude: whatever the Unicode version, these are never shown raw."""
    for point in MUST_ESCAPE:
        shown = scrubbed_detail(chr(point))
        assert shown != chr(point) and shown.isascii() and shown.startswith("\\"), hex(point)


def test_wire_ndjson_the_unfinished_line_is_measured_after_the_chunks_complete_lines(
    case: BoundCase,
) -> None:
    first = line(delta(case, 1))
    limits = Limits(max_frame_bytes=len(first) - 1)
    result = feed(case, [first + b"x" * len(first)], NDJSON, limits=limits)
    assert verdict(result) == ("invalid", "frame_byte_limit")
    assert result.stats.application_frames == 1 and result.provisional_content == "x"
    wrong = line(delta(case, 2))
    result = feed(case, [wrong + b"x" * len(first)], NDJSON, limits=limits)
    assert verdict(result) == ("invalid", "invalid_sequence")


@pytest.mark.parametrize(
    ("frames", "reason"),
    [("-0", "invalid_answer_json"), ('"0"', "invalid_frame_schema"),
     ("0.0", "invalid_frame_schema"), ("false", "invalid_frame_schema")],
)  # fmt: skip
def test_wire_ndjson_content_frames_is_an_integer_token(
    case: BoundCase, frames: str, reason: str
) -> None:
    """``-0`` is 0 (the claim of no delta holds, and the empty reply is not JSON)."""
    data = line(done(case, 1, [])).replace(
        b'"content_frames":0', b'"content_frames":' + frames.encode()
    )
    assert verdict(feed(case, [data], NDJSON)) == ("invalid", reason)


def test_frame_rules_a_dropped_duplicate_is_not_counted(case: BoundCase) -> None:
    first = line(delta(case, 1, "a"))
    tail = line(delta(case, 2, "b")) + line(done(case, 3, ["a", "b"]))
    limits = Limits(max_frames=3)
    kept = feed(case, [first + first + first + tail], NDJSON, ignore_duplicates=True, limits=limits)
    assert verdict(kept) == ("invalid", "invalid_answer_json")  # not frame_count_limit
    assert kept.stats.application_frames == 3


def test_faults_the_parameters_each_fault_takes_are_the_documents() -> None:
    """#faults names which fault takes which parameter; any other is refused."""
    stated = {
        "target_frame": {"omit", "repeat", "corrupt", "foreign-binding", "stall"},
        "stall_ms": {"stall"},
        "byte_count": {"truncate-tail"},
    }
    for name, kinds in stated.items():
        assert {kind.value for kind, takes in FAULT_PARAMETERS.items() if name in takes} == kinds
    section = " ".join(PROTOCOL.split('<a id="faults"></a>', 1)[1].split())
    assert (
        "(`target_frame` is taken by `omit`, `repeat`, `corrupt`, `foreign-binding` and "
        "`stall`, `stall_ms` by `stall`, `byte_count` by `truncate-tail`; the other faults "
        "take none)" in section
    )


# --- #grpc-status: how a call's ending is read, in the document's order --------------------


def call_session(recording: Recording, *, attempt: int = 0, applied: int = 0) -> StreamSession:
    """The consumer's gRPC edge with no call: ``applied`` frames of replace-file already in."""
    request = ReplyRequest.for_case(recording, "replace-file")
    options = StreamOptions(target="rules")
    sent = request.open_request()
    logger = structlog.get_logger()
    session = StreamSession(sent, request.consumer(logger, sent=sent), options, logger,
                            ReplyClient(options))  # fmt: skip
    session.attempt = attempt
    case = recording.case("replace-file")
    for frame in derive_frames(case.binding_sha256, case.content)[:applied]:
        assert session._apply(lp.encode_frame(frame))
    return session


UNAVAILABLE, CANCELLED = grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED


@pytest.mark.parametrize(
    ("end", "attempt", "applied", "expected"),
    [
        (StreamEnded(), 0, 0, ("incomplete", "missing_terminal")),  # 1
        (StreamEnded(broken=Reason.READER_FAILED, details="x"), 0, 0, ("error", "reader_failed")),
        (StreamEnded(idle=True), 0, 2, ("incomplete", "idle_timeout")),  # 3
        (StreamEnded(grpc.StatusCode.DEADLINE_EXCEEDED, "x"), 0, 0,
         ("incomplete", "deadline_exceeded")),  # 5
        # 6: a named code before any chunk, on the first attempt only
        (StreamEnded(grpc.StatusCode.FAILED_PRECONDITION, "request_binding_mismatch"), 0, 0,
         ("refused", "request_binding_mismatch")),
        (StreamEnded(grpc.StatusCode.FAILED_PRECONDITION, "request_binding_mismatch"), 1, 0,
         ("error", "transport_io_error")),
        (StreamEnded(grpc.StatusCode.FAILED_PRECONDITION, "request_binding_mismatch"), 0, 2,
         ("error", "transport_io_error")),
        (StreamEnded(UNAVAILABLE, "producer_shutdown"), 0, 0, ("error", "producer_shutdown")),
        (StreamEnded(UNAVAILABLE, "producer_shutdown"), 1, 0, ("error", "transport_io_error")),
        (StreamEnded(UNAVAILABLE, "producer_shutdown "), 0, 0, ("error", "transport_io_error")),
        # 7: gRPC's own refusals
        (StreamEnded(CANCELLED, "CANCELLED"), 0, 0, ("refused", "producer_overloaded")),
        (StreamEnded(UNAVAILABLE, "Received RST_STREAM with error code 7"), 1, 0,
         ("refused", "stream_limit")),
        (StreamEnded(grpc.StatusCode.RESOURCE_EXHAUSTED,
                     "received metadata size exceeds hard limit (value length 32769 vs. 32768)"),
         0, 0, ("refused", "metadata_too_large")),
        (StreamEnded(grpc.StatusCode.RESOURCE_EXHAUSTED, "metadata_too_large"), 0, 0,
         ("refused", "metadata_too_large")),
        # 8: a shared reply's named ending, mid-stream too
        (StreamEnded(UNAVAILABLE, "generator_lost"), 1, 2, ("error", "generator_lost")),
        (StreamEnded(UNAVAILABLE, "reply_log_behind"), 0, 5, ("error", "reply_log_behind")),
        (StreamEnded(UNAVAILABLE, "reply_log_behind"), 1, 0, ("error", "reply_log_behind")),
        (StreamEnded(grpc.StatusCode.RESOURCE_EXHAUSTED, "reply_log_limit"), 0, 2,
         ("error", "reply_log_limit")),
        (StreamEnded(grpc.StatusCode.INTERNAL, "because"), 0, 2, ("error", "transport_io_error")),
    ],
)  # fmt: skip
def test_grpc_status_a_calls_ending_is_read_in_the_documents_order(
    recording: Recording, end: StreamEnded, attempt: int, applied: int, expected: tuple[str, str]
) -> None:
    result = call_session(recording, attempt=attempt, applied=applied)._ended(end)
    assert verdict(result) == expected
    document = result.to_dict()
    if expected[0] == "refused" or expected[1] == "producer_shutdown":
        assert result.stats.bytes_received == 0 and result.stats.application_frames == 0
        assert document["detail"] == f"producer answered {end.code.name}"  # type: ignore[union-attr]
    if end.code is not None and end.code is not grpc.StatusCode.DEADLINE_EXCEEDED:
        assert document["transport"]["grpc_details"] == end.details


@pytest.mark.parametrize(
    ("details", "resumed"),
    [("Socket closed", True), ("producer_shutdown", True), ("connection_aged_out", True),
     ("controlled_transport_abort", True), ("generator_lost", False), ("reply_log_behind", False),
     ("request_binding_mismatch", False)],
)  # fmt: skip
def test_grpc_status_a_resumable_ending_is_resumed_before_anything_else_is_read(
    recording: Recording, details: str, resumed: bool
) -> None:
    """#grpc-status step 4 comes before 6: a resumable ending goes back to the resume loop."""
    outcome = call_session(recording)._judge(StreamEnded(UNAVAILABLE, details))
    assert isinstance(outcome, StreamEnded) is resumed
