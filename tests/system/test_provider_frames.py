"""One events -> frames loop for the live Gemini source and the capture converter.

The live path runs across real processes (the fake Gemini server, ``python -m
producer --source gemini --record``, ``python -m consumer stream``); the
converter's path runs ``producer.sources.gemini.protocol.frames_from_sse`` on the bytes that run
captured. Both must give the same frames, including for an event that is not JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replywire.producer.sources.gemini.protocol import frames_from_sse
from replywire.shared.digest import digest
from replywire.shared.frames import Frame, FrameKind
from replywire.shared.recording import Recording
from tests.processes import ROOT, FakeGeminiProcess, fake_gemini, producer, run_consumer

pytestmark = pytest.mark.timeout(180)

API_KEY = "AIzaSy-test-key-frames-0123456789"
NOT_JSON = b'data: {"candidates": [\n\n'
TEXT = b'data: {"candidates": [{"content": {"parts": [{"text": "{}"}]}}]}\n\n'
STOP = b'data: {"candidates": [{"finishReason": "STOP"}]}\n\n'


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGeminiProcess]:
    with fake_gemini(API_KEY) as server:
        yield server


def view(frames: list[Frame]) -> list[tuple[object, str, object]]:
    return [(f.sequence, f.kind.value, f.text if f.text else f.reason) for f in frames]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ([TEXT, STOP], [(1, "content_delta", "{}"), (2, "done", None)]),
        (
            [TEXT, NOT_JSON, STOP],
            [(1, "content_delta", "{}"), (2, "error", "provider_invalid_event")],
        ),
        ([NOT_JSON], [(1, "error", "provider_invalid_event")]),
        (
            [TEXT, b"not sse\n\n"],
            [(1, "content_delta", "{}"), (2, "error", "provider_invalid_event")],
        ),
        ([TEXT], [(1, "content_delta", "{}")]),
    ],
)
def test_frames_do_not_depend_on_how_the_body_is_cut(
    body: list[bytes], expected: list[tuple[object, str, object]]
) -> None:
    raw = b"".join(body)
    whole, _ = frames_from_sse([raw], "b" * 64)
    bytewise, _ = frames_from_sse([raw[i : i + 1] for i in range(len(raw))], "b" * 64)
    assert view(whole) == view(bytewise) == expected


def test_an_event_after_the_finish_aborts_instead_of_framing() -> None:
    frames, stream = frames_from_sse([TEXT + STOP + TEXT], "b" * 64)
    assert [f.kind for f in frames] == [FrameKind.CONTENT_DELTA, FrameKind.DONE]
    assert stream.abort == "provider_event_after_finish"


def captured(run_dir: Path) -> list[tuple[str, bytes]]:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    calls = []
    for call in manifest["calls"]:
        record = json.loads((run_dir / call["file"]).read_text())
        calls.append((call["case_id"], (run_dir / "requests" / record["sse_file"]).read_bytes()))
    return calls


def live_run(tmp_path: Path, fake: FakeGeminiProcess, model: str) -> tuple[Any, Path]:
    run_dir = tmp_path / "run"
    with producer(
        tmp_path,
        "--source", "gemini", "--gemini-base-url", fake.base_url, "--model", model,
        "--ledger", str(tmp_path / "ledger.json"), "--record", str(run_dir),
        env={"GEMINI_API_KEY": API_KEY},
    ) as running:  # fmt: skip
        run = run_consumer(running.target, "--case", "replace-file", "--log-level", "debug")
    return run, run_dir


@pytest.mark.parametrize(
    ("model", "outcome"),
    [
        ("gemini-3.1-flash-lite", ("complete", None)),
        ("fake-invalid-json", ("error", "provider_invalid_event")),
        ("fake-malformed-sse", ("error", "provider_invalid_event")),
        ("fake-max-tokens", ("error", "provider_finish_MAX_TOKENS")),
        ("fake-function-call", ("error", "provider_part_unsupported")),
    ],
)
def test_live_and_converter_give_the_same_frames(
    tmp_path: Path,
    fake: FakeGeminiProcess,
    recording: Recording,
    model: str,
    outcome: tuple[str, str | None],
) -> None:
    run, run_dir = live_run(tmp_path, fake, model)
    assert (run.result["status"], run.result["reason"]) == outcome
    live = [(r["sequence"], r["kind"]) for r in run.trace if r["event"] == "frame_applied"]
    ((case_id, raw),) = captured(run_dir)
    frames, _ = frames_from_sse([raw], digest(recording.case(case_id).binding))
    assert live == [(f.sequence, f.kind.value) for f in frames]
    assert run.result["provisional_content"] == "".join(str(f.text) for f in frames if f.text)
    assert (frames[-1].reason or None) == outcome[1]


def convert(run_dir: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "replywire.producer.convert_capture", str(run_dir), str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("model", ["fake-invalid-json", "fake-max-tokens"])
def test_a_capture_without_stop_is_not_converted(
    tmp_path: Path, fake: FakeGeminiProcess, model: str
) -> None:
    _, run_dir = live_run(tmp_path, fake, model)
    done = convert(run_dir, tmp_path / "replay")
    assert done.returncode == 2
    finish = "ERROR" if model == "fake-invalid-json" else "MAX_TOKENS"
    assert done.stderr.splitlines()[-1] == (
        f"convert_capture: no development case in {run_dir} finished with STOP, nothing to "
        f"replay: replace-file (requests/request-001.json): finish {finish}"
    )
    assert done.stdout == ""
    assert not (tmp_path / "replay").exists()
