"""The length-prefixed wire: header, decoder, schema-aware payload scanner, corruption.

Payloads in the refusal tests are written by hand in the protobuf wire format
(tag = field << 3 | wire type), so they do not depend on the encoder.

One file past 500 lines: one wire's header, decoder and scanner, sharing the hand-written
payloads.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replywire.shared.errors import ProtocolFailure
from replywire.shared.frames import DoneDigest, Frame, FrameKind, checked_done_digest
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.reasons import Reason
from replywire.shared.wire import NEED_DATA, WireFormat, codec_for, lp
from replywire.shared.wire.lp import HEADER_BYTES, LengthPrefixedCodec, LengthPrefixedDecoder

BINDING = "f1a54255dd15ecc6a6a6dc316530f88f204a6e4c48ec5ab0def12f8bddbb2c70"
DIGEST = "1d619656549162518093b042fecb1ea4cf9be9daa93b769e8369339dcaf06288"

VARINT, LEN = 0, 2


# --- hand-written protobuf wire format --------------------------------------------


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


def tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def vfield(field: int, value: int) -> bytes:
    return tag(field, VARINT) + varint(value)


def lfield(field: int, body: bytes) -> bytes:
    return tag(field, LEN) + varint(len(body)) + body


def header(length: int, flag: int = 0) -> bytes:
    return bytes([flag]) + length.to_bytes(4, "big")


def drain(decoder: LengthPrefixedDecoder) -> list[bytes]:
    payloads: list[bytes] = []
    while (event := decoder.next_event()) is not NEED_DATA:
        assert isinstance(event, bytes)
        payloads.append(event)
    return payloads


# --- the four frame kinds and their exact payloads ---------------------------------

CONTENT = Frame(
    sequence=1, kind=FrameKind.CONTENT_DELTA, binding_sha256=BINDING, text="héllo ☃ 𝄞 end"
)
DONE = Frame(
    sequence=300,
    kind=FrameKind.DONE,
    binding_sha256=BINDING,
    done_digest=DoneDigest(content_sha256=DIGEST, content_frames=299),
)
ERROR = Frame(
    sequence=2, kind=FrameKind.ERROR, binding_sha256=BINDING, reason="controlled_local_error"
)
CANCEL = Frame(
    sequence=3, kind=FrameKind.CANCEL, binding_sha256=BINDING, reason="controlled_local_cancel"
)

COMMON_1 = vfield(1, 1) + lfield(2, BINDING.encode())
EXPECTED_PAYLOADS = {
    FrameKind.CONTENT_DELTA: COMMON_1 + lfield(3, lfield(1, "héllo ☃ 𝄞 end".encode())),
    FrameKind.DONE: (
        b"\x08\xac\x02"  # sequence 300 as a two-byte varint
        + lfield(2, BINDING.encode())
        + lfield(4, lfield(1, DIGEST.encode()) + vfield(2, 299))
    ),
    FrameKind.ERROR: (
        vfield(1, 2) + lfield(2, BINDING.encode()) + lfield(5, lfield(1, b"controlled_local_error"))
    ),
    FrameKind.CANCEL: (
        vfield(1, 3)
        + lfield(2, BINDING.encode())
        + lfield(6, lfield(1, b"controlled_local_cancel"))
    ),
}
FRAMES = [CONTENT, DONE, ERROR, CANCEL]
STREAM_PAYLOADS = [EXPECTED_PAYLOADS[frame.kind] for frame in FRAMES]
STREAM = b"".join(header(len(payload)) + payload for payload in STREAM_PAYLOADS)


# --- encoding and round trip ---------------------------------------------------------


@pytest.mark.parametrize("frame", FRAMES, ids=lambda frame: frame.kind.value)
def test_encode_is_exact_header_then_payload(frame: Frame) -> None:
    encoded = lp.encode_frame(frame)
    payload = EXPECTED_PAYLOADS[frame.kind]
    assert encoded == b"\x00" + len(payload).to_bytes(4, "big") + payload
    assert encoded[:HEADER_BYTES] == b"\x00" + len(payload).to_bytes(4, "big")
    assert lp.frame_with_header(payload) == encoded


@pytest.mark.parametrize("frame", FRAMES, ids=lambda frame: frame.kind.value)
def test_round_trip_each_kind(frame: Frame) -> None:
    encoded = lp.encode_frame(frame)
    decoder = LengthPrefixedDecoder(8192)
    decoder.receive_data(encoded)
    assert drain(decoder) == [encoded[HEADER_BYTES:]]
    assert lp.parse_frame(encoded[HEADER_BYTES:]) == frame
    decoder.end_of_input()


def test_round_trip_through_the_codec_object() -> None:
    codec = codec_for(WireFormat.LENGTH_PREFIXED)
    assert isinstance(codec, LengthPrefixedCodec)
    assert codec.wire is WireFormat.LENGTH_PREFIXED
    for frame in FRAMES:
        assert codec.parse_frame(codec.encode_frame(frame)[HEADER_BYTES:]) == frame
    assert lp.encode_frames(FRAMES) == STREAM


def test_done_without_digest_encodes_an_empty_done_message() -> None:
    frame = Frame(sequence=1, kind=FrameKind.DONE, binding_sha256="ab")
    encoded = lp.encode_frame(frame)
    assert encoded == b"\x00\x00\x00\x00\x08" + b"\x08\x01\x12\x02ab\x22\x00"
    # proto3 cannot tell it from an empty digest: both are refused as a frame's shape.
    with pytest.raises(ProtocolFailure) as info:
        lp.parse_frame(encoded[HEADER_BYTES:])
    assert info.value.reason is Reason.INVALID_FRAME_SCHEMA


def test_empty_content_and_empty_reason_keep_their_kind() -> None:
    empty_text = Frame(sequence=0, kind=FrameKind.CONTENT_DELTA, binding_sha256="", text="")
    assert lp.encode_frame(empty_text) == b"\x00\x00\x00\x00\x02\x1a\x00"
    assert lp.parse_frame(b"\x1a\x00") == empty_text
    empty_reason = Frame(sequence=0, kind=FrameKind.CANCEL, binding_sha256="", reason="")
    assert lp.encode_frame(empty_reason) == b"\x00\x00\x00\x00\x02\x32\x00"
    assert lp.parse_frame(b"\x32\x00") == empty_reason


# --- the decoder fed whole, byte by byte, with trailing garbage ------------------------


def test_decoder_whole() -> None:
    decoder = LengthPrefixedDecoder(8192)
    decoder.receive_data(STREAM)
    assert drain(decoder) == STREAM_PAYLOADS
    assert decoder.buffered == 0
    decoder.end_of_input()
    assert [lp.parse_frame(payload) for payload in STREAM_PAYLOADS] == FRAMES


def test_decoder_byte_by_byte_emits_each_frame_at_its_last_byte() -> None:
    decoder = LengthPrefixedDecoder(8192)
    emitted: list[tuple[int, bytes]] = []
    for index in range(len(STREAM)):
        decoder.receive_data(STREAM[index : index + 1])
        emitted.extend((index, payload) for payload in drain(decoder))
    ends: list[int] = []
    offset = 0
    for payload in STREAM_PAYLOADS:
        offset += HEADER_BYTES + len(payload)
        ends.append(offset - 1)
    assert emitted == list(zip(ends, STREAM_PAYLOADS, strict=True))
    assert decoder.buffered == 0
    decoder.end_of_input()


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "bytewise"])
@pytest.mark.parametrize("garbage", [b"\x00", b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x05ab"])
def test_trailing_garbage_with_zero_flag_is_a_truncated_frame(
    garbage: bytes, bytewise: bool
) -> None:
    decoder = LengthPrefixedDecoder(8192)
    data = STREAM + garbage
    payloads: list[bytes] = []
    chunks = [data[i : i + 1] for i in range(len(data))] if bytewise else [data]
    for chunk in chunks:
        decoder.receive_data(chunk)
        payloads.extend(drain(decoder))
    assert payloads == STREAM_PAYLOADS
    with pytest.raises(ProtocolFailure) as info:
        decoder.end_of_input()
    assert info.value.reason is Reason.TRUNCATED_FRAME
    assert info.value.code == "truncated_frame"


@pytest.mark.parametrize("first", [0x01, 0x07, 0x7B, 0xFF])
def test_trailing_garbage_with_non_zero_first_byte_fails_once_five_bytes_are_in(
    first: int,
) -> None:
    decoder = LengthPrefixedDecoder(8192)
    decoder.receive_data(STREAM)
    assert drain(decoder) == STREAM_PAYLOADS
    garbage = bytes([first]) + b"garbage"
    for count in range(1, HEADER_BYTES):
        decoder.receive_data(garbage[count - 1 : count])
        assert decoder.next_event() is NEED_DATA
        assert decoder.buffered == count
    decoder.receive_data(garbage[HEADER_BYTES - 1 : HEADER_BYTES])
    with pytest.raises(ProtocolFailure) as info:
        decoder.next_event()
    assert info.value.reason is Reason.INVALID_FRAME_HEADER
    assert info.value.code == "invalid_frame_header"


# --- header checks ----------------------------------------------------------------------


@pytest.mark.parametrize("flag", [1, 2, 0x80, 0xFF])
def test_non_zero_flag_is_an_invalid_header(flag: int) -> None:
    decoder = LengthPrefixedDecoder(8192)
    decoder.receive_data(header(3, flag) + b"\x1a\x01\x00")
    with pytest.raises(ProtocolFailure) as info:
        decoder.next_event()
    assert info.value.reason is Reason.INVALID_FRAME_HEADER


def test_flag_is_checked_before_the_declared_length() -> None:
    decoder = LengthPrefixedDecoder(16)
    decoder.receive_data(header(2**32 - 1, flag=1))
    with pytest.raises(ProtocolFailure) as info:
        decoder.next_event()
    assert info.value.reason is Reason.INVALID_FRAME_HEADER


@pytest.mark.parametrize("limit", [1, 16, 8192])
def test_declared_length_equal_to_the_limit_is_accepted(limit: int) -> None:
    payload = bytes(range(256)) * (limit // 256) + bytes(range(limit % 256))
    assert len(payload) == limit
    decoder = LengthPrefixedDecoder(limit)
    decoder.receive_data(header(limit))
    assert decoder.next_event() is NEED_DATA
    decoder.receive_data(payload[:-1])
    assert decoder.next_event() is NEED_DATA
    decoder.receive_data(payload[-1:])
    assert decoder.next_event() == payload
    assert decoder.next_event() is NEED_DATA
    decoder.end_of_input()


@pytest.mark.parametrize(("limit", "declared"), [(1, 2), (16, 17), (8192, 8193), (8192, 2**32 - 1)])
def test_declared_length_over_the_limit_fails_on_the_header_alone(
    limit: int, declared: int
) -> None:
    decoder = LengthPrefixedDecoder(limit)
    data = header(declared)
    for count in range(1, HEADER_BYTES):
        decoder.receive_data(data[count - 1 : count])
        assert decoder.next_event() is NEED_DATA
    decoder.receive_data(data[HEADER_BYTES - 1 :])
    with pytest.raises(ProtocolFailure) as info:
        decoder.next_event()
    assert info.value.reason is Reason.FRAME_BYTE_LIMIT
    assert info.value.code == "frame_byte_limit"
    assert decoder.buffered == HEADER_BYTES


def test_zero_length_payload_is_a_frame_without_kind() -> None:
    decoder = LengthPrefixedDecoder(8192)
    decoder.receive_data(b"\x00\x00\x00\x00\x00")
    assert decoder.next_event() == b""
    assert decoder.next_event() is NEED_DATA
    decoder.end_of_input()
    with pytest.raises(ProtocolFailure) as info:
        lp.parse_frame(b"")
    assert info.value.reason is Reason.MISSING_FRAME_KIND


# --- parse_frame: a precise code for every refusal -------------------------------------

REFUSALS = [
    # malformed payloads
    ("wire-type-7-tag", b"\x07", Reason.INVALID_FRAME_PAYLOAD),
    ("wire-type-6-tag", tag(1, 6), Reason.INVALID_FRAME_PAYLOAD),
    ("field-0-tag", tag(0, VARINT) + b"\x01", Reason.INVALID_FRAME_PAYLOAD),
    ("truncated-varint-value", b"\x08", Reason.INVALID_FRAME_PAYLOAD),
    ("truncated-varint-continuation", b"\x08\x80", Reason.INVALID_FRAME_PAYLOAD),
    ("truncated-tag", b"\x88", Reason.INVALID_FRAME_PAYLOAD),
    ("varint-over-10-bytes", b"\x08" + b"\xff" * 10 + b"\x01", Reason.INVALID_FRAME_PAYLOAD),
    ("varint-over-64-bits", b"\x08" + b"\xff" * 9 + b"\x02", Reason.INVALID_FRAME_PAYLOAD),
    ("string-overruns", tag(2, LEN) + b"\x05ab", Reason.INVALID_FRAME_PAYLOAD),
    ("message-overruns", tag(3, LEN) + b"\x03" + b"\x0a\x00", Reason.INVALID_FRAME_PAYLOAD),
    ("nested-overruns", lfield(3, tag(1, LEN) + b"\x05"), Reason.INVALID_FRAME_PAYLOAD),
    ("length-truncated", tag(2, LEN), Reason.INVALID_FRAME_PAYLOAD),
    ("sequence-as-string", lfield(1, b""), Reason.INVALID_FRAME_PAYLOAD),
    ("binding-as-varint", vfield(2, 1), Reason.INVALID_FRAME_PAYLOAD),
    ("kind-as-varint", vfield(3, 1), Reason.INVALID_FRAME_PAYLOAD),
    ("sequence-as-fixed64", tag(1, 1) + bytes(8), Reason.INVALID_FRAME_PAYLOAD),
    ("done-frames-as-string", lfield(4, lfield(2, b"")), Reason.INVALID_FRAME_PAYLOAD),
    ("nested-field-0", lfield(3, b"\x00"), Reason.INVALID_FRAME_PAYLOAD),
    # fields the schema does not have
    ("field-9-varint", vfield(9, 1), Reason.UNKNOWN_FRAME_FIELD),
    (
        "field-7-string",
        COMMON_1 + lfield(7, b"x") + lfield(3, lfield(1, b"a")),
        Reason.UNKNOWN_FRAME_FIELD,
    ),
    (
        "field-9-after-a-valid-frame",
        EXPECTED_PAYLOADS[FrameKind.ERROR] + vfield(9, 0),
        Reason.UNKNOWN_FRAME_FIELD,
    ),
    (
        "content-delta-field-2",
        lfield(3, lfield(1, b"a") + vfield(2, 1)),
        Reason.UNKNOWN_FRAME_FIELD,
    ),
    ("stop-field-2", lfield(5, lfield(2, b"x")), Reason.UNKNOWN_FRAME_FIELD),
    ("done-field-3", lfield(4, vfield(3, 1)), Reason.UNKNOWN_FRAME_FIELD),
    # strings that are not UTF-8
    ("binding-not-utf8", lfield(2, b"\xff") + lfield(3, lfield(1, b"a")), Reason.INVALID_UTF8),
    ("text-not-utf8", vfield(1, 1) + lfield(3, lfield(1, b"\xc3")), Reason.INVALID_UTF8),
    ("text-surrogate", lfield(3, lfield(1, b"\xed\xa0\x80")), Reason.INVALID_UTF8),
    ("reason-not-utf8", lfield(6, lfield(1, b"\x80")), Reason.INVALID_UTF8),
    ("done-digest-not-utf8", lfield(4, lfield(1, b"\xfe")), Reason.INVALID_UTF8),
    # a field twice, two kinds
    ("sequence-twice", vfield(1, 1) + vfield(1, 1) + lfield(3, b""), Reason.INVALID_FRAME_SCHEMA),
    ("binding-twice", lfield(2, b"a") + lfield(2, b"a"), Reason.INVALID_FRAME_SCHEMA),
    ("content-delta-twice", lfield(3, b"") + lfield(3, b""), Reason.INVALID_FRAME_SCHEMA),
    (
        "content-delta-and-done",
        lfield(3, lfield(1, b"a")) + lfield(4, b""),
        Reason.INVALID_FRAME_SCHEMA,
    ),
    ("error-and-cancel", lfield(5, b"") + lfield(6, b""), Reason.INVALID_FRAME_SCHEMA),
    ("text-twice", lfield(3, lfield(1, b"a") + lfield(1, b"b")), Reason.INVALID_FRAME_SCHEMA),
    ("done-frames-twice", lfield(4, vfield(2, 1) + vfield(2, 2)), Reason.INVALID_FRAME_SCHEMA),
    # no kind
    ("empty", b"", Reason.MISSING_FRAME_KIND),
    ("sequence-only", vfield(1, 1), Reason.MISSING_FRAME_KIND),
    ("sequence-and-binding", COMMON_1, Reason.MISSING_FRAME_KIND),
]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [(payload, reason) for _, payload, reason in REFUSALS],
    ids=[name for name, _, _ in REFUSALS],
)
def test_parse_frame_refusal_codes(payload: bytes, reason: Reason) -> None:
    with pytest.raises(ProtocolFailure) as info:
        lp.parse_frame(payload)
    assert info.value.reason is reason
    assert info.value.code == reason.value


def test_parse_frame_accepts_a_hand_written_payload() -> None:
    payload = vfield(1, 2**64 - 1) + lfield(2, b"ab") + lfield(3, lfield(1, "é".encode()))
    assert lp.parse_frame(payload) == Frame(
        sequence=2**64 - 1, kind=FrameKind.CONTENT_DELTA, binding_sha256="ab", text="é"
    )


def test_parse_frame_accepts_fields_in_any_order() -> None:
    payload = lfield(5, lfield(1, b"boom")) + lfield(2, b"ab") + vfield(1, 7)
    assert lp.parse_frame(payload) == Frame(
        sequence=7, kind=FrameKind.ERROR, binding_sha256="ab", reason="boom"
    )


# --- end_of_input -------------------------------------------------------------------------


def test_end_of_input_on_a_frame_boundary_is_clean() -> None:
    decoder = LengthPrefixedDecoder(8192)
    decoder.end_of_input()
    decoder.receive_data(lp.encode_frame(CONTENT))
    assert drain(decoder) == [EXPECTED_PAYLOADS[FrameKind.CONTENT_DELTA]]
    decoder.end_of_input()


@pytest.mark.parametrize("count", range(1, HEADER_BYTES))
def test_end_of_input_mid_header_is_a_truncated_frame(count: int) -> None:
    decoder = LengthPrefixedDecoder(8192)
    decoder.receive_data(lp.encode_frame(CONTENT) + lp.encode_frame(ERROR)[:count])
    assert drain(decoder) == [EXPECTED_PAYLOADS[FrameKind.CONTENT_DELTA]]
    assert decoder.buffered == count
    with pytest.raises(ProtocolFailure) as info:
        decoder.end_of_input()
    assert info.value.reason is Reason.TRUNCATED_FRAME


@pytest.mark.parametrize("body", [0, 1, 10])
def test_end_of_input_mid_body_is_a_truncated_frame(body: int) -> None:
    encoded = lp.encode_frame(ERROR)
    decoder = LengthPrefixedDecoder(8192)
    decoder.receive_data(encoded[: HEADER_BYTES + body])
    assert decoder.next_event() is NEED_DATA
    with pytest.raises(ProtocolFailure) as info:
        decoder.end_of_input()
    assert info.value.reason is Reason.TRUNCATED_FRAME


def test_end_of_input_one_byte_short_is_a_truncated_frame() -> None:
    encoded = lp.encode_frame(DONE)
    decoder = LengthPrefixedDecoder(8192)
    decoder.receive_data(encoded[:-1])
    assert decoder.next_event() is NEED_DATA
    with pytest.raises(ProtocolFailure) as info:
        decoder.end_of_input()
    assert info.value.reason is Reason.TRUNCATED_FRAME


# --- corrupt_frame -------------------------------------------------------------------------


@pytest.mark.parametrize("frame", FRAMES, ids=lambda frame: frame.kind.value)
def test_corrupt_frame_keeps_the_length_and_breaks_the_payload(frame: Frame) -> None:
    encoded = lp.encode_frame(frame)
    corrupted = LengthPrefixedCodec().corrupt_frame(encoded)
    assert corrupted == lp.corrupt_frame(encoded)
    assert len(corrupted) == len(encoded)
    assert corrupted[:HEADER_BYTES] == encoded[:HEADER_BYTES]
    assert corrupted[HEADER_BYTES] == 0x07
    assert corrupted[HEADER_BYTES + 1 :] == encoded[HEADER_BYTES + 1 :]
    decoder = LengthPrefixedDecoder(8192)
    decoder.receive_data(corrupted)
    [payload] = drain(decoder)
    decoder.end_of_input()
    with pytest.raises(ProtocolFailure) as info:
        lp.parse_frame(payload)
    assert info.value.reason is Reason.INVALID_FRAME_PAYLOAD
    assert info.value.code == "invalid_frame_payload"


def test_hand_written_wire_format_helpers() -> None:
    assert vfield(9, 1) == b"\x48\x01"
    assert vfield(1, 300) == b"\x08\xac\x02"
    assert lfield(3, lfield(1, b"a")) == b"\x1a\x03\x0a\x01a"
    assert tag(2, LEN) == b"\x12"
    assert header(258) == b"\x00\x00\x00\x01\x02"


# --- one parse: the fast path agrees with the scanner on every payload ------------------


def reference_parse(payload: bytes) -> Frame | Reason:
    """The scanner first, then protobuf: how every payload was parsed before the fast path."""
    try:
        lp._scan(payload, 0, len(payload), lp._FRAME, top=True)
        message = pb.Frame.FromString(payload)
    except ProtocolFailure as failure:
        return failure.reason
    if message.WhichOneof("kind") is None:
        return Reason.MISSING_FRAME_KIND
    try:
        return lp_frame(message)
    except ProtocolFailure as failure:  # done's claim not of its form
        return failure.reason


def lp_frame(message: pb.Frame) -> Frame:
    """The frame a message the scanner accepted stands for, built without parse_frame's path."""
    which = FrameKind(str(message.WhichOneof("kind")))
    sequence, binding = message.sequence, message.binding_sha256
    if which is FrameKind.CONTENT_DELTA:
        text = message.content_delta.text
        return Frame(sequence=sequence, kind=which, binding_sha256=binding, text=text)
    if which is FrameKind.DONE:
        claim = checked_done_digest(message.done.content_sha256, message.done.content_frames)
        return Frame(sequence=sequence, kind=which, binding_sha256=binding, done_digest=claim)
    stop = message.error if which is FrameKind.ERROR else message.cancel
    return Frame(sequence=sequence, kind=which, binding_sha256=binding, reason=stop.reason)


