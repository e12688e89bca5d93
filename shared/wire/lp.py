"""The length-prefixed wire: ``flag (1 byte, 0) | length (4 bytes, big-endian) | Frame``.

This is gRPC's own message framing, applied again inside our byte stream so
frame boundaries survive any re-chunking. The decoder checks the header the
moment its five bytes are in: a flag other than 0 is ``invalid_frame_header``
and a declared length over the frame limit is ``frame_byte_limit`` before a
single body byte is buffered.

Payloads are parsed once, by the generated protobuf code, and accepted when
the parse is exactly the payload: no unknown field (they are discarded and the
size re-measured), no field given twice and no two kinds (protobuf keeps the
last, so the canonical size shrinks), no varint past 64 bits (only a value of
2**63 or more can hide one). Anything else, and any payload protobuf refuses,
is walked by a small scanner of the protobuf wire format that knows the
``Frame`` schema, so every refusal has a precise code: a malformed payload
(``invalid_frame_payload``), a field the schema does not have
(``unknown_frame_field``), a string field that is not UTF-8
(``invalid_utf8``), a field given twice or two kinds at once
(``invalid_frame_schema``); after a clean scan (a payload in a valid but not
canonical encoding), no kind set is ``missing_frame_kind``. The scanner is the
reference: tests/unit/test_wire_lp.py checks that both paths agree.

The frame's fields depend on the reply's kind (docs/protocol.md#lp-fields-by-kind):
``parse_frame`` reads a grounded or text reply's frame, replywire/1's (fields 1-6: a field
7-11 is ``unknown_frame_field``), ``parse_chat_frame`` a chat reply's, whose five chat
frames (fields 7-11) carry a ``shared.chat_parts`` part.
"""

from __future__ import annotations

import struct
from enum import Enum
from typing import Final

from google.protobuf.message import DecodeError

from replywire.shared.chat_parts import (
    INTEGER_FIELDS,
    PART_CLASSES,
    PART_FIELDS,
    ChatPart,
    part_values,
)
from replywire.shared.errors import ProtocolFailure
from replywire.shared.frames import (
    CHAT_KINDS,
    DoneDigest,
    Frame,
    FrameKind,
    checked_done_digest,
    decoded_frame,
)
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.reasons import Reason
from replywire.shared.wire.base import NEED_DATA, NeedData, WireFormat

HEADER: Final = struct.Struct(">BI")
HEADER_BYTES: Final = HEADER.size
_UNPACK_HEADER: Final = HEADER.unpack_from


# --- encoding ---------------------------------------------------------------


def to_message(frame: Frame) -> pb.Frame:
    if not isinstance(frame.sequence, int) or not isinstance(frame.binding_sha256, str):
        raise TypeError("a produced frame has an int sequence and a str binding hash")
    message = pb.Frame(sequence=frame.sequence, binding_sha256=frame.binding_sha256)
    if frame.kind is FrameKind.CONTENT_DELTA:
        if not isinstance(frame.text, str):
            raise TypeError("content_delta text must be str")
        message.content_delta.text = frame.text
    elif frame.kind is FrameKind.DONE:
        digest = frame.done_digest or DoneDigest(content_sha256="", content_frames=0)
        message.done.content_sha256 = digest.content_sha256
        message.done.content_frames = digest.content_frames
    elif frame.kind in CHAT_KINDS:
        _set_part(message, frame.kind.value, frame.part)
    else:
        if not isinstance(frame.reason, str):
            raise TypeError("terminal reason must be str")
        stop = message.error if frame.kind is FrameKind.ERROR else message.cancel
        stop.reason = frame.reason
    return message


