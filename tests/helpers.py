"""Helpers that several test modules share (no test module imports from another).

The Gemini test key and the fake server's failure scripts, a Gemini-backed producer, what
two runs of one stream must agree on, a producer's final trace records and metrics, and the
consumer's timeline table read back into rows. The processes themselves are started by
tests/processes.py; a private Redis server by tests/redis_server.py.
"""

from __future__ import annotations

import re
import signal
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from producer.gemini.ledger import Rates, estimate_prompt_tokens
from producer.gemini.protocol import DEFAULT_MAX_OUTPUT_TOKENS, request_body
from producer.states import FINAL_STATES
from shared.recording import Recording
from tests.processes import FakeGeminiProcess, Producer, producer, wait_for

#: The key the fake Gemini server expects (a real key's shape; never logged).
API_KEY = "AIzaSy-test-key-0123456789-never-logged"
#: The case most tests stream.
CASE = "replace-file"

#: Each failure script of the fake Gemini server (its "model"): the consumer's status, reason
#: and exit code.
SCRIPTS = {
    "fake-early-eof": ("incomplete", "missing_terminal", 3),
    "fake-max-tokens": ("error", "provider_finish_MAX_TOKENS", 5),
    "fake-safety": ("error", "provider_finish_SAFETY", 5),
    "fake-midstream-error": ("error", "provider_error_UNAVAILABLE", 5),
    "fake-midstream-error-raw": ("error", "provider_invalid_event", 5),
    "fake-rate-limited": ("refused", "provider_rate_limited", 7),
    "fake-server-error": ("error", "provider_unavailable", 5),
    "fake-malformed-sse": ("error", "provider_invalid_event", 5),
    "fake-invalid-json": ("error", "provider_invalid_event", 5),
    "fake-connection-reset": ("error", "provider_connection_lost", 5),
    "fake-after-finish": ("error", "transport_io_error", 5),
}


def gemini_producer(
    tmp_path: Path, fake: FakeGeminiProcess, *args: str, model: str | None = None
) -> Any:
    """A producer whose source is the fake Gemini server, with a file ledger of $1."""
    extra = ["--model", model] if model else []
    return producer(
        tmp_path,
        "--source", "gemini", "--gemini-base-url", fake.base_url,
        "--ledger", str(tmp_path / "ledger.json"), "--budget-usd", "1.0",
        "--log-level", "debug", *extra, *args,
        name=f"producer-{model or 'default'}",
        env={"GEMINI_API_KEY": API_KEY},
    )  # fmt: skip


def worst_case(recording: Recording, case_id: str = CASE) -> float:
    """The reservation a call of this case makes: its prompt and the most output it may get."""
    body = request_body(
        recording.case(case_id).binding, max_output_tokens=DEFAULT_MAX_OUTPUT_TOKENS
    )
    return Rates().cost(estimate_prompt_tokens(body), DEFAULT_MAX_OUTPUT_TOKENS)


def essence(result: dict[str, Any]) -> tuple[Any, ...]:
    """What must equal an unbroken run's."""
    return (
        result["status"],
        result["accepted_answer"],
        result["citations"],
        result["provisional_content"],
        result["stats"]["application_frames"],
    )


# --- a producer's trace and metrics -----------------------------------------------------------

FINAL_VALUES = {state.value for state in FINAL_STATES}
FINAL_COUNTERS = (
    "streams_completed",
    "streams_refused",
    "streams_aborted",
    "streams_cancelled",
    "streams_failed",
    "streams_shutdown",
    "streams_aged_out",
)


def finals(p: Producer) -> dict[str, dict[str, Any]]:
    """Each stream's final record, by stream id."""
    return {
        r["stream_id"]: r
        for r in p.trace()
        if r["event"] == "state_changed" and r["to_state"] in FINAL_VALUES
    }


def stopped_record(p: Producer) -> dict[str, Any]:
    """Stop the producer; its last record, whose counters add up."""
    p.process.send_signal(signal.SIGTERM)
    p.process.wait(timeout=30)
    assert p.process.returncode == 0
    stopped = p.trace()[-1]
    assert stopped["event"] == "producer_stopped"
    assert stopped["streams_opened"] == sum(stopped[name] for name in FINAL_COUNTERS)
    return stopped


def metrics_port(p: Producer) -> int:
    wait_for(lambda: p.logged("metrics_listening"))
    return int(next(r["port"] for r in p.trace() if r["event"] == "metrics_listening"))


def exposition(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return samples(exposition(port))


# --- the consumer's timeline table ------------------------------------------------------------


def parse_table(text: str) -> list[dict[str, str]]:
    """The rows of the table printed after the summary line, cut at the header's rule."""
    lines = text.splitlines()
    rule_at = next(i for i, line in enumerate(lines) if line.startswith("---"))
    header, rule = lines[rule_at - 1], lines[rule_at]
    bounds = [(m.start(), m.end()) for m in re.finditer(r"-+", rule)]
    names = [header[start:end].strip() or header[start:].split()[0] for start, end in bounds]
    rows = []
    for line in lines[rule_at + 1 :]:
        if not line.strip():
            break
        cells = [line[start:end].strip() for start, end in bounds[:-1]]
        cells.append(line[bounds[-1][0] :].strip())
        rows.append(dict(zip(names, cells, strict=True)))
    return rows
