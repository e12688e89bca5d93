"""The chat kind's makings for the conformance vectors: chat bindings, turns as frames, and
each chat frame's bytes written by hand where a vector needs what no producer sends (a
field of the wrong type, twice, of the wrong wire type, a key missing or too many).

A turn is a sequence of ``ChatItem``s (``shared.chat_frames``): ``(FrameKind.CONTENT_DELTA,
text)`` or ``(kind, part)`` with a part of ``shared.chat_parts``. Its frames are numbered
from 1 and ended by ``done`` with the chat content digest of every content frame
(docs/protocol.md#chat-digest), as a producer sends them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from conformance import craft
from replywire.shared.chat_frames import ChatItem, chat_frames
from replywire.shared.chat_parts import (
    INTEGER_FIELDS,
    PART_FIELDS,
    ChatDigest,
    ChatPart,
    FinishPart,
    SignaturePart,
    ThoughtPart,
    ToolCallPart,
    UsagePart,
    part_values,
)
from replywire.shared.chats import chat_binding
from replywire.shared.digest import digest
from replywire.shared.frames import DoneDigest, Frame, FrameKind
from replywire.shared.recording import BoundCase

#: Each chat frame kind's field number in ``replywire.v1.Frame`` (docs/protocol.md#wire-lp).
KIND_NUMBERS: Final = {"tool_call": 7, "thought": 8, "signature": 9, "usage": 10, "finish": 11}
#: The tools every chat vector's request declares (docs/protocol.md#chat-binding).
TOOLS: Final = (
    {
        "name": "read_file",
        "description": "Read a file of the workspace.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "minLength": 1}},
            "required": ["path"],
            "additionalProperties": False,
        },
    },
    {
        "name": "shell",
        "description": "Run a shell command in the workspace.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
    {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 2},
                "units": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    },
    {
        "name": "count",
        "description": "Count to n.",
        "parameters": {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 10}},
            "required": ["n"],
        },
    },
    {
        "name": "code",
        "description": "Look a three-character code up.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "minLength": 3, "maxLength": 3}},
            "required": ["code"],
        },
    },
)


def request(*, tools: Sequence[Mapping[str, Any]] = TOOLS, text: str = "") -> dict[str, Any]:
    """A model request asking about the workspace, with ``tools`` declared."""
    return {
        "model": "conformance-model",
        "system": "You are a careful coding assistant.",
        "turns": [
            {"role": "user", "parts": [{"text": text or "Read notes.py, then tell me where I am."}]}
        ],
        "tools": [dict(tool) for tool in tools],
        "settings": {"temperature": 0.0, "max_output_tokens": 1024},
    }


def case(binding: Mapping[str, Any], items: Sequence[ChatItem] = ()) -> BoundCase:
    """A chat case: the binding, and the turn its reply carries."""
    return BoundCase(
        case_id=str(binding["case_id"]),
        binding=binding,
        binding_sha256=digest(binding),
        request_sha256=str(binding["request_sha256"]),
        content="".join(value for _, value in items if isinstance(value, str)),
        chat_items=tuple(items),
    )


def chat_case(items: Sequence[ChatItem] = (), **options: Any) -> BoundCase:
    """The case of a chat binding of ``request(**options)`` answered by ``items``."""
    return case(chat_binding(request(**options)), items)


# --- a turn's items ----------------------------------------------------------------------------


def text(value: object) -> ChatItem:
    return (FrameKind.CONTENT_DELTA, value)  # type: ignore[return-value]


def call(index: object, arguments: object, name: object = "", id: object = "") -> ChatItem:
    """A tool_call fragment (the first of a call names it; later ones add arguments)."""
    return (FrameKind.TOOL_CALL, ToolCallPart(index=index, id=id, name=name, arguments=arguments))


def thought(value: object) -> ChatItem:
    return (FrameKind.THOUGHT, ThoughtPart(text=value))


def signature(part: object, index: object, value: object) -> ChatItem:
    return (FrameKind.SIGNATURE, SignaturePart(part=part, index=index, value=value))


def usage(
    prompt: object = 0,
    completion: object = 0,
    total: object = 0,
    *,
    cached: object = 0,
    thoughts: object = 0,
    tool_use: object = 0,
) -> ChatItem:
    part = UsagePart(
        prompt_tokens=prompt,
        cached_tokens=cached,
        completion_tokens=completion,
        thoughts_tokens=thoughts,
        tool_use_prompt_tokens=tool_use,
        total_tokens=total,
    )
    return (FrameKind.USAGE, part)


def finish(reason: object = "STOP") -> ChatItem:
    return (FrameKind.FINISH, FinishPart(reason=reason))


# --- frames --------------------------------------------------------------------------------


def claim(items: Sequence[ChatItem]) -> DoneDigest:
    """The chat content digest of ``items`` and their count."""
    running = ChatDigest()
    for kind, value in items:
        if kind is FrameKind.CONTENT_DELTA:
            running.add_text(str(value))
        else:
            assert not isinstance(value, str)
            running.add_part(kind.value, value)
    sha256, count = running.claim()
    return DoneDigest(content_sha256=sha256, content_frames=count)


def frames(
    chat: BoundCase,
    items: Sequence[ChatItem],
    *,
    terminal: FrameKind = FrameKind.DONE,
    claimed: Sequence[ChatItem] | DoneDigest | None = None,
) -> list[Frame]:
    """``items`` as frames numbered from 1, then the terminal: ``done`` claiming ``claimed``
    (the items themselves unless given), or a controlled ``cancel`` / ``error``."""
    if terminal is not FrameKind.DONE:
        reason = f"controlled_local_{terminal.value}"
        return chat_frames(chat.binding_sha256, list(items), terminal, reason)
    sent = chat_frames(chat.binding_sha256, list(items))[:-1]
    if claimed is None:
        claimed = items
    done_digest = claimed if isinstance(claimed, DoneDigest) else claim(claimed)
    done = Frame(
        sequence=len(sent) + 1,
        kind=FrameKind.DONE,
        binding_sha256=chat.binding_sha256,
        done_digest=done_digest,
    )
    return [*sent, done]


def item_frame(chat: BoundCase, sequence: int, item: ChatItem) -> Frame:
    """One item as frame ``sequence`` (values as they are: a crafted part may be wrong)."""
    kind, value = item
    if kind is FrameKind.CONTENT_DELTA:
        return craft.delta(chat, sequence, value)
    assert not isinstance(value, str)
    return Frame(sequence=sequence, kind=kind, binding_sha256=chat.binding_sha256, part=value)


def stream(wire: str, chat: BoundCase, items: Sequence[ChatItem], **options: Any) -> bytes:
    """The turn's frames on ``wire``, as one byte string."""
    return b"".join(craft.encode(wire, frames(chat, items, **options)))


