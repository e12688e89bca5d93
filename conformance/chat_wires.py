"""The ``chat`` group's wire corners: the five chat messages on ``lp`` field by field (an
unknown field inside one, a field twice, the wrong wire type, absent fields as their
defaults, varints of every length, bytes that are not UTF-8), the chat kinds on the NDJSON
wires key by key (and on ``ndjson-lab``, which knows only the lab's four), and a chat
frame that fails a frame rule before its own (docs/protocol.md#frame-rules, in order).
"""

from __future__ import annotations

from conformance import craft
from conformance.chat_craft import (
    KIND_NUMBERS,
    call,
    chat_case,
    claim,
    crafted,
    done_bytes,
    finish,
    item_bytes,
    lp_frame,
    ndjson_object,
    signature,
    text,
    thought,
    usage,
)
from conformance.vectors import Group
from replywire.shared.chat_frames import ChatItem
from replywire.shared.chat_parts import PART_FIELDS
from replywire.shared.recording import BoundCase, Recording

#: The turn every wire corner sits in: text, then the corner (frame 2), then the rest.
BEFORE: tuple[ChatItem, ...] = (text("Reading "),)
AFTER: tuple[ChatItem, ...] = (finish("tool_calls"),)
#: The arguments of the call a corner carries, complete and valid.
ARGUMENTS = '{"path":"notes.py"}'


def _with_frame(wire: str, chat: BoundCase, frame: bytes, as_item: ChatItem | None) -> list[bytes]:
    """``BEFORE``, the crafted ``frame`` as frame 2, ``AFTER``, and done claiming the turn
    with ``as_item`` in frame 2's place (what the frame means when it is accepted)."""
    before = [item_bytes(wire, chat, 1, BEFORE[0])]
    after = [item_bytes(wire, chat, 3, AFTER[0])]
    items = [*BEFORE, *([as_item] if as_item else []), *AFTER]
    done = done_bytes(wire, chat, 4, claim(items))
    return [*before, frame, *after, done]  # type: ignore[list-item]


