"""What the fake answers: one script per model name, as the steps of a reply.

``gemini-3.1-flash-lite`` (:data:`DEFAULT_MODEL`) answers the four development cases of
the published Gemini run (``fixtures/published-lab-record.json``, block [3]) with exactly
the published provider text events (any other question gets :data:`FALLBACK_REPLY` in
three events); every ``fake-*`` model of :data:`SCRIPTS` is a failure script: an HTTP
error before the stream, an error or a reset in it, a finish other than STOP, broken SSE.

Hostile-provider scripts (ours, not Google behaviour): ``fake-usage-negative``,
``fake-usage-huge``, ``fake-usage-non-integer`` and ``fake-usage-missing`` answer
the good reply with the implausible usage in :data:`BAD_USAGE`; ``fake-echo-key``
answers 400 with the received API key quoted in the error body;
``fake-slow-start`` holds the response for ``Pacing.start_delay`` seconds (2 s) after
reading the request, then answers the good reply (``harness.fake_gemini.server``).
``fake-fine-deltas`` answers the good reply's text in deltas of :data:`FINE_DELTA_CHARS`
characters, one event each (a model's reply as many small events: ``bench.fanout``), paced
by ``Pacing.event_delay``.

The ``fake-chat-*`` models (:data:`CHAT_MODELS`, not in :data:`SCRIPTS`: they answer a chat
request only) are ``harness.fake_gemini.chat_scripts``'.

A script is data: the steps (an event, raw bytes, a reset) the server writes, with the
usage a reply reports counted here (about four characters a token).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from harness.fake_gemini.chat_scripts import CHAT_SCRIPTS
from harness.fake_gemini.protocol import (
    EVENT_END,
    HttpError,
    Turn,
    encode_json,
    pretty_json,
    sse_event,
)

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED_RECORD = ROOT / "fixtures" / "published-lab-record.json"
GEMINI_BLOCK = 3

DEFAULT_MODEL = "gemini-3.1-flash-lite"
SCRIPTS: tuple[str, ...] = (
    DEFAULT_MODEL,
    "fake-early-eof",
    "fake-max-tokens",
    "fake-safety",
    "fake-midstream-error",
    "fake-midstream-error-raw",
    "fake-rate-limited",
    "fake-server-error",
    "fake-malformed-sse",
    "fake-invalid-json",
    "fake-slow-drip",
    "fake-connection-reset",
    "fake-after-finish",
    "fake-unterminated",
    "fake-running-usage",
    "fake-usage-negative",
    "fake-usage-huge",
    "fake-usage-non-integer",
    "fake-usage-missing",
    "fake-echo-key",
    "fake-slow-start",
    "fake-function-call",
    "fake-fine-deltas",
)

#: The characters of each text event of ``fake-fine-deltas``.
FINE_DELTA_CHARS: Final = 2

#: The models that answer a chat request (``chat_scripts``).
CHAT_MODELS: tuple[str, ...] = tuple(CHAT_SCRIPTS)

#: The part ``fake-function-call`` puts beside its second text: the model calling a tool, as
#: Gemini streams one (whole, in one part, with its id and a signature).
FUNCTION_CALL_PART: dict[str, Any] = {
    "functionCall": {"id": "call-1", "name": "search_docs", "args": {"query": "file"}},
    "thoughtSignature": "c2lnbmF0dXJlLW9mLWEtY2FsbA==",
}

#: A hostile provider's usage (the reply itself is the good one): the ledger must not believe it.
BAD_USAGE: dict[str, dict[str, Any]] = {
    "fake-usage-negative": {"promptTokenCount": -1_000_000_000, "totalTokenCount": -999_999_000},
    "fake-usage-huge": {"candidatesTokenCount": 1_000_000_000, "totalTokenCount": 1_000_000_100},
    "fake-usage-non-integer": {"candidatesTokenCount": 12.5, "thoughtsTokenCount": "7"},
    "fake-usage-missing": {"promptTokenCount": None, "candidatesTokenCount": None},
}

FALLBACK_REPLY: dict[str, Any] = {
    "status": "not_in_docs",
    "answer": "The supplied documentation does not answer this question.",
    "source_ids": [],
}

RATE_LIMITED_BODY: dict[str, Any] = {
    "error": {
        "code": 429,
        "message": (
            "You exceeded your current quota, please check your plan and billing details. "
            "For more information on this error, head to: "
            "https://ai.google.dev/gemini-api/docs/rate-limits."
        ),
        "status": "RESOURCE_EXHAUSTED",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": (
                            "generativelanguage.googleapis.com/generate_content_paid_tier_requests"
                        ),
                        "quotaId": "GenerateRequestsPerMinutePerProjectPerModel",
                        "quotaDimensions": {"location": "global", "model": DEFAULT_MODEL},
                        "quotaValue": "4000",
                    }
                ],
            },
            {
                "@type": "type.googleapis.com/google.rpc.Help",
                "links": [
                    {
                        "description": "Learn more about Gemini API quotas",
                        "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
                    }
                ],
            },
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"},
        ],
    }
}

SERVER_ERROR_BODY: dict[str, Any] = {
    "error": {
        "code": 500,
        "message": (
            "An internal error has occurred. Please retry or report in "
            "https://developers.generativeai.google/guide/troubleshooting"
        ),
        "status": "INTERNAL",
    }
}

MIDSTREAM_ERROR: dict[str, Any] = {
    "error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}
}

SAFETY_RATINGS: list[dict[str, Any]] = [
    {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}
]


@dataclass(frozen=True)
class PublishedCase:
    """One development case of the published Gemini run."""

    case_id: str
    system_text: str
    user_text: str
    texts: tuple[str, ...]  # one per provider text event, in order
    frame_count: int  # published application frames, ``done`` included


def load_published_cases(path: Path = PUBLISHED_RECORD) -> dict[str, PublishedCase]:
    """Block [3] of the published record: user text -> case."""
    record = json.loads(path.read_text(encoding="utf-8"))
    cases: dict[str, PublishedCase] = {}
    for case in record[GEMINI_BLOCK]["cases"]:
        messages = case["binding"]["messages"]
        frames = case["application_frames"]
        texts = tuple(f["text"] for f in frames if f["kind"] == "content_delta")
        user_text = messages[-1][1]
        cases[user_text] = PublishedCase(
            case_id=case["case_id"],
            system_text=messages[0][1],
            user_text=user_text,
            texts=texts,
            frame_count=len(frames),
        )
    return cases


#: A text request's reply: this, then the last user turn's text.
TEXT_REPLY: Final = "A reply in free text to: "


def _split_in_three(text: str) -> tuple[str, ...]:
    a, b = len(text) // 3, 2 * len(text) // 3
    return (text[:a], text[a:b], text[b:])


@dataclass(frozen=True)
class Step:
    """One thing a script writes: an SSE event, raw bytes, or a reset of the connection."""

    kind: Literal["event", "raw", "reset"]
    data: bytes = b""


class Scripts:
    """Every model's script over the published cases; ``extra_usage`` joins each reply's
    usage (e.g. ``thoughtsTokenCount``)."""

    def __init__(
        self, record_path: Path = PUBLISHED_RECORD, extra_usage: Mapping[str, int] | None = None
    ) -> None:
        self.cases = load_published_cases(record_path)
        self.extra_usage = dict(extra_usage or {})
        self._scripts: dict[str, Callable[[Turn], list[Step]]] = {
            DEFAULT_MODEL: self._script_ok,
            "fake-early-eof": self._script_early_eof,
            "fake-max-tokens": self._script_max_tokens,
            "fake-safety": self._script_safety,
            "fake-midstream-error": self._script_midstream_error,
            "fake-midstream-error-raw": self._script_midstream_error_raw,
            "fake-malformed-sse": self._script_malformed_sse,
            "fake-invalid-json": self._script_invalid_json,
            "fake-slow-drip": self._script_ok,
            "fake-connection-reset": self._script_connection_reset,
            "fake-after-finish": self._script_after_finish,
            "fake-unterminated": self._script_unterminated,
            "fake-running-usage": self._script_running_usage,
            "fake-slow-start": self._script_ok,
            "fake-function-call": self._script_function_call,
            "fake-fine-deltas": self._script_fine_deltas,
            **{name: self._script_bad_usage for name in BAD_USAGE},
            **{name: self._chat_script(name) for name in CHAT_SCRIPTS},
        }

    def plan(self, turn: Turn, entry: dict[str, Any]) -> list[Step]:
        """The steps of ``turn``'s reply (its case id written to the log ``entry``), or the
        :class:`HttpError` a script answers before any stream."""
        case = self.cases.get(turn.user_text)
        entry["case_id"] = case.case_id if case is not None else None
        if turn.model == "fake-rate-limited":
            raise HttpError(
                429,
                "RESOURCE_EXHAUSTED",
                RATE_LIMITED_BODY["error"]["message"],
                RATE_LIMITED_BODY["error"]["details"],
            )
        if turn.model == "fake-server-error":
            raise HttpError(500, "INTERNAL", SERVER_ERROR_BODY["error"]["message"])
        if turn.model == "fake-echo-key":
            # A provider (or a proxy) that quotes the credential back in its error body.
            key = entry["headers"].get("x-goog-api-key", "")
            raise HttpError(400, "INVALID_ARGUMENT", f"API key {key} is not valid for {key[:8]}")
        return self._scripts[turn.model](turn)

    def texts(self, turn: Turn) -> tuple[str, ...]:
        """The reply's text events: the published case's, else the fallback reply's."""
        if turn.schema is None:  # a text request: free text about what was asked
            return _split_in_three(TEXT_REPLY + turn.user_text)
        case = self.cases.get(turn.user_text)
        if case is not None:
            return case.texts
        return _split_in_three(json.dumps(FALLBACK_REPLY))

    def usage(self, turn: Turn, output_text: str) -> dict[str, Any]:
        """Deterministic token counts (about four characters a token)."""
        schema_chars = 0 if turn.schema is None else len(encode_json(turn.schema))
        prompt_chars = len(turn.system_text) + len(turn.user_text) + schema_chars
        prompt = math.ceil(prompt_chars / 4)
        candidates = math.ceil(len(output_text) / 4)
        usage: dict[str, Any] = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": candidates,
            "totalTokenCount": prompt + candidates + self.extra_usage.get("thoughtsTokenCount", 0),
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
        }
        usage.update(self.extra_usage)
        return usage

    def response(
        self,
        turn: Turn,
        text: str | None,
        *,
        finish: str | None = None,
        usage: dict[str, Any] | None = None,
        safety: bool = False,
    ) -> dict[str, Any]:
        """One GenerateContentResponse, in the order Google writes its fields."""
        candidate: dict[str, Any] = {}
        if text is not None:
            candidate["content"] = {"parts": [{"text": text}], "role": "model"}
        if finish is not None:
            candidate["finishReason"] = finish
        candidate["index"] = 0
        if safety:
            candidate["safetyRatings"] = SAFETY_RATINGS
        out: dict[str, Any] = {"candidates": [candidate]}
        if usage is not None:
            out["usageMetadata"] = usage
        out["modelVersion"] = turn.model
        out["responseId"] = turn.response_id
        return out

    def _text_events(
        self, turn: Turn, texts: Sequence[str], finish: str | None, *, last_terminated: bool = True
    ) -> list[Step]:
        steps = []
        for i, text in enumerate(texts):
            last = i == len(texts) - 1
            if last and finish is not None:
                obj = self.response(
                    turn, text, finish=finish, usage=self.usage(turn, "".join(texts))
                )
            else:
                obj = self.response(turn, text)
            steps.append(Step("event", sse_event(obj, terminated=not last or last_terminated)))
        return steps

    def _script_ok(self, turn: Turn) -> list[Step]:
        return self._text_events(turn, self.texts(turn), "STOP")

    def _script_early_eof(self, turn: Turn) -> list[Step]:
        return self._text_events(turn, self.texts(turn)[:2], None)

    def _script_max_tokens(self, turn: Turn) -> list[Step]:
        texts = self.texts(turn)
        return self._text_events(turn, texts[: max(1, len(texts) - 1)], "MAX_TOKENS")

    def _script_safety(self, turn: Turn) -> list[Step]:
        first = self.texts(turn)[0]
        blocked = self.response(
            turn, None, finish="SAFETY", usage=self.usage(turn, first), safety=True
        )
        return [*self._text_events(turn, [first], None), Step("event", sse_event(blocked))]

    def _script_midstream_error(self, turn: Turn) -> list[Step]:
        first = self._text_events(turn, self.texts(turn)[:1], None)
        return [*first, Step("event", sse_event(MIDSTREAM_ERROR))]

    def _script_midstream_error_raw(self, turn: Turn) -> list[Step]:
        first = self._text_events(turn, self.texts(turn)[:1], None)
        return [*first, Step("raw", pretty_json(MIDSTREAM_ERROR))]

    def _script_malformed_sse(self, turn: Turn) -> list[Step]:
        first = self._text_events(turn, self.texts(turn)[:1], None)
        return [*first, Step("raw", b"this is not sse" + EVENT_END)]

    def _script_invalid_json(self, turn: Turn) -> list[Step]:
        return [Step("event", b'data: {"candidates": [' + EVENT_END)]

    def _script_connection_reset(self, turn: Turn) -> list[Step]:
        return [*self._text_events(turn, self.texts(turn)[:1], None), Step("reset")]

    def _script_after_finish(self, turn: Turn) -> list[Step]:
        texts = self.texts(turn)
        head, tail = texts[0], "".join(texts[1:]) or " "
        done = self.response(turn, head, finish="STOP", usage=self.usage(turn, head))
        return [
            Step("event", sse_event(done)),
            Step("event", sse_event(self.response(turn, tail))),
        ]

    def _script_fine_deltas(self, turn: Turn) -> list[Step]:
        text = "".join(self.texts(turn))
        deltas = [text[i : i + FINE_DELTA_CHARS] for i in range(0, len(text), FINE_DELTA_CHARS)]
        return self._text_events(turn, deltas, "STOP")

    def _script_unterminated(self, turn: Turn) -> list[Step]:
        return self._text_events(turn, self.texts(turn), "STOP", last_terminated=False)

    def _script_bad_usage(self, turn: Turn) -> list[Step]:
        texts = self.texts(turn)
        usage = self.usage(turn, "".join(texts))
        for key, value in BAD_USAGE[turn.model].items():
            if value is None:
                usage.pop(key, None)
            else:
                usage[key] = value
        steps = self._text_events(turn, texts[:-1], None)
        last = self.response(turn, texts[-1], finish="STOP", usage=usage)
        return [*steps, Step("event", sse_event(last))]

    def _script_running_usage(self, turn: Turn) -> list[Step]:
        texts = self.texts(turn)
        steps = []
        for i, text in enumerate(texts):
            last = i == len(texts) - 1
            usage = self.usage(turn, "".join(texts[: i + 1]))
            obj = self.response(turn, text, finish="STOP" if last else None, usage=usage)
            steps.append(Step("event", sse_event(obj)))
        return steps

    @staticmethod
    def _chat_script(model: str) -> Callable[[Turn], list[Step]]:
        """A ``fake-chat-*`` model's events (``chat_scripts``), as the steps that send them."""
        events = CHAT_SCRIPTS[model]
        return lambda turn: [Step("event", sse_event(event)) for event in events(turn)]

    def _script_function_call(self, turn: Turn) -> list[Step]:
        """The reply's text, with a function call beside its second text event (then the
        rest, STOP and usage, as if all went well)."""
        texts = self.texts(turn)
        steps = self._text_events(turn, texts, "STOP")
        called = self.response(turn, texts[1])
        called["candidates"][0]["content"]["parts"].append(FUNCTION_CALL_PART)
        steps[1] = Step("event", sse_event(called))
        return steps