# --- chat frames by hand -------------------------------------------------------------------


def ndjson_object(
    chat: BoundCase, sequence: object, kind: str, fields: Mapping[str, Any]
) -> dict[str, Any]:
    """A chat frame's NDJSON object: ``fields`` as given (a key left out, one too many, a
    value of any JSON type), after the three common keys."""
    return {"sequence": sequence, "kind": kind, "binding_sha256": chat.binding_sha256, **fields}


def part_object(chat: BoundCase, sequence: object, kind: str, part: ChatPart) -> dict[str, Any]:
    return ndjson_object(chat, sequence, kind, part_values(kind, part))


def ndjson_line(obj: Mapping[str, Any] | str) -> bytes:
    """One NDJSON line: an object written compactly (non-ASCII raw), or a text as it is (a
    lone surrogate's escape, a number token JSON keeps but Python's ``json`` would not)."""
    if isinstance(obj, str):
        return obj.encode("utf-8") + b"\n"
    return craft.line(obj)


def pb_field(number: int, value: object) -> bytes:
    """One field of a chat message: a varint for an int, a length-delimited field for text
    (UTF-8) or bytes (as they are)."""
    if isinstance(value, int):
        return craft.field_varint(number, value)
    data = value.encode("utf-8") if isinstance(value, str) else value
    assert isinstance(data, bytes)
    return craft.field_bytes(number, data)


