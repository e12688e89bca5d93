"""The hashed recording: pinned hash, verification order and codes, bindings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_recording_rebuilds_byte_for_byte_from_the_published_record() -> None:
    check = subprocess.run(
        [sys.executable, str(ROOT / "fixtures/rebuild_recording.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stderr


def test_the_text_recording_rebuilds_byte_for_byte_from_the_published_record() -> None:
    check = subprocess.run(
        [sys.executable, str(ROOT / "fixtures/rebuild_text_recording.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stderr