def _lp_corners(group: Group) -> None:
    chat = chat_case()

    def add(name: str, description: str, frame: bytes, as_item: ChatItem | None = None) -> None:
        group.add(
            f"lp-{name}",
            description,
            "#wire-lp",
            craft.LP,
            _with_frame(craft.LP, chat, frame, as_item),
            case=chat,
        )

    def frame(kind: str, body: bytes) -> bytes:
        return lp_frame(chat, 2, kind, body)

    name_field = craft.field_bytes(3, b"read_file")
    args_field = craft.field_bytes(4, ARGUMENTS.encode())
    good_call = call(0, ARGUMENTS, "read_file", "c0")
    id_field = craft.field_bytes(2, b"c0")
    full = craft.field_varint(1, 0) + id_field + name_field + args_field
    add(
        "tool-call-fields-reversed",
        "a ToolCall's fields in reverse order (and index 0 given)",
        frame("tool_call", args_field + name_field + id_field + craft.field_varint(1, 0)),
        good_call,
    )
    add(
        "tool-call-index-10-byte-varint",
        "index 0 written in 10 bytes",
        frame(
            "tool_call",
            craft.tag(1, 0) + craft.padded_varint(0, 10) + id_field + name_field + args_field,
        ),
        good_call,
    )
    add(
        "tool-call-index-11-byte-varint",
        "index written in 11 bytes: invalid_frame_payload",
        frame("tool_call", craft.tag(1, 0) + craft.padded_varint(0, 11) + name_field),
    )
    add(
        "tool-call-index-2-64",
        "index 2^64 (a 10-byte varint past 64 bits)",
        frame("tool_call", craft.tag(1, 0) + b"\xff" * 9 + b"\x7f" + name_field),
    )
    add(
        "tool-call-tag-6-bytes",
        "a ToolCall tag in 6 bytes: refused after the walk",
        frame("tool_call", craft.padded_varint(3 << 3 | 2, 6) + b"\x09read_file" + args_field),
    )
    add(
        "tool-call-tag-5-bytes",
        "a ToolCall tag in 5 bytes: accepted",
        frame(
            "tool_call",
            id_field + craft.padded_varint(3 << 3 | 2, 5) + b"\x09read_file" + args_field,
        ),
        good_call,
    )
    add(
        "tool-call-absent-index-id",
        'a ToolCall with no index and no id: 0 and ""',
        frame("tool_call", name_field + args_field),
        call(0, ARGUMENTS, "read_file", ""),
    )
    add(
        "tool-call-empty",
        "an empty ToolCall: index 0, no name: invalid_tool_call",
        frame("tool_call", b""),
    )
    add(
        "tool-call-unknown-field",
        "a field 5 inside a ToolCall: unknown_frame_field",
        frame("tool_call", full + craft.field_varint(5, 1)),
    )
    add(
        "tool-call-unknown-group",
        "a field 6 of wire type 3 inside a ToolCall",
        frame("tool_call", full + craft.tag(6, 3)),
    )
    add(
        "tool-call-index-twice",
        "index given twice: invalid_frame_schema",
        frame("tool_call", full + craft.field_varint(1, 0)),
    )
    add(
        "tool-call-name-twice",
        "name given twice (the same value)",
        frame("tool_call", full + name_field),
    )
    add(
        "tool-call-index-length-delimited",
        "index as a length-delimited field",
        frame("tool_call", craft.field_bytes(1, b"\x00") + name_field),
    )
    add("tool-call-name-varint", "name as a varint", frame("tool_call", craft.field_varint(3, 1)))
    add(
        "tool-call-length-past-message",
        "name's length runs past the ToolCall",
        frame("tool_call", craft.tag(3, 2) + craft.varint(40) + b"read_file"),
    )
    add(
        "tool-call-name-not-utf8",
        "a byte 0xff in the name: invalid_utf8",
        frame("tool_call", craft.field_bytes(3, b"read\xff") + args_field),
    )
    add(
        "tool-call-arguments-surrogate-bytes",
        "a surrogate's UTF-8 form in the arguments",
        frame("tool_call", name_field + craft.field_bytes(4, b'{"path":"\xed\xa0\x80"}')),
    )
    add(
        "two-kinds",
        "a tool_call and a thought in one frame: invalid_frame_schema",
        craft.lp(
            craft.pb_frame(2, chat.binding_sha256, KIND_NUMBERS["tool_call"], full)
            + craft.field_bytes(KIND_NUMBERS["thought"], craft.field_bytes(1, b"t"))
        ),
    )
    add(
        "delta-and-finish",
        "a content_delta and a finish in one frame",
        craft.lp(
            craft.pb_frame(2, chat.binding_sha256, 3, craft.pb_text("x"))
            + craft.field_bytes(11, craft.field_bytes(1, b"STOP"))
        ),
    )
    add(
        "thought-empty-message",
        'an empty Thought: its text "", invalid_thought',
        frame("thought", b""),
    )
    add(
        "thought-unknown-field",
        "a field 2 inside a Thought",
        frame("thought", craft.field_bytes(1, b"t") + craft.field_bytes(2, b"x")),
    )
    add(
        "thought-text-varint",
        "a Thought's text as a varint",
        frame("thought", craft.field_varint(1, 5)),
    )
    add(
        "thought-not-utf8",
        "a Thought's text cut inside a character",
        frame("thought", craft.field_bytes(1, b"caf\xc3")),
    )
    add(
        "signature-empty-message",
        'an empty Signature: part "", invalid_signature',
        frame("signature", b""),
    )
    add(
        "signature-no-value",
        "a text signature with no value: invalid_signature",
        frame("signature", craft.field_bytes(1, b"text")),
    )
    add(
        "signature-absent-index",
        "a text signature with no index: index 0",
        frame("signature", craft.field_bytes(1, b"text") + craft.field_bytes(3, b"s")),
        signature("text", 0, "s"),
    )
    add(
        "signature-index-length-delimited",
        "a Signature's index as a length-delimited field",
        frame(
            "signature",
            craft.field_bytes(1, b"text")
            + craft.field_bytes(2, b"\x00")
            + craft.field_bytes(3, b"s"),
        ),
    )
    add(
        "signature-unknown-field",
        "a field 4 inside a Signature",
        frame(
            "signature",
            craft.field_bytes(1, b"text") + craft.field_bytes(3, b"s") + craft.field_varint(4, 0),
        ),
    )
    add("usage-empty-message", "an empty Usage: every count 0", frame("usage", b""), usage(0, 0, 0))
    add(
        "usage-max-10-bytes",
        "a total of 2^64 - 1 in 10 bytes",
        frame("usage", craft.field_varint(6, 2**64 - 1)),
        usage(0, 0, 2**64 - 1),
    )
    add(
        "usage-total-twice",
        "total_tokens given twice",
        frame("usage", craft.field_varint(6, 1) + craft.field_varint(6, 1)),
    )
    add(
        "usage-count-length-delimited",
        "a count as a length-delimited field",
        frame("usage", craft.field_bytes(1, b"\x01")),
    )
    add("usage-unknown-field", "a field 7 inside a Usage", frame("usage", craft.field_varint(7, 1)))
    add(
        "usage-truncated-varint-then-unknown",
        "a count's varint cut short, then an unknown "
        "field: invalid_frame_payload where the walk reaches it",
        frame("usage", craft.tag(1, 0) + b"\x80\x80" + craft.field_varint(9, 1)),
    )
    add("finish-empty-message", 'an empty Finish: reason "", invalid_finish', frame("finish", b""))
    add(
        "finish-reason-twice",
        "a Finish's reason twice",
        frame("finish", craft.field_bytes(1, b"STOP") + craft.field_bytes(1, b"STOP")),
    )
    add(
        "finish-unknown-field",
        "a field 2 inside a Finish",
        frame("finish", craft.field_bytes(1, b"STOP") + craft.field_varint(2, 0)),
    )
    add(
        "finish-not-utf8",
        "a Finish's reason of one byte 0xc0",
        frame("finish", craft.field_bytes(1, b"\xc0")),
    )
    add(
        "kind-12",
        "a kind field 12, which Frame does not have: unknown_frame_field",
        craft.lp(craft.pb_frame(2, chat.binding_sha256, 12, craft.field_bytes(1, b"x"))),
    )


