"""The five chat frames on the wires (docs/protocol.md#wire-lp, #wire-ndjson): encoded
exactly as the protocol writes them, decoded as sent (``Frame.part``), and refused with the
same rules as the other frames; on lp only in a chat reply (#lp-fields-by-kind), on
ndjson-lab never."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replywire.shared.chat_parts import (
    PART_CLASSES,
    PART_FIELDS,
    FinishPart,
    SignaturePart,
    ThoughtPart,
    ToolCallPart,
    UsagePart,
)
from replywire.shared.errors import ProtocolFailure
from replywire.shared.frames import Frame, FrameKind
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.reasons import Reason
from replywire.shared.wire import WireFormat, codec_for, lp, ndjson
from tests.unit.test_wire_lp import LEN, VARINT, lfield, tag, varint, vfield

BINDING = "f1a54255dd15ecc6a6a6dc316530f88f204a6e4c48ec5ab0def12f8bddbb2c70"
COMMON = vfield(1, 1) + lfield(2, BINDING.encode())

CHAT_FRAMES = [
    Frame(
        sequence=1,
        kind=FrameKind.TOOL_CALL,
        binding_sha256=BINDING,
        part=ToolCallPart(index=1, id="c2", name="get_weather", arguments='{"city":"Oslo"}'),
    ),
    Frame(
        sequence=1,
        kind=FrameKind.THOUGHT,
        binding_sha256=BINDING,
        part=ThoughtPart(text="The user wants 𝄞."),
    ),
    Frame(
        sequence=1,
        kind=FrameKind.SIGNATURE,
        binding_sha256=BINDING,
        part=SignaturePart(part="tool_call", index=1, value="c2lnLTE="),
    ),
    Frame(
        sequence=1,
        kind=FrameKind.USAGE,
        binding_sha256=BINDING,
        part=UsagePart(
            prompt_tokens=31,
            cached_tokens=0,
            completion_tokens=18,
            thoughts_tokens=12,
            tool_use_prompt_tokens=0,
            total_tokens=2**64 - 1,
        ),
    ),
    Frame(
        sequence=1, kind=FrameKind.FINISH, binding_sha256=BINDING, part=FinishPart(reason="STOP")
    ),
]
#: Each chat frame's payload, field by field in field-number order (proto3 leaves out a
#: default: usage's zeros are not written).
EXPECTED_LP = {
    FrameKind.TOOL_CALL: COMMON
    + lfield(
        7,
        vfield(1, 1) + lfield(2, b"c2") + lfield(3, b"get_weather") + lfield(4, b'{"city":"Oslo"}'),
    ),
    FrameKind.THOUGHT: COMMON + lfield(8, lfield(1, "The user wants 𝄞.".encode())),
    FrameKind.SIGNATURE: COMMON
    + lfield(9, lfield(1, b"tool_call") + vfield(2, 1) + lfield(3, b"c2lnLTE=")),
    FrameKind.USAGE: COMMON
    + lfield(10, vfield(1, 31) + vfield(3, 18) + vfield(4, 12) + vfield(6, 2**64 - 1)),
    FrameKind.FINISH: COMMON + lfield(11, lfield(1, b"STOP")),
}
EXPECTED_NDJSON = {
    FrameKind.TOOL_CALL: '{"sequence":1,"kind":"tool_call","binding_sha256":"%s","index":1,'
    '"id":"c2","name":"get_weather","arguments":"{\\"city\\":\\"Oslo\\"}"}',
    FrameKind.THOUGHT: '{"sequence":1,"kind":"thought","binding_sha256":"%s",'
    '"text":"The user wants 𝄞."}',
    FrameKind.SIGNATURE: '{"sequence":1,"kind":"signature","binding_sha256":"%s",'
    '"part":"tool_call","index":1,"value":"c2lnLTE="}',
    FrameKind.USAGE: '{"sequence":1,"kind":"usage","binding_sha256":"%s","prompt_tokens":31,'
    '"cached_tokens":0,"completion_tokens":18,"thoughts_tokens":12,'
    '"tool_use_prompt_tokens":0,"total_tokens":18446744073709551615}',
    FrameKind.FINISH: '{"sequence":1,"kind":"finish","binding_sha256":"%s","reason":"STOP"}',
}


def ids(frame: Frame) -> str:
    return frame.kind.value


# --- encoding, exactly ---------------------------------------------------------------


@pytest.mark.parametrize("frame", CHAT_FRAMES, ids=ids)
def test_lp_encodes_a_chat_frame_field_by_field(frame: Frame) -> None:
    payload = EXPECTED_LP[frame.kind]
    assert lp.encode_frame(frame) == lp.frame_with_header(payload)


@pytest.mark.parametrize("frame", CHAT_FRAMES, ids=ids)
def test_ndjson_encodes_a_chat_frame_with_its_keys_in_order(frame: Frame) -> None:
    line = (EXPECTED_NDJSON[frame.kind] % BINDING + "\n").encode("utf-8")
    assert codec_for(WireFormat.NDJSON).encode_frame(frame) == line
    keys = list(json.loads(line))
    assert keys == ["sequence", "kind", "binding_sha256", *PART_FIELDS[frame.kind.value]]


@pytest.mark.parametrize("frame", CHAT_FRAMES, ids=ids)
def test_ndjson_lab_refuses_to_encode_a_chat_frame(frame: Frame) -> None:
    with pytest.raises(ValueError, match="ndjson-lab"):
        codec_for(WireFormat.NDJSON_LAB).encode_frame(frame)


def test_a_usage_of_zeros_keeps_its_kind_on_lp() -> None:
    zeros = UsagePart(**dict.fromkeys(PART_FIELDS["usage"], 0))
    frame = Frame(sequence=1, kind=FrameKind.USAGE, binding_sha256=BINDING, part=zeros)
    assert lp.encode_frame(frame) == lp.frame_with_header(COMMON + lfield(10, b""))
    assert lp.parse_chat_frame(COMMON + lfield(10, b"")) == frame


def test_lp_refuses_to_encode_a_part_of_the_wrong_type() -> None:
    wrong = ToolCallPart(index="0", id="", name="f", arguments="")
    with pytest.raises(TypeError):
        lp.encode_frame(
            Frame(sequence=1, kind=FrameKind.TOOL_CALL, binding_sha256=BINDING, part=wrong)
        )
    with pytest.raises(TypeError):
        lp.encode_frame(
            Frame(
                sequence=1,
                kind=FrameKind.FINISH,
                binding_sha256=BINDING,
                part=ThoughtPart(text="x"),
            )
        )


# --- decoding: as sent ---------------------------------------------------------------


@pytest.mark.parametrize("wire", [WireFormat.LENGTH_PREFIXED, WireFormat.NDJSON], ids=str)
@pytest.mark.parametrize("frame", CHAT_FRAMES, ids=ids)
def test_a_chat_frame_round_trips(frame: Frame, wire: WireFormat) -> None:
    codec = codec_for(wire)
    encoded = codec.encode_frame(frame)
    payload = encoded[5:] if wire is WireFormat.LENGTH_PREFIXED else encoded[:-1]
    assert codec.parse_chat_frame(payload) == frame


def test_lp_takes_an_absent_chat_field_as_its_default() -> None:
    frame = lp.parse_chat_frame(COMMON + lfield(7, b""))
    assert frame.part == ToolCallPart(index=0, id="", name="", arguments="")
    frame = lp.parse_chat_frame(COMMON + lfield(9, vfield(2, 3)))
    assert frame.part == SignaturePart(part="", index=3, value="")


def test_lp_accepts_chat_fields_in_any_order_and_overlong_varints() -> None:
    body = lfield(4, b"{}") + b"\x08\x81\x00" + lfield(3, b"f")  # index 1 in three bytes
    frame = lp.parse_chat_frame(lfield(7, body) + lfield(2, BINDING.encode()) + vfield(1, 2))
    assert frame.sequence == 2
    assert frame.part == ToolCallPart(index=1, id="", name="f", arguments="{}")


def test_ndjson_keeps_wrongly_typed_values_for_the_core() -> None:
    line = (
        '{"kind":"tool_call","sequence":1,"binding_sha256":"b","index":1.0,"id":null,'
        '"name":["f"],"arguments":{"a":1}}'
    )
    frame = ndjson.parse_frame(line.encode(), digest=True)
    assert frame.part == ToolCallPart(index=1.0, id=None, name=["f"], arguments={"a": 1})
    assert type(frame.part.index) is float


# --- refusals --------------------------------------------------------------------------

LP_REFUSALS: list[tuple[str, bytes, Reason]] = [
    ("tool-call-field-5", lfield(7, vfield(5, 1)), Reason.UNKNOWN_FRAME_FIELD),
    ("usage-field-7", lfield(10, vfield(7, 1)), Reason.UNKNOWN_FRAME_FIELD),
    ("finish-field-2-group", lfield(11, tag(2, 3)), Reason.UNKNOWN_FRAME_FIELD),
    ("field-12", vfield(12, 1), Reason.UNKNOWN_FRAME_FIELD),
    ("index-twice", lfield(7, vfield(1, 0) + vfield(1, 0)), Reason.INVALID_FRAME_SCHEMA),
    ("thought-twice", lfield(8, b"") + lfield(8, b""), Reason.INVALID_FRAME_SCHEMA),
    ("thought-and-finish", lfield(8, b"") + lfield(11, b""), Reason.INVALID_FRAME_SCHEMA),
    (
        "content-and-usage",
        lfield(3, lfield(1, b"a")) + lfield(10, b""),
        Reason.INVALID_FRAME_SCHEMA,
    ),
    ("index-as-string", lfield(7, lfield(1, b"0")), Reason.INVALID_FRAME_PAYLOAD),
    ("name-as-varint", lfield(7, vfield(3, 1)), Reason.INVALID_FRAME_PAYLOAD),
    ("usage-as-varint", vfield(10, 1), Reason.INVALID_FRAME_PAYLOAD),
    (
        "count-over-64-bits",
        lfield(10, tag(1, VARINT) + b"\xff" * 9 + b"\x02"),
        Reason.INVALID_FRAME_PAYLOAD,
    ),
    ("count-truncated", lfield(10, tag(1, VARINT) + b"\x80"), Reason.INVALID_FRAME_PAYLOAD),
    (
        "nested-varint-then-unknown",
        lfield(10, tag(1, VARINT) + b"\x80") + vfield(13, 1),
        Reason.INVALID_FRAME_PAYLOAD,
    ),
    ("arguments-overrun", lfield(7, tag(4, LEN) + varint(9) + b"{}"), Reason.INVALID_FRAME_PAYLOAD),
    ("arguments-not-utf8", lfield(7, lfield(4, b"\xc3")), Reason.INVALID_UTF8),
    ("signature-surrogate", lfield(9, lfield(3, b"\xed\xa0\x80")), Reason.INVALID_UTF8),
]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [(COMMON + payload, reason) for _, payload, reason in LP_REFUSALS],
    ids=[name for name, _, _ in LP_REFUSALS],
)
def test_lp_refuses_a_malformed_chat_frame_precisely(payload: bytes, reason: Reason) -> None:
    with pytest.raises(ProtocolFailure) as info:
        lp.parse_chat_frame(payload)
    assert info.value.reason is reason


@pytest.mark.parametrize("frame", CHAT_FRAMES, ids=ids)
def test_lp_outside_a_chat_reply_a_chat_field_is_unknown(frame: Frame) -> None:
    """A grounded or text reply's Frame is replywire/1's (fields 1-6)."""
    with pytest.raises(ProtocolFailure) as info:
        lp.parse_frame(EXPECTED_LP[frame.kind])
    assert info.value.reason is Reason.UNKNOWN_FRAME_FIELD


def test_lp_a_ten_byte_count_is_settled_by_the_scanner() -> None:
    top = 2**64 - 1
    written = lfield(10, tag(6, VARINT) + varint(top))
    assert lp.parse_chat_frame(COMMON + written).part.total_tokens == top  # type: ignore[union-attr]
    overflow = lfield(7, tag(1, VARINT) + b"\xff" * 9 + b"\x03")
    with pytest.raises(ProtocolFailure) as info:
        lp.parse_chat_frame(COMMON + overflow)
    assert info.value.reason is Reason.INVALID_FRAME_PAYLOAD


def _line(kind: str, **fields: Any) -> bytes:
    return json.dumps({"sequence": 1, "kind": kind, "binding_sha256": "b", **fields}).encode()


NDJSON_FIELDS = {kind: dict.fromkeys(fields, 0) for kind, fields in PART_FIELDS.items()}


@pytest.mark.parametrize("kind", sorted(PART_FIELDS))
def test_ndjson_refuses_a_chat_frame_without_exactly_its_keys(kind: str) -> None:
    fields = dict(NDJSON_FIELDS[kind])
    assert ndjson.parse_frame(_line(kind, **fields), digest=True).kind.value == kind
    missing = dict(fields)
    missing.pop(PART_FIELDS[kind][0])
    for bad in (
        _line(kind, **missing),
        _line(kind, **fields, extra=1),
        _line(kind, **fields, text="x") if kind != "thought" else _line(kind, **fields, reason="x"),
    ):
        with pytest.raises(ProtocolFailure) as info:
            ndjson.parse_frame(bad, digest=True)
        assert info.value.reason is Reason.INVALID_FRAME_SCHEMA


@pytest.mark.parametrize("kind", sorted(PART_FIELDS))
def test_ndjson_lab_knows_only_the_labs_four_kinds(kind: str) -> None:
    with pytest.raises(ProtocolFailure) as info:
        codec_for(WireFormat.NDJSON_LAB).parse_chat_frame(_line(kind, **NDJSON_FIELDS[kind]))
    assert info.value.reason is Reason.INVALID_FRAME_SCHEMA


# --- the one parse agrees with the scanner on chat payloads ------------------------------


def reference_parse(payload: bytes) -> Frame | Reason:
    """The scanner first, then protobuf, for a chat reply's frame."""
    try:
        lp._scan(payload, 0, len(payload), lp._CHAT_FRAME, top=True)
        message = pb.Frame.FromString(payload)
    except ProtocolFailure as failure:
        return failure.reason
    which = message.WhichOneof("kind")
    if which is None:
        return Reason.MISSING_FRAME_KIND
    if which not in PART_FIELDS:
        try:
            return lp.parse_chat_frame(payload)
        except ProtocolFailure as failure:
            return failure.reason
    sub = getattr(message, which)
    values = {name: getattr(sub, name) for name in PART_FIELDS[which]}
    part = PART_CLASSES[which](**values)
    return Frame(
        sequence=message.sequence,
        kind=FrameKind(which),
        binding_sha256=message.binding_sha256,
        part=part,
    )


def fast_parse(payload: bytes) -> Frame | Reason:
    try:
        return lp.parse_chat_frame(payload)
    except ProtocolFailure as failure:
        return failure.reason


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(list(EXPECTED_LP.values())),
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), min_size=1, max_size=3),
    st.binary(max_size=12),
)
def test_one_parse_agrees_with_the_scanner_on_chat_mutations(
    payload: bytes, edits: list[tuple[int, int]], tail: bytes
) -> None:
    mutated = bytearray(payload)
    for position, value in edits:
        mutated[position % len(mutated)] = value
    for candidate in (bytes(mutated), payload + tail, bytes(mutated[: len(mutated) // 2])):
        assert fast_parse(candidate) == reference_parse(candidate)