def pb_part(kind: str, part: ChatPart, *, skip_defaults: bool = True) -> bytes:
    """A chat message's body in field-number order; proto3's way leaves 0 and "" out."""
    out = b""
    for number, value in enumerate(part_values(kind, part).values(), start=1):
        if skip_defaults and value in (0, "") and type(value) in (int, str):
            continue
        out += pb_field(number, value)
    return out


def lp_frame(chat: BoundCase, sequence: int, kind: str, body: bytes) -> bytes:
    """A length-prefixed frame whose kind field is chat kind ``kind`` holding ``body``."""
    return craft.lp(craft.pb_frame(sequence, chat.binding_sha256, KIND_NUMBERS[kind], body))


def field_number(kind: str, name: str) -> int:
    return PART_FIELDS[kind].index(name) + 1


def compact(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _has_lone_surrogate(value: object) -> bool:
    if isinstance(value, str):
        return any(0xD800 <= ord(char) <= 0xDFFF for char in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(key) or _has_lone_surrogate(v) for key, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def _lp_value(name: str, value: object) -> bool:
    """Whether the length-prefixed wire can carry field ``name`` holding ``value``: an
    unsigned 64-bit integer in an integer field, a string in a string field (a lone
    surrogate's bytes included, which are then not UTF-8)."""
    if name in INTEGER_FIELDS:
        return type(value) is int and 0 <= value < 1 << 64
    return type(value) is str


def item_bytes(wire: str, chat: BoundCase, sequence: int, item: ChatItem) -> bytes | None:
    """One item as frame ``sequence`` on ``wire``, its values as they are; None when the
    wire cannot carry one of them (a value that is not an integer or a string, on lp).

    NDJSON: a lone surrogate is written as its ``\\u`` escape (the line stays UTF-8); lp:
    as its three bytes (``ED A0 80``), which are not UTF-8."""
    kind, value = item
    if kind is FrameKind.CONTENT_DELTA:
        fields: dict[str, object] = {"text": value}
    else:
        assert not isinstance(value, str)
        fields = part_values(kind.value, value)
    if wire == craft.LP:
        if not all(_lp_value(name, field) for name, field in fields.items()):
            return None
        body = b""
        for number, field in enumerate(fields.values(), start=1):
            if field in (0, "") and type(field) in (int, str):
                continue
            if isinstance(field, str):
                body += craft.field_bytes(number, field.encode("utf-8", "surrogatepass"))
            else:
                body += pb_field(number, field)
        number = 3 if kind is FrameKind.CONTENT_DELTA else KIND_NUMBERS[kind.value]
        return craft.lp(craft.pb_frame(sequence, chat.binding_sha256, number, body))
    obj = ndjson_object(chat, sequence, kind.value, fields)
    if _has_lone_surrogate(obj):
        return (json.dumps(obj, ensure_ascii=True, separators=(",", ":")) + "\n").encode()
    return craft.line(obj)


def done_bytes(wire: str, chat: BoundCase, sequence: int, claimed: DoneDigest) -> bytes:
    frame = Frame(
        sequence=sequence,
        kind=FrameKind.DONE,
        binding_sha256=chat.binding_sha256,
        done_digest=claimed,
    )
    return craft.encode(wire, [frame])[0]


def crafted(
    wire: str, chat: BoundCase, items: Sequence[ChatItem], *, done: bool = True
) -> list[bytes] | None:
    """Each item as a frame, numbered from 1, values as they are, then (``done``) a done
    claiming the items (the claim of the items before the first one the digest cannot
    hold: a vector's verdict comes before it); None when the wire cannot carry an item."""
    out = []
    for sequence, item in enumerate(items, start=1):
        data = item_bytes(wire, chat, sequence, item)
        if data is None:
            return None
        out.append(data)
    if done:
        claimed = None
        for count in range(len(items), -1, -1):
            try:
                claimed = claim(items[:count])
                break
            except (TypeError, ValueError, UnicodeEncodeError, AssertionError):
                continue
        assert claimed is not None
        out.append(done_bytes(wire, chat, len(items) + 1, claimed))
    return out