def _ndjson_corners(group: Group) -> None:
    chat = chat_case()

    def add(
        name: str, description: str, obj: dict[str, object] | str, as_item: ChatItem | None = None
    ) -> None:
        line = (obj if isinstance(obj, str) else craft.line(obj).decode()).rstrip("\n")
        group.add(
            f"ndjson-{name}",
            description,
            "#wire-ndjson",
            craft.NDJSON,
            _with_frame(craft.NDJSON, chat, craft.line(line), as_item),
            case=chat,
        )

    fields = {"index": 0, "id": "c0", "name": "read_file", "arguments": ARGUMENTS}
    good = call(0, ARGUMENTS, "read_file", "c0")
    tool_call = ndjson_object(chat, 2, "tool_call", fields)
    for key in fields:
        add(
            f"tool-call-without-{key}",
            f"a tool_call without {key}: invalid_frame_schema",
            {k: v for k, v in tool_call.items() if k != key},
        )
    add("tool-call-extra-key", "a tool_call with a text key too", {**tool_call, "text": "x"})
    add(
        "tool-call-keys-reordered",
        "a tool_call's keys in reverse order, white space inside",
        "{ "
        + ", ".join(
            f'"{k}" : {craft.line({k: v}).decode()[1:-2].split(":", 1)[1]}'
            for k, v in reversed(tool_call.items())
        )
        + " }",
        good,
    )
    add(
        "tool-call-index-minus-zero",
        "index -0: the integer 0",
        craft.line(tool_call).decode().replace('"index":0', '"index":-0'),
        good,
    )
    add(
        "tool-call-index-1e0",
        "index 1e0: not an integer token",
        craft.line({**tool_call, "index": 0}).decode().replace('"index":0', '"index":0e0'),
    )
    add(
        "tool-call-index-twice",
        "index given twice: not strict JSON",
        craft.line(tool_call).decode().replace('"index":0', '"index":0,"index":0'),
    )
    add("kind-upper", 'kind "TOOL_CALL": invalid_frame_schema', {**tool_call, "kind": "TOOL_CALL"})
    add("kind-dash", 'kind "tool-call"', {**tool_call, "kind": "tool-call"})
    thought_obj = ndjson_object(chat, 2, "thought", {"text": "t"})
    add("thought-with-reason", "a thought with a reason key too", {**thought_obj, "reason": "x"})
    add("thought-without-text", "a thought with no text key", ndjson_object(chat, 2, "thought", {}))
    add(
        "finish-with-text",
        "a finish whose reason is named text",
        ndjson_object(chat, 2, "finish", {"text": "STOP"}),
    )
    sig = {"part": "text", "index": 0, "value": "s"}
    add(
        "signature-without-index",
        "a signature with no index",
        ndjson_object(chat, 2, "signature", {k: v for k, v in sig.items() if k != "index"}),
    )
    counts = dict.fromkeys(PART_FIELDS["usage"], 1)
    add(
        "usage-without-total",
        "a usage without total_tokens",
        ndjson_object(chat, 2, "usage", {k: v for k, v in counts.items() if k != "total_tokens"}),
    )
    add(
        "usage-big-exact",
        "every count 18446744073709551615, kept exactly",
        ndjson_object(chat, 2, "usage", dict.fromkeys(counts, 2**64 - 1)),
        usage(
            2**64 - 1,
            2**64 - 1,
            2**64 - 1,
            cached=2**64 - 1,
            thoughts=2**64 - 1,
            tool_use=2**64 - 1,
        ),
    )
    add(
        "usage-1e400",
        "a count of 1e400: JSON, but not an integer",
        craft.line(ndjson_object(chat, 2, "usage", counts))
        .decode()
        .replace('"total_tokens":1', '"total_tokens":1e400'),
    )
    add(
        "delta-with-index",
        "a content_delta with an index key",
        {**ndjson_object(chat, 2, "content_delta", {"text": "x"}), "index": 0},
    )


