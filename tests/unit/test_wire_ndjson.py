"""The NDJSON wires (encoding, sans-IO decoder, frame shape) and chunk plans.

The module's functions without ``digest=True`` are the lab's wire (``ndjson-lab``);
the default ``ndjson`` wire differs only in its done, which carries the content digest.

One file past 500 lines: one format's encoder, decoder and chunk plans, each tested against
the others.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.lab_baseline import strict_json as lab_strict_json
from replywire.shared.consumer_limits import MAX_FRAME_BYTES
from replywire.shared.digest import strict_json
from replywire.shared.errors import ProtocolFailure, RequestRefused
from replywire.shared.frames import DoneDigest, Frame, FrameKind, derive_frames
from replywire.shared.reasons import Reason
from replywire.shared.recording import Recording
from replywire.shared.wire import NEED_DATA, WireFormat, codec_for, ndjson
from replywire.shared.wire.chunking import (
    LAB_PATTERN,
    MAX_CHUNK_BYTES,
    MAX_PATTERN_LENGTH,
    ChunkMode,
    ChunkPlan,
    cut,
    cut_sizes,
)
from replywire.shared.wire.ndjson import NdjsonCodec, NdjsonDecoder

BINDING = "f1a54255dd15ecc6a6a6dc316530f88f204a6e4c48ec5ab0def12f8bddbb2c70"
DIGEST = "1d619656549162518093b042fecb1ea4cf9be9daa93b769e8369339dcaf06288"
TEXT = 'héllo "☃"\n𝄞\u2028\t\\ end'

CONTENT = Frame(sequence=1, kind=FrameKind.CONTENT_DELTA, binding_sha256=BINDING, text=TEXT)
DONE = Frame(
    sequence=4,
    kind=FrameKind.DONE,
    binding_sha256=BINDING,
    done_digest=DoneDigest(content_sha256=DIGEST, content_frames=3),
)
ERROR = Frame(
    sequence=2, kind=FrameKind.ERROR, binding_sha256=BINDING, reason="controlled_local_error"
)
CANCEL = Frame(
    sequence=3, kind=FrameKind.CANCEL, binding_sha256=BINDING, reason="controlled_local_cancel"
)
FRAMES = [CONTENT, ERROR, CANCEL, DONE]

#: The lab's frame dicts, keys in the lab's order.
LAB_OBJECTS: dict[FrameKind, dict[str, Any]] = {
    FrameKind.CONTENT_DELTA: {
        "sequence": 1,
        "kind": "content_delta",
        "binding_sha256": BINDING,
        "text": TEXT,
    },
    FrameKind.ERROR: {
        "sequence": 2,
        "kind": "error",
        "binding_sha256": BINDING,
        "reason": "controlled_local_error",
    },
    FrameKind.CANCEL: {
        "sequence": 3,
        "kind": "cancel",
        "binding_sha256": BINDING,
        "reason": "controlled_local_cancel",
    },
    FrameKind.DONE: {"sequence": 4, "kind": "done", "binding_sha256": BINDING},
}


def lab_encode(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


LINES = [lab_encode(LAB_OBJECTS[frame.kind])[:-1] for frame in FRAMES]
_D_LAB = '"sequence":4,"kind":"done","binding_sha256":"' + BINDING + '"'
STREAM = b"".join(line + b"\n" for line in LINES)
#: What NDJSON gives back: the lab's done carries no digest.
DECODED = [CONTENT, ERROR, CANCEL, Frame(sequence=4, kind=FrameKind.DONE, binding_sha256=BINDING)]


def drain(decoder: NdjsonDecoder) -> list[bytes]:
    lines: list[bytes] = []
    while (event := decoder.next_event()) is not NEED_DATA:
        assert isinstance(event, bytes)
        lines.append(event)
    return lines


def feed(decoder: NdjsonDecoder, chunks: list[bytes]) -> list[bytes]:
    lines: list[bytes] = []
    for chunk in chunks:
        decoder.receive_data(chunk)
        lines.extend(drain(decoder))
    return lines


def bytewise(data: bytes) -> list[bytes]:
    return [data[index : index + 1] for index in range(len(data))]


# --- encoding -------------------------------------------------------------------------------


@pytest.mark.parametrize("frame", FRAMES, ids=lambda frame: frame.kind.value)
def test_encode_frame_is_byte_identical_to_the_lab(frame: Frame) -> None:
    encoded = ndjson.encode_frame(frame)
    assert encoded == lab_encode(LAB_OBJECTS[frame.kind])
    assert ndjson.frame_object(frame) == LAB_OBJECTS[frame.kind]
    assert encoded.endswith(b"\n")
    assert encoded.count(b"\n") == 1


def test_encode_frame_exact_bytes_and_key_order() -> None:
    frame = Frame(sequence=7, kind=FrameKind.CONTENT_DELTA, binding_sha256="ab", text="é☃")
    assert ndjson.encode_frame(frame) == (
        b'{"sequence":7,"kind":"content_delta","binding_sha256":"ab","text":"\xc3\xa9\xe2\x98\x83"}\n'
    )
    stop = Frame(sequence=8, kind=FrameKind.CANCEL, binding_sha256="ab", reason="r")
    assert ndjson.encode_frame(stop) == (
        b'{"sequence":8,"kind":"cancel","binding_sha256":"ab","reason":"r"}\n'
    )
    assert list(json.loads(ndjson.encode_frame(CONTENT))) == [
        "sequence",
        "kind",
        "binding_sha256",
        "text",
    ]
    assert list(json.loads(ndjson.encode_frame(ERROR))) == [
        "sequence",
        "kind",
        "binding_sha256",
        "reason",
    ]


def test_done_has_no_digest_keys() -> None:
    encoded = ndjson.encode_frame(DONE)
    assert encoded == (
        b'{"sequence":4,"kind":"done","binding_sha256":"' + BINDING.encode() + b'"}\n'
    )
    assert list(json.loads(encoded)) == ["sequence", "kind", "binding_sha256"]


def test_non_ascii_text_stays_unescaped() -> None:
    encoded = ndjson.encode_frame(CONTENT)
    assert "héllo".encode() in encoded
    assert "☃".encode() in encoded
    assert "𝄞".encode() in encoded
    assert "\u2028".encode() in encoded
    assert b"\\u" not in encoded
    # JSON's own escapes: quote, newline, tab, backslash.
    assert b'\\"\xe2\x98\x83\\"\\n' in encoded
    assert b"\\t\\\\ end" in encoded


def test_encode_frames_and_lab_codec_object() -> None:
    assert ndjson.encode_frames(FRAMES) == STREAM
    codec = codec_for(WireFormat.NDJSON_LAB)
    assert isinstance(codec, NdjsonCodec)
    assert codec.wire is WireFormat.NDJSON_LAB
    assert codec.wire.integrity.value == "none"
    assert [codec.encode_frame(frame) for frame in FRAMES] == [line + b"\n" for line in LINES]
    assert [codec.parse_frame(line) for line in LINES] == DECODED


# --- the default ndjson wire: done carries the content digest --------------------------------

DIGEST_DONE = (
    b'{"sequence":4,"kind":"done","binding_sha256":"' + BINDING.encode() + b'",'
    b'"content_sha256":"' + DIGEST.encode() + b'","content_frames":3}\n'
)


def test_default_codec_differs_from_the_lab_only_in_done() -> None:
    codec = codec_for(WireFormat.NDJSON)
    assert isinstance(codec, NdjsonCodec)
    assert codec.wire is WireFormat.NDJSON
    assert codec.wire.integrity.value == "sha256"
    assert [codec.encode_frame(frame) for frame in FRAMES] == [
        *(line + b"\n" for line in LINES[:3]),
        DIGEST_DONE,
    ]
    assert ndjson.encode_frame(DONE, digest=True) == DIGEST_DONE
    assert list(json.loads(DIGEST_DONE)) == [
        "sequence",
        "kind",
        "binding_sha256",
        "content_sha256",
        "content_frames",
    ]
    # Everything the wire gave comes back, the digest included.
    assert [codec.parse_frame(codec.encode_frame(frame)[:-1]) for frame in FRAMES] == FRAMES


def test_ndjson_codec_is_only_for_ndjson_wires() -> None:
    with pytest.raises(ValueError, match="not an NDJSON wire"):
        NdjsonCodec(WireFormat.LENGTH_PREFIXED)


_GOOD_DIGEST = ',"content_sha256":"' + DIGEST + '","content_frames":3'
DIGEST_REFUSALS = [
    ("lab-done", "{" + _D_LAB + "}"),
    ("only-sha256", "{" + _D_LAB + ',"content_sha256":"' + DIGEST + '"}'),
    ("only-frames", "{" + _D_LAB + ',"content_frames":3}'),
    ("extra-key", "{" + _D_LAB + _GOOD_DIGEST + ',"extra":1}'),
    ("reason", "{" + _D_LAB + _GOOD_DIGEST + ',"reason":"r"}'),
    ("sha256-null", "{" + _D_LAB + ',"content_sha256":null,"content_frames":3}'),
    ("sha256-number", "{" + _D_LAB + ',"content_sha256":1,"content_frames":3}'),
    ("frames-string", "{" + _D_LAB + ',"content_sha256":"' + DIGEST + '","content_frames":"3"}'),
    ("frames-bool", "{" + _D_LAB + ',"content_sha256":"' + DIGEST + '","content_frames":true}'),
    ("frames-float", "{" + _D_LAB + ',"content_sha256":"' + DIGEST + '","content_frames":3.0}'),
    ("frames-null", "{" + _D_LAB + ',"content_sha256":"' + DIGEST + '","content_frames":null}'),
]


@pytest.mark.parametrize(
    "payload", [payload for _, payload in DIGEST_REFUSALS], ids=[n for n, _ in DIGEST_REFUSALS]
)
def test_default_ndjson_done_requires_its_digest(payload: str) -> None:
    with pytest.raises(ProtocolFailure) as info:
        codec_for(WireFormat.NDJSON).parse_frame(payload.encode())
    assert info.value.reason is Reason.INVALID_FRAME_SCHEMA


def test_the_lab_wire_refuses_a_done_with_a_digest() -> None:
    # The lab's consumer accepts exactly its keys; ndjson-lab stays byte-identical to it.
    with pytest.raises(ProtocolFailure) as info:
        codec_for(WireFormat.NDJSON_LAB).parse_frame(DIGEST_DONE[:-1])
    assert info.value.reason is Reason.INVALID_FRAME_SCHEMA


# --- the decoder fed whole, byte by byte, with trailing garbage ------------------------------


def test_decoder_whole() -> None:
    decoder = NdjsonDecoder(MAX_FRAME_BYTES)
    assert feed(decoder, [STREAM]) == LINES
    assert decoder.buffered == 0
    decoder.end_of_input()
    assert [ndjson.parse_frame(line) for line in LINES] == DECODED


def test_decoder_byte_by_byte_emits_each_line_at_its_newline() -> None:
    decoder = NdjsonDecoder(MAX_FRAME_BYTES)
    emitted: list[tuple[int, bytes]] = []
    for index, chunk in enumerate(bytewise(STREAM)):
        decoder.receive_data(chunk)
        emitted.extend((index, line) for line in drain(decoder))
    newlines = [index for index, byte in enumerate(STREAM) if byte == 0x0A]
    assert emitted == list(zip(newlines, LINES, strict=True))
    decoder.end_of_input()


@pytest.mark.parametrize("split", [False, True], ids=["whole", "bytewise"])
def test_trailing_garbage_without_newline_is_a_truncated_frame(split: bool) -> None:
    data = STREAM + b"garbage"
    decoder = NdjsonDecoder(MAX_FRAME_BYTES)
    assert feed(decoder, bytewise(data) if split else [data]) == LINES
    assert decoder.buffered == len(b"garbage")
    with pytest.raises(ProtocolFailure) as info:
        decoder.end_of_input()
    assert info.value.reason is Reason.TRUNCATED_FRAME
    assert info.value.code == "truncated_frame"


@pytest.mark.parametrize("split", [False, True], ids=["whole", "bytewise"])
def test_trailing_garbage_line_is_returned_and_is_not_json(split: bool) -> None:
    data = STREAM + b"garbage\n"
    decoder = NdjsonDecoder(MAX_FRAME_BYTES)
    assert feed(decoder, bytewise(data) if split else [data]) == [*LINES, b"garbage"]
    decoder.end_of_input()
    with pytest.raises(ProtocolFailure) as info:
        ndjson.parse_frame(b"garbage")
    assert info.value.reason is Reason.INVALID_FRAME_JSON


def test_trailing_invalid_utf8_refuses_the_whole_chunk() -> None:
    decoder = NdjsonDecoder(MAX_FRAME_BYTES)
    with pytest.raises(ProtocolFailure) as info:
        decoder.receive_data(STREAM + b"\xff\n")
    assert info.value.reason is Reason.INVALID_UTF8
    assert decoder.next_event() is NEED_DATA
    assert decoder.buffered == 0


# --- UTF-8 ------------------------------------------------------------------------------------


def test_multibyte_characters_split_across_chunks_decode() -> None:
    line = ndjson.encode_frame(CONTENT)
    for cut_at in range(1, len(line)):
        decoder = NdjsonDecoder(MAX_FRAME_BYTES)
        decoder.receive_data(line[:cut_at])
        assert decoder.next_event() is NEED_DATA
        assert feed(decoder, [line[cut_at:]]) == [line[:-1]]
        decoder.end_of_input()


@pytest.mark.parametrize("char", ["é", "☃", "𝄞"])
def test_each_byte_of_a_character_in_its_own_chunk(char: str) -> None:
    frame = Frame(sequence=1, kind=FrameKind.CONTENT_DELTA, binding_sha256="ab", text=char)
    line = ndjson.encode_frame(frame)
    decoder = NdjsonDecoder(MAX_FRAME_BYTES)
    [decoded] = feed(decoder, bytewise(line))
    assert ndjson.parse_frame(decoded) == frame
    decoder.end_of_input()


@pytest.mark.parametrize(
    "bad",
    [
        b"\xff",
        b"\x80",
        b"\xc0\xaf",  # overlong
        b"\xed\xa0\x80",  # surrogate
        b"\xf4\x90\x80\x80",  # beyond U+10FFFF
        b"\xc3A",  # missing continuation byte
    ],
    ids=["ff", "lone-continuation", "overlong", "surrogate", "too-large", "bad-continuation"],
)
def test_invalid_utf8_is_raised_by_receive_data_before_any_line(bad: bytes) -> None:
    decoder = NdjsonDecoder(MAX_FRAME_BYTES)
    with pytest.raises(ProtocolFailure) as info:
        decoder.receive_data(LINES[0] + b"\n" + LINES[1] + b"\n" + bad + b"\n")
    assert info.value.reason is Reason.INVALID_UTF8
    assert info.value.code == "invalid_utf8"
    assert decoder.buffered == 0
    assert decoder.next_event() is NEED_DATA


def test_invalid_utf8_across_a_chunk_boundary() -> None:
    decoder = NdjsonDecoder(MAX_FRAME_BYTES)
    assert feed(decoder, [LINES[0] + b"\n\xe2\x98"]) == [LINES[0]]
    assert decoder.buffered == 2
    with pytest.raises(ProtocolFailure) as info:
        decoder.receive_data(b"A\n")
    assert info.value.reason is Reason.INVALID_UTF8
    assert decoder.buffered == 2
    assert decoder.next_event() is NEED_DATA


@pytest.mark.parametrize(
    "partial", [b"\xc3", b"\xe2", b"\xe2\x98", b"\xf0", b"\xf0\x9d", b"\xf0\x9d\x84"]
)
@pytest.mark.parametrize("before", [b"", b'{"seq'], ids=["line-start", "mid-line"])
def test_end_inside_a_character_is_truncated_utf8(partial: bytes, before: bytes) -> None:
    decoder = NdjsonDecoder(MAX_FRAME_BYTES)
    assert feed(decoder, [STREAM + before + partial]) == LINES
    with pytest.raises(ProtocolFailure) as info:
        decoder.end_of_input()
    assert info.value.reason is Reason.TRUNCATED_UTF8
    assert info.value.code == "truncated_utf8"


@pytest.mark.parametrize("partial", [b"{", b'{"sequence":1', '{"text":"é'.encode()])
def test_end_after_a_partial_line_is_truncated_frame(partial: bytes) -> None:
    decoder = NdjsonDecoder(MAX_FRAME_BYTES)
    assert feed(decoder, [STREAM, partial]) == LINES
    with pytest.raises(ProtocolFailure) as info:
        decoder.end_of_input()
    assert info.value.reason is Reason.TRUNCATED_FRAME


def test_end_on_a_line_boundary_is_clean() -> None:
    decoder = NdjsonDecoder(MAX_FRAME_BYTES)
    decoder.end_of_input()
    decoder = NdjsonDecoder(MAX_FRAME_BYTES)
    assert feed(decoder, [STREAM]) == LINES
    decoder.end_of_input()


# --- frame_byte_limit at and past the edge -----------------------------------------------------


@pytest.mark.parametrize("limit", [1, 4, 16, MAX_FRAME_BYTES])
@pytest.mark.parametrize("split", [False, True], ids=["whole", "bytewise"])
def test_complete_line_of_exactly_the_limit_passes(limit: int, split: bool) -> None:
    line = b"x" * limit
    decoder = NdjsonDecoder(limit)
    data = line + b"\n"
    assert feed(decoder, bytewise(data) if split else [data]) == [line]
    decoder.end_of_input()


@pytest.mark.parametrize("limit", [1, 4, 16, MAX_FRAME_BYTES])
def test_complete_line_over_the_limit_fails(limit: int) -> None:
    decoder = NdjsonDecoder(limit)
    decoder.receive_data(b"x" * (limit + 1) + b"\n")
    with pytest.raises(ProtocolFailure) as info:
        decoder.next_event()
    assert info.value.reason is Reason.FRAME_BYTE_LIMIT
    assert info.value.code == "frame_byte_limit"


def test_complete_multibyte_line_of_exactly_the_limit_passes() -> None:
    line = "aé☃𝄞".encode()
    assert len(line) == 10
    decoder = NdjsonDecoder(10)
    assert feed(decoder, bytewise(line + b"\n")) == [line]
    decoder = NdjsonDecoder(9)
    with pytest.raises(ProtocolFailure) as info:
        feed(decoder, [line + b"\n"])
    assert info.value.reason is Reason.FRAME_BYTE_LIMIT


@pytest.mark.parametrize("limit", [1, 4, 16])
def test_unterminated_line_fails_as_soon_as_it_exceeds_the_limit(limit: int) -> None:
    decoder = NdjsonDecoder(limit)
    for count in range(1, limit + 1):
        decoder.receive_data(b"x")
        assert decoder.next_event() is NEED_DATA
        assert decoder.buffered == count
    decoder.receive_data(b"x")
    with pytest.raises(ProtocolFailure) as info:
        decoder.next_event()
    assert info.value.reason is Reason.FRAME_BYTE_LIMIT


def test_unterminated_line_over_the_limit_fails_after_the_lines_before_it() -> None:
    decoder = NdjsonDecoder(4)
    decoder.receive_data(b"ok\nabcd\nxyzzy")
    assert decoder.next_event() == b"ok"
    assert decoder.next_event() == b"abcd"
    with pytest.raises(ProtocolFailure) as info:
        decoder.next_event()
    assert info.value.reason is Reason.FRAME_BYTE_LIMIT


@pytest.mark.parametrize("split", [False, True], ids=["one-chunk", "two-chunks"])
def test_pending_partial_character_is_not_counted(split: bool) -> None:
    decoder = NdjsonDecoder(4)
    chunks = [b"abcd", b"\xc3"] if split else [b"abcd\xc3"]
    assert feed(decoder, chunks) == []
    assert decoder.buffered == 5
    decoder.receive_data(b"\xa9")
    with pytest.raises(ProtocolFailure) as info:
        decoder.next_event()
    assert info.value.reason is Reason.FRAME_BYTE_LIMIT


def test_pending_partial_four_byte_character_is_not_counted() -> None:
    decoder = NdjsonDecoder(4)
    for chunk in (b"abcd", b"\xf0", b"\x9d", b"\x84"):
        decoder.receive_data(chunk)
        assert decoder.next_event() is NEED_DATA
    assert decoder.buffered == 7
    decoder.receive_data(b"\x9e")
    with pytest.raises(ProtocolFailure) as info:
        decoder.next_event()
    assert info.value.reason is Reason.FRAME_BYTE_LIMIT


def test_line_completed_by_a_split_character_at_the_limit_passes() -> None:
    decoder = NdjsonDecoder(5)
    assert feed(decoder, [b"abc\xc3", b"\xa9", b"\n"]) == ["abcé".encode()]
    decoder.end_of_input()


def test_lab_limit_completed_line() -> None:
    decoder = NdjsonDecoder(MAX_FRAME_BYTES)
    assert MAX_FRAME_BYTES == 8192
    decoder.receive_data(b"y" * 8192)
    assert decoder.next_event() is NEED_DATA
    decoder.receive_data(b"\n" + b"z" * 8193)
    assert decoder.next_event() == b"y" * 8192
    with pytest.raises(ProtocolFailure) as info:
        decoder.next_event()
    assert info.value.reason is Reason.FRAME_BYTE_LIMIT


# --- parse_frame ------------------------------------------------------------------------------

_C = '"sequence":1,"kind":"content_delta","binding_sha256":"ab"'
_D = '"sequence":1,"kind":"done","binding_sha256":"ab"'
_S = '"sequence":1,"kind":"error","binding_sha256":"ab"'

REFUSALS = [
    ("not-json", "x", Reason.INVALID_FRAME_JSON),
    ("empty-line", "", Reason.INVALID_FRAME_JSON),
    ("unclosed", "{" + _D, Reason.INVALID_FRAME_JSON),
    ("trailing-comma", "{" + _D + ",}", Reason.INVALID_FRAME_JSON),
    ("two-objects", "{" + _D + "}{" + _D + "}", Reason.INVALID_FRAME_JSON),
    ("single-quotes", "{'sequence':1}", Reason.INVALID_FRAME_JSON),
    ("duplicate-key", '{"sequence":1,' + _D + "}", Reason.INVALID_FRAME_JSON),
    ("duplicate-kind", "{" + _D + ',"kind":"done"}', Reason.INVALID_FRAME_JSON),
    ("duplicate-nested-key", "{" + _C + ',"text":{"a":1,"a":2}}', Reason.INVALID_FRAME_JSON),
    ("nan", '{"sequence":NaN,"kind":"done","binding_sha256":"ab"}', Reason.INVALID_FRAME_JSON),
    (
        "infinity",
        '{"sequence":Infinity,"kind":"done","binding_sha256":"ab"}',
        Reason.INVALID_FRAME_JSON,
    ),
    (
        "minus-infinity",
        '{"sequence":-Infinity,"kind":"done","binding_sha256":"ab"}',
        Reason.INVALID_FRAME_JSON,
    ),
    ("bare-nan", "NaN", Reason.INVALID_FRAME_JSON),
    ("too-deep", "[" * 100_000 + "]" * 100_000, Reason.INVALID_FRAME_JSON),
    ("array", "[]", Reason.INVALID_FRAME_SCHEMA),
    ("array-of-frame", "[{" + _D + "}]", Reason.INVALID_FRAME_SCHEMA),
    ("string", '"done"', Reason.INVALID_FRAME_SCHEMA),
    ("number", "1", Reason.INVALID_FRAME_SCHEMA),
    ("null", "null", Reason.INVALID_FRAME_SCHEMA),
    ("empty-object", "{}", Reason.INVALID_FRAME_SCHEMA),
    (
        "unknown-kind",
        '{"sequence":1,"kind":"delta","binding_sha256":"ab","text":"a"}',
        Reason.INVALID_FRAME_SCHEMA,
    ),
    (
        "kind-upper-case",
        '{"sequence":1,"kind":"DONE","binding_sha256":"ab"}',
        Reason.INVALID_FRAME_SCHEMA,
    ),
    (
        "kind-not-string",
        '{"sequence":1,"kind":["done"],"binding_sha256":"ab","reason":"r"}',
        Reason.INVALID_FRAME_SCHEMA,
    ),
    (
        "kind-missing",
        '{"sequence":1,"binding_sha256":"ab","reason":"r"}',
        Reason.INVALID_FRAME_SCHEMA,
    ),
    ("content-missing-text", "{" + _C + "}", Reason.INVALID_FRAME_SCHEMA),
    ("error-missing-reason", "{" + _S + "}", Reason.INVALID_FRAME_SCHEMA),
    ("missing-sequence", '{"kind":"done","binding_sha256":"ab"}', Reason.INVALID_FRAME_SCHEMA),
    ("missing-binding", '{"sequence":1,"kind":"done"}', Reason.INVALID_FRAME_SCHEMA),
    ("extra-key", "{" + _C + ',"text":"a","extra":1}', Reason.INVALID_FRAME_SCHEMA),
    ("content-with-reason", "{" + _C + ',"text":"a","reason":"r"}', Reason.INVALID_FRAME_SCHEMA),
    ("error-with-text", "{" + _S + ',"reason":"r","text":"a"}', Reason.INVALID_FRAME_SCHEMA),
    ("done-with-reason", "{" + _D + ',"reason":"r"}', Reason.INVALID_FRAME_SCHEMA),
    ("done-with-null-reason", "{" + _D + ',"reason":null}', Reason.INVALID_FRAME_SCHEMA),
    ("done-with-text", "{" + _D + ',"text":"a"}', Reason.INVALID_FRAME_SCHEMA),
    (
        "done-with-digest",
        "{" + _D + ',"content_sha256":"00","content_frames":1}',
        Reason.INVALID_FRAME_SCHEMA,
    ),
]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [(payload, reason) for _, payload, reason in REFUSALS],
    ids=[name for name, _, _ in REFUSALS],
)
def test_parse_frame_refusal_codes(payload: str, reason: Reason) -> None:
    with pytest.raises(ProtocolFailure) as info:
        ndjson.parse_frame(payload.encode("utf-8"))
    assert info.value.reason is reason
    assert info.value.code == reason.value


@pytest.mark.parametrize("frame", FRAMES, ids=lambda frame: frame.kind.value)
def test_parse_frame_each_kind(frame: Frame) -> None:
    expected = DECODED[FRAMES.index(frame)]
    assert ndjson.parse_frame(ndjson.encode_frame(frame)[:-1]) == expected


def test_parse_frame_keeps_field_types_as_given() -> None:
    payload = b'{"text":5,"binding_sha256":null,"kind":"content_delta","sequence":"1"}'
    assert ndjson.parse_frame(payload) == Frame(
        sequence="1", kind=FrameKind.CONTENT_DELTA, binding_sha256=None, text=5
    )
    payload = b'{"sequence":1.5,"kind":"cancel","binding_sha256":["x"],"reason":""}'
    assert ndjson.parse_frame(payload) == Frame(
        sequence=1.5, kind=FrameKind.CANCEL, binding_sha256=["x"], reason=""
    )


def test_corrupt_frame_keeps_the_length_and_is_not_json() -> None:
    for frame in FRAMES:
        encoded = ndjson.encode_frame(frame)
        corrupted = NdjsonCodec().corrupt_frame(encoded)
        assert corrupted == b"#" + encoded[1:]
        assert len(corrupted) == len(encoded)
        decoder = NdjsonDecoder(MAX_FRAME_BYTES)
        [line] = feed(decoder, [corrupted])
        with pytest.raises(ProtocolFailure) as info:
            ndjson.parse_frame(line)
        assert info.value.reason is Reason.INVALID_FRAME_JSON


# --- the search for b"\n" resumes where it stopped -----------------------------------------------


class CountingBuffer(bytearray):
    """A bytearray that counts how many bytes ``find`` was asked to scan."""

    scanned = 0

    def find(self, sub: Any, start: Any = None, end: Any = None) -> int:
        first = 0 if start is None else start
        stop = len(self) if end is None else end
        self.scanned += max(0, stop - first)
        return super().find(sub, first, stop)


def test_search_position_is_remembered_across_one_byte_chunks() -> None:
    text = "é" + "a" * 100
    frame = Frame(sequence=1, kind=FrameKind.CONTENT_DELTA, binding_sha256=BINDING, text=text)
    overhead = len(ndjson.encode_frame(frame)) - 1 - len(text.encode())
    text = "é" + "a" * (9000 - overhead - 2)
    frame = Frame(sequence=1, kind=FrameKind.CONTENT_DELTA, binding_sha256=BINDING, text=text)
    line = ndjson.encode_frame(frame)
    assert len(line) == 9001
    following = Frame(
        sequence=2, kind=FrameKind.CONTENT_DELTA, binding_sha256=BINDING, text="b" * 2000
    )
    tail = ndjson.encode_frame(following)[:999]
    data = line + tail
    assert len(data) == 10_000

    decoder = NdjsonDecoder(9000)
    counting = CountingBuffer()
    decoder._buffer._data = counting  # the ReceiveBuffer's bytes
    lines = feed(decoder, bytewise(data))
    assert lines == [line[:-1]]
    assert ndjson.parse_frame(lines[0]) == frame
    assert decoder.buffered == 999
    # Every byte was looked at exactly once: no rescanning of the growing line.
    assert counting.scanned == 10_000
    with pytest.raises(ProtocolFailure) as info:
        decoder.end_of_input()
    assert info.value.reason is Reason.TRUNCATED_FRAME

    whole = NdjsonDecoder(9000)
    assert feed(whole, [data]) == [line[:-1]]
    assert whole.buffered == 999


# --- chunk plans ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "mode", "sizes", "described"),
    [
        ("frame", ChunkMode.FRAME, (), "frame"),
        ("whole", ChunkMode.WHOLE, (), "whole"),
        (" whole\n", ChunkMode.WHOLE, (), "whole"),
        ("5", ChunkMode.SIZES, (5,), "5"),
        ("1,2,7,3,11", ChunkMode.SIZES, (1, 2, 7, 3, 11), "1,2,7,3,11"),
        (str(MAX_CHUNK_BYTES), ChunkMode.SIZES, (MAX_CHUNK_BYTES,), str(MAX_CHUNK_BYTES)),
        (",".join(["1"] * MAX_PATTERN_LENGTH), ChunkMode.SIZES, (1,) * 64, ",".join(["1"] * 64)),
    ],
)
def test_chunk_plan_parse(
    text: str, mode: ChunkMode, sizes: tuple[int, ...], described: str
) -> None:
    plan = ChunkPlan.parse(text)
    assert plan == ChunkPlan(mode, sizes)
    assert plan.mode is mode
    assert plan.sizes == sizes
    assert plan.describe() == described


@pytest.mark.parametrize(
    "text",
    [
        "0",
        "-1",
        "a",
        "",
        "1,,2",
        "1_0",
        "+3",
        "\u0663",
        " 1, 2",
        "1,0",
        "2,",
        "frames",
        "sizes",
        "1.5",
        str(MAX_CHUNK_BYTES + 1),
        ",".join(["1"] * (MAX_PATTERN_LENGTH + 1)),
    ],
)
def test_chunk_plan_parse_refuses(text: str) -> None:
    with pytest.raises(RequestRefused) as info:
        ChunkPlan.parse(text)
    assert info.value.reason is Reason.INVALID_REQUEST
    assert info.value.code == "invalid_request"


def test_chunk_plan_refuses_sizes_in_other_modes() -> None:
    with pytest.raises(RequestRefused) as info:
        ChunkPlan(ChunkMode.WHOLE, (1,))
    assert info.value.reason is Reason.INVALID_REQUEST
    with pytest.raises(RequestRefused) as info:
        ChunkPlan(ChunkMode.SIZES)
    assert info.value.reason is Reason.INVALID_REQUEST


PLANS = ["frame", "whole", "1", "5", "1,2,7,3,11", "3,1", "1000"]
ENCODED_SETS = [
    [],
    [b""],
    [b"a"],
    [line + b"\n" for line in LINES],
    [b"", b"abc", b"", b"defghij"],
]


@pytest.mark.parametrize("plan_text", PLANS)
@pytest.mark.parametrize("encoded", ENCODED_SETS, ids=["none", "empty", "one", "frames", "gaps"])
def test_cut_concatenation_equals_the_input(plan_text: str, encoded: list[bytes]) -> None:
    chunks = cut(encoded, ChunkPlan.parse(plan_text))
    assert b"".join(chunks) == b"".join(encoded)
    assert all(chunks)


def test_cut_exact_chunks() -> None:
    encoded = [b"abc", b"", b"defghij", b"kl"]
    assert cut(encoded, ChunkPlan.parse("frame")) == [b"abc", b"defghij", b"kl"]
    assert cut(encoded, ChunkPlan.parse("whole")) == [b"abcdefghijkl"]
    assert cut(encoded, ChunkPlan.parse("5")) == [b"abcde", b"fghij", b"kl"]
    assert cut(encoded, ChunkPlan.parse("1,2,7,3,11")) == [b"a", b"bc", b"defghij", b"kl"]
    assert cut([], ChunkPlan.parse("whole")) == []
    wire = bytes(range(30))
    assert [len(chunk) for chunk in cut_sizes(wire, LAB_PATTERN)] == [1, 2, 7, 3, 11, 1, 2, 3]


def test_lab_pattern_gives_299_chunks_for_replace_file(recording: Recording) -> None:
    case = recording.case("replace-file")
    frames = derive_frames(case.binding_sha256, case.content)
    wire = ndjson.encode_frames(frames)
    assert len(frames) == 10
    assert len(wire) == 1427
    encoded = [ndjson.encode_frame(frame) for frame in frames]
    chunks = cut(encoded, ChunkPlan.parse("1,2,7,3,11"))
    assert len(chunks) == 299
    assert b"".join(chunks) == wire
    assert [len(chunk) for chunk in chunks] == [LAB_PATTERN[i % 5] for i in range(298)] + [1]
    assert chunks == list(cut_sizes(wire, LAB_PATTERN))

    decoder = NdjsonDecoder(MAX_FRAME_BYTES)
    lines = feed(decoder, chunks)
    decoder.end_of_input()
    assert [ndjson.parse_frame(line) for line in lines] == [
        *frames[:-1],
        Frame(sequence=10, kind=FrameKind.DONE, binding_sha256=case.binding_sha256),
    ]


# --- strict_json: one decoder built once, the same verdicts as json.loads with the hooks ----


def verdict(parse: Any, text: str | bytes) -> tuple[str, Any]:
    try:
        return "ok", parse(text)
    except (ValueError, RecursionError) as error:
        return type(error).__name__, str(error)


@pytest.mark.parametrize(
    "text",
    [
        '{"a":1}',
        ' {"a":1} \n',
        '{"a":1,"a":2}',
        '{"x":{"a":1,"a":2}}',
        "NaN",
        '{"a":-Infinity}',
        "[1,2]x",
        "",
        "   ",
        "\ufeff{}",
        b"\xef\xbb\xbf{}",
        '"s"',
        "12",
        b'{"c":[1,{"d":null}]}',
        "[" * 100_000,
        '{"a":"\\ud800"}',
    ],
)
def test_strict_json_agrees_with_the_labs(text: str | bytes) -> None:
    assert verdict(strict_json, text) == verdict(lab_strict_json, text)
