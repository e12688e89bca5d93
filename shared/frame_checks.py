"""The checks a frame passes before the consumer core applies it, in the lab's order: the
next sequence number (or, under the duplicate policy, an exact replay), the binding hash, the
frame count (``FrameChecks``); and a cancel or error terminal's reason
(``check_terminal_reason``). Each failure raises ``ProtocolFailure``; the core
(``shared.consumer_core``) runs them and checks the rest of a frame itself.
"""

from __future__ import annotations

import hashlib

from replywire.shared.consumer_limits import Limits
from replywire.shared.errors import ProtocolFailure
from replywire.shared.frames import Frame
from replywire.shared.reasons import Reason


class FrameChecks:
    """The checks every frame passes before it is applied, in the lab's order: the next
    sequence number (or, under the duplicate policy, an exact replay), the binding hash,
    the frame count. Each failure raises ``ProtocolFailure``."""

    def __init__(self, binding_sha256: str, limits: Limits, *, ignore_duplicates: bool) -> None:
        self.binding_sha256 = binding_sha256
        self.limits = limits
        self.ignore_duplicates = ignore_duplicates
        #: Frames counted so far (the lab counts the one a limit refuses).
        self.frames = 0
        # Duplicate policy: SHA-256 of each applied frame's bytes, by sequence - 1.
        self._applied: list[bytes] = []

    def admit(self, frame: Frame, payload: bytes) -> bool:
        """True to apply ``frame``; False for an exact duplicate the policy drops."""
        sequence = frame.sequence
        if type(sequence) is not int or sequence != self.frames + 1:
            if self._is_duplicate(sequence, payload):
                return False
            raise ProtocolFailure(Reason.INVALID_SEQUENCE, f"expected {self.frames + 1}")
        if frame.binding_sha256 != self.binding_sha256:
            raise ProtocolFailure(Reason.FRAME_REQUEST_MISMATCH, f"sequence {sequence}")
        self.frames += 1
        if self.frames > self.limits.max_frames:
            raise ProtocolFailure(Reason.FRAME_COUNT_LIMIT, f"{self.frames} frames")
        if self.ignore_duplicates:
            self._applied.append(hashlib.sha256(payload).digest())
        return True

    def _is_duplicate(self, sequence: object, payload: bytes) -> bool:
        if not self.ignore_duplicates or type(sequence) is not int:
            return False
        if not 1 <= sequence <= self.frames:
            return False
        if self._applied[sequence - 1] != hashlib.sha256(payload).digest():
            raise ProtocolFailure(Reason.CONFLICTING_DUPLICATE, f"sequence {sequence}")
        return True


def check_terminal_reason(reason: object, limits: Limits) -> None:
    """A cancel or error terminal says why: non-empty UTF-8 text within the limit."""
    if not isinstance(reason, str) or not reason or len(reason) > limits.max_reason_chars:
        raise ProtocolFailure(Reason.INVALID_TERMINAL_REASON)
    try:
        reason.encode("utf-8")
    except UnicodeError as error:
        raise ProtocolFailure(Reason.INVALID_TERMINAL_REASON, "not UTF-8") from error
