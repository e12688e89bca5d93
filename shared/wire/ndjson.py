"""The NDJSON wires: one compact JSON object per ``\\n``-terminated line.

Two wires share this module. ``ndjson-lab`` is the lab's wire byte for byte:
its encoding is the lab's ``encode_frames``, and its ``done`` is
``{"sequence":N,"kind":"done","binding_sha256":"…"}`` with nothing about the
content. ``ndjson`` (a default wire) is the same with the end-of-stream
integrity claim the length-prefixed wire carries: ``done`` is
``{"sequence":N,"kind":"done","binding_sha256":"…","content_sha256":"…","content_frames":K}``
and both keys are required. The module's functions speak the lab's wire unless
called with ``digest=True``; ``codec_for(WireFormat.NDJSON)`` does so.

Decoding follows the lab's ``StreamConsumer.feed`` check for check:

* every fragment is first run through an incremental UTF-8 decoder, so an
  invalid byte fails the whole fragment (``invalid_utf8``) before any line in
  it is interpreted, exactly as the lab decodes before splitting;
* an ASCII fragment while no character is pending skips the decoder: it can
  neither be invalid nor complete a character (``bytes.isascii`` is one C pass);
* complete lines are taken from the front of a ``ReceiveBuffer``
  (``shared.wire.buffer``), whose search for ``\\n`` resumes where it stopped,
  so no byte is scanned twice however the stream is cut (the lab's
  ``str.split`` per line is quadratic in the number of lines per fragment);
* a line longer than the frame limit fails when it is complete, and the
  unfinished remainder fails as soon as it exceeds the limit (the lab's check
  counts decoded characters' bytes, i.e. excludes a pending partial character).
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable
from functools import partial
from typing import Any, Final

from replywire.shared.chat_parts import PART_CLASSES, PART_FIELDS, part_values
from replywire.shared.digest import strict_json
from replywire.shared.errors import ProtocolFailure
from replywire.shared.frames import CHAT_KINDS, Frame, FrameKind, checked_done_digest, decoded_frame
from replywire.shared.reasons import Reason
from replywire.shared.wire.base import NEED_DATA, Integrity, NeedData, WireFormat
from replywire.shared.wire.buffer import ReceiveBuffer

_CONTENT_KEYS = frozenset({"sequence", "kind", "binding_sha256", "text"})
_LAB_DONE_KEYS = frozenset({"sequence", "kind", "binding_sha256"})
_DIGEST_KEYS = frozenset({"content_sha256", "content_frames"})
_DONE_KEYS = _LAB_DONE_KEYS | _DIGEST_KEYS
_STOP_KEYS = frozenset({"sequence", "kind", "binding_sha256", "reason"})
#: The keys each kind must have, exactly: the lab's wire, and ours with done's digest.
_LAB_EXPECTED: Final[dict[str, frozenset[str]]] = {
    "content_delta": _CONTENT_KEYS,
    "done": _LAB_DONE_KEYS,
    "error": _STOP_KEYS,
    "cancel": _STOP_KEYS,
}
#: ``ndjson`` has the nine kinds: the lab's four (done with its claim) and the five chat
#: frames (docs/protocol.md#wire-ndjson), each with its own fields after the lab's three.
_DIGEST_EXPECTED: Final = {
    **_LAB_EXPECTED,
    "done": _DONE_KEYS,
    **{kind: _LAB_DONE_KEYS | set(fields) for kind, fields in PART_FIELDS.items()},
}
_KIND_OF: Final = {kind.value: kind for kind in FrameKind}


def frame_object(frame: Frame, *, digest: bool = False) -> dict[str, Any]:
    """The lab's frame dict, keys in the lab's order; with ``digest``, done's claim after them.

    A done frame without a ``done_digest`` is written without the digest keys
    (the consumer of the ``ndjson`` wire refuses it).
    """
    obj: dict[str, Any] = {
        "sequence": frame.sequence,
        "kind": frame.kind.value,
        "binding_sha256": frame.binding_sha256,
    }
    if frame.kind is FrameKind.CONTENT_DELTA:
        obj["text"] = frame.text
    elif frame.kind in CHAT_KINDS:
        # Only ndjson carries them: the lab's wire has its four kinds.
        if not digest or frame.part is None:
            raise ValueError(f"a {frame.kind.value} frame on ndjson-lab, or without its part")
        obj.update(part_values(frame.kind.value, frame.part))
    elif frame.kind is not FrameKind.DONE:
        obj["reason"] = frame.reason
    elif digest and frame.done_digest is not None:
        obj["content_sha256"] = frame.done_digest.content_sha256
        obj["content_frames"] = frame.done_digest.content_frames
    return obj


def encode_frame(frame: Frame, *, digest: bool = False) -> bytes:
    text = json.dumps(frame_object(frame, digest=digest), ensure_ascii=False, separators=(",", ":"))
    return (text + "\n").encode("utf-8")


def encode_frames(frames: list[Frame], *, digest: bool = False) -> bytes:
    return b"".join(encode_frame(frame, digest=digest) for frame in frames)


def parse_frame(payload: bytes, *, digest: bool = False) -> Frame:
    """Shape checks of the lab's ``process``; sequence, binding and content are the consumer's.

    With ``digest``, done must carry exactly the lab's keys plus ``content_sha256``
    (64 lowercase hex characters) and ``content_frames`` (a non-negative integer), else
    ``invalid_frame_schema``;
    whether they match the content is the consumer's check, as in the
    length-prefixed wire.
    """
    try:
        # Decoded first: json.loads(bytes) would detect the encoding in Python, per frame.
        obj = strict_json(payload.decode("utf-8"))
    except (ValueError, RecursionError) as error:
        raise ProtocolFailure(Reason.INVALID_FRAME_JSON, str(error)[:200]) from error
    if not isinstance(obj, dict):
        raise ProtocolFailure(Reason.INVALID_FRAME_SCHEMA, "frame is not an object")
    kind = obj.get("kind")
    # A kind that is not a string (a list is not even hashable) has no expected keys.
    table = _DIGEST_EXPECTED if digest else _LAB_EXPECTED
    if type(kind) is not str or obj.keys() != table.get(kind):
        raise ProtocolFailure(Reason.INVALID_FRAME_SCHEMA, "unexpected kind or keys")
    frame_kind = _KIND_OF[kind]
    if frame_kind is FrameKind.CONTENT_DELTA:
        return decoded_frame(obj["sequence"], frame_kind, obj["binding_sha256"], text=obj["text"])
    if frame_kind in CHAT_KINDS:
        part = PART_CLASSES[kind](**{name: obj[name] for name in PART_FIELDS[kind]})
        return decoded_frame(obj["sequence"], frame_kind, obj["binding_sha256"], part=part)
    if frame_kind is not FrameKind.DONE:
        return decoded_frame(
            obj["sequence"], frame_kind, obj["binding_sha256"], reason=obj["reason"]
        )
    done_digest = None
    if digest:
        done_digest = checked_done_digest(obj["content_sha256"], obj["content_frames"])
    return decoded_frame(
        obj["sequence"], frame_kind, obj["binding_sha256"], done_digest=done_digest
    )


class NdjsonDecoder:
    def __init__(self, max_frame_bytes: int) -> None:
        self._max_frame_bytes = max_frame_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")("strict")
        # True while the UTF-8 decoder holds no partial character: an ASCII fragment then
        # needs no decoding (it cannot be invalid, nor complete a character).
        self._utf8_clean = True
        self._buffer = ReceiveBuffer()

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def receive_data(self, data: bytes) -> None:
        if not (self._utf8_clean and data.isascii()):
            try:
                self._utf8.decode(data, final=False)
            except UnicodeDecodeError as error:
                raise ProtocolFailure(Reason.INVALID_UTF8, str(error)[:200]) from error
            self._utf8_clean = not self._utf8.getstate()[0]
        self._buffer.append(data)

    def next_event(self) -> bytes | NeedData:
        line = self._buffer.pop_line()
        if line is None:
            # The lab counts decoded characters' bytes: a pending partial one is not in
            # (asked of the UTF-8 decoder only once the line is long enough to matter).
            unfinished = len(self._buffer)
            if unfinished > self._max_frame_bytes and (
                unfinished - len(self._utf8.getstate()[0]) > self._max_frame_bytes
            ):
                raise ProtocolFailure(Reason.FRAME_BYTE_LIMIT, "unterminated line over the limit")
            return NEED_DATA
        if len(line) > self._max_frame_bytes:
            raise ProtocolFailure(Reason.FRAME_BYTE_LIMIT, f"line of {len(line)} bytes")
        return line

    def end_of_input(self) -> None:
        try:
            self._utf8.decode(b"", final=True)
        except UnicodeDecodeError as error:
            raise ProtocolFailure(Reason.TRUNCATED_UTF8, str(error)[:200]) from error
        if self._buffer:
            raise ProtocolFailure(
                Reason.TRUNCATED_FRAME, f"{len(self._buffer)} bytes after the last newline"
            )


def corrupt_frame(encoded: bytes) -> bytes:
    """Same length, still one line, no longer JSON: the opening brace becomes ``#``."""
    return b"#" + encoded[1:]


class NdjsonCodec:
    """``ndjson`` (done carries the content digest) or ``ndjson-lab`` (the lab's, without)."""

    def __init__(self, wire: WireFormat = WireFormat.NDJSON) -> None:
        if wire not in (WireFormat.NDJSON, WireFormat.NDJSON_LAB):
            raise ValueError(f"not an NDJSON wire: {wire}")
        self.wire: WireFormat = wire
        self._digest = wire.integrity is Integrity.SHA256
        #: ``parse_frame`` with this wire's ``digest``, bound once: no method call per frame.
        self.parse_frame: Callable[[bytes], Frame] = partial(parse_frame, digest=self._digest)
        #: A chat reply's frames: the same kinds (``ndjson`` has all nine whatever the reply).
        self.parse_chat_frame = self.parse_frame

    def encode_frame(self, frame: Frame) -> bytes:
        return encode_frame(frame, digest=self._digest)

    def decoder(self, max_frame_bytes: int) -> NdjsonDecoder:
        return NdjsonDecoder(max_frame_bytes)

    def corrupt_frame(self, encoded: bytes) -> bytes:
        return corrupt_frame(encoded)