def fast_parse(payload: bytes) -> Frame | Reason:
    try:
        return lp.parse_frame(payload)
    except ProtocolFailure as failure:
        return failure.reason


# Payloads the size check alone would let through: a ten-byte varint whose last byte
# carries bits past 64 (protobuf drops them; the value keeps bit 63, so the same size).
OVERFLOWS = [
    vfield(1, 1)[:1] + b"\xff" * 9 + b"\x03" + lfield(3, b""),
    lfield(4, tag(2, VARINT) + b"\xff" * 9 + b"\x7f"),
    lfield(4, tag(2, VARINT) + b"\x80" * 9 + b"\x03"),
]
# Valid payloads in a non-canonical encoding: the scanner accepts them, so must the fast path.
NON_CANONICAL = [
    vfield(1, 0) + lfield(3, lfield(1, b"a")),  # a default written out
    b"\x08\x81\x00" + lfield(3, lfield(1, b"a")),  # an overlong varint
    lfield(3, lfield(1, b"")) + vfield(1, 5),  # an empty string written out, fields reordered
    vfield(1, 2**64 - 1) + lfield(4, lfield(1, b"") + vfield(2, 2**63)),
]


@pytest.mark.parametrize(
    "payload",
    [payload for _, payload, _ in REFUSALS] + STREAM_PAYLOADS + OVERFLOWS + NON_CANONICAL,
)
def test_one_parse_agrees_with_the_scanner(payload: bytes) -> None:
    assert fast_parse(payload) == reference_parse(payload)


def test_overflowing_varints_are_refused_precisely() -> None:
    for payload in OVERFLOWS:
        assert fast_parse(payload) is Reason.INVALID_FRAME_PAYLOAD


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(STREAM_PAYLOADS + NON_CANONICAL),
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), min_size=1, max_size=3),
    st.binary(max_size=12),
)
def test_one_parse_agrees_with_the_scanner_on_mutations(
    payload: bytes, edits: list[tuple[int, int]], tail: bytes
) -> None:
    mutated = bytearray(payload)
    for position, value in edits:
        mutated[position % len(mutated)] = value
    for candidate in (bytes(mutated), payload + tail, bytes(mutated[: len(mutated) // 2])):
        assert fast_parse(candidate) == reference_parse(candidate)
