"""The ``chat`` group's rules: every chat frame rule and reason (docs/protocol.md#chat-rules),
each in its order (a frame that fails two rules gets the first), the chat reply's checks
(#chat-reply) in theirs, and the limits at and past their edges (tool calls; the content
limit over text, thoughts, arguments and signatures). The wires' own corners of the chat
frames are ``conformance.chat_wires``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from conformance import chat_wires, craft
from conformance.chat_craft import (
    call,
    chat_case,
    crafted,
    finish,
    frames,
    signature,
    text,
    thought,
    usage,
)
from conformance.text_replies import case_of
from conformance.vectors import Group, core_result
from replywire.shared.chat_frames import ChatItem
from replywire.shared.consumer_limits import Limits
from replywire.shared.recording import Recording
from replywire.shared.vectors import End

#: A call begun: the state most fragment rules are judged in.
CALL_0: Final = call(0, '{"path":"a"}', "read_file", "c0")
SURROGATE: Final = "\udc00"
#: How each wire carries a lone surrogate (docs/protocol.md#wire-lp: lp's strings are UTF-8).
_LONE: Final = " (its escape on NDJSON: invalid_utf8 on lp, which carries its three bytes)"
#: What a chat frame is in a reply of another kind, on each wire.
_OUTSIDE: Final = {
    craft.LP: "on lp, a field (7-11) its reply's frame does not have",
    craft.NDJSON: "part_outside_chat, before its fields are judged",
}
#: Each vector: a name, what it shows, its rule, and the turn (the last item is the one
#: judged when a frame rule refuses it; a done claiming the turn follows).
Rows = Sequence[tuple[str, str, str, Sequence[ChatItem]]]


def _frame_after_finish() -> Rows:
    done = (text("Hi."), finish())
    return [
        (f"after-finish-{name}", f"{what} after the finish", "#chat-rules", [*done, item])
        for name, what, item in (
            ("text", "a text delta", text("more")),
            ("thought", "a thought", thought("more")),
            ("call", "a new call", call(0, "{}", "shell")),
            ("signature", "a signature of the text", signature("text", 0, "s")),
            ("finish", "a second finish", finish()),
            ("same-finish", "the same finish again (another sequence)", finish()),
            (
                "invalid-call",
                "a call with no name (invalid too: the finish rule is first)",
                call(0, "{}", ""),
            ),
            ("invalid-thought", "an empty thought (invalid too)", thought("")),
        )
    ] + [
        (
            "after-finish-usage-then-text",
            "usage after the finish is fine; text after it is not",
            "#chat-rules",
            [*done, usage(1, 1, 2), text("x")],
        ),
        (
            "after-finish-invalid-usage",
            "usage after the finish with a count of -1: invalid_usage",
            "#chat-rules",
            [*done, usage(-1, 1, 0)],
        ),
    ]


def _tool_calls() -> Rows:
    rows: list[tuple[str, str, Sequence[ChatItem]]] = [
        ("index-skips", "the first call at index 1", [call(1, "{}", "shell")]),
        ("index-past-begun", "index 2 with one call begun", [CALL_0, call(2, "{}", "shell")]),
        ("index-string", 'index "0"', [call("0", "{}", "shell")]),
        ("index-float", "index 0.0", [call(0.0, "{}", "shell")]),
        ("index-true", "index true", [call(True, "{}", "shell")]),
        ("index-null", "index null", [call(None, "{}", "shell")]),
        ("index-negative", "index -1", [call(-1, "{}", "shell")]),
        ("index-2-64", "index 2^64", [call(2**64, "{}", "shell")]),
        ("id-number", "id 7", [call(0, "{}", "shell", 7)]),
        ("id-null", "id null", [call(0, "{}", "shell", None)]),
        ("name-number", "name 1", [call(0, "{}", 1)]),
        ("arguments-object", "arguments an object, not its text", [call(0, {}, "shell")]),
        ("arguments-null", "arguments null", [call(0, None, "shell")]),
        (
            "id-lone-surrogate",
            "a lone surrogate in the id" + _LONE,
            [call(0, "{}", "shell", "c" + SURROGATE)],
        ),
        (
            "name-lone-surrogate",
            "a lone surrogate in the name" + _LONE,
            [call(0, "{}", "shell" + SURROGATE)],
        ),
        (
            "arguments-lone-surrogate",
            "a lone surrogate in an arguments fragment" + _LONE,
            [CALL_0, call(0, " " + SURROGATE)],
        ),
        ("new-call-no-name", "a new call with an empty name", [call(0, "{}", "")]),
        ("second-call-no-name", "a second call with an empty name", [CALL_0, call(1, "{}", "")]),
        (
            "fragment-other-id",
            "a later fragment with another id",
            [call(0, '{"path":', "read_file", "c0"), call(0, '"a"}', "", "c1")],
        ),
        (
            "fragment-other-name",
            "a later fragment with another name",
            [call(0, '{"path":', "read_file", "c0"), call(0, '"a"}', "shell", "")],
        ),
        (
            "fragment-id-when-none",
            "a later fragment with an id the first did not give",
            [call(0, '{"path":', "read_file", ""), call(0, '"a"}', "", "c0")],
        ),
        (
            "fragment-empty",
            "a later fragment with no arguments",
            [call(0, '{"path":', "read_file", "c0"), call(0, "", "", "")],
        ),
        (
            "fragment-of-earlier-call-empty",
            "a fragment of call 0, empty, after call 1 began",
            [CALL_0, call(1, "{}", "shell"), call(0, "")],
        ),
    ]
    return [
        (f"tool-call-{name}", what, "#chat-rules", [text("x"), *items])
        for name, what, items in rows
    ]


def _parts() -> Rows:
    rows: list[tuple[str, str, Sequence[ChatItem]]] = [
        ("thought-empty", "an empty thought", [thought("")]),
        ("thought-null", "a thought of null", [thought(None)]),
        ("thought-number", "a thought of 1", [thought(1)]),
        (
            "thought-lone-surrogate",
            "a thought holding a lone surrogate" + _LONE,
            [thought("a" + SURROGATE)],
        ),
        ("signature-part-image", 'a signature of part "image"', [signature("image", 0, "s")]),
        ("signature-part-empty", 'a signature of part ""', [signature("", 0, "s")]),
        ("signature-part-upper", 'a signature of part "TEXT"', [signature("TEXT", 0, "s")]),
        ("signature-part-null", "a signature of part null", [signature(None, 0, "s")]),
        ("signature-value-empty", "a signature with an empty value", [signature("text", 0, "")]),
        ("signature-value-number", "a signature whose value is 1", [signature("text", 0, 1)]),
        (
            "signature-value-lone-surrogate",
            "a signature value with a lone surrogate" + _LONE,
            [signature("text", 0, SURROGATE)],
        ),
        (
            "signature-no-call",
            "a tool_call signature before any call",
            [signature("tool_call", 0, "s")],
        ),
        (
            "signature-call-not-begun",
            "a signature of call 1 with one call begun",
            [CALL_0, signature("tool_call", 1, "s")],
        ),
        (
            "signature-call-twice",
            "a second signature of call 0",
            [CALL_0, signature("tool_call", 0, "s"), signature("tool_call", 0, "t")],
        ),
        ("signature-text-index-1", "a text signature at index 1", [signature("text", 1, "s")]),
        (
            "signature-thought-index-1",
            "a thought signature at index 1",
            [thought("t"), signature("thought", 1, "s")],
        ),
        ("signature-index-string", 'a text signature at index "0"', [signature("text", "0", "s")]),
        (
            "signature-index-negative",
            "a call signature at index -1",
            [CALL_0, signature("tool_call", -1, "s")],
        ),
        ("usage-negative", "a prompt count of -1", [usage(-1, 0, 0)]),
        ("usage-string", 'a cached count of "1"', [usage(1, 0, 1, cached="1")]),
        ("usage-float", "a completion count of 1.0", [usage(1, 1.0, 2)]),
        ("usage-true", "a thoughts count of true", [usage(1, 1, 2, thoughts=True)]),
        ("usage-null", "a tool-use count of null", [usage(1, 1, 2, tool_use=None)]),
        ("usage-2-64", "a total of 2^64", [usage(1, 1, 2**64)]),
        ("finish-empty", "an empty finish reason", [finish("")]),
        ("finish-65", "a finish reason of 65 code points", [finish("S" * 65)]),
        (
            "finish-65-astral",
            "a finish reason of 65 astral code points (130 UTF-16 units)",
            [finish("\U0001f600" * 65)],
        ),
        ("finish-null", "a finish reason of null", [finish(None)]),
        ("finish-number", "a finish reason of 0", [finish(0)]),
        (
            "finish-lone-surrogate",
            "a finish reason with a lone surrogate" + _LONE,
            [finish("STOP" + SURROGATE)],
        ),
    ]
    return [(name, what, "#chat-rules", [text("x"), *items]) for name, what, items in rows]


def _reply_checks() -> Rows:
    """After done: the finish, then each call in index order, its three checks in order."""
    read, shell = "read_file", "shell"
    rows: list[tuple[str, str, Sequence[ChatItem]]] = [
        ("no-finish", "text and done, no finish", [text("Hello.")]),
        ("no-finish-empty", "done alone: an empty turn needs its finish too", []),
        (
            "no-finish-malformed-call",
            "no finish, and a malformed call: the finish is first",
            [call(0, '{"path":', read)],
        ),
        ("no-finish-usage", "usage and done, no finish", [text("x"), usage(1, 1, 2)]),
    ]
    for name, arguments in (
        ("cut", '{"path":'),
        ("array", "[]"),
        ("string", '"notes.py"'),
        ("number", "1"),
        ("null", "null"),
        ("empty", ""),
        ("duplicate-key", '{"path":"a","path":"b"}'),
        ("nan", '{"path":NaN}'),
        ("trailing", '{"path":"a"} {}'),
        ("bom", '\ufeff{"path":"a"}'),
        ("single-quotes", "{'path':'a'}"),
        ("trailing-comma", '{"path":"a",}'),
    ):
        rows.append(
            (
                f"malformed-{name}",
                f"arguments {arguments!r}: not strict JSON, or not an object",
                [call(0, arguments, read, "c0"), finish()],
            )
        )
    for name, tool, arguments in (
        ("missing-required", read, "{}"),
        ("min-length", read, '{"path":""}'),
        ("wrong-type", read, '{"path":1}'),
        ("additional", read, '{"path":"a","mode":"r"}'),
        ("enum", "get_weather", '{"city":"Oslo","units":"kelvin"}'),
        ("maximum", "count", '{"n":11}'),
        ("not-integer", "count", '{"n":1.5}'),
        ("integer-as-string", "count", '{"n":"1"}'),
        ("code-short", "code", '{"code":"ab"}'),
        ("code-four-astral", "code", '{"code":"\U0001f600\U0001f600\U0001f600\U0001f600"}'),
    ):
        rows.append(
            (
                f"arguments-invalid-{name}",
                f"{tool} with {arguments}: not valid against its parameters",
                [call(0, arguments, tool), finish()],
            )
        )
    rows += [
        (
            "malformed-escaped-lone-surrogate",
            "arguments whose string holds an escaped lone surrogate (strict JSON, no UTF-8)",
            [call(0, '{"command":"\\ud800"}', shell), finish()],
        ),
        (
            "malformed-escaped-lone-surrogate-name",
            "arguments whose name is an escaped lone surrogate",
            [call(0, '{"command":"pwd","\\udc00":1}', shell), finish()],
        ),
        (
            "malformed-infinity",
            "arguments holding 1e400 (strict JSON reads it as infinity, which JSON cannot write)",
            [call(0, '{"command":"pwd","n":1e400}', shell), finish()],
        ),
        (
            "undeclared",
            "a call of a tool the request does not declare",
            [call(0, '{"path":"a"}', "delete_all"), finish()],
        ),
        (
            "undeclared-case",
            "a call of Read_file: names are compared exactly",
            [call(0, '{"path":"a"}', "Read_file"), finish()],
        ),
        (
            "malformed-before-undeclared",
            "an undeclared call whose arguments are malformed",
            [call(0, '{"path":', "delete_all"), finish()],
        ),
        (
            "undeclared-before-invalid",
            "an undeclared call whose arguments would be invalid",
            [call(0, "{}", "delete_all"), finish()],
        ),
        (
            "call-0-undeclared-1-malformed",
            "call 0 undeclared, call 1 malformed: call 0",
            [call(0, "{}", "delete_all"), call(1, "[", shell), finish()],
        ),
        (
            "call-0-invalid-1-undeclared",
            "call 0 invalid, call 1 undeclared: call 0",
            [call(0, "{}", read), call(1, "{}", "delete_all"), finish()],
        ),
        (
            "call-0-fine-1-malformed",
            "call 0 fine, call 1 malformed: call 1",
            [CALL_0, call(1, '{"command":', shell, "c1"), finish()],
        ),
        (
            "index-order-not-arrival",
            "call 1's fragments end first and are malformed; call 0, "
            "ended later, is undeclared: call 0 (index order)",
            [
                call(0, "{", "delete_all", "c0"),
                call(1, "[", shell, "c1"),
                call(1, "]]"),
                call(0, "}"),
                finish(),
            ],
        ),
    ]
    return [(name, what, "#chat-reply", items) for name, what, items in rows]


def _order() -> Rows:
    """A frame that fails two rules: the first in docs/protocol.md's order is the verdict."""
    return [
        (
            "limit-before-no-name",
            "a 129th call with no name: invalid_tool_call, not the limit",
            "#chat-rules",
            [*_calls(128), call(128, "{}", "")],
        ),
    ]


