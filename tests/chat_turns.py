"""Chat replies for the consumer's tests, built by hand: a chat binding valid against
protos/schemas/chat-binding.schema.json, a turn's frames (``shared.chat_parts`` and a
running ``ChatDigest``), 002's example turn, and a core fed with them on a wire."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterable, Sequence
from typing import Any, Final

from replywire.shared.chat_parts import (
    ChatDigest,
    ChatPart,
    FinishPart,
    SignaturePart,
    ThoughtPart,
    ToolCallPart,
    UsagePart,
)
from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.consumer_limits import Limits
from replywire.shared.digest import digest
from replywire.shared.errors import ProtocolFailure
from replywire.shared.frames import DoneDigest, Frame, FrameKind
from replywire.shared.wire import WireFormat, codec_for, ndjson

#: The wires whose done carries the content digest (a chat reply's only wires).
WIRES: Final = (WireFormat.LENGTH_PREFIXED, WireFormat.NDJSON)

READ_FILE: Final = {
    "name": "read_file",
    "description": "Read a file of the project.",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string", "minLength": 1, "maxLength": 8}},
        "required": ["path"],
        "additionalProperties": False,
    },
}
SHELL: Final = {
    "name": "shell",
    "description": "Run a shell command.",
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
        "required": ["command"],
    },
}


#: A declared tool: the weather in a city (the fake model's and the tests' one tool).
WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "minLength": 1}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def chat_binding(tools: Sequence[dict[str, Any]] = (READ_FILE, SHELL)) -> dict[str, Any]:
    """A chat binding as the schema has it, by hand (shared/chats.py builds the real ones)."""
    request = {
        "model": "gemini-test",
        "system": "You are a careful assistant.",
        "turns": [{"role": "user", "parts": [{"text": "Look at notes.py and where we are."}]}],
        "tools": [copy.deepcopy(tool) for tool in tools],
        "settings": {},
    }
    request_sha256 = digest(request)
    return {
        "kind": "chat",
        "case_id": "chat-" + request_sha256[:16],
        "request_sha256": request_sha256,
        "request": request,
    }


#: A turn as items: ``(FrameKind.CONTENT_DELTA, text)`` or ``(kind, part)``.
Item = tuple[FrameKind, "str | ChatPart"]


def call(index: int, arguments: str, name: str = "", call_id: str = "") -> Item:
    return FrameKind.TOOL_CALL, ToolCallPart(
        index=index, id=call_id, name=name, arguments=arguments
    )


def text(value: str) -> Item:
    return FrameKind.CONTENT_DELTA, value


def thought(value: object) -> Item:
    return FrameKind.THOUGHT, ThoughtPart(text=value)


def signature(part: object, index: object, value: object) -> Item:
    return FrameKind.SIGNATURE, SignaturePart(part=part, index=index, value=value)


def usage(prompt: int, completion: int, total: int, thoughts: int = 0, cached: int = 0) -> Item:
    return FrameKind.USAGE, UsagePart(
        prompt_tokens=prompt,
        cached_tokens=cached,
        completion_tokens=completion,
        thoughts_tokens=thoughts,
        tool_use_prompt_tokens=0,
        total_tokens=total,
    )


def finish(reason: object = "STOP") -> Item:
    return FrameKind.FINISH, FinishPart(reason=reason)


#: 002's example: "Reading " + read_file and shell calls whose fragments interleave +
#: "the files." + usage 18/9/27/4 (prompt, completion, total; 4 of the prompt's cached).
EXAMPLE: Final[tuple[Item, ...]] = (
    text("Reading "),
    call(0, '{"path":', name="read_file", call_id="c1"),
    call(1, '{"comm', name="shell", call_id="c2"),
    call(0, '"notes.py"}'),
    call(1, 'and":"pwd"}', call_id="c2"),
    text("the files."),
    usage(18, 9, 27, cached=4),
    finish("STOP"),
)
EXAMPLE_CALLS: Final = [{"path": "notes.py"}, {"command": "pwd"}]


def frames(
    binding_sha256: str,
    items: Iterable[Item],
    *,
    terminal: FrameKind = FrameKind.DONE,
    claim: tuple[str, int] | None = None,
) -> list[Frame]:
    """The frames of ``items``, numbered from 1, then the terminal (``done`` with the
    digest of what was sent, or ``claim``)."""
    running = ChatDigest()
    out: list[Frame] = []
    for sequence, (kind, value) in enumerate(items, start=1):
        if kind is FrameKind.CONTENT_DELTA:
            assert isinstance(value, str)
            running.add_text(value)
            out.append(
                Frame(sequence=sequence, kind=kind, binding_sha256=binding_sha256, text=value)
            )
        else:
            assert not isinstance(value, str)
            with contextlib.suppress(UnicodeError):  # a lone surrogate: refused before done
                running.add_part(kind.value, value)
            out.append(
                Frame(sequence=sequence, kind=kind, binding_sha256=binding_sha256, part=value)
            )
    sequence = len(out) + 1
    if terminal is FrameKind.DONE:
        sha, count = claim or running.claim()
        done = DoneDigest(content_sha256=sha, content_frames=count)
        out.append(
            Frame(sequence=sequence, kind=terminal, binding_sha256=binding_sha256, done_digest=done)
        )
    else:
        out.append(
            Frame(
                sequence=sequence,
                kind=terminal,
                binding_sha256=binding_sha256,
                reason="controlled_local_" + terminal.value,
            )
        )
    return out


def encoded(wire: WireFormat, frame_list: Iterable[Frame]) -> list[bytes]:
    """Each frame on ``wire``; on NDJSON a text holding a lone surrogate is written with
    ``\\u`` escapes (valid JSON; the core refuses the text where it is used)."""
    codec = codec_for(wire)
    out = []
    for frame in frame_list:
        try:
            out.append(codec.encode_frame(frame))
        except UnicodeEncodeError:
            line = json.dumps(ndjson.frame_object(frame, digest=True), separators=(",", ":"))
            out.append(line.encode("ascii") + b"\n")
    return out


def judge(
    binding: dict[str, Any],
    chunks: Iterable[bytes],
    wire: WireFormat,
    *,
    limits: Limits | None = None,
    ignore_duplicates: bool = False,
) -> dict[str, Any]:
    """The result document of a core fed ``chunks`` and a clean end."""
    consumer = ReplyConsumer(binding, wire=wire, limits=limits, ignore_duplicates=ignore_duplicates)
    for chunk in chunks:
        if consumer.finished:
            break
        try:
            consumer.receive_data(chunk)
        except ProtocolFailure:  # the verdict is in the result
            break
    return consumer.end_of_stream().to_dict()


def run(
    items: Iterable[Item],
    wire: WireFormat,
    *,
    binding: dict[str, Any] | None = None,
    limits: Limits | None = None,
    claim: tuple[str, int] | None = None,
) -> dict[str, Any]:
    """``items`` as a whole chat reply on ``wire`` (one chunk per frame), judged."""
    binding = binding or chat_binding()
    sent = frames(digest(binding), items, claim=claim)
    return judge(binding, encoded(wire, sent), wire, limits=limits)
