"""What the fake answers a chat request (a request with ``thinkingConfig``, tools and turns:
the Gemini source's chat body), one script per ``fake-chat-*`` model, as the events of a
reply (each a GenerateContentResponse, in Google's field order).

* ``fake-chat-text``: text only, in three events, usage on every event (cumulative);
* ``fake-chat-turn``: the chat kind's evidence turn, docs/protocol.md#chat-reply's example:
  a thought summary, text, two parallel calls of ``get_weather`` (Oslo and Lima, the first
  with its thought signature), usage cumulative over the three events;
* ``fake-chat-undeclared``: a call of a tool the request does not declare;
* ``fake-chat-inline-data``: an ``inlineData`` part after the text (a part a chat turn
  cannot carry: ``provider_part_unsupported``).

Gemini streams a ``functionCall`` whole, in one part (never in fragments), with its
``thoughtSignature`` on the same part (ai.google.dev thinking and function calling docs;
``fake-function-call`` of ``scripts`` answers a grounded request so).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from harness.fake_gemini.protocol import Turn

#: The evidence turn's thought, text, calls and signature (the protocol's example).
THOUGHT: Final = "The user wants two cities."
TEXT: Final = "Checking both."
CALLS: Final = (
    {"id": "c1", "name": "get_weather", "args": {"city": "Oslo"}},
    {"id": "c2", "name": "get_weather", "args": {"city": "Lima"}},
)
SIGNATURE: Final = "c2lnLTE="
#: The evidence turn's usage after each of its three events: prompt, candidates, thoughts.
EVIDENCE_USAGE: Final = ((31, 0, 12), (31, 4, 12), (31, 18, 12))
#: What ``fake-chat-text`` answers: this, then the last user turn's text.
CHAT_TEXT_REPLY: Final = "A chat reply to: "
#: The tool ``fake-chat-undeclared`` calls (a request that declares it gets another name).
UNDECLARED: Final = "tool_not_declared"
INLINE_DATA: Final = {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}


def usage(prompt: int, candidates: int, thoughts: int = 0) -> dict[str, Any]:
    """A ``usageMetadata`` as Gemini writes one (a count that is 0 left out)."""
    out: dict[str, Any] = {"promptTokenCount": prompt}
    if candidates:
        out["candidatesTokenCount"] = candidates
    out["totalTokenCount"] = prompt + candidates + thoughts
    if thoughts:
        out["thoughtsTokenCount"] = thoughts
    return out


def response(
    turn: Turn,
    parts: Sequence[Mapping[str, Any]],
    report: dict[str, Any],
    finish: str | None = None,
) -> dict[str, Any]:
    """One GenerateContentResponse of a chat reply."""
    candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}}
    if finish is not None:
        candidate["finishReason"] = finish
    candidate["index"] = 0
    return {
        "candidates": [candidate],
        "usageMetadata": report,
        "modelVersion": turn.model,
        "responseId": turn.response_id,
    }


def _prompt_tokens(turn: Turn) -> int:
    return max(1, (len(turn.system_text) + len(turn.user_text) + 3) // 4)


def chat_text(turn: Turn) -> list[dict[str, Any]]:
    text = CHAT_TEXT_REPLY + turn.user_text
    a, b = len(text) // 3, 2 * len(text) // 3
    prompt, events, so_far = _prompt_tokens(turn), [], 0
    for at, piece in enumerate((text[:a], text[a:b], text[b:])):
        so_far += len(piece)
        finish = "STOP" if at == 2 else None
        report = usage(prompt, max(1, (so_far + 3) // 4))  # cumulative, as Gemini's
        events.append(response(turn, [{"text": piece}], report, finish))
    return events


def chat_turn(turn: Turn) -> list[dict[str, Any]]:
    (p1, c1, t1), (p2, c2, t2), (p3, c3, t3) = EVIDENCE_USAGE
    first, second = CALLS
    return [
        response(turn, [{"text": THOUGHT, "thought": True}], usage(p1, c1, t1)),
        response(turn, [{"text": TEXT}], usage(p2, c2, t2)),
        response(
            turn,
            [
                {"functionCall": dict(first), "thoughtSignature": SIGNATURE},
                {"functionCall": dict(second)},
            ],
            usage(p3, c3, t3),
            "STOP",
        ),
    ]


def chat_undeclared(turn: Turn) -> list[dict[str, Any]]:
    name = UNDECLARED
    while name in turn.tools:
        name += "_"
    call = {"id": "c1", "name": name, "args": {"path": "/"}}
    prompt = _prompt_tokens(turn)
    return [
        response(turn, [{"text": "Calling a tool."}], usage(prompt, 4)),
        response(turn, [{"functionCall": call}], usage(prompt, 12), "STOP"),
    ]


def chat_inline_data(turn: Turn) -> list[dict[str, Any]]:
    prompt = _prompt_tokens(turn)
    return [
        response(turn, [{"text": "Here is a picture:"}], usage(prompt, 5)),
        response(turn, [INLINE_DATA], usage(prompt, 260), "STOP"),
    ]


#: Each chat model's script: the events of its reply.
CHAT_SCRIPTS: Final[dict[str, Callable[[Turn], list[dict[str, Any]]]]] = {
    "fake-chat-text": chat_text,
    "fake-chat-turn": chat_turn,
    "fake-chat-undeclared": chat_undeclared,
    "fake-chat-inline-data": chat_inline_data,
}
