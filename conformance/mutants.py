"""Mutants of the Python core, each with one check turned off: the kit's proof that its
vectors catch a consumer that skips that check (``python -m conformance.testee --mutant``).

A mutant patches one method or function of the core for as long as it is applied; the
core itself is never changed on disk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

from native import PURE_ENV, is_compiled
from shared import consumer_core
from shared.consumer_content import Content
from shared.consumer_core import ReplyConsumer
from shared.consumer_limits import Limits
from shared.errors import ProtocolFailure
from shared.frame_checks import FrameChecks
from shared.frames import DoneDigest, Frame
from shared.kinds import ReplyKind
from shared.reasons import Reason
from shared.reply import validate_reply
from shared.wire.lp import LengthPrefixedDecoder
from shared.wire.ndjson import NdjsonDecoder

Patch = tuple[object, str, Any]

_ADMIT: Final = FrameChecks.admit
_MATCHES: Final = Content.matches
_APPLY: Final = ReplyConsumer._apply
_INIT: Final = ReplyConsumer.__init__
_VALIDATE: Final = validate_reply
#: Limits no test stream reaches.
_UNBOUNDED: Final = Limits(
    max_stream_bytes=1 << 40,
    max_frame_bytes=1 << 40,
    max_content_chars=1 << 40,
    max_frames=1 << 40,
    max_reason_chars=1 << 40,
)


def _admit_any_sequence(self: FrameChecks, frame: Frame, payload: bytes) -> bool:
    """``admit`` without the sequence check: the frame is taken as the next one."""
    return _ADMIT(self, _renumbered(frame, self.frames + 1), payload)


def _renumbered(frame: Frame, sequence: int) -> Frame:
    return Frame(
        sequence=sequence,
        kind=frame.kind,
        binding_sha256=frame.binding_sha256,
        text=frame.text,
        reason=frame.reason,
        done_digest=frame.done_digest,
    )


def _admit_any_binding(self: FrameChecks, frame: Frame, payload: bytes) -> bool:
    """``admit`` without the per-frame binding check."""
    bound = Frame(
        sequence=frame.sequence,
        kind=frame.kind,
        binding_sha256=self.binding_sha256,
        text=frame.text,
        reason=frame.reason,
        done_digest=frame.done_digest,
    )
    return _ADMIT(self, bound, payload)


def _admit_past_frame_limit(self: FrameChecks, frame: Frame, payload: bytes) -> bool:
    """``admit`` without the frame count limit."""
    limits, self.limits = self.limits, _UNBOUNDED
    try:
        return _ADMIT(self, frame, payload)
    finally:
        self.limits = limits


def _matches_any_digest(self: Content, claim: DoneDigest) -> bool:
    """done's claim checked for its frame count only."""
    return claim.content_frames == self.frames


def _matches_any_count(self: Content, claim: DoneDigest) -> bool:
    """done's claim checked for its SHA-256 only."""
    claimed = DoneDigest(content_sha256=claim.content_sha256, content_frames=self.frames)
    return _MATCHES(self, claimed)


def _apply_after_terminal(self: ReplyConsumer, payload: bytes) -> None:
    """A frame after the terminal is taken as any other."""
    terminal, self._terminal = self._terminal, None
    try:
        _APPLY(self, payload)
    finally:
        if self._terminal is None:
            self._terminal = terminal


def _no_end_check(self: object) -> None:
    """The end of input is not checked for a frame or character left unfinished."""


def _init_unbounded(self: ReplyConsumer, binding: Mapping[str, Any], **options: Any) -> None:
    """Every limit out of reach."""
    options["limits"] = _UNBOUNDED
    _INIT(self, binding, **options)


def _lenient(*forgiven: Reason) -> Callable[..., tuple[dict[str, Any], list[dict[str, Any]]]]:
    """The reply's validation with ``forgiven`` refusals turned into an acceptance."""

    def validate(
        content: str, binding: Mapping[str, Any]
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        try:
            return _VALIDATE(content, binding)
        except ProtocolFailure as failure:
            if failure.reason not in forgiven:
                raise
            return {"content": content}, []

    return validate


def _any_terminal_reason(reason: object, limits: Limits) -> None:
    """A cancel or error terminal's reason is not checked."""


def _every_reply_grounded(binding: Mapping[str, Any]) -> ReplyKind:
    """The binding's kind is not read: every reply is validated as a grounded answer."""
    return ReplyKind.GROUNDED


#: Each mutant: the check it turns off, as the patches that turn it off.
MUTANTS: Final[dict[str, tuple[Patch, ...]]] = {
    "sequence": ((FrameChecks, "admit", _admit_any_sequence),),
    "binding": ((FrameChecks, "admit", _admit_any_binding),),
    "content-digest": ((Content, "matches", _matches_any_digest),),
    "frame-count": ((Content, "matches", _matches_any_count),),
    "terminal": ((ReplyConsumer, "_apply", _apply_after_terminal),),
    "terminal-reason": ((consumer_core, "check_terminal_reason", _any_terminal_reason),),
    "clean-end": (
        (LengthPrefixedDecoder, "end_of_input", _no_end_check),
        (NdjsonDecoder, "end_of_input", _no_end_check),
    ),
    "reply-schema": ((consumer_core, "validate_reply", _lenient(Reason.INVALID_ANSWER_SCHEMA)),),
    "citations": (
        (
            consumer_core,
            "validate_reply",
            _lenient(Reason.UNKNOWN_CONTEXT_CITATION, Reason.STATUS_CITATION_MISMATCH),
        ),
    ),
    "frame-limit": ((FrameChecks, "admit", _admit_past_frame_limit),),
    "limits": ((ReplyConsumer, "__init__", _init_unbounded),),
    "reply-kind": ((consumer_core, "kind_of", _every_reply_grounded),),
}


def core_is_compiled() -> bool:
    return is_compiled("shared.consumer_core")


@contextmanager
def applied(name: str | None) -> Iterator[None]:
    """The core with mutant ``name`` applied (None: the core as it is).

    Only the pure core can be patched: compiled by mypyc, its classes refuse new methods or
    ignore them (its own calls are bound when compiled), so a mutant of the compiled core
    would silently be the core itself. Run mutants with ``REPLYWIRE_PURE=1`` (the testee
    does that itself)."""
    patches = MUTANTS[name] if name is not None else ()
    if patches and core_is_compiled():
        raise RuntimeError(f"a mutant patches the pure core: run it with {PURE_ENV}=1")
    saved = [(owner, attribute, getattr(owner, attribute)) for owner, attribute, _ in patches]
    for owner, attribute, replacement in patches:
        setattr(owner, attribute, replacement)
    try:
        yield
    finally:
        for owner, attribute, original in reversed(saved):
            setattr(owner, attribute, original)
