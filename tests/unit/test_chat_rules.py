"""A chat reply's frame rules (docs/protocol.md#chat-rules), each on both default wires:
part_outside_chat, frame_after_finish, each chat frame's fields, the tool call limit, the
content limit over every part, the chat content digest (#chat-digest) and the duplicate
policy on chat frames.

One file past 500 lines: each rule is checked on both wires from the same frame builders.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from replywire.consumer import flags as consumer_flags
from replywire.consumer.cli import limits_from
from replywire.shared.chat_parts import ChatDigest, ToolCallPart
from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.consumer_limits import Limits
from replywire.shared.digest import digest
from replywire.shared.errors import ProtocolFailure
from replywire.shared.frames import Frame, FrameKind
from replywire.shared.reasons import Reason
from replywire.shared.wire import WireFormat
from tests.chat_turns import (
    EXAMPLE,
    WIRES,
    Item,
    call,
    chat_binding,
    encoded,
    finish,
    frames,
    judge,
    run,
    signature,
    text,
    thought,
    usage,
)

LP, NDJSON = WireFormat.LENGTH_PREFIXED, WireFormat.NDJSON
#: An unfinished call and a finish: a valid ending for the turns below.
END = (finish(),)


def refused(result: dict[str, Any], reason: Reason) -> None:
    assert (result["status"], result["reason"]) == ("invalid", reason.value), result["reason"]


def both(items: list[Item] | tuple[Item, ...], reason: Reason, **kw: Any) -> list[dict[str, Any]]:
    """``items`` judged on both wires, each refused ``reason``."""
    results = [run(items, wire, **kw) for wire in WIRES]
    for result in results:
        refused(result, reason)
    return results


# --- part_outside_chat ------------------------------------------------------------------

TEXT_BINDING: dict[str, Any] = {
    "kind": "text",
    "case_id": "text-0123456789abcdef",
    "request_sha256": digest([["human", "Say something."]]),
    "messages": [["human", "Say something."]],
}


@pytest.mark.parametrize("item", [call(0, "{}", name="f"), thought("x"), usage(1, 1, 2), finish()])
def test_a_chat_frame_outside_a_chat_reply(item: Item) -> None:
    """ndjson: part_outside_chat, after the frame's sequence and binding; lp: the frame of a
    text reply has no field 7-11 (docs/protocol.md#lp-fields-by-kind)."""
    sent = frames(digest(TEXT_BINDING), [text("Hi"), item])
    on_ndjson = judge(TEXT_BINDING, encoded(NDJSON, sent), NDJSON)
    refused(on_ndjson, Reason.PART_OUTSIDE_CHAT)
    assert on_ndjson["stats"]["application_frames"] == 2
    assert "turn" not in on_ndjson
    on_lp = judge(TEXT_BINDING, encoded(LP, sent), LP)
    refused(on_lp, Reason.UNKNOWN_FRAME_FIELD)
    assert on_lp["stats"]["application_frames"] == 1


def test_part_outside_chat_comes_after_the_sequence_check() -> None:
    sent = frames(digest(TEXT_BINDING), [text("Hi"), thought("x")])
    renumbered = [sent[0], Frame(**{**_fields(sent[1]), "sequence": 5})]
    refused(judge(TEXT_BINDING, encoded(NDJSON, renumbered), NDJSON), Reason.INVALID_SEQUENCE)


def _fields(frame: Frame) -> dict[str, Any]:
    return {name: getattr(frame, name) for name in Frame.__dataclass_fields__}


# --- frame_after_finish -------------------------------------------------------------------


@pytest.mark.parametrize(
    "after",
    [
        text("more"),
        thought("more"),
        call(0, "{}", name="shell"),
        signature("text", 0, "s"),
        finish(),
    ],
    ids=["content_delta", "thought", "tool_call", "signature", "finish"],
)
def test_after_the_finish_only_usage(after: Item) -> None:
    results = both([text("Hi"), finish(), after], Reason.FRAME_AFTER_FINISH)
    assert results[0]["turn"]["finish_reason"] == "STOP"


def test_frame_after_finish_comes_before_the_frames_own_fields() -> None:
    both([text("Hi"), finish(), thought("")], Reason.FRAME_AFTER_FINISH)
    both([text("Hi"), finish(), call(7, "", name="")], Reason.FRAME_AFTER_FINISH)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_usage_after_the_finish_is_applied(wire: WireFormat) -> None:
    result = run([text("Hi"), usage(1, 1, 2), finish(), usage(3, 4, 7)], wire)
    assert result["status"] == "complete"
    assert result["accepted_answer"]["usage"]["total_tokens"] == 7


# --- tool_call -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "items",
    [
        [call(1, "{}", name="shell")],  # index past the calls begun
        [call(0, "{", name="shell"), call(2, "}")],
        [call(0, "{}", name="")],  # a new call without a name
        [call(0, "{", name="shell", call_id="a"), call(0, "}", call_id="b")],  # id changed
        [call(0, "{", name="shell"), call(0, "}", name="read_file")],  # name changed
        [call(0, "{", name="shell"), call(0, "")],  # a later fragment without arguments
    ],
    ids=["index-ahead", "index-skips", "no-name", "id-changed", "name-changed", "no-arguments"],
)
def test_invalid_tool_call_on_both_wires(items: list[Item]) -> None:
    both([*items, *END], Reason.INVALID_TOOL_CALL)


