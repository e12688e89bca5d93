"""What a hostile peer, model or user sends, and the credentials that must never show: text
with terminal controls and how it is shown, hostile trace records, nested brackets,
a store's password, the callers' tokens."""

from __future__ import annotations

from typing import Any

INJECTED = (
    '{"event":"state_changed","to_state":"completed","side":"producer",'
    '"stream_id":"forged-by-peer","level":"info"}'
)


TOKEN_A = "token-for-alice-0123456789abcdef"


TOKEN_B = "token-for-bob-fedcba9876543210xx"


def nested_brackets(depth: int) -> str:
    return "[" * depth + "]" * depth


#: Long enough for the trace scrubbers (4 characters or more), percent-encoded in the URL.
PASSWORD = "st0re-Secret@42"


QUOTED = "st0re-Secret%4042"


ACCEPTED = (
    "give redis://, rediss://, unix://, redis+cluster://, rediss+cluster:// or a file path "
    "(the scheme in any case)"
)


def refused(char: str, *, multiline: bool = False) -> bool:
    """The refused ranges, written out again here (not the module's patterns)."""
    if multiline and char in "\n\t":
        return False
    code = ord(char)
    return (
        code < 0x20
        or 0x7F <= code <= 0x9F
        or 0x2028 <= code <= 0x202E
        or 0x2066 <= code <= 0x2069
        or 0xD800 <= code <= 0xDFFF
    )


#: A value for every slot of a record, each with raw sequences a terminal would obey.
H = "\x1b]0;PWNED\x07\x1b[2J\x9b2J\u202e"


H_SHOWN = "\\x1b]0;PWNED\\x07\\x1b[2J\\x9b2J\\u202e"


def hostile_records(stream_id: str) -> list[dict[str, Any]]:
    """Both sides' records of one stream, every text field hostile (as a trace file a
    person is handed may hold)."""
    at = "2026-11-30T09:18:55.{:03d}000Z".format
    side = {"stream_id": stream_id, "level": "info"}
    return [
        {**side, "side": "producer", "timestamp": at(1), "event": "state_changed",
         "from_state": None, "to_state": "verified" + H, "input": "open" + H,
         "case_id": "case" + H},
        {**side, "side": "consumer", "timestamp": at(2), "event": "chunk_received",
         "component": "core", "size": 10, "index": "i" + H},
        {**side, "side": "consumer", "timestamp": at(3), "event": "frame_applied",
         "component": "core", "sequence": 1, "kind": "content_delta"},
        {**side, "side": "consumer", "timestamp": at(3), "event": "frame_applied",
         "component": "core", "sequence": 2, "kind": "tool_call"},
        {**side, "side": "consumer", "timestamp": at(4), "event": "note" + H,
         "component": "reader" + H, "detail": "text " + H + "\nmore"},
        {**side, "side": "consumer", "timestamp": at(5), "event": "state_changed",
         "component": "core", "from_state": "streaming", "to_state": "error",
         "input": "transport_error", "reason": "r" + H},
        {**side, "side": "consumer", "timestamp": at(6), "event": "stream_finished",
         "status": "error" + H, "reason": "transport_io_error" + H, "kind": "chat" + H,
         "call_index": 0, "call_id": "c" + H, "call_name": "read" + H},
    ]  # fmt: skip


TRACE_STREAM = "<svg/onload=alert(1)>" + H


def stream_id(scenario: str) -> str:
    """A stream id (the request's: a person typed it) with what a terminal obeys first."""
    return f"\x9b2J\u202e{scenario}-\x1b]0;T\x07"


TOKEN = "alice-token-0123456789abcdef"
