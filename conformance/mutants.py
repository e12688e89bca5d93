"""Mutants of the Python core, each with one check turned off (or, on the wires, made
sooner or later): the kit's proof that its vectors catch a consumer that skips that check
(``python -m conformance.testee --mutant``).

A mutant patches one method or function of the core for as long as it is applied; the
core itself is never changed on disk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

from conformance.chat_mutants import CHAT_MUTANTS
from replywire.native import PURE_ENV, is_compiled
from replywire.shared import consumer_core, reply
from replywire.shared.consumer_content import Content
from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.consumer_limits import Limits
from replywire.shared.errors import CUT_MARK, MAX_DETAIL_CHARS, ProtocolFailure
from replywire.shared.frame_checks import FrameChecks
from replywire.shared.frames import DoneDigest, Frame
from replywire.shared.kinds import ReplyKind
from replywire.shared.reasons import Reason
from replywire.shared.reply import validate_reply
from replywire.shared.wire import NEED_DATA, NeedData, WireFormat, codec_for
from replywire.shared.wire.buffer import ReceiveBuffer
from replywire.shared.wire.lp import HEADER, HEADER_BYTES, LengthPrefixedDecoder, parse_frame
from replywire.shared.wire.ndjson import NdjsonDecoder

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


# --- an lp header's flag: judged when its fifth byte is in, not sooner, not later ----------

_LP_NEXT_EVENT: Final = LengthPrefixedDecoder.next_event


def _lp_flag_at_first_byte(self: LengthPrefixedDecoder) -> bytes | NeedData:
    """The flag byte judged as soon as it is in, before the rest of its header."""
    if not self._end and self._buffer and self._buffer[0] != 0:
        raise ProtocolFailure(Reason.INVALID_FRAME_HEADER, f"flag byte {self._buffer[0]}")
    return _LP_NEXT_EVENT(self)


def _lp_flag_with_body(self: LengthPrefixedDecoder) -> bytes | NeedData:
    """A bad flag judged only once the frame it heads is complete (the length at 5 bytes)."""
    buffer = self._buffer
    if self._end or len(buffer) < HEADER_BYTES or buffer[0] == 0:
        return _LP_NEXT_EVENT(self)
    flag, length = HEADER.unpack_from(buffer)
    if length > self._max_frame_bytes:
        raise ProtocolFailure(Reason.FRAME_BYTE_LIMIT, f"declared length {length}")
    if len(buffer) < HEADER_BYTES + length:
        return NEED_DATA
    raise ProtocolFailure(Reason.INVALID_FRAME_HEADER, f"flag byte {flag}")


# --- varints inside a message field: past 10 bytes, and a tag or a length past 5 -----------

_LP_CODEC: Final = codec_for(WireFormat.LENGTH_PREFIXED)
#: A varint's bound (bytes), and a tag's or a length's, in the protobuf wire format.
_VARINT_BYTES: Final = 10
_PREFIX_BYTES: Final = 5
#: The message fields of a Frame: content_delta, done, error, cancel.
_MESSAGE_FIELDS: Final = frozenset({3, 4, 5, 6})


def _any_varint(data: bytes, offset: int) -> tuple[int, int, int] | None:
    """A varint of any length at ``offset``: its value, its size, where it ends; None when
    the data ends inside it."""
    value = size = 0
    while offset + size < len(data):
        byte = data[offset + size]
        value |= (byte & 0x7F) << (7 * size)
        size += 1
        if not byte & 0x80:
            return value, size, offset + size
    return None


def _minimal(value: int, size: int = 1) -> bytes:
    """``value``'s low 64 bits as a varint of at least ``size`` bytes."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        size -= 1
        if not value and size <= 0:
            return bytes([*out, byte])
        out.append(byte | 0x80)


#: Which of a nested message's varints a mutant reads differently: given the varint's role
#: (``tag``, ``length`` or ``value``), its size and its value, whether it is one.
_Picked = Callable[[str, int, int], bool]


def _nested_rewritten(data: bytes, picked: _Picked) -> tuple[bytes, bool]:
    """A nested message's bytes with each ``picked`` varint written minimal; whether one
    was. Anything but varint and length fields, or bytes that end too soon, stay as they are."""
    out, offset, found = bytearray(), 0, False
    while offset < len(data):
        tag = _any_varint(data, offset)
        if tag is None or tag[0] & 7 not in (0, 2):
            return bytes(out + data[offset:]), found
        value = _any_varint(data, tag[2])
        if value is None:
            return bytes(out + data[offset:]), found
        end = value[2] + (value[0] if tag[0] & 7 == 2 else 0)
        role = "length" if tag[0] & 7 == 2 else "value"
        fix_tag, fix_value = picked("tag", *tag[1::-1]), picked(role, *value[1::-1])
        found = found or fix_tag or fix_value
        out += _minimal(tag[0]) if fix_tag else data[offset : tag[2]]
        out += _minimal(value[0]) if fix_value else data[tag[2] : value[2]]
        out += data[value[2] : end]
        offset = end
    return bytes(out), found