def _calls(count: int, arguments: str = '{"path":"a"}') -> list[ChatItem]:
    return [call(index, arguments, "read_file", f"c{index}") for index in range(count)]


def _add_rows(group: Group, wire: str, rows: Rows) -> None:
    chat = chat_case()
    for name, description, rule, items in rows:
        chunks = crafted(wire, chat, list(items))
        if chunks is None:  # a value the wire cannot carry
            continue
        group.add(name, description, rule, wire, chunks, case=chat)


def _limits(group: Group, wire: str) -> None:
    """The tool-call limit at and past its default; the content limit, custom and default,
    reached by each of the four things it counts."""
    chat = chat_case()
    last = call(127, '"b"}')
    for name, items, description in (
        ("tool-calls-128", [*_calls(128), finish()], "128 calls: the default limit"),
        ("tool-calls-129", [*_calls(129), finish()], "129 calls: one past the default limit"),
        (
            "tool-calls-128-then-fragment",
            [*_calls(127), call(127, '{"path":', "read_file"), last, finish()],
            "128 calls, then a fragment of the last: not a new call",
        ),
    ):
        group.add(
            f"limit-{name}",
            description,
            "#limits",
            wire,
            craft.encode(wire, frames(chat, items)),
            case=chat,
        )
    # A custom limit: the 002 turn's two calls (the second's fragments interleaved).
    turn_002 = [
        text("Reading "),
        call(0, '{"path":"', "read_file", "call-read"),
        call(1, '{"command":"', "shell", "call-shell"),
        call(1, 'pwd"}'),
        call(0, 'notes.py"}'),
        finish("tool_calls"),
    ]
    for value, where in ((2, "at"), (1, "past")):
        group.add(
            f"limit-max_tool_calls.{where}-edge",
            f"max_tool_calls = {value}: {where} the edge (two calls, fragments interleaved)",
            "#limits",
            wire,
            craft.encode(wire, frames(chat, turn_002)),
            case=chat,
            limits={"max_tool_calls": value},
        )
    counted: dict[str, list[ChatItem]] = {
        "text": [thought("efgh"), CALL_0, signature("tool_call", 0, "sig"), text("abcd")],
        "thought": [text("abcd"), CALL_0, signature("tool_call", 0, "sig"), thought("efgh")],
        "arguments": [
            text("abcd"),
            thought("efgh"),
            call(0, '{"path":', "read_file", "c0"),
            call(0, '"a"}'),
        ],
        "signature": [text("abcd"), thought("efgh"), CALL_0, signature("tool_call", 0, "sig")],
    }
    for part, items in counted.items():
        turn = [*items, finish("A-LONG-FINISH-REASON-NOT-COUNTED")]
        chunks = tuple(craft.encode(wire, frames(chat, turn)))

        def passes(value: int, chunks: tuple[bytes, ...] = chunks) -> bool:
            limits = {"max_content_chars": value}
            return bool(
                core_result(chat.binding, wire, chunks, End.EOF, limits)["status"] == "complete"
            )

        edge = craft.smallest(passes, 1, 1000)
        for value, where in ((edge, "at"), (edge - 1, "past")):
            group.add(
                f"limit-content-{part}.{where}-edge",
                f"max_content_chars = {value}: {where} the edge ({edge} code points of text, "
                f"thoughts, arguments and signatures), the {part} last",
                "#limits",
                wire,
                chunks,
                case=chat,
                limits={"max_content_chars": value},
            )
    default = Limits().max_content_chars
    for count, where in ((default, "at"), (default + 1, "past")):
        pieces = [thought("t" * 4000) for _ in range(count // 4000)]
        pieces.append(thought("t" * (count % 4000)))
        turn = [*pieces, finish()]
        group.add(
            f"limit-default-content-thoughts.{where}-edge",
            f"{count} code points of thoughts: {where} the default content limit",
            "#limits",
            wire,
            craft.encode(wire, frames(chat, turn)),
            case=chat,
        )


def _outside_chat(group: Group, recording: Recording, wire: str) -> None:
    """The five chat frames in a grounded and in a text reply: on NDJSON
    ``part_outside_chat``, on lp fields its reply's frame does not have."""
    grounded = recording.case(recording.case_ids[0])
    for reply, other in (("grounded", grounded), ("text", case_of("abcdefgh"))):
        for name, what, item in (
            ("tool-call", "a tool_call", CALL_0),
            ("thought", "a thought", thought("t")),
            ("signature", "a signature", signature("text", 0, "s")),
            ("usage", "a usage", usage(1, 1, 2)),
            ("finish", "a finish", finish()),
            ("invalid-call", "an invalid tool_call", call("x", None, "")),
            ("empty-finish", "an empty finish", finish("")),
        ):
            chunks = crafted(wire, other, [text("{"), item])
            if chunks is None:
                continue
            group.add(
                f"outside-chat-{reply}-{name}",
                f"{what} frame in a {reply} reply: " + _OUTSIDE[wire],
                "#lp-fields-by-kind" if wire == craft.LP else "#chat-rules",
                wire,
                chunks,
                case=other,
            )


def rules_of(group: Group, recording: Recording) -> None:
    """Add every rule's vectors to ``group`` on both default wires, and the wires' own."""
    for wire in (craft.LP, craft.NDJSON):
        for rows in (_frame_after_finish(), _tool_calls(), _parts(), _reply_checks(), _order()):
            _add_rows(group, wire, rows)
        _limits(group, wire)
        _outside_chat(group, recording, wire)
    chat_wires.wires_of(group, recording)