@pytest.mark.parametrize(
    "part",
    [
        ToolCallPart(index="0", id="", name="shell", arguments="{}"),
        ToolCallPart(index=0.0, id="", name="shell", arguments="{}"),
        ToolCallPart(index=True, id="", name="shell", arguments="{}"),
        ToolCallPart(index=-1, id="", name="shell", arguments="{}"),
        ToolCallPart(index=None, id="", name="shell", arguments="{}"),
        ToolCallPart(index=0, id=None, name="shell", arguments="{}"),
        ToolCallPart(index=0, id="", name=1, arguments="{}"),
        ToolCallPart(index=0, id="", name="shell", arguments={"a": 1}),
        ToolCallPart(index=0, id="", name="shell", arguments="{\ud800}"),
        ToolCallPart(index=0, id="\udc00", name="shell", arguments="{}"),
    ],
    ids=[
        "index-string",
        "index-fraction",
        "index-true",
        "index-negative",
        "index-null",
        "id-null",
        "name-number",
        "arguments-object",
        "arguments-lone-surrogate",
        "id-lone-surrogate",
    ],
)
def test_invalid_tool_call_values_on_ndjson(part: ToolCallPart) -> None:
    refused(run([(FrameKind.TOOL_CALL, part), *END], NDJSON), Reason.INVALID_TOOL_CALL)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_later_fragment_may_repeat_the_id_and_name(wire: WireFormat) -> None:
    items = [
        call(0, '{"command":', name="shell", call_id="c1"),
        call(0, '"ls"}', name="shell", call_id="c1"),
        finish(),
    ]
    result = run(items, wire)
    assert result["status"] == "complete"
    assert result["accepted_answer"]["tool_calls"][0]["arguments"] == {"command": "ls"}


@pytest.mark.parametrize("wire", WIRES, ids=str)
@pytest.mark.parametrize("limit", [1, 2, 128])
def test_the_tool_call_limit_at_and_past_its_edge(wire: WireFormat, limit: int) -> None:
    limits = Limits(max_tool_calls=limit) if limit != 128 else None  # 128: the default
    calls = [call(i, '{"command":"pwd"}', name="shell") for i in range(limit)]
    at = run([*calls, finish()], wire, limits=limits)
    assert at["status"] == "complete", at["reason"]
    assert len(at["accepted_answer"]["tool_calls"]) == limit
    past = run([*calls, call(limit, "{}", name="shell"), finish()], wire, limits=limits)
    refused(past, Reason.TOOL_CALL_LIMIT)
    assert len(past["turn"]["tool_calls"]) == limit
    # a fragment of a call begun is not a new call
    more = run([*calls, call(limit - 1, " "), finish()], wire, limits=limits)
    assert more["status"] == "complete"


def test_a_new_call_without_a_name_is_invalid_before_the_limit() -> None:
    both(
        [call(0, "{}", name="shell"), call(1, "{}"), *END],
        Reason.INVALID_TOOL_CALL,
        limits=Limits(max_tool_calls=1),
    )


def test_the_default_tool_call_limit_is_128() -> None:
    assert Limits().max_tool_calls == 128
    with pytest.raises(ValueError, match="max_tool_calls"):
        Limits(max_tool_calls=0)


# --- thought, signature, usage, finish -------------------------------------------------------


@pytest.mark.parametrize("value", ["", None, 3, "\ud83d"], ids=["empty", "null", "number", "lone"])
def test_invalid_thought(value: object) -> None:
    refused(run([thought(value), *END], NDJSON), Reason.INVALID_THOUGHT)
    if value == "":
        refused(run([thought(value), *END], LP), Reason.INVALID_THOUGHT)