def _frame_rewritten(payload: bytes, picked: _Picked) -> tuple[bytes, bool]:
    """The payload with its message fields' ``picked`` varints written minimal (the top
    level's bytes as they are, a message's length rewritten in as many bytes as before)."""
    out, offset, found = bytearray(), 0, False
    while offset < len(payload):
        tag = _any_varint(payload, offset)
        if tag is None or tag[0] & 7 not in (0, 2):
            break
        value = _any_varint(payload, tag[2])
        if value is None or (tag[0] & 7 == 2 and value[2] + value[0] > len(payload)):
            break
        if tag[0] & 7 == 0:
            out += payload[offset : value[2]]
            offset = value[2]
            continue
        end = value[2] + value[0]
        body, changed = payload[value[2] : end], False
        if tag[0] >> 3 in _MESSAGE_FIELDS:
            body, changed = _nested_rewritten(body, picked)
        found = found or changed
        length = _minimal(len(body), value[1]) if changed else payload[tag[2] : value[2]]
        out += payload[offset : tag[2]] + length + body
        offset = end
    return bytes(out + payload[offset:]), found


def _over_bound(role: str, size: int, value: int) -> bool:
    """A varint past 10 bytes (or its value past 64 bits)."""
    return size > _VARINT_BYTES or value >= 1 << 64


def _long_prefix(role: str, size: int, value: int) -> bool:
    """A tag or a length in more than 5 bytes (and at most 10)."""
    return role != "value" and _PREFIX_BYTES < size <= _VARINT_BYTES


def _parse_nested_varints_of_any_length(payload: bytes) -> Frame:
    """A message field's varints read whatever their length: past 10 bytes (their low 64
    bits) and, for a tag or a length, past 5; the top level as it is."""
    rewritten, _ = _frame_rewritten(
        payload, lambda *varint: _over_bound(*varint) or _long_prefix(*varint)
    )
    return parse_frame(rewritten)


def _parse_nested_over_long_late(payload: bytes) -> Frame:
    """A message field's varint past 10 bytes refused only once the walk is clean."""
    rewritten, found = _frame_rewritten(payload, _over_bound)
    frame = parse_frame(rewritten)
    if found:
        raise ProtocolFailure(Reason.INVALID_FRAME_PAYLOAD, "varint longer than 10 bytes")
    return frame


def _parse_nested_long_prefix_early(payload: bytes) -> Frame:
    """A message field's tag or length over 5 bytes refused before the walk."""
    if _frame_rewritten(payload, _long_prefix)[1]:
        raise ProtocolFailure(Reason.INVALID_FRAME_PAYLOAD, "a tag or a length over 5 bytes")
    return parse_frame(payload)


# --- NDJSON: white space after the last line feed, at a clean end ----------------------------

_NDJSON_END: Final = NdjsonDecoder.end_of_input


def _ndjson_blank_tail_dropped(self: NdjsonDecoder) -> None:
    """Bytes after the last line feed that are all white space are no unfinished frame."""
    try:
        blank = bytes(self._buffer).decode("utf-8").isspace()
    except UnicodeDecodeError:
        blank = False
    if blank:
        self._buffer = ReceiveBuffer()
    _NDJSON_END(self)


# --- NDJSON: an unfinished line over the frame limit, and a pending character's bytes -------

_NDJSON_NEXT_EVENT: Final = NdjsonDecoder.next_event


def _ndjson_line_judged_when_complete(self: NdjsonDecoder) -> bytes | NeedData:
    """An over-long line refused only once its line feed is in."""
    line = self._buffer.pop_line()
    if line is None:
        return NEED_DATA
    if len(line) > self._max_frame_bytes:
        raise ProtocolFailure(Reason.FRAME_BYTE_LIMIT, f"line of {len(line)} bytes")
    return line


def _ndjson_pending_bytes_counted(self: NdjsonDecoder) -> bytes | NeedData:
    """The unfinished line measured with the bytes of a character not yet complete."""
    if b"\n" not in bytes(self._buffer) and len(self._buffer) > self._max_frame_bytes:
        raise ProtocolFailure(Reason.FRAME_BYTE_LIMIT, "unterminated line over the limit")
    return _NDJSON_NEXT_EVENT(self)


