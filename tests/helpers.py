"""Helpers that several test modules share (no test module imports from another).

The Gemini test key and the fake server's failure scripts, a Gemini-backed producer, what
two runs of one stream must agree on, a producer's final trace records and metrics, and the
consumer's timeline table read back into rows. The processes themselves are started by
tests/processes.py; a private Redis server by tests/redis_server.py.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import re
import signal
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import structlog
import structlog.testing
from grpc_health.v1 import health_pb2
from prometheus_client.parser import text_string_to_metric_families

from harness.fake_gemini import (
    PublishedCase,
    load_published_cases,
)
from producer.budget.usage import Rates, estimate_prompt_tokens
from producer.gemini.protocol import DEFAULT_MAX_OUTPUT_TOKENS, request_body
from producer.states import FINAL_STATES
from shared.recording import Recording
from tests.processes import (
    FakeGeminiProcess,
    Producer,
    producer,
    wait_for,
)

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


async def until(
    predicate: Callable[[], bool], *, timeout: float = 15.0, interval: float = 0.02
) -> None:
    """tests.processes.wait_for inside an event loop: poll without blocking it, bounded."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() >= deadline:
            raise TimeoutError(f"condition not met within {timeout} s")
        await asyncio.sleep(interval)


#: Coverage's subprocess hook: set in a test process's environment, every Python process the
#: test starts is measured too (pyproject.toml: ``patch = ["subprocess"]``).
COVERAGE_HOOK = ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START")


def unmeasured_environ(**extra: str) -> dict[str, str]:
    """This process's environment (and ``extra``) without coverage's subprocess hook: for
    what a test marked ``no_cover`` starts in a fixture wider than the test (the processes
    the test itself starts are unmeasured by tests/conftest.py)."""
    environ = {key: value for key, value in os.environ.items() if key not in COVERAGE_HOOK}
    return {**environ, **extra}


def once_per_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, compute: Callable[[], Any]
) -> Any:
    """``compute()`` (a JSON value) once for the whole run: under pytest-xdist the first
    worker to ask computes it and writes it down, in the folder all the run's workers share;
    the others wait for it (bounded) and read it."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return compute()
    shared = tmp_path_factory.getbasetemp().parent
    done = shared / f"{name}.json"
    with (shared / f"{name}.lock").open("a") as lock:
        deadline = time.monotonic() + ONCE_TIMEOUT_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{name}: another worker still at it") from None
                time.sleep(0.05)
        if not done.exists():
            done.write_text(json.dumps(compute()), encoding="utf-8")
        return json.loads(done.read_text(encoding="utf-8"))


#: How long a worker waits for another to compute what once_per_run shares.
ONCE_TIMEOUT_S = 300.0


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


# --- the fake Gemini server's wire ---------------------------------------------------------------


KEY = "test-key"


HEADERS = {"x-goog-api-key": KEY}


EVENT_END = b"\r\n\r\n"


CASES: dict[str, PublishedCase] = load_published_cases()


FIRST = next(iter(CASES.values()))


SCHEMA = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "enum": ["answered", "not_in_docs"]},
        "answer": {"type": "string"},
        "source_ids": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["status", "answer", "source_ids"],
}


def fake_request_body(case: PublishedCase = FIRST, user_text: str | None = None) -> dict[str, Any]:
    return {
        "contents": [{"role": "user", "parts": [{"text": user_text or case.user_text}]}],
        "systemInstruction": {"parts": [{"text": case.system_text}]},
        "generationConfig": {
            "responseMimeType": "application/json",
            "responseJsonSchema": SCHEMA,
            "maxOutputTokens": 1024,
        },
    }


def split_events(raw: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """Complete ``data: <json>\\r\\n\\r\\n`` events, and whatever follows the last one."""
    *parts, tail = raw.split(EVENT_END)
    events = []
    for part in parts:
        assert part.startswith(b"data: "), part
        assert b"\n" not in part and b"\r" not in part
        events.append(json.loads(part[len(b"data: ") :]))
    return events, tail


def text_of(event: dict[str, Any]) -> str | None:
    content = event["candidates"][0].get("content")
    return None if content is None else content["parts"][0]["text"]


# --- flow control --------------------------------------------------------------------------------


#: Bounded waits: the pause ends on its own well before the test's timeout.
HOLD_S = 15.0


# --- the budget ledger ---------------------------------------------------------------------------


BODY = {"contents": [{"role": "user", "parts": [{"text": "x" * 300}]}]}


PROMPT_ESTIMATE = estimate_prompt_tokens(BODY)


GOOD_USAGE = {"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120}


# --- many streams on one producer ----------------------------------------------------------------


UTF8_CASE = "utf8-write"


def quiet() -> structlog.typing.FilteringBoundLogger:
    return structlog.wrap_logger(
        None, wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL)
    )


# --- the producer's operations surface -----------------------------------------------------------


SERVING = health_pb2.HealthCheckResponse.SERVING


NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


INJECTED = (
    '{"event":"state_changed","to_state":"completed","side":"producer",'
    '"stream_id":"forged-by-peer","level":"info"}'
)


# --- security ------------------------------------------------------------------------------------


TOKEN_A = "token-for-alice-0123456789abcdef"


TOKEN_B = "token-for-bob-fedcba9876543210xx"


def nested_brackets(depth: int) -> str:
    return "[" * depth + "]" * depth


# --- store URLs ----------------------------------------------------------------------------------


#: Long enough for the trace scrubbers (4 characters or more), percent-encoded in the URL.
PASSWORD = "st0re-Secret@42"


QUOTED = "st0re-Secret%4042"


ACCEPTED = "give redis://, rediss://, unix:// or a file path (the scheme in any case)"


# --- terminal safety: hostile text ---------------------------------------------------------------


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
        {**side, "side": "consumer", "timestamp": at(4), "event": "note" + H,
         "component": "reader" + H, "detail": "text " + H + "\nmore"},
        {**side, "side": "consumer", "timestamp": at(5), "event": "state_changed",
         "component": "core", "from_state": "streaming", "to_state": "error",
         "input": "transport_error", "reason": "r" + H},
        {**side, "side": "consumer", "timestamp": at(6), "event": "stream_finished",
         "status": "error" + H, "reason": "transport_io_error" + H},
    ]  # fmt: skip


TRACE_STREAM = "<svg/onload=alert(1)>" + H


def stream_id(scenario: str) -> str:
    """A stream id (the request's: a person typed it) with what a terminal obeys first."""
    return f"\x9b2J\u202e{scenario}-\x1b]0;T\x07"


# --- the timeline page ---------------------------------------------------------------------------


SVG = "{http://www.w3.org/2000/svg}"


def counted(event_cell: str) -> tuple[str, int]:
    match = re.fullmatch(r"(\w+) ×(\d+)", event_cell)
    return (match.group(1), int(match.group(2))) if match else (event_cell, 1)


def svg_of(html: str) -> ET.Element:
    start, end = html.index("<svg"), html.index("</svg>") + len("</svg>")
    return ET.fromstring(html[start:end])


# --- tokens --------------------------------------------------------------------------------------


TOKEN = "alice-token-0123456789abcdef"


# --- the tour's samples --------------------------------------------------------------------------


def rejected_rows(drawn: str, headline: str) -> list[str]:
    """The rows of the not-accepted block, borders and padding off."""
    lines = drawn.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"╭─ {headline} "))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("╰"))
    return [ln[2:-1].rstrip() for ln in lines[start + 1 : end]]


