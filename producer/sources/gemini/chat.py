"""A chat turn from Gemini, pure: the request body of a chat binding, and its events as chat
frames (docs/protocol.md#chat-frames).

``chat_request_body`` sends the binding's request as it is: its system instruction, each
turn's parts (``text``, ``thought``, ``tool_call`` as ``functionCall``, ``tool_result``
as ``functionResponse``, each with the ``thoughtSignature`` it came with sent back), its
tools as ``functionDeclarations`` with their ``parametersJsonSchema``, its settings, and
``thinkingConfig.includeThoughts`` so thought summaries come as parts. ``maxOutputTokens``
is the binding's, at most the source's (the ledger reserves the source's).

``ChatFrames`` is the lab's adapter in chat mode: each event's parts in order, a text part
as a ``content_delta``, a ``thought: true`` part as a ``thought``, a ``functionCall`` as
one whole ``tool_call`` (``index`` the calls so far, its ``id`` or ``""``, its ``name``,
``arguments`` the canonical JSON of its ``args``), a part's ``thoughtSignature`` as a
``signature`` right after that part's frame; then the event's ``usageMetadata`` as a
``usage`` frame when it differs from the last one sent (a count absent is 0); then
``finishReason``: STOP gives ``finish`` ``"STOP"`` and ``done`` (the chat digest,
``ChatDigest``), any other the error terminal it gives a grounded reply. A part it cannot
carry (``inlineData``, ``executableCode``, ``functionResponse``, anything unknown) ends the
reply ``provider_part_unsupported``, as for a grounded reply; a usage count that is not an
integer from 0 to 2^64 - 1, or a part with a lone surrogate or a number beyond a double,
ends it ``provider_invalid_event`` (a frame cannot carry it, and nothing of a turn is left
out). The call is settled from the last usage frame sent
(``usage``, in the ledger's keys), so the ledger and the consumer hold one report.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from replywire.producer.sources.gemini.protocol import (
    MAX_PART_KINDS_SHOWN,
    ProviderFrames,
    error_of,
    finish_of,
    parts_of,
)
from replywire.shared.chat_parts import (
    ChatDigest,
    ChatPart,
    FinishPart,
    SignaturePart,
    ThoughtPart,
    ToolCallPart,
    UsagePart,
)
from replywire.shared.digest import canonical_json
from replywire.shared.errors import scrubbed_detail
from replywire.shared.frames import DoneDigest, Frame, FrameKind
from replywire.shared.reasons import Reason

#: A usage frame's fields and the ``usageMetadata`` key each is read from.
USAGE_FIELDS: Final = {
    "prompt_tokens": "promptTokenCount",
    "cached_tokens": "cachedContentTokenCount",
    "completion_tokens": "candidatesTokenCount",
    "thoughts_tokens": "thoughtsTokenCount",
    "tool_use_prompt_tokens": "toolUsePromptTokenCount",
    "total_tokens": "totalTokenCount",
}
MAX_COUNT: Final = (1 << 64) - 1
#: The keys of a part a chat turn carries (``thought`` is a flag on a text part).
CARRIED_KEYS: Final = frozenset({"text", "thought", "thoughtSignature", "functionCall"})
STOP: Final = "STOP"


def _part(part: Mapping[str, Any]) -> dict[str, Any]:
    """A binding's part as a Gemini part, its signature sent back with it."""
    out: dict[str, Any]
    if "text" in part:
        out = {"text": part["text"]}
    elif "thought" in part:
        out = {"text": part["thought"], "thought": True}
    elif "tool_call" in part:
        call = part["tool_call"]
        out = {"functionCall": {"name": call["name"], "args": call["arguments"]}}
        if call["id"]:
            out["functionCall"]["id"] = call["id"]
    else:
        result = part["tool_result"]
        out = {"functionResponse": {"name": result["name"], "response": result["result"]}}
        if result["id"]:
            out["functionResponse"]["id"] = result["id"]
    if "signature" in part:
        out["thoughtSignature"] = part["signature"]
    return out


