"""The bytes the crafted vectors are made of: replies, frames, and wire bytes written by hand.

The codecs (``shared.wire``) write only well-formed frames; a conformance vector must also
carry what no producer should send: a protobuf field given twice, a varint of eleven
bytes, a JSON line with a duplicate key, a byte that is not UTF-8. Those are written here,
byte by byte, from the protobuf wire format and the NDJSON frame objects.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from replywire.shared.digest import digest
from replywire.shared.frames import DoneDigest, Frame, FrameKind, content_sha256, frames_from_deltas
from replywire.shared.recording import BoundCase
from replywire.shared.wire import WireFormat, codec_for
from replywire.shared.wire.lp import frame_with_header

LP, NDJSON, NDJSON_LAB = "lp", "ndjson", "ndjson-lab"
WIRES: Final = (LP, NDJSON, NDJSON_LAB)
NDJSON_WIRES: Final = (NDJSON, NDJSON_LAB)

# --- replies ---------------------------------------------------------------------------------


def source_ids(case: BoundCase) -> list[str]:
    return [row["source_id"] for row in case.binding["selected_context"]]


def reply(
    status: str = "answered", answer: object = "An answer.", ids: object = None, **extra: Any
) -> str:
    """A reply's JSON text (``ids`` None: no ``source_ids`` key at all unless given)."""
    obj: dict[str, Any] = {"status": status, "answer": answer}
    if ids is not None:
        obj["source_ids"] = ids
    obj.update(extra)
    return json.dumps(obj, ensure_ascii=False)


def rebound(case: BoundCase, binding: Mapping[str, Any]) -> BoundCase:
    """``case`` under another binding (its frames carry that binding's digest)."""
    return BoundCase(
        case_id=case.case_id,
        binding=binding,
        binding_sha256=digest(binding),
        request_sha256=case.request_sha256,
        content=case.content,
    )


def answered(case: BoundCase, answer: str = "An answer.") -> str:
    """A valid ``answered`` reply citing the case's first source."""
    return reply("answered", answer, source_ids(case)[:1])


def deltas(content: str, size: int = 13) -> list[str]:
    return [content[offset : offset + size] for offset in range(0, len(content), size)] or []


# --- frames ------------------------------------------------------------------------------------


def content_frames(
    case: BoundCase, content: str, size: int = 13, terminal: FrameKind = FrameKind.DONE
) -> list[Frame]:
    """The content in deltas of ``size`` characters, then a done with their digest (or a
    cancel / error terminal with ``controlled_local_<kind>``)."""
    reason = None if terminal is FrameKind.DONE else f"controlled_local_{terminal.value}"
    return frames_from_deltas(case.binding_sha256, deltas(content, size), terminal, reason)


def delta(case: BoundCase, sequence: object, text: object, binding: object = None) -> Frame:
    return Frame(
        sequence=sequence,
        kind=FrameKind.CONTENT_DELTA,
        binding_sha256=case.binding_sha256 if binding is None else binding,
        text=text,
    )


def done(
    case: BoundCase, sequence: int, texts: Sequence[str], *, frames: int | None = None
) -> Frame:
    claim = DoneDigest(
        content_sha256=content_sha256("".join(texts)),
        content_frames=len(texts) if frames is None else frames,
    )
    return Frame(
        sequence=sequence,
        kind=FrameKind.DONE,
        binding_sha256=case.binding_sha256,
        done_digest=claim,
    )


def stop(case: BoundCase, sequence: int, kind: FrameKind, reason: object) -> Frame:
    return Frame(sequence=sequence, kind=kind, binding_sha256=case.binding_sha256, reason=reason)


def encode(wire: str, frames: Sequence[Frame]) -> list[bytes]:
    codec = codec_for(WireFormat(wire))
    return [codec.encode_frame(frame) for frame in frames]


# --- the protobuf wire format by hand (the length-prefixed wire's payloads) --------------------


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


def padded_varint(value: int, length: int) -> bytes:
    """``value`` as a varint of exactly ``length`` bytes (not minimal: zero groups added)."""
    groups = [(value >> (7 * index)) & 0x7F for index in range(length)]
    return bytes([group | 0x80 for group in groups[:-1]] + [groups[-1]])


def tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def field_varint(number: int, value: int) -> bytes:
    return tag(number, 0) + varint(value)


def field_bytes(number: int, data: bytes) -> bytes:
    return tag(number, 2) + varint(len(data)) + data


def pb_frame(
    sequence: int | None,
    binding: bytes | str | None,
    kind: int | None = None,
    body: bytes = b"",
) -> bytes:
    """A Frame payload: the fields given, in order (kind: 3 content_delta, 4 done, 5 error,
    6 cancel, its message's bytes ``body``)."""
    out = b""
    if sequence is not None:
        out += field_varint(1, sequence)
    if binding is not None:
        out += field_bytes(2, binding.encode() if isinstance(binding, str) else binding)
    if kind is not None:
        out += field_bytes(kind, body)
    return out


def pb_text(text: bytes | str) -> bytes:
    """A ContentDelta's (or a Stop's) body: field 1, the text."""
    return field_bytes(1, text.encode() if isinstance(text, str) else text)


def pb_done(sha256: str, frames: int) -> bytes:
    return field_bytes(1, sha256.encode()) + field_varint(2, frames)


def lp(payload: bytes, flag: int = 0, length: int | None = None) -> bytes:
    """A length-prefixed frame: flag, the declared length (the payload's unless given)."""
    if flag == 0 and length is None:
        return frame_with_header(payload)
    declared = len(payload) if length is None else length
    return bytes([flag]) + declared.to_bytes(4, "big") + payload


# --- NDJSON lines by hand -------------------------------------------------------------------


def line(obj: Mapping[str, Any] | str | bytes) -> bytes:
    """One NDJSON line: an object written compactly (non-ASCII raw), or text / bytes as is."""
    if isinstance(obj, bytes):
        return obj + b"\n"
    if isinstance(obj, str):
        return obj.encode("utf-8") + b"\n"
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def delta_object(case: BoundCase, sequence: object, text: object) -> dict[str, Any]:
    return {
        "sequence": sequence,
        "kind": "content_delta",
        "binding_sha256": case.binding_sha256,
        "text": text,
    }


def done_object(
    wire: str, case: BoundCase, sequence: object, texts: Sequence[str]
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "sequence": sequence,
        "kind": "done",
        "binding_sha256": case.binding_sha256,
    }
    if wire == NDJSON:
        obj["content_sha256"] = content_sha256("".join(texts))
        obj["content_frames"] = len(texts)
    return obj


def split_at(data: bytes, *offsets: int) -> list[bytes]:
    """``data`` cut at each offset (increasing); empty pieces are kept out."""
    pieces, start = [], 0
    for offset in (*offsets, len(data)):
        if offset > start:
            pieces.append(data[start:offset])
        start = max(start, offset)
    return pieces


def sized(data: bytes, size: int) -> list[bytes]:
    return [data[offset : offset + size] for offset in range(0, len(data), size)]


def smallest(passes: Callable[[int], bool], low: int, high: int) -> int:
    """The smallest value in [low, high] that passes (``passes`` is monotone: false, then
    true); ``high`` must pass."""
    while low < high:
        middle = (low + high) // 2
        if passes(middle):
            high = middle
        else:
            low = middle + 1
    return low