def _lab(group: Group, recording: Recording) -> None:
    """``ndjson-lab`` knows the lab's four kinds: a chat kind there is no frame it has."""
    grounded = recording.case(recording.case_ids[0])
    for name, item in (
        ("tool-call", call(0, ARGUMENTS, "read_file", "c0")),
        ("thought", thought("t")),
        ("signature", signature("text", 0, "s")),
        ("usage", usage(1, 1, 2)),
        ("finish", finish()),
    ):
        line = item_bytes(craft.NDJSON, grounded, 1, item)
        assert line is not None
        group.add(
            f"lab-{name}",
            f"a {name} frame on ndjson-lab: invalid_frame_schema",
            "#wire-ndjson-lab",
            craft.NDJSON_LAB,
            [line],
            case=grounded,
        )


def _frame_rules_first(group: Group) -> None:
    """A chat frame that fails a frame rule before its own: that rule's reason."""
    chat = chat_case()
    bad = call(7, None, "")  # invalid whatever the turn (lp: index past the calls begun)
    for wire in (craft.LP, craft.NDJSON):
        turn = [text("x"), call(0, ARGUMENTS, "read_file"), finish()]
        good = crafted(wire, chat, turn)
        assert good is not None

        def frame(
            sequence: int, item: ChatItem = bad, the_chat: BoundCase = chat, wire: str = wire
        ) -> bytes:
            data = item_bytes(wire, the_chat, sequence, item)
            if data is None:  # lp: no null arguments; an empty name is as invalid
                data = item_bytes(wire, the_chat, sequence, call(7, "", ""))
            assert data is not None
            return data

        foreign = chat_case(text="Another request.")
        for name, description, chunks, limits in (
            (
                "after-terminal",
                "an invalid call after done: frame_after_terminal",
                [*good, frame(5)],
                None,
            ),
            (
                "wrong-sequence",
                "an invalid call numbered 3 after frame 1: invalid_sequence",
                [good[0], frame(3)],
                None,
            ),
            (
                "foreign-binding",
                "an invalid call of another binding: frame_request_mismatch",
                [good[0], frame(2, the_chat=foreign)],
                None,
            ),
            (
                "past-frame-limit",
                "an invalid call as frame 3 of at most 2: frame_count_limit",
                [*good[:2], frame(3)],
                {"max_frames": 2},
            ),
            (
                "sequence-zero-under-policy",
                "a call numbered 0 under the duplicate policy",
                [good[0], frame(0, call(0, ARGUMENTS, "read_file"))],
                None,
            ),
        ):
            group.add(
                f"order-{name}",
                description,
                "#precedence",
                wire,
                chunks,
                case=chat,
                limits=limits,
                ignore_duplicates=name.endswith("policy"),
            )


def wires_of(group: Group, recording: Recording) -> None:
    _lp_corners(group)
    _ndjson_corners(group)
    _lab(group, recording)
    _frame_rules_first(group)