def chat_request_body(binding: Mapping[str, Any], *, max_output_tokens: int) -> dict[str, Any]:
    """A chat binding's request as Gemini's REST body (the binding is checked already)."""
    request = binding["request"]
    settings = request["settings"]
    config: dict[str, Any] = {
        "maxOutputTokens": min(settings.get("max_output_tokens", max_output_tokens),
                               max_output_tokens),
        "thinkingConfig": {"includeThoughts": True},
    }  # fmt: skip
    if "temperature" in settings:
        config["temperature"] = settings["temperature"]
    body: dict[str, Any] = {
        "contents": [
            {"role": turn["role"], "parts": [_part(part) for part in turn["parts"]]}
            for turn in request["turns"]
        ],
        "generationConfig": config,
    }
    if request["system"]:
        body["systemInstruction"] = {"parts": [{"text": request["system"]}]}
    if request["tools"]:
        body["tools"] = [
            {
                "functionDeclarations": [
                    {
                        "name": tool["name"],
                        "description": tool["description"],
                        "parametersJsonSchema": tool["parameters"],
                    }
                    for tool in request["tools"]
                ]
            }
        ]
    return body


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= MAX_COUNT else None


def usage_part(metadata: Mapping[str, Any]) -> UsagePart | None:
    """The usage frame of a ``usageMetadata`` (absent counts 0), or None when a count is not
    an integer from 0 to 2^64 - 1."""
    counts: dict[str, int] = {}
    for name, key in USAGE_FIELDS.items():
        count = _count(metadata.get(key, 0))
        if count is None:
            return None
        counts[name] = count
    return UsagePart(**counts)


def ledger_usage(part: UsagePart) -> dict[str, object]:
    """A usage frame in the ledger's keys (Gemini's): what the call is settled from."""
    return {key: getattr(part, name) for name, key in USAGE_FIELDS.items()}


