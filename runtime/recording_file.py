"""Reading the hashed recording from its file (the checks themselves are ``shared.recording``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final, TypeVar

from replywire.shared.chat_recording import ChatRecording
from replywire.shared.errors import ConfigurationError, ReplywireError
from replywire.shared.pinned_cases import PinnedCases
from replywire.shared.recording import RECORDING_SHA256, Recording
from replywire.shared.text_recording import TextRecording

DEFAULT_RECORDING_PATH: Final = Path(__file__).resolve().parent.parent / "fixtures/recording.json"
DEFAULT_TEXT_RECORDING_PATH: Final = DEFAULT_RECORDING_PATH.with_name("text-recording.json")
DEFAULT_CHAT_RECORDING_PATH: Final = DEFAULT_RECORDING_PATH.with_name("chat-recording.json")

P = TypeVar("P", bound=PinnedCases)


def load_recording(path: Path = DEFAULT_RECORDING_PATH, **kwargs: Any) -> Recording:
    """The recording in ``path``, verified (``Recording.from_bytes``'s checks and codes)."""
    return Recording.from_bytes(path.read_bytes(), **kwargs)


def load_recording_or_explain(path: Path, *, expected_sha256: str = RECORDING_SHA256) -> Recording:
    """``load_recording`` for a command line: a file that cannot be used is a
    ConfigurationError (one line, exit 2)."""
    try:
        return load_recording(path, expected_sha256=expected_sha256)
    except OSError as error:
        raise ConfigurationError(f"cannot read the recording {path}: {error.strerror}") from error
    except ReplywireError as error:
        raise ConfigurationError(f"recording {path} refused: {error.code}") from error


def _pinned_or_explain(kind: type[P], what: str, path: Path) -> P:
    """``kind.from_bytes`` of the file at ``path``; a file that cannot be used is a
    ConfigurationError (one line, exit 2)."""
    try:
        return kind.from_bytes(path.read_bytes())
    except OSError as error:
        raise ConfigurationError(f"cannot read the {what} {path}: {error.strerror}") from error
    except ReplywireError as error:
        raise ConfigurationError(f"{what} {path} refused: {error.code}") from error


def load_text_recording_or_explain(path: Path = DEFAULT_TEXT_RECORDING_PATH) -> TextRecording:
    """The text recording in ``path``, verified (``TextRecording.from_bytes``)."""
    return _pinned_or_explain(TextRecording, "text recording", path)


def load_chat_recording_or_explain(path: Path = DEFAULT_CHAT_RECORDING_PATH) -> ChatRecording:
    """The chat recording in ``path``, verified (``ChatRecording.from_bytes``)."""
    return _pinned_or_explain(ChatRecording, "chat recording", path)