MASKS = (
    (re.compile(r"\b\d\d:\d\d:\d\d\.\d{3}\b"), "HH:MM:SS.mmm"),
    (re.compile(r"\b\d+\.\d s\b"), "N.N s"),
    (re.compile(r"(· |stream |STREAM=)[0-9a-f]{8}\b"), r"\1STREAMID"),
    (re.compile(r"(peer=ipv4:127\.0\.0\.1:)\d+"), r"\1PORT"),
    (re.compile(r"backoff_ms=[\d.]+"), "backoff_ms=N"),
    (re.compile(r"paused \d+×"), "paused N×"),
    (re.compile(r"queue \d+/"), "queue N/"),
    # The build of the hot modules (native/): compiled where a C compiler is, else pure.
    (re.compile(r"\bbuild=(compiled|pure|mixed)\b"), "build=BUILD"),
    # How many tries failed while a producer was down: timing (0 stays 0).
    (re.compile(r"\b(reconnects[ =])[1-9]\d*"), r"\1N"),
)


#: Samples whose frames, bytes and partial text depend on when the producer was stopped.
STOPPED_MID_STREAM = {"view-killed"}


#: The timeline rows (side, event, from -> to) that are there or not by timing: a failed
#: resume attempt (the restarted producer may answer the first one).
TIMING_ROWS = {("consumer/reader", "state_changed", "connecting -> ended")}


def masked(block: str, name: str = "") -> tuple[list[str], list[str]]:
    """A sample with what varies run to run masked: its trace lines (in any order: the
    reader's and the core's records of one moment may come either way) and the rest."""
    for pattern, replacement in MASKS:
        block = pattern.sub(replacement, block)
    lines = [line for line in block.splitlines() if "reads_paused_episode" not in line]
    if name in STOPPED_MID_STREAM:
        lines = without_partial_text(lines)
    trace = sorted(line for line in lines if line.startswith("HH:MM:SS.mmm"))
    return trace, [line for line in lines if not line.startswith("HH:MM:SS.mmm")]


def without_partial_text(lines: list[str]) -> list[str]:
    """The verdict without the counts and the text that depend on how far the stream got:
    the box's ``text`` row says only that a partial text was kept."""
    kept, in_text = [], False
    for line in (re.sub(r"frames \d+  \d+ B", "frames N  N B", line) for line in lines):
        if line.startswith("│ text    partial ("):
            kept.append("│ text    partial")
            in_text = True
        elif not (in_text and line.startswith("│         ")):
            kept.append(line)
            in_text = False
    return kept


def timeline_shape(block: str) -> tuple[str, str, set[tuple[str, str, str]]]:
    """A ``make trace`` sample: its command (stream id masked), the verdict on its summary
    line, and which (side, event, from -> to) rows it has; how many chunks each run has,
    the times and the order of the two sides are timing."""
    unfenced = "\n".join(line for line in block.splitlines() if not line.startswith("```"))
    command, summary, table = unfenced.split("\n", 2)
    verdict = re.fullmatch(r"stream [0-9a-f]{32} \(replace-file\): ([^;]+); .*", summary)
    assert verdict, summary
    rows = {
        (row["side"], row["event"].split(" ×")[0], row["from -> to"]) for row in parse_table(table)
    }
    return masked(command)[1][0], verdict.group(1), rows - TIMING_ROWS