def _set_part(message: pb.Frame, kind: str, part: ChatPart | None) -> None:
    """A chat frame's message (fields 7-11), its fields numbered in ``PART_FIELDS`` order;
    set even when every field is its default (a usage of zeros is still a usage)."""
    if not isinstance(part, PART_CLASSES[kind]):
        raise TypeError(f"a {kind} frame carries a {PART_CLASSES[kind].__name__}")
    submessage = getattr(message, kind)
    submessage.SetInParent()
    for name, value in part_values(kind, part).items():
        if type(value) is not (int if name in INTEGER_FIELDS else str):
            raise TypeError(f"a produced {kind}'s {name} is not of its type")
        setattr(submessage, name, value)


def frame_with_header(payload: bytes) -> bytes:
    return HEADER.pack(0, len(payload)) + payload


def encode_frame(frame: Frame) -> bytes:
    return frame_with_header(to_message(frame).SerializeToString(deterministic=True))


def encode_frames(frames: list[Frame]) -> bytes:
    return b"".join(encode_frame(frame) for frame in frames)


# --- the schema-aware scanner --------------------------------------------------


class _Field(Enum):
    VARINT = 0
    STRING = 1
    MESSAGE = 2


_WIRE_VARINT = 0
_WIRE_LEN = 2
_Schema = dict[int, tuple[_Field, "_Schema | None"]]

_STOP: _Schema = {1: (_Field.STRING, None)}
_CONTENT_DELTA: _Schema = {1: (_Field.STRING, None)}
_DONE: _Schema = {1: (_Field.STRING, None), 2: (_Field.VARINT, None)}
_TOOL_CALL: _Schema = {
    1: (_Field.VARINT, None),
    2: (_Field.STRING, None),
    3: (_Field.STRING, None),
    4: (_Field.STRING, None),
}
_THOUGHT: _Schema = {1: (_Field.STRING, None)}
_SIGNATURE: _Schema = {
    1: (_Field.STRING, None),
    2: (_Field.VARINT, None),
    3: (_Field.STRING, None),
}
_USAGE: _Schema = {number: (_Field.VARINT, None) for number in range(1, 7)}
_FINISH: _Schema = {1: (_Field.STRING, None)}
#: The frame of a grounded or text reply: replywire/1's, whose fields 7-11 are fields it
#: does not have (``unknown_frame_field``), exactly as before the chat kind.
_FRAME: _Schema = {
    1: (_Field.VARINT, None),
    2: (_Field.STRING, None),
    3: (_Field.MESSAGE, _CONTENT_DELTA),
    4: (_Field.MESSAGE, _DONE),
    5: (_Field.MESSAGE, _STOP),
    6: (_Field.MESSAGE, _STOP),
}
#: The frame of a chat reply: the five chat frames too (fields 7-11).
_CHAT_FRAME: _Schema = {
    **_FRAME,
    7: (_Field.MESSAGE, _TOOL_CALL),
    8: (_Field.MESSAGE, _THOUGHT),
    9: (_Field.MESSAGE, _SIGNATURE),
    10: (_Field.MESSAGE, _USAGE),
    11: (_Field.MESSAGE, _FINISH),
}
_KIND_FIELDS = frozenset(range(3, 12))


def _varint(data: bytes, offset: int, end: int) -> tuple[int, int]:
    value = 0
    for index in range(10):
        if offset >= end:
            raise ProtocolFailure(Reason.INVALID_FRAME_PAYLOAD, "truncated varint")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << (7 * index)
        if not byte & 0x80:
            if value >= 2**64:
                raise ProtocolFailure(Reason.INVALID_FRAME_PAYLOAD, "varint over 64 bits")
            return value, offset
    raise ProtocolFailure(Reason.INVALID_FRAME_PAYLOAD, "varint longer than 10 bytes")


