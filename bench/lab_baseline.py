"""The lab's consumer algorithm, as a labelled baseline for the decoder benchmark.

Transcribed from the lab's ``StreamConsumer.feed`` / ``process`` and its
``strict_json`` (the source document 000 of the project; facts copied, the
folder itself is never read): an incremental UTF-8 decoder, a ``str`` buffer
split at the first ``\\n`` per line (``str.split`` copies the rest of the
buffer each time, which is quadratic in the lines one fragment carries), the
byte length of each line and of the unfinished rest, ``json.loads`` with a
duplicate-key hook (a new decoder per call), then the frame-shape check.

``LabDecoder`` stops there, at the checks our decoders make (the wire's); the
sequence, binding and content checks are the consumer core's in both.
"""

from __future__ import annotations

import codecs
import json
from typing import Any, Final

MAX_FRAME_BYTES: Final = 8192


class LabError(ValueError):
    pass


def strict_json(text: str | bytes) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in items:
            if key in result:
                raise ValueError("duplicate_json_key")
            result[key] = value
        return result

    def constant(value: str) -> Any:
        raise ValueError("invalid_json_constant")

    return json.loads(text, object_pairs_hook=pairs, parse_constant=constant)


class LabDecoder:
    """``feed`` as the lab's, ``process`` up to and including the frame-shape check."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.buffer = ""
        self.frames = 0

    def feed(self, data: bytes) -> None:
        try:
            self.buffer += self.decoder.decode(data, final=False)
        except UnicodeDecodeError as error:
            raise LabError("invalid_utf8") from error
        while "\n" in self.buffer:
            line, self.buffer = self.buffer.split("\n", 1)
            if len(line.encode("utf-8")) > self.max_frame_bytes:
                raise LabError("frame_byte_limit")
            self.process(line)
        if len(self.buffer.encode("utf-8")) > self.max_frame_bytes:
            raise LabError("frame_byte_limit")

    def process(self, line: str) -> None:
        try:
            frame = strict_json(line)
        except (ValueError, RecursionError) as error:
            raise LabError("invalid_frame_json") from error
        if not isinstance(frame, dict):
            raise LabError("invalid_frame_schema")
        kind = frame.get("kind")
        expected = (
            {"sequence", "kind", "binding_sha256", "text"}
            if kind == "content_delta"
            else {"sequence", "kind", "binding_sha256"}
            if kind == "done"
            else {"sequence", "kind", "binding_sha256", "reason"}
        )
        if kind not in ("content_delta", "done", "error", "cancel") or set(frame) != expected:
            raise LabError("invalid_frame_schema")
        self.frames += 1

    def finish(self) -> None:
        tail = self.decoder.decode(b"", final=True)
        if self.buffer or tail:
            raise LabError("truncated_frame")
