"""Configuration errors and loading the verified recording (shared by consumer commands)."""

from __future__ import annotations

from pathlib import Path

from shared.errors import ReplywireError
from shared.recording import Recording


class UsageError(Exception):
    """A bad flag or configuration: exit 2 with a one-line message."""


def load_recording(path: Path) -> Recording:
    try:
        return Recording.load(path)
    except OSError as error:
        raise UsageError(f"cannot read the recording {path}: {error.strerror}") from error
    except ReplywireError as error:
        raise UsageError(f"recording {path} refused: {error.code}") from error
