"""The live Gemini source, against a real local HTTP server that speaks Gemini's SSE.

Three real processes per test: the fake Gemini server, ``python -m producer
--source gemini`` pointed at it, and ``python -m consumer stream``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.fake_gemini.scripts import TEXT_REPLY
from replywire.children import stop_process
from replywire.producer.budget.file_ledger import BudgetLedger
from replywire.shared.recording import Recording
from replywire.shared.result import lab_view
from tests.gemini_runs import API_KEY, SCRIPTS, gemini_producer
from tests.processes import (
    ROOT,
    FakeGeminiProcess,
    Producer,
    concurrent_replies,
    consumer_process,
    fake_gemini,
    producer,
    read_trace,
    run_consumer,
    wait_for,
)

pytestmark = pytest.mark.timeout(180)

HERE = Path(__file__).resolve().parents[1]
GEMINI_RUN = json.loads((HERE / "published/gemini-run.json").read_text(encoding="utf-8"))
PUBLISHED = {case["case_id"]: case for case in GEMINI_RUN["cases"]}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGeminiProcess]:
    with fake_gemini(API_KEY) as server:
        yield server


@pytest.fixture(scope="module")
def live_run(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeGeminiProcess
) -> Iterator[tuple[Producer, Path]]:
    directory = tmp_path_factory.mktemp("gemini")
    run_dir = directory / "run"
    with gemini_producer(directory, fake, "--record", str(run_dir)) as running:
        yield running, run_dir


# --- the published run --------------------------------------------------------------------


def test_published_gemini_block_is_the_fixtures() -> None:
    record = json.loads((ROOT / "fixtures/published-lab-record.json").read_text("utf-8"))
    assert record[3] == GEMINI_RUN


@pytest.mark.parametrize("case_id", list(PUBLISHED))
def test_four_cases_match_the_published_gemini_run(
    live_run: tuple[Producer, Path], case_id: str
) -> None:
    running, _ = live_run
    run = run_consumer(running.target, "--case", case_id, "--wire", "ndjson-lab")
    published = PUBLISHED[case_id]
    assert run.returncode == 0, run.result
    # The lab encoded one provider frame per read: its NDJSON wire, one frame per chunk.
    assert lab_view(run.result) == published["result"]
    assert run.result["stats"]["application_frames"] == len(published["application_frames"])


@pytest.mark.parametrize("case_id", list(PUBLISHED))
def test_length_prefixed_wire_gives_the_same_answers(
    live_run: tuple[Producer, Path], case_id: str
) -> None:
    running, _ = live_run
    run = run_consumer(running.target, "--case", case_id, "--chunks", "1,2,7,3,11")
    published = PUBLISHED[case_id]["result"]
    assert run.returncode == 0
    for key in ("accepted_answer", "citations", "provisional_content", "events"):
        assert run.result[key] == published[key]


def test_summary_statuses_and_frames(live_run: tuple[Producer, Path]) -> None:
    running, _ = live_run
    summary = []
    for case_id in ("utf8-write", "replace-file", "json-result-type", "backup-schedule"):
        result = run_consumer(running.target, "--case", case_id).result
        summary.append(
            (
                result["status"],
                result["accepted_answer"]["status"],
                result["stats"]["application_frames"],
            )
        )
    assert summary == [
        ("complete", "not_in_docs", 4),
        ("complete", "answered", 4),
        ("complete", "answered", 3),
        ("complete", "not_in_docs", 4),
    ]


# --- failures -----------------------------------------------------------------------------


SETTLED = {"fake-max-tokens", "fake-safety", "fake-after-finish"}


@pytest.mark.parametrize("model", list(SCRIPTS))
def test_each_failure_script_ends_in_its_named_outcome(
    tmp_path: Path, fake: FakeGeminiProcess, model: str
) -> None:
    status, reason, exit_code = SCRIPTS[model]
    with gemini_producer(tmp_path, fake, model=model) as running:
        run = run_consumer(running.target, "--case", "replace-file")
    assert (run.result["status"], run.result["reason"]) == (status, reason)
    assert run.returncode == exit_code
    assert run.result["accepted_answer"] is None
    if model == "fake-rate-limited":
        assert run.result["transport"]["retry-delay"] == "7s"
        assert run.result["transport"]["grpc_code"] == "RESOURCE_EXHAUSTED"
    if model == "fake-after-finish":
        assert run.result["local_terminal"] == "done"
        assert run.result["transport"]["grpc_details"] == "provider_event_after_finish"
    ledger = json.loads((tmp_path / "ledger.json").read_text())
    (entry,) = ledger["entries"]
    # A call the provider finished (any reason) reported its usage: settled with it.
    # Every other call keeps its worst-case reservation: nobody knows what it cost.
    assert entry["state"] == ("settled" if model in SETTLED else "failed")
    assert (entry["usage"] is not None) == (model in SETTLED)


@pytest.mark.parametrize("model", ["fake-unterminated", "fake-running-usage", "fake-slow-drip"])
def test_scripts_that_still_complete(tmp_path: Path, fake: FakeGeminiProcess, model: str) -> None:
    with gemini_producer(tmp_path, fake, model=model) as running:
        run = run_consumer(running.target, "--case", "json-result-type")
    assert run.returncode == 0
    assert (
        run.result["accepted_answer"] == PUBLISHED["json-result-type"]["result"]["accepted_answer"]
    )
    (entry,) = json.loads((tmp_path / "ledger.json").read_text())["entries"]
    assert entry["state"] == "settled"
    assert entry["usage"]["totalTokenCount"] > 0


def test_faults_are_refused_by_the_gemini_source(live_run: tuple[Producer, Path]) -> None:
    running, _ = live_run
    run = run_consumer(running.target, "--case", "replace-file", "--fault", "omit")
    assert run.returncode == 7
    assert run.result["reason"] in {"faults_not_allowed", "invalid_request"}


def test_the_producer_needs_an_api_key(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "GEMINI_API_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "replywire.producer", "--source", "gemini", "--port", "0"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "GEMINI_API_KEY" in done.stderr


# --- the budget ---------------------------------------------------------------------------


def test_twenty_concurrent_streams_never_exceed_the_budget(
    tmp_path: Path, fake: FakeGeminiProcess, recording: Recording
) -> None:
    # One worst case is about 0.0016 USD (1024 output tokens at 1.50 / M plus the prompt):
    # a budget of 0.008 admits a handful of the twenty.
    budget = 0.008
    with producer(
        tmp_path,
        "--source", "gemini", "--gemini-base-url", fake.base_url, "--model", "fake-slow-drip",
        "--ledger", str(tmp_path / "ledger.json"), "--budget-usd", str(budget),
        env={"GEMINI_API_KEY": API_KEY},
    ) as running:  # fmt: skip
        ids = [f"budget-{index}" for index in range(20)]
        results = concurrent_replies([running.target], recording, "utf8-write", ids, deadline_s=60)
    statuses = sorted((r["status"], r["reason"]) for r in results)
    completed = [s for s in statuses if s[0] == "complete"]
    refused = [s for s in statuses if s[0] != "complete"]
    assert completed and refused
    assert set(refused) == {("refused", "budget_exhausted")}
    ledger = BudgetLedger(tmp_path / "ledger.json", budget_usd=budget)
    totals = ledger.totals()
    assert totals["committed_usd"] <= budget
    assert totals["entries"] == len(completed)


# --- cancellation reaches the provider ----------------------------------------------------


def test_consumer_cancellation_closes_the_upstream_response(
    tmp_path: Path, fake: FakeGeminiProcess
) -> None:
    """A consumer that leaves without Cancel (here: its deadline) and does not come back
    within the detach grace (0 s here): the generation is abandoned, the upstream closed."""
    before = len(fake.log())
    with gemini_producer(
        tmp_path, fake, "--detach-grace-s", "0", model="fake-slow-drip"
    ) as running:
        run = run_consumer(
            running.target, "--case", "backup-schedule", "--deadline-s", "0.3",
            "--stream-id", "cancelled-upstream",
        )  # fmt: skip
        assert (run.result["status"], run.result["reason"]) == ("incomplete", "deadline_exceeded")
        wait_for(lambda: len(fake.log()) > before and bool(fake.log()[-1]["client_disconnected"]))
        wait_for(lambda: running.logged("provider_stream_closed"))
        closed = next(r for r in running.trace() if r["event"] == "provider_stream_closed")
    entry = fake.log()[-1]
    assert entry["client_disconnected"] is True
    assert entry["body_completed"] is False
    assert closed["outcome"] == "reply_abandoned"  # the generation's ending: nobody came back
    assert closed["stream_id"] == "cancelled-upstream"


@pytest.mark.parametrize("how", ["cancel", "vanish"])
def test_a_consumer_that_leaves_while_a_write_waits_still_closes_the_call(
    tmp_path: Path, fake: FakeGeminiProcess, how: str
) -> None:
    """The producer's write is held by a 1 KiB window the consumer does not drain; then the
    consumer cancels (Ctrl-C) or vanishes (SIGKILL). The plan is closed exactly once: the
    provider stream's close is logged, the ledger entry leaves ``reserved`` (settled from
    the usage, or its reservation kept when the provider had not finished), the call is
    captured. The reply is generated into the reply log apart from the blocked write, so
    the provider stream may well have completed by then (closed ``completed``)."""
    run_dir = tmp_path / "run"
    stream_id = f"left-while-blocked-{how}"
    with gemini_producer(tmp_path, fake, "--record", str(run_dir)) as running:
        with consumer_process(
            tmp_path, running.target, "--case", "replace-file", "--stream-id", stream_id,
            "--chunks", "1", "--window-bytes", "1024", "--queue-size", "1",
            "--process-delay-ms", "1000",
        ) as consumer:  # fmt: skip
            consumer_trace = tmp_path / "consumer.trace.jsonl"
            wait_for(lambda: any(r["event"] == "reads_paused" for r in read_trace(consumer_trace)))
            stop_process(consumer, signal.SIGINT if how == "cancel" else signal.SIGKILL)
        settled = {"budget_settled", "budget_reservation_kept"}
        wait_for(lambda: any(r["event"] in settled for r in running.trace()))
        # The reply is generated apart from the delivery: the blocked delivery ends when the
        # producer sees the consumer gone, which may come after the ledger is settled.
        wait_for(lambda: running.states(stream_id)[-1][1] != "streaming")
        states = running.states(stream_id)
        events = [r["event"] for r in running.stream_trace(stream_id)]
    assert states[-1] == ("streaming", "cancelled_by_consumer")
    assert events.count("provider_stream_closed") == 1
    closed = next(
        r for r in running.stream_trace(stream_id) if r["event"] == "provider_stream_closed"
    )
    assert closed["outcome"] in {"cancelled_by_consumer", "completed"}
    entries = json.loads((tmp_path / "ledger.json").read_text())["entries"]
    assert len(entries) == 1
    assert entries[0]["state"] in {"settled", "failed"}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert len(manifest["calls"]) == 1


# --- evidence -----------------------------------------------------------------------------


def test_capture_and_traces_never_contain_the_api_key(live_run: tuple[Producer, Path]) -> None:
    running, run_dir = live_run
    run = run_consumer(running.target, "--case", "replace-file", "--stream-id", "keyless")
    assert run.returncode == 0
    wait_for((run_dir / "manifest.json").exists)
    texts = [path.read_bytes() for path in run_dir.rglob("*") if path.is_file()]
    texts.append(running.trace_path.read_bytes())
    texts.append(json.dumps(run.trace).encode())
    texts.append((running.trace_path.parent / "ledger.json").read_bytes())
    assert texts
    for text in texts:
        assert API_KEY.encode() not in text


def test_capture_layout_and_manifest(live_run: tuple[Producer, Path], recording: Recording) -> None:
    running, run_dir = live_run
    run_consumer(running.target, "--case", "json-result-type", "--stream-id", "captured")
    wait_for(lambda: any(c["case_id"] == "json-result-type" for c in manifest(run_dir)["calls"]))
    call = next(c for c in manifest(run_dir)["calls"] if c["case_id"] == "json-result-type")
    record = json.loads((run_dir / call["file"]).read_text())
    raw = (run_dir / "requests" / record["sse_file"]).read_bytes()
    assert call["historic_request_sha256"] == recording.case("json-result-type").request_sha256
    assert call["provider_request_sha256"] == record["provider_request_sha256"]
    assert call["provider_request_sha256"] != call["historic_request_sha256"]
    assert call["user_context_identical"] is True
    assert record["finish_reason"] == "STOP"
    assert record["usage"]["totalTokenCount"] > 0
    assert record["estimated_usd"] > 0
    assert raw.startswith(b"data: ") and raw.endswith(b"\r\n\r\n")
    assert sum(receipt["bytes"] for receipt in record["receipts"]) == len(raw)
    offsets = [receipt["offset_ms"] for receipt in record["receipts"]]
    assert offsets == sorted(offsets)


def manifest(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text())
    return data


def test_a_run_directory_is_never_overwritten(tmp_path: Path) -> None:
    used = tmp_path / "run"
    used.mkdir()
    (used / "manifest.json").write_text("{}")
    done = subprocess.run(
        [sys.executable, "-m", "replywire.producer", "--source", "gemini", "--port", "0",
         "--record", str(used)],
        cwd=ROOT, env={**os.environ, "GEMINI_API_KEY": API_KEY},
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "refusing to overwrite" in done.stderr


# --- record to replay ---------------------------------------------------------------------


def test_a_captured_run_replays_offline_with_the_providers_boundaries(
    live_run: tuple[Producer, Path], tmp_path: Path
) -> None:
    running, run_dir = live_run
    for case_id in PUBLISHED:
        assert run_consumer(running.target, "--case", case_id).returncode == 0
    out = tmp_path / "replay"
    converted = subprocess.run(
        [sys.executable, "-m", "replywire.producer.convert_capture", str(run_dir), str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert converted.returncode == 0, converted.stderr
    pinned = json.loads((out / "manifest.json").read_text())["recording_sha256"]
    with producer(
        tmp_path, "--recording", str(out / "recording.json"), "--recording-sha256", pinned,
        name="replaying",
    ) as offline:  # fmt: skip
        for case_id, published in PUBLISHED.items():
            run = run_consumer(offline.target, "--case", case_id, "--wire", "ndjson-lab")
            assert run.returncode == 0
            assert lab_view(run.result) == published["result"]
    # Without its own pin the converted file is refused: the default pin is the fixture's.
    unpinned = subprocess.run(
        [sys.executable, "-m", "replywire.producer", "--port", "0",
         "--recording", str(out / "recording.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert unpinned.returncode == 2
    assert "recording_hash_mismatch" in unpinned.stderr


# --- your own question --------------------------------------------------------------------


def test_your_own_question_binds_its_passages(
    live_run: tuple[Producer, Path], tmp_path: Path
) -> None:
    running, _ = live_run
    passages = tmp_path / "passages.jsonl"
    passages.write_text(
        '{"id": "tz-1", "text": "The office opens at 9:00 local time.", "url": "https://example.org/hours"}\n'
    )
    run = run_consumer(
        running.target, "--question", "When does the office open?", "--context", str(passages)
    )
    assert run.returncode == 0
    assert run.result["status"] == "complete"
    assert run.result["case_id"].startswith("question-")
    assert run.result["accepted_answer"]["status"] == "not_in_docs"


def test_the_recording_source_refuses_a_question(tmp_path: Path) -> None:
    passages = tmp_path / "passages.json"
    passages.write_text('[{"id": "a", "text": "b", "url": "https://example.org/a"}]')
    with producer(tmp_path) as offline:
        run = run_consumer(offline.target, "--question", "q?", "--context", str(passages))
    assert run.returncode == 7
    assert (run.result["status"], run.result["reason"]) == ("refused", "development_case_required")


# --- live ---------------------------------------------------------------------------------


@pytest.mark.live
@pytest.mark.skipif(not os.environ.get("GEMINI_API_KEY"), reason="needs GEMINI_API_KEY")
def test_live_gemini_smoke(tmp_path: Path) -> None:
    with producer(
        tmp_path, "--source", "gemini", "--ledger", str(tmp_path / "ledger.json"),
        "--budget-usd", "0.01", "--record", str(tmp_path / "run"),
    ) as live:  # fmt: skip
        run = run_consumer(live.target, "--case", "replace-file", timeout=120)
    assert run.result["status"] in {"complete", "invalid", "error", "incomplete", "refused"}
    assert run.result["status"] != "complete" or run.result["accepted_answer"] is not None


def test_a_text_reply_from_the_model(tmp_path: Path, fake: FakeGeminiProcess) -> None:
    """--kind text through the Gemini source: the model is asked the message with no
    response schema, its free text is the accepted reply, and the call is settled from the
    usage the provider reported."""
    with gemini_producer(tmp_path, fake) as running:
        run = run_consumer(running.target, "--kind", "text", "--text", "Say hello.")
    assert run.returncode == 0
    assert run.result["accepted_answer"] == {"text": TEXT_REPLY + "Say hello."}
    assert (run.result["kind"], run.result["first_output"]) == ("text", True)
    (entry,) = json.loads((tmp_path / "ledger.json").read_text())["entries"]
    assert entry["state"] == "settled"
    assert entry["usage"]["totalTokenCount"] > 0