@pytest.mark.parametrize(
    "items",
    [
        [signature("image", 0, "s")],
        [signature("", 0, "s")],
        [text("Hi"), signature("text", 0, "")],
        [text("Hi"), signature("text", 1, "s")],
        [thought("Hm"), signature("thought", 2, "s")],
        [signature("tool_call", 0, "s")],  # no call begun
        [call(0, "{}", name="shell"), signature("tool_call", 1, "s")],
        [
            call(0, "{}", name="shell"),
            signature("tool_call", 0, "s"),
            signature("tool_call", 0, "t"),
        ],
    ],
    ids=[
        "part-unknown",
        "part-empty",
        "value-empty",
        "text-index-1",
        "thought-index-2",
        "no-call",
        "call-not-begun",
        "call-signed-twice",
    ],
)
def test_invalid_signature_on_both_wires(items: list[Item]) -> None:
    both([*items, *END], Reason.INVALID_SIGNATURE)


@pytest.mark.parametrize(
    "item",
    [
        signature("text", "0", "s"),
        signature("text", 0, 7),
        signature(None, 0, "s"),
        signature("text", 0, "\udfff"),
    ],
    ids=["index-string", "value-number", "part-null", "value-lone"],
)
def test_invalid_signature_values_on_ndjson(item: Item) -> None:
    refused(run([text("Hi"), item, *END], NDJSON), Reason.INVALID_SIGNATURE)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_signature_is_kept_with_its_part(wire: WireFormat) -> None:
    items = [
        thought("Two "),
        signature("thought", 0, "dGg="),
        thought("cities."),
        text("Checking "),
        signature("text", 0, "dHg="),
        call(0, '{"command":"date"}', name="shell", call_id="c1"),
        signature("tool_call", 0, "c2lnLTE="),
        text("both."),
        finish(),
    ]
    result = run(items, wire)
    assert result["status"] == "complete"
    assert result["accepted_answer"]["signatures"] == [
        {"part": "thought", "at": 4, "value": "dGg="},
        {"part": "text", "at": 9, "value": "dHg="},
        {"part": "tool_call", "index": 0, "value": "c2lnLTE="},
    ]
    assert result["turn"]["signatures"] == result["accepted_answer"]["signatures"]
    assert result["accepted_answer"]["thoughts"] == "Two cities."


@pytest.mark.parametrize(
    "value",
    [-1, 2**64, 1.0, "1", None, True],
    ids=["negative", "2**64", "fraction", "string", "null", "true"],
)
def test_invalid_usage_on_ndjson(value: object) -> None:
    item = usage(1, 1, 2)
    part = item[1]
    bad = (FrameKind.USAGE, type(part)(**{**_part_fields(part), "completion_tokens": value}))
    refused(run([bad, *END], NDJSON), Reason.INVALID_USAGE)


def _part_fields(part: object) -> dict[str, Any]:
    return {name: getattr(part, name) for name in part.__dataclass_fields__}  # type: ignore[attr-defined]


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_usage_is_replaced_not_summed(wire: WireFormat) -> None:
    result = run([usage(10, 1, 11), text("Hi"), usage(10, 5, 15), finish()], wire)
    assert result["accepted_answer"]["usage"] == {
        "prompt_tokens": 10,
        "cached_tokens": 0,
        "completion_tokens": 5,
        "thoughts_tokens": 0,
        "tool_use_prompt_tokens": 0,
        "total_tokens": 15,
    }
    assert result["notes"] == []


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_the_largest_counts_are_usage(wire: WireFormat) -> None:
    top = 2**64 - 1
    result = run([usage(top, 0, top), finish()], wire)
    assert result["status"] == "complete"
    assert result["accepted_answer"]["usage"]["prompt_tokens"] == top


@pytest.mark.parametrize(
    "reason", ["", "x" * 65, "\U0001f600" * 65], ids=["empty", "65", "65-code-points"]
)
def test_invalid_finish_on_both_wires(reason: str) -> None:
    both([text("Hi"), finish(reason)], Reason.INVALID_FINISH)


