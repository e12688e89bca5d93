"""The lab's NDJSON wire: one compact JSON object per ``\\n``-terminated line.

Encoding is byte-identical to the lab's ``encode_frames``. Decoding follows
the lab's ``StreamConsumer.feed`` check for check, on a ``bytearray``:

* every fragment is first run through an incremental UTF-8 decoder, so an
  invalid byte fails the whole fragment (``invalid_utf8``) before any line in
  it is interpreted, exactly as the lab decodes before splitting;
* complete lines are taken from the front of the buffer with ``del buf[:n]``
  and the search for ``\\n`` resumes where it stopped, so no byte is scanned
  twice however the stream is cut (the lab's ``str.split`` per line is
  quadratic in the number of lines per fragment);
* a line longer than the frame limit fails when it is complete, and the
  unfinished remainder fails as soon as it exceeds the limit (the lab's check
  counts decoded characters' bytes, i.e. excludes a pending partial character).
"""

from __future__ import annotations

import codecs
import json
from typing import Any

from shared.digest import strict_json
from shared.errors import ProtocolFailure, Reason
from shared.frames import Frame, FrameKind
from shared.wire.base import NEED_DATA, NeedData, WireFormat

_CONTENT_KEYS = frozenset({"sequence", "kind", "binding_sha256", "text"})
_DONE_KEYS = frozenset({"sequence", "kind", "binding_sha256"})
_STOP_KEYS = frozenset({"sequence", "kind", "binding_sha256", "reason"})
_KINDS = ("content_delta", "done", "error", "cancel")


def frame_object(frame: Frame) -> dict[str, Any]:
    """The lab's frame dict, keys in the lab's order (no done digest: the lab has none)."""
    obj: dict[str, Any] = {
        "sequence": frame.sequence,
        "kind": frame.kind.value,
        "binding_sha256": frame.binding_sha256,
    }
    if frame.kind is FrameKind.CONTENT_DELTA:
        obj["text"] = frame.text
    elif frame.kind is not FrameKind.DONE:
        obj["reason"] = frame.reason
    return obj


def encode_frame(frame: Frame) -> bytes:
    text = json.dumps(frame_object(frame), ensure_ascii=False, separators=(",", ":"))
    return (text + "\n").encode("utf-8")


def encode_frames(frames: list[Frame]) -> bytes:
    return b"".join(encode_frame(frame) for frame in frames)


def parse_frame(payload: bytes) -> Frame:
    """Shape checks of the lab's ``process``; sequence, binding and content are the consumer's."""
    try:
        obj = strict_json(payload.decode("utf-8"))
    except (ValueError, RecursionError) as error:
        raise ProtocolFailure(Reason.INVALID_FRAME_JSON, str(error)[:200]) from error
    if not isinstance(obj, dict):
        raise ProtocolFailure(Reason.INVALID_FRAME_SCHEMA, "frame is not an object")
    kind = obj.get("kind")
    if kind == "content_delta":
        expected = _CONTENT_KEYS
    elif kind == "done":
        expected = _DONE_KEYS
    else:
        expected = _STOP_KEYS
    if kind not in _KINDS or set(obj) != expected:
        raise ProtocolFailure(Reason.INVALID_FRAME_SCHEMA, "unexpected kind or keys")
    return Frame(
        sequence=obj["sequence"],
        kind=FrameKind(kind),
        binding_sha256=obj["binding_sha256"],
        text=obj.get("text"),
        reason=obj.get("reason"),
    )


class NdjsonDecoder:
    def __init__(self, max_frame_bytes: int) -> None:
        self._max_frame_bytes = max_frame_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")("strict")
        self._buffer = bytearray()
        # Bytes at the front of the buffer already known to hold no b"\n".
        self._searched = 0

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def receive_data(self, data: bytes) -> None:
        try:
            self._utf8.decode(data, final=False)
        except UnicodeDecodeError as error:
            raise ProtocolFailure(Reason.INVALID_UTF8, str(error)[:200]) from error
        self._buffer += data

    def next_event(self) -> bytes | NeedData:
        end = self._buffer.find(b"\n", self._searched)
        if end < 0:
            self._searched = len(self._buffer)
            pending_partial_char = len(self._utf8.getstate()[0])
            if len(self._buffer) - pending_partial_char > self._max_frame_bytes:
                raise ProtocolFailure(Reason.FRAME_BYTE_LIMIT, "unterminated line over the limit")
            return NEED_DATA
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        self._searched = 0
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
    wire = WireFormat.NDJSON

    def encode_frame(self, frame: Frame) -> bytes:
        return encode_frame(frame)

    def decoder(self, max_frame_bytes: int) -> NdjsonDecoder:
        return NdjsonDecoder(max_frame_bytes)

    def parse_frame(self, payload: bytes) -> Frame:
        return parse_frame(payload)

    def corrupt_frame(self, encoded: bytes) -> bytes:
        return corrupt_frame(encoded)
