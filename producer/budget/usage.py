"""What a provider call costs: the worst case a reservation holds, and whether the usage the
provider reported can be what the call cost (``check_usage``) before it is charged."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from replywire.producer.sources.gemini.protocol import USAGE_KEYS

#: A deliberately high estimate: about 3 bytes per token (Gemini averages about 4 characters).
BYTES_PER_TOKEN_ESTIMATE: Final = 3
PROMPT_OVERHEAD_TOKENS: Final = 16
MAX_SHOWN_CHARS: Final = 40


@dataclass(frozen=True, slots=True)
class Rates:
    input_usd_per_mtok: float = 0.25
    output_usd_per_mtok: float = 1.50

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (
            input_tokens * self.input_usd_per_mtok + output_tokens * self.output_usd_per_mtok
        ) / 1_000_000


def estimate_prompt_tokens(body: Mapping[str, Any]) -> int:
    size = len(json.dumps(body, ensure_ascii=False).encode("utf-8"))
    return math.ceil(size / BYTES_PER_TOKEN_ESTIMATE) + PROMPT_OVERHEAD_TOKENS


def _count(usage: Mapping[str, object], key: str) -> int:
    value = usage.get(key, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def charged_tokens(usage: Mapping[str, object]) -> tuple[int, int]:
    """The input and output tokens reported usage is charged for (cached and thinking tokens
    in full, never discounted).

    Output is what the total counts beyond the prompt, if that is more than the
    candidates and thoughts reported (a count left out is still paid for).
    """
    prompt = _count(usage, "promptTokenCount")
    output = _count(usage, "candidatesTokenCount") + _count(usage, "thoughtsTokenCount")
    beyond_prompt = _count(usage, "totalTokenCount") - prompt
    return prompt, max(output, beyond_prompt)


def usage_cost(usage: Mapping[str, object], rates: Rates) -> float:
    """Reported usage at our rates (``charged_tokens``)."""
    return rates.cost(*charged_tokens(usage))


def shown(value: object) -> object:
    """A reported value as a log or ledger field: bounded, never the provider's whole text."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**15:
        return value
    return repr(value)[:MAX_SHOWN_CHARS]


def _first_malformed_count(usage: Mapping[str, object]) -> str | None:
    """The first of ``USAGE_KEYS`` present but not a JSON integer >= 0, or None."""
    for key in USAGE_KEYS:
        if key in usage:
            value = usage[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                return key
    return None


def check_usage(
    usage: Mapping[str, object], *, prompt_estimate: int, max_output_tokens: int
) -> str | None:
    """Why the reported usage cannot be what the call cost, or None if it can be.

    Every count is a JSON integer >= 0; ``promptTokenCount`` is present (a call
    always has a prompt; Gemini leaves out only the counts that are 0); the
    prompt count is at most the reservation's prompt estimate (deliberately
    high, so a count above it is a provider's error, not ours); cached tokens
    are part of the prompt; candidates plus thoughts, and the total beyond the
    prompt, are at most ``maxOutputTokens``. So a settled cost is never more
    than the reservation.
    """
    malformed = _first_malformed_count(usage)
    if malformed is not None:
        return f"{malformed} is not a non-negative integer"
    if "promptTokenCount" not in usage:
        return "promptTokenCount is missing"
    prompt = _count(usage, "promptTokenCount")
    output = _count(usage, "candidatesTokenCount") + _count(usage, "thoughtsTokenCount")
    if prompt > prompt_estimate:
        return f"promptTokenCount exceeds the prompt estimate {prompt_estimate}"
    if _count(usage, "cachedContentTokenCount") > prompt:
        return "cachedContentTokenCount exceeds promptTokenCount"
    if output > max_output_tokens:
        return f"candidates + thoughts exceed maxOutputTokens {max_output_tokens}"
    if "totalTokenCount" in usage:
        total = _count(usage, "totalTokenCount")
        if total < prompt + output:
            return "totalTokenCount is less than its parts"
        if total - prompt > max_output_tokens:
            return f"totalTokenCount beyond the prompt exceeds maxOutputTokens {max_output_tokens}"
    return None