class ChatFrames(ProviderFrames):
    """Provider events in, a chat turn's frames out (the lab's adapter in chat mode)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.calls = 0
        self.digest = ChatDigest()
        self.last_usage: UsagePart | None = None

    def event(self, event: object) -> list[Frame]:
        """One parsed SSE ``data`` payload. Raises ``ProviderError`` after the finish."""
        event = self._counted(event)
        error = error_of(event)
        if error is not None:
            return [self._provider_error(error)]
        frames = self._parts(parts_of(event))
        if self.cut_off is None:
            frames += self._usage(event.get("usageMetadata"))
        finish = finish_of(event)
        if finish is not None and self.cut_off is None:
            self.finish_reason = scrubbed_detail(finish)
            if finish == STOP:
                frames.append(self._content(FrameKind.FINISH, FinishPart(reason=finish)))
            frames.append(self.terminal(finish))
        return frames

    def _parts(self, parts: list[object]) -> list[Frame]:
        """Each part's frames, in order, up to one a turn cannot carry (which ends it)."""
        frames: list[Frame] = []
        for at, part in enumerate(parts):
            if not _encodable(part):
                return [*frames, self._invalid("provider_part_not_unicode")]
            unsupported = self._unsupported(part)
            if unsupported is not None:
                rest = [self._unsupported(other) or "text" for other in parts[at + 1 :]]
                return [*frames, self._cut_off([unsupported, *rest][:MAX_PART_KINDS_SHOWN])]
            assert isinstance(part, dict)
            frames += self._part(part)
        return frames

    def _usage(self, metadata: object) -> list[Frame]:
        """A usage frame when the report differs from the last one sent (none without one)."""
        if not isinstance(metadata, dict):
            return []
        usage = usage_part(metadata)
        if usage is None:
            return [self._invalid("provider_usage_invalid")]
        if usage == self.last_usage:
            return []
        self.last_usage = usage
        self.usage = ledger_usage(usage)
        return [self._content(FrameKind.USAGE, usage)]

    def terminal(self, finish: str) -> Frame:
        if finish != STOP:
            return super().terminal(finish)
        content_sha256, content_frames = self.digest.claim()
        claim = DoneDigest(content_sha256=content_sha256, content_frames=content_frames)
        return self._frame(FrameKind.DONE, done_digest=claim)

    def _invalid(self, event: str) -> Frame:
        """What no frame can carry (a usage count out of range, a lone surrogate or a number
        beyond a double in a part): the reply ends here in error, nothing more is read, and
        the call is not settled from a report it did not carry (its reservation is kept)."""
        self.finish_reason = "ERROR"
        self.cut_off = Reason.PROVIDER_INVALID_EVENT
        self._log.warning(event, reason=self.cut_off.value)
        return self._frame(FrameKind.ERROR, reason=self.cut_off.value)

    @staticmethod
    def _unsupported(part: object) -> str | None:
        """None for a part a chat turn carries; else what it is (for the trace)."""
        if not isinstance(part, dict):
            return "not_an_object"
        others = sorted(str(key) for key in part if key not in CARRIED_KEYS)
        if others:
            return ",".join(scrubbed_detail(key, 64) for key in others[:MAX_PART_KINDS_SHOWN])
        if not isinstance(part.get("text", ""), str) or not isinstance(
            part.get("thought", False), bool
        ):
            return "text_not_a_string"
        signature = part.get("thoughtSignature")
        if signature is not None and not (isinstance(signature, str) and signature):
            return "thoughtSignature_not_a_string"
        call = part.get("functionCall")
        if call is not None and not _is_call(call):
            return "functionCall_malformed"
        if call is not None and ("text" in part or part.get("thought")):
            return "functionCall_with_text"
        return None

    def _part(self, part: Mapping[str, Any]) -> list[Frame]:
        """A part's frame (none for an empty text), then its signature's."""
        frames: list[Frame] = []
        signed: tuple[str, int]
        if "functionCall" in part:
            call = part["functionCall"]
            index, self.calls = self.calls, self.calls + 1
            arguments = canonical_json(call.get("args", {})).decode("utf-8")
            tool_call = ToolCallPart(
                index=index, id=call.get("id", ""), name=call["name"], arguments=arguments
            )
            frames.append(self._content(FrameKind.TOOL_CALL, tool_call))
            signed = ("tool_call", index)
        elif part.get("thought"):
            if part.get("text"):
                frames.append(self._content(FrameKind.THOUGHT, ThoughtPart(text=part["text"])))
            signed = ("thought", 0)
        else:
            if part.get("text"):
                self.texts.append(part["text"])
                self.digest.add_text(part["text"])
                frames.append(self._frame(FrameKind.CONTENT_DELTA, text=part["text"]))
            signed = ("text", 0)
        signature = part.get("thoughtSignature")
        if signature is not None:
            kind, index = signed
            signature_part = SignaturePart(part=kind, index=index, value=signature)
            frames.append(self._content(FrameKind.SIGNATURE, signature_part))
        return frames

    def _content(self, kind: FrameKind, part: ChatPart) -> Frame:
        self.digest.add_part(kind.value, part)
        return self._frame(kind, part=part)


def _encodable(part: object) -> bool:
    """Whether ``part`` has a canonical form (no lone surrogate from an escape, no number
    beyond a double): what a frame carries must."""
    try:
        json.dumps(part, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except ValueError:  # UnicodeEncodeError is one
        return False
    return True


def _is_call(call: object) -> bool:
    """A ``functionCall`` a frame can carry: a non-empty name, an object of arguments (or
    none), a string id (or none)."""
    return (
        isinstance(call, dict)
        and isinstance(call.get("name"), str)
        and bool(call["name"])
        and isinstance(call.get("args", {}), dict)
        and isinstance(call.get("id", ""), str)
    )
