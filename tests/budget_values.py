"""The values the budget tests charge: a request body, its prompt estimate, plausible usage,
a case's worst case."""

from __future__ import annotations

from replywire.producer.budget.usage import Rates, estimate_prompt_tokens
from replywire.producer.sources.gemini.protocol import DEFAULT_MAX_OUTPUT_TOKENS, request_body
from replywire.shared.recording import Recording
from tests.runs import CASE


def worst_case(recording: Recording, case_id: str = CASE) -> float:
    """The reservation a call of this case makes: its prompt and the most output it may get."""
    body = request_body(
        recording.case(case_id).binding, max_output_tokens=DEFAULT_MAX_OUTPUT_TOKENS
    )
    return Rates().cost(estimate_prompt_tokens(body), DEFAULT_MAX_OUTPUT_TOKENS)


BODY = {"contents": [{"role": "user", "parts": [{"text": "x" * 300}]}]}


PROMPT_ESTIMATE = estimate_prompt_tokens(BODY)


GOOD_USAGE = {"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120}