@pytest.mark.parametrize("reason", [None, 1, "\ud800STOP"], ids=["null", "number", "lone"])
def test_invalid_finish_values_on_ndjson(reason: object) -> None:
    refused(run([text("Hi"), finish(reason)], NDJSON), Reason.INVALID_FINISH)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_finish_reason_of_64_code_points(wire: WireFormat) -> None:
    reason = "\U0001f600" * 64  # 64 code points, 128 UTF-16 units
    result = run([finish(reason)], wire)
    assert result["status"] == "complete"
    assert result["accepted_answer"]["finish_reason"] == reason


# --- the content limit over every part ------------------------------------------------------

LIMIT_ITEMS = [
    text("ab"),  # 2
    thought("cde"),  # 3
    call(0, '{"command":"x"}', name="shell"),  # 15
    signature("tool_call", 0, "sig"),  # 3
    usage(1, 2, 3),  # 0
    finish(),  # 0 (the reason is not counted)
]
LIMIT_TOTAL = 2 + 3 + 15 + 3


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_the_content_limit_counts_text_thoughts_arguments_and_signatures(wire: WireFormat) -> None:
    at = run(LIMIT_ITEMS, wire, limits=Limits(max_content_chars=LIMIT_TOTAL))
    assert at["status"] == "complete"
    past = run(LIMIT_ITEMS, wire, limits=Limits(max_content_chars=LIMIT_TOTAL - 1))
    refused(past, Reason.CONTENT_LIMIT)
    # the signature that went past is kept with the turn, with no event of its own
    assert past["turn"]["signatures"] == [{"part": "tool_call", "index": 0, "value": "sig"}]
    assert [e["kind"] for e in past["events"]].count("part_received") == 2


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_the_content_limit_refuses_a_delta_past_it(wire: WireFormat) -> None:
    past = run([thought("abc"), text("de"), finish()], wire, limits=Limits(max_content_chars=4))
    refused(past, Reason.CONTENT_LIMIT)
    assert past["provisional_content"] == "de"
    assert [e["kind"] for e in past["events"]] == ["part_received"]


# --- the chat content digest ---------------------------------------------------------------


def _claim_of(items: list[Item]) -> tuple[str, int]:
    running = ChatDigest()
    for kind, value in items:
        if isinstance(value, str):
            running.add_text(value)
        else:
            running.add_part(kind.value, value)
    return running.claim()


def _example() -> list[Item]:
    return list(EXAMPLE)


@pytest.mark.parametrize(
    "change",
    [
        lambda items: items.pop(6),  # a part dropped (the usage)
        lambda items: items.insert(2, items.pop(3)),  # two calls' fragments swapped
        lambda items: items.__setitem__(5, text("the filez.")),  # altered
        lambda items: items.__setitem__(6, usage(18, 9, 28, cached=4)),  # a count altered
    ],
    ids=["dropped", "reordered", "altered-text", "altered-usage"],
)
def test_the_claim_covers_every_part(change: Any) -> None:
    """The producer's claim is the example's; the consumer applied something else."""
    claim = _claim_of(_example())
    sent = _example()
    change(sent)
    for wire in WIRES:
        refused(run(sent, wire, claim=claim), Reason.CONTENT_DIGEST_MISMATCH)
    assert all(run(sent, wire)["status"] == "complete" for wire in WIRES)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_retyped_part_changes_the_digest(wire: WireFormat) -> None:
    """A tool call's arguments carried as a text delta: the same characters, another record."""
    claim = _claim_of([text("Hi "), call(0, '{"command":"ls"}', name="shell"), finish()])
    retyped = [text("Hi "), text('{"command":"ls"}'), finish()]
    refused(run(retyped, wire, claim=claim), Reason.CONTENT_DIGEST_MISMATCH)


def test_the_digest_is_over_the_records_the_protocol_shows() -> None:
    """docs/protocol.md#chat-digest: the canonical JSON of the frame's kind and fields, a
    line feed after each; content_frames counts the six kinds."""
    items = [text("Hel"), call(0, '{"city":', name="get_weather"), usage(1, 2, 3), finish()]
    records = (
        b'{"kind":"content_delta","text":"Hel"}\n'
        b'{"arguments":"{\\"city\\":","id":"","index":0,"kind":"tool_call","name":"get_weather"}\n'
        b'{"cached_tokens":0,"completion_tokens":2,"kind":"usage","prompt_tokens":1,'
        b'"thoughts_tokens":0,"tool_use_prompt_tokens":0,"total_tokens":3}\n'
        b'{"kind":"finish","reason":"STOP"}\n'
    )
    assert _claim_of(items) == (hashlib.sha256(records).hexdigest(), 4)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_done_that_counts_only_the_deltas_is_a_mismatch(wire: WireFormat) -> None:
    items = [text("Hi"), thought("x"), finish()]
    sha, _ = _claim_of(items)
    refused(run(items, wire, claim=(sha, 1)), Reason.CONTENT_DIGEST_MISMATCH)