#: The wires' mutants: each judges one thing sooner, later or not at all.
_WIRE_MUTANTS: Final[dict[str, tuple[Patch, ...]]] = {
    "lp-flag-early": ((LengthPrefixedDecoder, "next_event", _lp_flag_at_first_byte),),
    "lp-flag-late": ((LengthPrefixedDecoder, "next_event", _lp_flag_with_body),),
    "nested-varint": ((_LP_CODEC, "parse_frame", _parse_nested_varints_of_any_length),),
    "nested-varint-late": ((_LP_CODEC, "parse_frame", _parse_nested_over_long_late),),
    "nested-prefix-early": ((_LP_CODEC, "parse_frame", _parse_nested_long_prefix_early),),
    "ndjson-trailing-space": ((NdjsonDecoder, "end_of_input", _ndjson_blank_tail_dropped),),
    "ndjson-long-line-late": ((NdjsonDecoder, "next_event", _ndjson_line_judged_when_complete),),
    "ndjson-long-line-pending": ((NdjsonDecoder, "next_event", _ndjson_pending_bytes_counted),),
}
# --- the rules of sequence 0, repeated source ids, blank answers, details and limits -------

_IS_DUPLICATE: Final = FrameChecks._is_duplicate
_LIMITS_CHECK: Final = Limits.__post_init__
#: JavaScript's ``\s`` (ECMAScript's WhiteSpace and LineTerminator): not the 29 of
#: docs/protocol.md#white-space (it lacks U+001C-U+001F and U+0085, and has U+FEFF).
_JS_SPACE: Final = frozenset(
    "\t\n\v\f\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff"
    + "".join(chr(code) for code in range(0x2000, 0x200B))
)


def _zero_is_duplicate(self: FrameChecks, sequence: object, payload: bytes) -> bool:
    """Under the duplicate policy, a frame numbered 0 is dropped as a duplicate."""
    if self.ignore_duplicates and type(sequence) is int and sequence == 0:
        return True
    return _IS_DUPLICATE(self, sequence, payload)


def _cite_first_row(
    content: str, binding: Mapping[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A repeated source id cites the first row with it, not the last."""
    rows = list(binding["selected_context"])
    return _VALIDATE(content, {**binding, "selected_context": rows[::-1]})


def _blank_by_js_space(text: str) -> bool:
    """Blank by JavaScript's ``\\s`` instead of the document's white space."""
    return all(char in _JS_SPACE for char in text)


def _escaped(char: str) -> str:
    """The document's scrubbing of one code point (kept when printable)."""
    return char if char.isprintable() else char.encode("unicode_escape").decode("ascii")


def _escaped_backslash_too(char: str) -> str:
    """``unicode_escape``'s way with a printable backslash as well: two for one."""
    return "\\\\" if char == "\\" else _escaped(char)


def _scrubbed(text: str, escape: Callable[[str], str], *, whole_pieces: bool) -> str:
    """A detail scrubbed with ``escape`` and bounded, cut between whole pieces or not."""
    pieces = [escape(char) for char in text]
    shown = "".join(pieces)
    if len(shown) <= MAX_DETAIL_CHARS:
        return shown
    room = MAX_DETAIL_CHARS - len(CUT_MARK)
    if not whole_pieces:
        return shown[:room] + CUT_MARK
    kept, size = [], 0
    for piece in pieces:
        if size + len(piece) > room:
            break
        kept.append(piece)
        size += len(piece)
    return "".join(kept) + CUT_MARK


def _scrub_backslash(text: str) -> str:
    """Every backslash of the detail escaped (doubled); the cut as the document says."""
    return _scrubbed(text, _escaped_backslash_too, whole_pieces=True)


def _cut_inside_escape(text: str) -> str:
    """The scrubbed detail cut at 255 code points wherever that falls, inside an escape too."""
    return _scrubbed(text, _escaped, whole_pieces=False)


def _below_one_unbounded(self: Limits) -> None:
    """A limit of 0 or below taken as no limit at all, instead of refused."""
    for name in self.__dataclass_fields__:
        value = getattr(self, name)
        if type(value) is int and value < 1:
            object.__setattr__(self, name, 1 << 40)
    _LIMITS_CHECK(self)


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
    **_WIRE_MUTANTS,
    "duplicate-zero": ((FrameChecks, "_is_duplicate", _zero_is_duplicate),),
    "citation-first-row": ((consumer_core, "validate_reply", _cite_first_row),),
    "blank-any-space": ((reply, "is_blank", _blank_by_js_space),),
    "detail-scrub": ((consumer_core, "scrubbed_detail", _scrub_backslash),),
    "detail-cut": ((consumer_core, "scrubbed_detail", _cut_inside_escape),),
    "limits-below-one": ((Limits, "__post_init__", _below_one_unbounded),),
    "reply-kind": ((consumer_core, "kind_of", _every_reply_grounded),),
    **CHAT_MUTANTS,
}


def core_is_compiled() -> bool:
    return is_compiled("replywire.shared.consumer_core")


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
