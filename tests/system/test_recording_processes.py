"""The hashed recordings: each rebuilt byte for byte from the published record."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "script", ["rebuild_recording.py", "rebuild_text_recording.py", "rebuild_chat_recording.py"]
)
def test_a_recording_rebuilds_byte_for_byte_from_the_published_record(script: str) -> None:
    check = subprocess.run(
        [sys.executable, str(ROOT / "fixtures" / script), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stderr