def _admit(tag: int, schema: _Schema, seen: set[int], top: bool) -> tuple[int, int]:
    """The tag's field number and wire type, once the schema allows the field here
    (known, not seen before, at most one kind at the top); adds it to ``seen``."""
    number, wire_type = tag >> 3, tag & 7
    if number == 0 or wire_type in (6, 7):
        raise ProtocolFailure(Reason.INVALID_FRAME_PAYLOAD, f"invalid tag {tag}")
    if number not in schema:
        raise ProtocolFailure(Reason.UNKNOWN_FRAME_FIELD, f"field {number}")
    if number in seen:
        raise ProtocolFailure(Reason.INVALID_FRAME_SCHEMA, f"field {number} repeated")
    if top and number in _KIND_FIELDS and seen & _KIND_FIELDS:
        raise ProtocolFailure(Reason.INVALID_FRAME_SCHEMA, "more than one kind")
    seen.add(number)
    return number, wire_type


def _scan(data: bytes, offset: int, end: int, schema: _Schema, top: bool) -> None:
    seen: set[int] = set()
    while offset < end:
        tag, offset = _varint(data, offset, end)
        number, wire_type = _admit(tag, schema, seen, top)
        field, nested = schema[number]
        if field is _Field.VARINT:
            if wire_type != _WIRE_VARINT:
                raise ProtocolFailure(Reason.INVALID_FRAME_PAYLOAD, f"field {number} wire type")
            _, offset = _varint(data, offset, end)
            continue
        if wire_type != _WIRE_LEN:
            raise ProtocolFailure(Reason.INVALID_FRAME_PAYLOAD, f"field {number} wire type")
        length, offset = _varint(data, offset, end)
        if length > end - offset:
            raise ProtocolFailure(Reason.INVALID_FRAME_PAYLOAD, f"field {number} overruns")
        if field is _Field.STRING:
            try:
                data[offset : offset + length].decode("utf-8")
            except UnicodeDecodeError as error:
                raise ProtocolFailure(Reason.INVALID_UTF8, f"field {number}") from error
        else:
            assert nested is not None
            _scan(data, offset, offset + length, nested, top=False)
        offset += length


_KIND_OF: Final = {kind.value: kind for kind in FrameKind}
#: A parsed varint value at or above this came from ten bytes, whose last may carry bits
#: past 64 that protobuf drops; the scanner decides.
_TEN_BYTE_VARINT: Final = 1 << 63
_FROM_STRING: Final = pb.Frame.FromString


def _parse_precisely(payload: bytes, schema: _Schema) -> pb.Frame:
    """The slow path: the scanner names the reason, or the payload is valid after all."""
    _scan(payload, 0, len(payload), schema, top=True)
    try:
        return pb.Frame.FromString(payload)
    except DecodeError as error:  # the scanner should have caught it; stay precise anyway
        raise ProtocolFailure(Reason.INVALID_FRAME_PAYLOAD, str(error)[:200]) from error


def parse_frame(payload: bytes) -> Frame:
    """A frame of a grounded or text reply: replywire/1's (no field 7-11)."""
    return _parse(payload, _FRAME)


def parse_chat_frame(payload: bytes) -> Frame:
    """A frame of a chat reply: replywire/1's and the five chat frames."""
    return _parse(payload, _CHAT_FRAME)


def _parse(payload: bytes, schema: _Schema) -> Frame:
    """One protobuf parse; the scanner only when the parse is not exactly the payload (or
    holds a field the schema does not have: a chat frame outside a chat reply)."""
    try:
        message = _FROM_STRING(payload)
    except DecodeError:
        message = _parse_precisely(payload, schema)
    else:
        message.DiscardUnknownFields()
        if message.ByteSize() != len(payload) or message.sequence >= _TEN_BYTE_VARINT:
            message = _parse_precisely(payload, schema)
    which = message.WhichOneof("kind")
    if which is None:
        raise ProtocolFailure(Reason.MISSING_FRAME_KIND, f"sequence {message.sequence}")
    kind = _KIND_OF[which]
    if kind is FrameKind.CONTENT_DELTA:
        text = message.content_delta.text
        return decoded_frame(message.sequence, kind, message.binding_sha256, text=text)
    if kind is FrameKind.DONE:
        done = message.done
        if done.content_frames >= _TEN_BYTE_VARINT:
            done = _parse_precisely(payload, schema).done
        # proto3 cannot tell an absent digest from an empty one: both are refused.
        digest = checked_done_digest(done.content_sha256, done.content_frames)
        return decoded_frame(message.sequence, kind, message.binding_sha256, done_digest=digest)
    if kind in CHAT_KINDS:
        if schema is not _CHAT_FRAME:  # the scanner names the field this frame does not have
            message = _parse_precisely(payload, schema)
        part = _part(which, getattr(message, which), payload)
        return decoded_frame(message.sequence, kind, message.binding_sha256, part=part)
    stop = message.error if kind is FrameKind.ERROR else message.cancel
    return decoded_frame(message.sequence, kind, message.binding_sha256, reason=stop.reason)


