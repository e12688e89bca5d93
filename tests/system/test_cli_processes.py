"""``python -m consumer`` as a user runs it: real subprocesses, exit codes, stdout, stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from replywire.shared.faults import EXPECTED_OUTCOMES, FaultKind
from replywire.shared.recording import DEVELOPMENT_CASES
from replywire.shared.wire import WireFormat
from tools.docs import demo_block

ROOT = Path(__file__).resolve().parents[2]


README = (ROOT / "README.md").read_text(encoding="utf-8")


EXIT = {"complete": 0, "incomplete": 3, "cancelled": 4, "error": 5, "invalid": 6, "refused": 7}


def consumer(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "replywire.consumer", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def trace(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.strip()]


def test_replay_complete_prints_the_result_and_exits_0() -> None:
    # The lab's wire, to compare with the lab's published figures (1427 bytes, 299 fragments).
    run = consumer(
        "replay", "--case", "replace-file", "--wire", "ndjson-lab", "--chunks", "1,2,7,3,11"
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["status"] == "complete"
    assert result["stats"] == {
        "bytes_received": 1427,
        "transport_fragments": 299,
        "application_frames": 10,
        "reconnects": 0,
        "discarded_bytes": 0,
    }
    assert result["accepted_answer"]["source_ids"] == ["path-write"]
    assert (result["wire_format"], result["integrity"]) == ("ndjson-lab", "none")
    assert result["binding_sha256"] == (
        "f1a54255dd15ecc6a6a6dc316530f88f204a6e4c48ec5ab0def12f8bddbb2c70"
    )


def test_trace_is_json_lines_with_the_interface_fields() -> None:
    run = consumer("replay", "--case", "utf8-write", "--stream-id", "s-123")
    assert run.returncode == 0
    records = trace(run.stderr)
    assert records, "no trace on stderr"
    for record in records:
        assert {"timestamp", "level", "event", "side", "stream_id"} <= set(record)
        assert record["side"] == "consumer"
        assert record["stream_id"] == "s-123"
        assert record["timestamp"].endswith("Z")
    changes = [(r["from_state"], r["to_state"]) for r in records if r["event"] == "state_changed"]
    assert changes == [
        ("streaming", "terminal_received"),
        ("terminal_received", "validating"),
        ("validating", "complete"),
    ]


@pytest.mark.parametrize("wire", [w.value for w in WireFormat])
@pytest.mark.parametrize("fault", [kind.value for kind in FaultKind])
def test_each_fault_exits_with_its_status_code(fault: str, wire: str) -> None:
    run = consumer("replay", "--case", "replace-file", "--wire", wire, "--fault", fault)
    expected = EXPECTED_OUTCOMES[FaultKind(fault)][WireFormat(wire)]
    result = json.loads(run.stdout)
    assert (result["status"], result["reason"]) == (expected.status, expected.reason)
    assert run.returncode == EXIT[expected.status]
    assert (result["accepted_answer"] is None) == (expected.status != "complete")


def test_fault_parameters_reach_the_fault() -> None:
    run = consumer(
        "replay", "--case", "replace-file", "--fault", "truncate-tail", "--fault-bytes", "1"
    )
    assert run.returncode == 6
    assert json.loads(run.stdout)["stats"]["bytes_received"] == 942  # 943 - 1


def test_ignore_duplicates_flag() -> None:
    run = consumer("replay", "--case", "replace-file", "--fault", "repeat", "--ignore-duplicates")
    assert run.returncode == 0
    assert json.loads(run.stdout)["status"] == "complete"


def test_a_case_outside_the_allowlist_is_refused_with_7() -> None:
    run = consumer("replay", "--case", "held-out-case")
    assert run.returncode == 7
    result = json.loads(run.stdout)
    assert (result["status"], result["reason"]) == ("refused", "development_case_required")
    assert result["accepted_answer"] is None


def test_limits_are_flags() -> None:
    run = consumer("replay", "--case", "replace-file", "--max-frames", "9")
    assert run.returncode == 6
    assert json.loads(run.stdout)["reason"] == "frame_count_limit"


def test_result_file(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    run = consumer("replay", "--case", "json-result-type", "--result", str(path))
    assert run.returncode == 0
    assert run.stdout == ""
    assert json.loads(path.read_text())["status"] == "complete"


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["replay"],
        ["replay", "--case", "replace-file", "--wire", "xml"],
        ["replay", "--case", "replace-file", "--chunks", "0"],
        ["replay", "--case", "replace-file", "--chunks", "a,b"],
        ["replay", "--case", "replace-file", "--fault", "meteor"],
        ["replay", "--case", "replace-file", "--max-frames", "0"],
        ["replay", "--case", "replace-file", "--fault-frame", "2"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    assert consumer(*args).returncode == 2


def test_a_tampered_recording_is_a_configuration_error(tmp_path: Path) -> None:
    tampered = tmp_path / "recording.json"
    tampered.write_bytes((ROOT / "fixtures/recording.json").read_bytes() + b" ")
    run = consumer("replay", "--case", "replace-file", "--recording", str(tampered))
    assert run.returncode == 2
    assert "recording_hash_mismatch" in run.stderr
    missing = consumer("replay", "--case", "replace-file", "--recording", str(tmp_path / "no"))
    assert missing.returncode == 2


def test_demo_prints_the_table(tmp_path: Path) -> None:
    """`make demo` as the README shows it: its output is the README's sample, both traces kept."""
    run = subprocess.run(
        ["make", "--no-print-directory", "demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # the demo's trace directory lands here
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr == "", "the demo's consumer trace goes to consumer.jsonl, not stderr"
    lines = run.stdout.splitlines()
    assert any(
        line.startswith("replace-file + truncate-tail") and "truncated_frame" in line
        for line in lines
    )
    assert sum(1 for line in lines if " complete " in line and line.rstrip().endswith("yes")) == 11
    assert any(line.startswith("replace-file + stall") and "idle_timeout" in line for line in lines)
    assert "11 accepted, 16 refused or not accepted." in run.stdout
    # The README's sample is this output, with the pid, port and directory fixed.
    assert demo_block(run.stdout) in README, (
        "regenerate: python -m tools.docs --update README.md --run"
    )
    # Both traces, JSON lines at debug, every row's stream id on both sides.
    (traces,) = tmp_path.glob("replywire-demo-*")
    stream_ids = [line.split()[line.split().index("lp") - 1] for line in lines if " lp " in line]
    stream_ids += [
        line.split()[line.split().index("ndjson") - 1] for line in lines if " ndjson " in line
    ]
    assert sorted(stream_ids) == [f"demo-{n:02d}" for n in range(1, 28)]
    for side in ("producer", "consumer"):
        records = [json.loads(line) for line in (traces / f"{side}.jsonl").read_text().splitlines()]
        assert {r["side"] for r in records} == {side}
        assert {r["stream_id"] for r in records} >= set(stream_ids)
    # The printed join command, run as printed (from the repository's root).
    (join,) = [line.strip() for line in lines if "join-traces" in line]
    assert join == f".venv/bin/python -m replywire join-traces {traces} --stream-id demo-13"
    joined = subprocess.run(
        join, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    records = [json.loads(line) for line in joined.stdout.splitlines()]
    assert {r["stream_id"] for r in records} == {"demo-13"}
    assert [r["timestamp"] for r in records] == sorted(r["timestamp"] for r in records)
    ends = [
        (r["side"], r["to_state"]) for r in records if r.get("to_state") in ("completed", "invalid")
    ]
    assert sorted(ends) == [("consumer", "invalid"), ("producer", "completed")]
    # Each stream's timeline page, all linked from one index, and the printed trace command.
    index = (traces / "timelines.html").read_text(encoding="utf-8")
    for stream_id in stream_ids:
        page = (traces / f"timeline-{stream_id}.html").read_text(encoding="utf-8")
        assert f"<h1>Stream {stream_id}: " in page  # and the row's run
        assert 'id="lane-producer"' in page and 'id="lane-consumer"' in page
        assert f'href="timeline-{stream_id}.html"' in index
    assert "<h1>Stream demo-18: replace-file + stall</h1>" in (
        traces / "timeline-demo-18.html"
    ).read_text(encoding="utf-8")
    assert "<td>replace-file + stall</td><td>incomplete / idle_timeout</td>" in index
    (trace,) = [line.strip() for line in lines if " replywire trace " in line]
    assert trace == (
        f".venv/bin/python -m replywire trace {traces}/producer.jsonl {traces}/consumer.jsonl "
        "--stream demo-13"
    )
    shown = subprocess.run(
        trace, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    assert shown.stdout.startswith("stream demo-13 (replace-file): invalid / truncated_frame;")
    sent = sum(1 for r in records if r["event"] == "chunk_sent")
    assert sent > 0, "the demo keeps its traces at debug: every chunk is in them"
    assert f"chunk_sent ×{sent} " in shown.stdout


def test_help_shows_the_defaults_and_the_case_ids() -> None:
    stream_help = consumer("stream", "--help")
    assert stream_help.returncode == 0
    text = " ".join(stream_help.stdout.split())  # argparse wraps lines
    # argparse wraps lines, at a hyphen too: compared without any white space
    squeezed = "".join(text.split())
    assert "".join(f"development case: {', '.join(DEVELOPMENT_CASES)}".split()) in squeezed
    for shown in ("(default: 127.0.0.1:50051)", "(default: 120.0)", "(default: 300.0)"):
        assert shown in text
    assert "--stall-ms" in text
    producer_help = subprocess.run(
        [sys.executable, "-m", "replywire.producer", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    text = " ".join(producer_help.stdout.split())
    for shown in ("(default: 50051)", "(default: 127.0.0.1)", "(default: 300.0)", "--ready-file"):
        assert shown in text


@pytest.mark.parametrize("command", ["replay", "stream"])
def test_an_unknown_case_names_the_known_ones(command: str) -> None:
    run = consumer(command, "--case", "replace-fil", "--log-format", "json")
    assert run.returncode == 7
    result = json.loads(run.stdout)
    assert (result["status"], result["reason"]) == ("refused", "development_case_required")
    message = "unknown case 'replace-fil'; known: " + ", ".join(DEVELOPMENT_CASES)
    assert result["detail"] == message
    assert [r["detail"] for r in trace(run.stderr) if r["event"] == "request_refused"] == [message]


def test_stall_ms_needs_the_stall_fault() -> None:
    for args in (["--stall-ms", "10"], ["--fault", "omit", "--stall-ms", "10"]):
        run = consumer("replay", "--case", "replace-file", *args)
        assert run.returncode == 2
        assert "--stall-ms needs --fault stall" in run.stderr
