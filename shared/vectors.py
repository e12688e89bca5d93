"""The conformance vector file: its one JSON form, read and written (pure: bytes in, bytes out).

A vector file (``fixtures/conformance/vectors/*.json``, schema
``fixtures/conformance/vector.schema.json``, documented in ``docs/conformance.md``) holds
one group of vectors. A vector is one transmission and its verdict: the request (case id,
binding and its exact canonical bytes), the wire, the exact transport chunks, how the
input ended, optional limits, and what a consumer must conclude. The producer's
conformance mode serves a vector's chunks verbatim; the kit's runner compares what a
consumer concluded with ``expected``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

#: The file format's name and version, in every file's ``format``.
FORMAT: Final = "replywire-conformance/1"
WIRES: Final = ("lp", "ndjson", "ndjson-lab")
LIMIT_KEYS: Final = (
    "max_stream_bytes",
    "max_frame_bytes",
    "max_content_chars",
    "max_frames",
    "max_reason_chars",
    "max_tool_calls",
)
#: The keys of ``expected``, in the order the files give them.
EXPECTED_KEYS: Final = (
    "status",
    "reason",
    "detail",
    "frames",
    "bytes",
    "content_sha256",
    "provisional_content",
    "accepted_answer",
    "citations",
)
#: The keys of ``expected`` a chat reply's verdict adds, after those, where it has them.
CHAT_EXPECTED_KEYS: Final = ("turn", "call", "notes")


class End(StrEnum):
    """How the input ended after the last chunk."""

    EOF = "eof"
    TRANSPORT_ERROR = "transport_error"


class Mode(StrEnum):
    """Where a vector can run: the core mode (bytes to a consumer's core, through the
    line protocol) and the wire mode (the chunks over real gRPC to a consumer's CLI)."""

    CORE = "core"
    WIRE = "wire"


class VectorError(ValueError):
    """A vector file, or one vector in it, that is not in the format."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Vector:
    id: str
    description: str
    rule: str
    wire: str
    stream_id: str
    case_id: str
    binding: Mapping[str, Any]
    binding_bytes: bytes
    chunks: tuple[bytes, ...]
    end: End
    limits: Mapping[str, int] | None = None
    ignore_duplicates: bool = False
    modes: tuple[Mode, ...] = (Mode.CORE, Mode.WIRE)
    expected: Mapping[str, Any] = field(default_factory=dict)

    def to_object(self) -> dict[str, Any]:
        """The vector's JSON object, keys in the documented order."""
        obj: dict[str, Any] = {
            "id": self.id,
            "description": self.description,
            "rule": self.rule,
            "wire": self.wire,
            "stream_id": self.stream_id,
            "case_id": self.case_id,
            "binding": self.binding,
            "binding_bytes": _b64(self.binding_bytes),
            "chunks": [_b64(chunk) for chunk in self.chunks],
            "end": self.end.value,
        }
        if self.limits is not None:
            obj["limits"] = dict(self.limits)
        if self.ignore_duplicates:
            obj["ignore_duplicates"] = True
        obj["modes"] = [mode.value for mode in self.modes]
        obj["expected"] = {key: self.expected[key] for key in EXPECTED_KEYS}
        obj["expected"].update(
            (key, self.expected[key]) for key in CHAT_EXPECTED_KEYS if key in self.expected
        )
        return obj


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: object, what: str) -> bytes:
    if not isinstance(text, str):
        raise VectorError(f"{what} is not a base64 string")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as error:
        raise VectorError(f"{what} is not base64") from error


def _text(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise VectorError(f"{key} must be a non-empty string")
    return value


def parse_vector(obj: object) -> Vector:
    """One vector from its JSON object (``VectorError`` when it is not one)."""
    if not isinstance(obj, dict):
        raise VectorError("a vector is an object")
    wire = _text(obj, "wire")
    if wire not in WIRES:
        raise VectorError(f"wire {wire!r}")
    binding = obj.get("binding")
    if not isinstance(binding, dict):
        raise VectorError("binding must be an object")
    chunks = obj.get("chunks")
    if not isinstance(chunks, list):
        raise VectorError("chunks must be a list")
    try:
        end = End(str(obj.get("end")))
        modes = tuple(Mode(mode) for mode in obj.get("modes", [m.value for m in Mode]))
    except ValueError as error:
        raise VectorError(str(error)) from error
    limits = obj.get("limits")
    if limits is not None and (
        not isinstance(limits, dict)
        or any(key not in LIMIT_KEYS for key in limits)
        or any(type(value) is not int or value < 1 for value in limits.values())
    ):
        raise VectorError("limits: positive integers named " + ", ".join(LIMIT_KEYS))
    expected = obj.get("expected", {})
    if not isinstance(expected, dict):
        raise VectorError("expected must be an object")
    ignore_duplicates = obj.get("ignore_duplicates", False)
    if type(ignore_duplicates) is not bool:
        raise VectorError("ignore_duplicates must be true or false")
    return Vector(
        id=_text(obj, "id"),
        description=_text(obj, "description"),
        rule=_text(obj, "rule"),
        wire=wire,
        stream_id=_text(obj, "stream_id"),
        case_id=_text(obj, "case_id"),
        binding=binding,
        binding_bytes=_unb64(obj.get("binding_bytes"), "binding_bytes"),
        chunks=tuple(_unb64(chunk, "a chunk") for chunk in chunks),
        end=end,
        limits=limits,
        ignore_duplicates=ignore_duplicates,
        modes=modes,
        expected=expected,
    )


def load_vectors(raw: bytes) -> tuple[Vector, ...]:
    """Every vector of one file's bytes (``VectorError`` when the file is not one)."""
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise VectorError(f"not a JSON file: {error}") from error
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise VectorError(f"not a {FORMAT} file")
    vectors = document.get("vectors")
    if not isinstance(vectors, list):
        raise VectorError("vectors must be a list")
    return tuple(parse_vector(vector) for vector in vectors)


def dump_vectors(group: str, description: str, vectors: list[Vector]) -> bytes:
    """One file's bytes: a vector a line, ASCII (every other character escaped), so the
    same vectors always give the same bytes and a diff shows vectors."""
    lines = [json.dumps(vector.to_object(), ensure_ascii=True) for vector in vectors]
    head = json.dumps(
        {"format": FORMAT, "group": group, "description": description}, ensure_ascii=True
    )[:-1]
    body = ",\n".join(lines)
    return f'{head}, "vectors": [\n{body}\n]}}\n'.encode("ascii")