def _part(kind: str, submessage: object, payload: bytes) -> ChatPart:
    """A chat frame's part from its message: an absent field is its default (0 or ``""``),
    judged by the core. A count of 2**63 or more may hide bits past 64: the scanner
    decides, as for the top-level sequence."""
    fields = PART_FIELDS[kind]
    values = {name: getattr(submessage, name) for name in fields}
    if any(name in INTEGER_FIELDS and values[name] >= _TEN_BYTE_VARINT for name in fields):
        precise = getattr(_parse_precisely(payload, _CHAT_FRAME), kind)
        values = {name: getattr(precise, name) for name in fields}
    return PART_CLASSES[kind](**values)


# --- decoding -------------------------------------------------------------------


class LengthPrefixedDecoder:
    """Frames out of a ``bytearray``: the header is checked (flag, then declared length)
    each time it is complete, so a bad one fails before a body byte is awaited; a frame
    leaves the buffer (its header with it) only once all of it is in."""

    def __init__(self, max_frame_bytes: int) -> None:
        self._max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        # Where the frame whose header was checked ends in the buffer (0: no header yet).
        self._end = 0

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def receive_data(self, data: bytes) -> None:
        self._buffer += data

    def next_event(self) -> bytes | NeedData:
        buffer = self._buffer
        end = self._end
        if not end:
            if len(buffer) < HEADER_BYTES:
                return NEED_DATA
            flag, length = _UNPACK_HEADER(buffer)
            if flag != 0:
                raise ProtocolFailure(Reason.INVALID_FRAME_HEADER, f"flag byte {flag}")
            if length > self._max_frame_bytes:
                raise ProtocolFailure(Reason.FRAME_BYTE_LIMIT, f"declared length {length}")
            end = self._end = HEADER_BYTES + length
        if len(buffer) < end:
            return NEED_DATA
        payload = bytes(buffer[HEADER_BYTES:end])
        # From the front of a bytearray: CPython moves its start, it copies nothing.
        del buffer[:end]
        self._end = 0
        return payload

    def end_of_input(self) -> None:
        if pending := self.pending:
            raise ProtocolFailure(Reason.TRUNCATED_FRAME, f"{pending} bytes of an unfinished frame")


def corrupt_frame(encoded: bytes) -> bytes:
    """Same header and length; the first payload byte becomes a tag of wire type 7."""
    if len(encoded) <= HEADER_BYTES:
        return encoded[:HEADER_BYTES]
    return encoded[:HEADER_BYTES] + b"\x07" + encoded[HEADER_BYTES + 1 :]


class LengthPrefixedCodec:
    wire = WireFormat.LENGTH_PREFIXED

    def encode_frame(self, frame: Frame) -> bytes:
        return encode_frame(frame)

    def decoder(self, max_frame_bytes: int) -> LengthPrefixedDecoder:
        return LengthPrefixedDecoder(max_frame_bytes)

    #: The module's functions themselves: no method call in front of them, per frame.
    parse_frame = staticmethod(parse_frame)
    parse_chat_frame = staticmethod(parse_chat_frame)

    def corrupt_frame(self, encoded: bytes) -> bytes:
        return corrupt_frame(encoded)
