"""A property of the chat kind: any chat turn — text, thoughts, calls whose fragments
interleave, signatures with their parts, usage reports before and after the finish —
encoded on lp and on ndjson and cut into any chunks is accepted with exactly that turn,
which a model of the turn written here (not the core's) predicts."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from replywire.shared.chat_parts import PART_FIELDS, USAGE_COMPONENTS
from replywire.shared.digest import digest
from tests.chat_turns import (
    WIRES,
    Item,
    call,
    chat_binding,
    encoded,
    finish,
    frames,
    judge,
    signature,
    text,
    thought,
    usage,
)

#: Two tools that take any object.
TOOLS: list[dict[str, Any]] = [
    {"name": name, "description": "Anything.", "parameters": {"type": "object"}}
    for name in ("alpha", "beta.v2")
]
BINDING = chat_binding(TOOLS)
SMALL_TEXT = st.text(min_size=1, max_size=6)
ARGUMENTS = st.dictionaries(
    st.text(max_size=4),
    st.one_of(st.integers(-(2**70), 2**70), st.text(max_size=6), st.booleans(), st.none()),
    max_size=3,
)
COUNT = st.integers(0, 2**64 - 1)


@st.composite
def turns(draw: st.DrawFn) -> tuple[list[Item], dict[str, Any]]:
    """A turn's items in a valid order, and the accepted answer they make."""
    calls = draw(
        st.lists(st.tuples(st.sampled_from(TOOLS), st.text(max_size=4), ARGUMENTS), max_size=3)
    )
    lanes: list[list[Item]] = []
    for index, (tool, call_id, arguments) in enumerate(calls):
        raw = json.dumps(arguments, ensure_ascii=draw(st.booleans()))
        cuts = sorted(draw(st.sets(st.integers(1, max(1, len(raw) - 1)), max_size=3)))
        pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True) if raw[a:b]]
        first_empty = draw(st.booleans())
        fragments = ["", *pieces] if first_empty else pieces
        lane = [call(index, fragments[0], name=tool["name"], call_id=call_id)]
        if draw(st.booleans()):
            lane.append(signature("tool_call", index, draw(SMALL_TEXT)))
        for piece in fragments[1:]:
            repeat = draw(st.booleans())
            lane.append(
                call(
                    index,
                    piece,
                    name=tool["name"] if repeat else "",
                    call_id=call_id if repeat else "",
                )
            )
        lanes.append(lane)
    free: list[Item] = draw(
        st.lists(
            st.one_of(
                SMALL_TEXT.map(text),
                SMALL_TEXT.map(thought),
                SMALL_TEXT.map(lambda value: signature("text", 0, value)),
                SMALL_TEXT.map(lambda value: signature("thought", 0, value)),
                st.tuples(COUNT, COUNT, COUNT).map(lambda c: usage(c[0], c[1], c[2])),
            ),
            max_size=8,
        )
    )
    # Merge the lanes: a call begins only after the one before it began.
    items: list[Item] = []
    positions = [0] * len(lanes)
    free_at = 0
    while free_at < len(free) or any(
        p < len(lane) for p, lane in zip(positions, lanes, strict=True)
    ):
        open_lanes = [
            i
            for i, lane in enumerate(lanes)
            if positions[i] < len(lane) and (i == 0 or positions[i - 1] > 0)
        ]
        choices = [*open_lanes, *(["free"] if free_at < len(free) else [])]
        choice = draw(st.sampled_from(choices))
        if choice == "free":
            items.append(free[free_at])
            free_at += 1
        else:
            assert isinstance(choice, int)
            items.append(lanes[choice][positions[choice]])
            positions[choice] += 1
    reason = draw(st.text(min_size=1, max_size=12))
    after = draw(
        st.lists(st.tuples(COUNT, COUNT, COUNT).map(lambda c: usage(c[0], c[1], c[2])), max_size=2)
    )
    items = [*items, finish(reason), *after]
    return items, expected_answer(items, calls)


def expected_answer(items: list[Item], calls: list[Any]) -> dict[str, Any]:
    """The turn these items make, by the protocol's words (docs/protocol.md#chat-reply)."""
    turn_text, thoughts, signatures = "", "", []
    last_usage = None
    finish_reason = None
    ids: dict[int, str] = {}
    for kind, value in items:
        fields = (
            {}
            if isinstance(value, str)
            else {n: getattr(value, n) for n in PART_FIELDS[kind.value]}
        )
        if kind.value == "content_delta":
            assert isinstance(value, str)
            turn_text += value
        elif kind.value == "thought":
            thoughts += fields["text"]
        elif kind.value == "tool_call":
            ids.setdefault(fields["index"], fields["id"])
        elif kind.value == "signature":
            if fields["part"] == "tool_call":
                signatures.append(
                    {"part": "tool_call", "index": fields["index"], "value": fields["value"]}
                )
            else:
                at = len(turn_text) if fields["part"] == "text" else len(thoughts)
                signatures.append({"part": fields["part"], "at": at, "value": fields["value"]})
        elif kind.value == "usage":
            last_usage = fields
        else:
            finish_reason = fields["reason"]
    return {
        "text": turn_text,
        "thoughts": thoughts,
        "tool_calls": [
            {"index": i, "id": ids[i], "name": tool["name"], "arguments": arguments}
            for i, (tool, _, arguments) in enumerate(calls)
        ],
        "signatures": signatures,
        "usage": last_usage,
        "finish_reason": finish_reason,
    }


@settings(max_examples=150, deadline=None)
@given(turns(), st.lists(st.integers(1, 4000), max_size=12), st.sampled_from(WIRES))
def test_any_chat_turn_cut_anyhow_is_accepted_with_exactly_that_turn(
    turn: tuple[list[Item], dict[str, Any]], cuts: list[int], wire: Any
) -> None:
    items, expected = turn
    stream = b"".join(encoded(wire, frames(digest(BINDING), items)))
    points = sorted({cut % (len(stream) + 1) for cut in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    result = judge(BINDING, [chunk for chunk in chunks if chunk], wire)
    assert (result["status"], result["reason"]) == ("complete", None)
    assert result["accepted_answer"] == expected
    assert result["provisional_content"] == expected["text"]
    usage_report = expected["usage"]
    mismatch = usage_report is not None and usage_report["total_tokens"] != sum(
        usage_report[name] for name in USAGE_COMPONENTS
    )
    assert result["notes"] == (["usage_total_mismatch"] if mismatch else [])
    raw = [c["arguments"] for c in result["turn"]["tool_calls"]]
    assert [json.loads(r) for r in raw] == [c["arguments"] for c in expected["tool_calls"]]