# --- the duplicate policy ---------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_an_exact_replay_of_a_chat_frame_is_dropped(wire: WireFormat) -> None:
    binding = chat_binding()
    sent = encoded(wire, frames(digest(binding), EXAMPLE))
    replayed = [*sent[:3], sent[1], sent[2], *sent[3:]]
    result = judge(binding, replayed, wire, ignore_duplicates=True)
    assert result["status"] == "complete"
    dropped = [e for e in result["events"] if e["kind"] == "duplicate_dropped"]
    assert [e["sequence"] for e in dropped] == [2, 3]
    refused(judge(binding, replayed, wire), Reason.INVALID_SEQUENCE)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_different_chat_frame_under_an_applied_sequence_conflicts(wire: WireFormat) -> None:
    binding = chat_binding()
    sent = encoded(wire, frames(digest(binding), EXAMPLE))
    other = encoded(
        wire, frames(digest(binding), [text("Reading "), call(0, '{"path":', name="shell")])
    )
    result = judge(binding, [*sent[:3], other[1], *sent[3:]], wire, ignore_duplicates=True)
    refused(result, Reason.CONFLICTING_DUPLICATE)


# --- what the core keeps as it goes -------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_refused_turn_keeps_what_it_held(wire: WireFormat) -> None:
    result = run([text("Hi "), call(0, '{"comm', name="shell", call_id="c1"), thought("")], wire)
    refused(result, Reason.INVALID_THOUGHT)
    assert result["turn"] == {
        "text": "Hi ",
        "thoughts": "",
        "tool_calls": [{"index": 0, "id": "c1", "name": "shell", "arguments": '{"comm'}],
        "signatures": [],
        "usage": None,
        "finish_reason": None,
    }
    assert result["kind"] == "chat"
    assert result["first_output"] is True
    assert result["notes"] == []
    assert "call" not in result


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_turn_broken_off_keeps_its_turn(wire: WireFormat) -> None:
    binding = chat_binding()
    sent = encoded(wire, frames(digest(binding), EXAMPLE))
    consumer = ReplyConsumer(binding, wire=wire)
    for chunk in sent[:4]:
        consumer.receive_data(chunk)
    result = consumer.transport_error().to_dict()
    assert (result["status"], result["reason"]) == ("error", "transport_io_error")
    assert [c["arguments"] for c in result["turn"]["tool_calls"]] == [
        '{"path":"notes.py"}',
        '{"comm',
    ]


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_chat_frame_is_checked_with_the_others_first(wire: WireFormat) -> None:
    """Sequence, binding and the frame count come before the chat rules."""
    binding = chat_binding()
    foreign = encoded(wire, frames("0" * 64, [thought("")]))
    refused(judge(binding, foreign, wire), Reason.FRAME_REQUEST_MISMATCH)
    counted = run([thought("a"), thought("")], wire, limits=Limits(max_frames=1))
    refused(counted, Reason.FRAME_COUNT_LIMIT)


def test_receive_data_raises_the_chat_reason() -> None:
    binding = chat_binding()
    sent = encoded(LP, frames(digest(binding), [finish(), finish()]))
    consumer = ReplyConsumer(binding, wire=LP)
    consumer.receive_data(sent[0])
    with pytest.raises(ProtocolFailure) as info:
        consumer.receive_data(sent[1])
    assert info.value.reason is Reason.FRAME_AFTER_FINISH


# --- the limit as the consumer's CLI configures it -----------------------------------------------


@pytest.mark.parametrize("value", ["0", "-1", "x"])
def test_max_tool_calls_below_one_is_a_usage_error(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        consumer_flags.build_parser().parse_args(["stream", "--max-tool-calls", value])
    assert exit_info.value.code == 2
    assert "--max-tool-calls" in capsys.readouterr().err.splitlines()[-1]


def test_max_tool_calls_reaches_the_cores_limits() -> None:
    args = consumer_flags.build_parser().parse_args(["stream", "--max-tool-calls", "3"])
    assert limits_from(args).max_tool_calls == 3
    default = consumer_flags.build_parser().parse_args(["stream"])
    assert limits_from(default) == Limits()
