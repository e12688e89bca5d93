"""Property tests of the consumer: re-chunking, prefixes, garbage, no altered reply, wires agreeing.

Fixtures do not mix well with ``@given``, so the recording and a quiet logger
(everything below CRITICAL dropped; the consumer logs only info and debug) are
built once at module level.

One file past 500 lines: the properties share the module-level recording and logger below.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from itertools import accumulate, pairwise
from typing import Any, Final

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replywire.runtime.recording_file import load_recording
from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.consumer_limits import Limits
from replywire.shared.errors import MAX_DETAIL_CHARS, ProtocolFailure
from replywire.shared.faults import (
    EXPECTED_OUTCOMES,
    REPEAT_WITH_DUPLICATE_POLICY,
    Ending,
    Fault,
    FaultKind,
    Transmission,
    transmit,
)
from replywire.shared.frames import (
    TERMINAL_KINDS,
    DoneDigest,
    Frame,
    FrameKind,
    content_frames,
    derive_frames,
    terminal_frame,
)
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.reasons import Reason
from replywire.shared.reply import validate_reply
from replywire.shared.result import LAB_RESULT_KEYS
from replywire.shared.status import Status
from replywire.shared.wire import DEFAULT_WIRES, Integrity, WireFormat, codec_for
from replywire.shared.wire.chunking import ChunkPlan
from replywire.shared.wire.lp import frame_with_header

# Not traced by coverage: hundreds of generated examples per test run the same lines again
# and again, twice as slow under the tracer (make test); the wire, machine and SSE
# tests measure those lines. Slow: a minute of CPU, so make check leaves it to make test.
pytestmark = [pytest.mark.no_cover, pytest.mark.slow]

QUIET: Final = structlog.wrap_logger(
    structlog.PrintLogger(), wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL)
)
RECORDING: Final = load_recording()
CASE_IDS: Final = RECORDING.case_ids
WIRES: Final = tuple(WireFormat)
FAULTS: Final[tuple[FaultKind | None, ...]] = (None, *FaultKind)
TRANSPORT_DETAIL: Final = {"kind": "controlled_transport_abort"}

#: Every status a consumer can conclude (``refused`` belongs to the producer).
CONSUMER_STATUSES: Final = frozenset(status.value for status in Status) - {Status.REFUSED.value}
REASON_CODES: Final = frozenset(reason.value for reason in Reason)
#: How a strict prefix of a complete wire can end.
PREFIX_VERDICTS: Final = frozenset(
    {
        (Status.INCOMPLETE.value, Reason.MISSING_TERMINAL.value),
        (Status.INVALID.value, Reason.TRUNCATED_FRAME.value),
        (Status.INVALID.value, Reason.TRUNCATED_UTF8.value),
    }
)


def fault_id(fault: FaultKind | None) -> str:
    return fault.value if fault is not None else "no-fault"


# --- feeding ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fed:
    """What came of feeding chunks to a consumer the way ``consume`` does."""

    result: dict[str, Any]
    #: Bytes handed to ``receive_data`` (including the chunk that was refused).
    bytes_fed: int
    chunks_fed: int
    failure: ProtocolFailure | None


def feed(consumer: ReplyConsumer, chunks: Sequence[bytes], ending: Ending) -> Fed:
    """Feed every chunk, stop at the first refusal, end the input as ``ending`` says.

    Only ``ProtocolFailure`` is caught: anything else escapes and fails the test.
    """
    bytes_fed = chunks_fed = 0
    failure: ProtocolFailure | None = None
    for chunk in chunks:
        bytes_fed += len(chunk)
        chunks_fed += 1
        try:
            consumer.receive_data(chunk)
        except ProtocolFailure as error:
            failure = error
            break
    if ending is Ending.TRANSPORT_ERROR:
        result = consumer.transport_error(TRANSPORT_DETAIL).to_dict()
    else:
        result = consumer.end_of_stream().to_dict()
    return Fed(result, bytes_fed, chunks_fed, failure)


def split_at(data: bytes, offsets: Sequence[int]) -> list[bytes]:
    """Cut ``data`` at the sorted ``offsets`` (a repeated offset gives an empty chunk)."""
    points = [0, *sorted(offsets), len(data)]
    return [data[start:end] for start, end in pairwise(points)]


def chunkings(data: bytes) -> st.SearchStrategy[list[bytes]]:
    """Arbitrary transport chunks of ``data``: drawn cut offsets, or a fixed size (down to 1)."""
    size = len(data)
    by_offsets = st.lists(st.integers(0, size), max_size=min(size + 1, 64)).map(
        lambda offsets: split_at(data, offsets)
    )
    by_size = st.integers(1, max(1, size)).map(
        lambda step: [data[start : start + step] for start in range(0, size, step)]
    )
    return st.one_of(by_offsets, by_size)


def assert_well_formed(consumer: ReplyConsumer, fed: Fed) -> dict[str, Any]:
    """The result document is complete, consistent, and the consumer is closed for good."""
    doc = fed.result
    assert set(LAB_RESULT_KEYS) <= set(doc)
    status, reason = doc["status"], doc["reason"]
    assert status in CONSUMER_STATUSES
    assert consumer.finished
    assert isinstance(doc["provisional_content"], str)
    if fed.failure is not None:
        assert (status, reason) == (Status.INVALID.value, fed.failure.reason.value)
    if status == Status.COMPLETE.value:
        assert reason is None
        assert doc["local_terminal"] == FrameKind.DONE.value
        accepted, citations = validate_reply(doc["provisional_content"], consumer.binding)
        assert (doc["accepted_answer"], doc["citations"]) == (accepted, citations)
    else:
        assert doc["accepted_answer"] is None
        assert doc["citations"] == []
        # Whatever the peer sent, the reason is a registered code; its text is only detail.
        assert reason in REASON_CODES
    if "detail" in doc:
        assert doc["detail"].isprintable() and len(doc["detail"]) <= MAX_DETAIL_CHARS
    if status == Status.CANCELLED.value:
        assert doc["local_terminal"] == FrameKind.CANCEL.value
    assert doc["local_terminal"] in {None, *(kind.value for kind in TERMINAL_KINDS)}
    assert doc["stats"]["bytes_received"] == fed.bytes_fed
    assert doc["stats"]["transport_fragments"] == fed.chunks_fed
    # Finished means finished: more input, or a second ending, is refused.
    with pytest.raises(ProtocolFailure) as late:
        consumer.receive_data(b"\x00")
    assert late.value.reason is Reason.CONSUMER_ALREADY_FINISHED
    with pytest.raises(ProtocolFailure):
        consumer.end_of_stream()
    return doc


# --- references --------------------------------------------------------------------


@cache
def reference_transmission(case_id: str, fault: FaultKind | None, wire: WireFormat) -> Transmission:
    return transmit(
        RECORDING.case(case_id),
        wire=wire,
        plan=ChunkPlan.parse("frame"),
        fault=Fault(kind=fault) if fault is not None else None,
        foreign_binding_sha256=RECORDING.foreign_binding_sha256(case_id),
    )


@cache
def reference_result(
    case_id: str, fault: FaultKind | None, wire: WireFormat, ignore_duplicates: bool
) -> Fed:
    """One frame per chunk, checked against the documented outcome."""
    transmission = reference_transmission(case_id, fault, wire)
    consumer = ReplyConsumer(
        RECORDING.case(case_id).binding,
        wire=wire,
        ignore_duplicates=ignore_duplicates,
        logger=QUIET,
    )
    fed = feed(consumer, transmission.chunks, transmission.ending)
    if fault is None or (fault is FaultKind.REPEAT and ignore_duplicates):
        expected = REPEAT_WITH_DUPLICATE_POLICY  # complete, no reason
    else:
        expected = EXPECTED_OUTCOMES[fault][wire]
    assert (fed.result["status"], fed.result["reason"]) == (expected.status.value, expected.reason)
    return fed


@cache
def clean_wire(case_id: str, wire: WireFormat) -> tuple[bytes, tuple[int, ...], tuple[str, ...]]:
    """A complete wire, its frame boundaries (offsets, 0 first) and the frames' texts."""
    case = RECORDING.case(case_id)
    frames = derive_frames(case.binding_sha256, case.content)
    encoded = [codec_for(wire).encode_frame(frame) for frame in frames]
    boundaries = (0, *accumulate(len(part) for part in encoded))
    texts = tuple(frame.text if isinstance(frame.text, str) else "" for frame in frames)
    return b"".join(encoded), boundaries, texts


def without_stats(doc: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in doc.items() if key != "stats"}


# --- a. re-chunking invariance -------------------------------------------------------


@pytest.mark.parametrize("ignore_duplicates", [False, True], ids=["strict", "ignore-duplicates"])
@pytest.mark.parametrize("fault", FAULTS, ids=fault_id)
@pytest.mark.parametrize("wire", WIRES, ids=str)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_rechunking_never_changes_the_verdict(
    wire: WireFormat, fault: FaultKind | None, ignore_duplicates: bool, data: st.DataObject
) -> None:
    case_id = data.draw(st.sampled_from(CASE_IDS), label="case")
    reference = reference_result(case_id, fault, wire, ignore_duplicates)
    transmission = reference_transmission(case_id, fault, wire)
    chunks = data.draw(chunkings(b"".join(transmission.chunks)), label="chunks")
    consumer = ReplyConsumer(
        RECORDING.case(case_id).binding,
        wire=wire,
        ignore_duplicates=ignore_duplicates,
        logger=QUIET,
    )

    fed = feed(consumer, chunks, transmission.ending)

    doc = assert_well_formed(consumer, fed)
    assert without_stats(doc) == without_stats(reference.result)
    assert doc["stats"]["application_frames"] == reference.result["stats"]["application_frames"]
    # Refused (or not) while receiving, for the same reason, whatever the cut.
    assert (fed.failure is None) == (reference.failure is None)
    if reference.failure is None:
        assert doc["stats"]["bytes_received"] == reference.result["stats"]["bytes_received"]
    # Otherwise bytes_received legitimately depends on where the refused chunk ended
    # (assert_well_formed checked it is exactly the bytes handed over).


# --- b. strict prefixes ---------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_empty_input_is_incomplete(wire: WireFormat) -> None:
    consumer = ReplyConsumer(RECORDING.case(CASE_IDS[0]).binding, wire=wire, logger=QUIET)
    doc = consumer.end_of_stream().to_dict()
    assert (doc["status"], doc["reason"]) == ("incomplete", "missing_terminal")
    assert doc["accepted_answer"] is None


@pytest.mark.parametrize("wire", WIRES, ids=str)
@pytest.mark.parametrize("case_id", CASE_IDS)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_strict_prefix_of_a_complete_wire_is_never_complete(
    case_id: str, wire: WireFormat, data: st.DataObject
) -> None:
    complete, boundaries, texts = clean_wire(case_id, wire)
    length = data.draw(st.integers(0, len(complete) - 1), label="prefix length")
    prefix = complete[:length]
    chunks = data.draw(chunkings(prefix), label="chunks")
    consumer = ReplyConsumer(RECORDING.case(case_id).binding, wire=wire, logger=QUIET)

    fed = feed(consumer, chunks, Ending.CLEAN)

    doc = assert_well_formed(consumer, fed)
    assert fed.failure is None  # a prefix is refused only when the input ends
    assert doc["status"] != "complete"
    assert doc["accepted_answer"] is None
    verdict = (doc["status"], doc["reason"])
    assert verdict in PREFIX_VERDICTS
    if length in boundaries:
        assert verdict == ("incomplete", "missing_terminal")
    elif wire is WireFormat.NDJSON and not _is_utf8(prefix):
        assert verdict == ("invalid", "truncated_utf8")
    else:
        assert verdict == ("invalid", "truncated_frame")
    whole_frames = sum(1 for boundary in boundaries[1:] if boundary <= length)
    assert doc["stats"]["application_frames"] == whole_frames
    assert doc["provisional_content"] == "".join(texts[:whole_frames])
    assert doc["local_terminal"] is None


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# --- c. arbitrary and mutated bytes -----------------------------------------------------

LIMITS: Final = st.one_of(
    st.none(),
    st.builds(
        Limits,
        max_stream_bytes=st.integers(1, 2048),
        max_frame_bytes=st.integers(1, 512),
        max_content_chars=st.integers(1, 256),
        max_frames=st.integers(1, 16),
        max_reason_chars=st.integers(1, 64),
    ),
)
SEQUENCES: Final = st.one_of(st.integers(0, 4), st.integers(0, 2**64 - 1))
BINDINGS: Final = st.one_of(
    st.sampled_from([RECORDING.case(case_id).binding_sha256 for case_id in CASE_IDS]), st.text()
)


SURROGATES: Final = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1)
#: Lines that strict JSON must refuse (or, nested too deep, must not crash on).
NASTY_LINES: Final = (
    b'{"sequence":1,"sequence":1}\n',
    b'{"sequence":NaN}\n',
    b"Infinity\n",
    b"[" * 4000 + b"]" * 4000 + b"\n",
    b'{"a":' * 3000 + b"1" + b"}" * 3000 + b"\n",
)


@st.composite
def pb_payloads(draw: st.DrawFn, binding_sha256: str) -> bytes:
    """A Frame message with random fields, possibly merged with random bytes or another one."""
    # Usually a plausible sequence and the right binding, so the checks after them are reached.
    plausible = draw(st.booleans())
    message = pb.Frame(
        sequence=draw(st.integers(1, 3) if plausible else SEQUENCES),
        binding_sha256=binding_sha256 if draw(st.booleans()) else draw(BINDINGS),
    )
    kind = draw(st.sampled_from(["content_delta", "done", "error", "cancel", None]))
    if kind == "content_delta":
        message.content_delta.text = draw(st.text(max_size=16))
    elif kind == "done":
        message.done.content_sha256 = draw(st.text(max_size=70))
        message.done.content_frames = draw(SEQUENCES)
    elif kind is not None:
        getattr(message, kind).reason = draw(st.text(max_size=16))
    payload = message.SerializeToString()
    return payload + draw(
        st.one_of(st.just(b""), st.binary(max_size=8), pb_payloads(binding_sha256))
    )


@st.composite
def json_frames(draw: st.DrawFn, binding_sha256: str, digest: bool) -> bytes:
    """A JSON line shaped like an NDJSON frame (the right keys for its kind) or loosely so.

    With ``digest`` (the ``ndjson`` wire) a shaped done carries the two digest keys.
    """
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12), SEQUENCES
    )
    values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3), max_leaves=6)
    texts = st.one_of(st.text(max_size=12), SURROGATES, values)
    obj: dict[str, Any] = {}
    if draw(st.booleans()):  # shaped: exactly the keys of its kind
        kind = draw(st.sampled_from(FrameKind))
        obj["sequence"] = draw(st.integers(1, 3) if draw(st.booleans()) else values)
        obj["kind"] = kind.value
        obj["binding_sha256"] = (
            binding_sha256 if draw(st.booleans()) else draw(st.one_of(BINDINGS, values))
        )
        if kind is FrameKind.CONTENT_DELTA:
            obj["text"] = draw(texts)
        elif kind is not FrameKind.DONE:
            obj["reason"] = draw(texts)
        elif digest:
            obj["content_sha256"] = draw(st.one_of(st.text(max_size=70), values))
            obj["content_frames"] = draw(st.one_of(SEQUENCES, values))
    else:
        keys = ("sequence", "kind", "binding_sha256", "text", "reason", "extra")
        for key in (*keys, "content_sha256", "content_frames") if digest else keys:
            if draw(st.booleans()):
                obj[key] = draw(st.one_of(st.sampled_from([*FrameKind, "other"]), values))
    body = json.dumps(obj, ensure_ascii=draw(st.booleans()), separators=(",", ":"))
    return body.encode("utf-8", "surrogatepass") + b"\n"


def garbage(wire: WireFormat, binding_sha256: str) -> st.SearchStrategy[bytes]:
    """A sequence of frame-shaped garbage of the wire, then perhaps a few raw bytes."""
    if wire is WireFormat.LENGTH_PREFIXED:
        parts = st.one_of(
            pb_payloads(binding_sha256).map(frame_with_header),
            st.binary(max_size=64).map(frame_with_header),
        )
    else:
        parts = st.one_of(
            json_frames(binding_sha256, digest=wire.integrity is Integrity.SHA256),
            st.sampled_from(NASTY_LINES),
            st.text(max_size=32).map(lambda line: line.encode("utf-8") + b"\n"),
        )
    return st.tuples(st.lists(parts, max_size=8), st.binary(max_size=8)).map(
        lambda drawn: b"".join(drawn[0]) + drawn[1]
    )


@pytest.mark.parametrize("wire", WIRES, ids=str)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case_id=st.sampled_from(CASE_IDS), payload=st.binary(), data=st.data())
def test_arbitrary_bytes_are_refused_within_the_family(
    wire: WireFormat, case_id: str, payload: bytes, data: st.DataObject
) -> None:
    limits = data.draw(LIMITS, label="limits")
    ignore_duplicates = data.draw(st.booleans(), label="ignore_duplicates")
    chunks = data.draw(chunkings(payload), label="chunks")
    consumer = ReplyConsumer(
        RECORDING.case(case_id).binding,
        wire=wire,
        limits=limits,
        ignore_duplicates=ignore_duplicates,
        logger=QUIET,
    )

    fed = feed(consumer, chunks, Ending.CLEAN)

    doc = assert_well_formed(consumer, fed)
    # Random bytes cannot carry the 64-hex binding hash, let alone a valid reply.
    assert doc["status"] != "complete"


@pytest.mark.parametrize("wire", WIRES, ids=str)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case_id=st.sampled_from(CASE_IDS), ending=st.sampled_from(Ending), data=st.data())
def test_frame_shaped_garbage_is_refused_within_the_family(
    wire: WireFormat, case_id: str, ending: Ending, data: st.DataObject
) -> None:
    limits = data.draw(LIMITS, label="limits")
    ignore_duplicates = data.draw(st.booleans(), label="ignore_duplicates")
    payload = data.draw(garbage(wire, RECORDING.case(case_id).binding_sha256), label="payload")
    chunks = data.draw(chunkings(payload), label="chunks")
    consumer = ReplyConsumer(
        RECORDING.case(case_id).binding,
        wire=wire,
        limits=limits,
        ignore_duplicates=ignore_duplicates,
        logger=QUIET,
    )

    fed = feed(consumer, chunks, ending)

    doc = assert_well_formed(consumer, fed)
    if wire.integrity is Integrity.SHA256:
        assert_not_altered(doc, case_id)
    if ending is Ending.TRANSPORT_ERROR and fed.failure is None:
        assert (doc["status"], doc["reason"]) == ("error", "transport_io_error")
        assert doc["transport"] == TRANSPORT_DETAIL


@pytest.mark.parametrize("wire", WIRES, ids=str)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case_id=st.sampled_from(CASE_IDS), ignore_duplicates=st.booleans(), data=st.data())
def test_one_mutated_byte_is_refused_within_the_family(
    wire: WireFormat, case_id: str, ignore_duplicates: bool, data: st.DataObject
) -> None:
    complete, _, _ = clean_wire(case_id, wire)
    offset = data.draw(st.integers(0, len(complete) - 1), label="offset")
    if data.draw(st.booleans(), label="flip a bit"):
        new = complete[offset] ^ (1 << data.draw(st.integers(0, 7), label="bit"))
    else:
        new = data.draw(st.integers(0, 255), label="replacement")
    mutated = complete[:offset] + bytes([new]) + complete[offset + 1 :]
    chunks = data.draw(chunkings(mutated), label="chunks")
    consumer = ReplyConsumer(
        RECORDING.case(case_id).binding,
        wire=wire,
        ignore_duplicates=ignore_duplicates,
        logger=QUIET,
    )

    fed = feed(consumer, chunks, Ending.CLEAN)

    doc = assert_well_formed(consumer, fed)
    reference = reference_result(case_id, None, wire, ignore_duplicates).result
    if mutated == complete:
        assert without_stats(doc) == without_stats(reference)
    elif wire.integrity is Integrity.SHA256:
        # Every byte is guarded: framing, sequence, binding hash, kind and keys or tags by
        # the frame checks, the text by done's required digest and count.
        assert_not_altered(doc, case_id)
    elif doc["status"] == "complete":
        # ndjson-lab carries no digest: a byte changed inside the reply's text can still
        # yield a reply the validator accepts (the lab wire's known weakness, and why its
        # result says integrity: none). It is then a different reply, validated like any
        # other (assert_well_formed).
        assert doc["integrity"] == "none"
        assert doc["provisional_content"] != RECORDING.case(case_id).content


def assert_not_altered(doc: dict[str, Any], case_id: str) -> None:
    """A default wire never ends complete with content other than the recording's."""
    if doc["status"] == "complete":
        assert doc["integrity"] == "sha256"
        assert doc["provisional_content"] == RECORDING.case(case_id).content


#: XOR masks of the exhaustive sweep: the lowest bit, the highest, and every bit at once.
SWEEP_MASKS: Final = (0x01, 0x80, 0xFF)


def sweep(case_id: str, wire: WireFormat) -> list[str]:
    """Every single-byte XOR mutation of a recorded wire, whole; the altered replies accepted."""
    complete, _, _ = clean_wire(case_id, wire)
    binding, content = RECORDING.case(case_id).binding, RECORDING.case(case_id).content
    accepted_altered = []
    for offset in range(len(complete)):
        for mask in SWEEP_MASKS:
            mutated = bytearray(complete)
            mutated[offset] ^= mask
            consumer = ReplyConsumer(binding, wire=wire, logger=QUIET)
            fed = feed(consumer, [bytes(mutated)], Ending.CLEAN)
            doc = fed.result
            if doc["status"] == "complete" and doc["provisional_content"] != content:
                accepted_altered.append(doc["provisional_content"])
    return accepted_altered


@pytest.mark.parametrize("case_id", CASE_IDS)
@pytest.mark.parametrize("wire", DEFAULT_WIRES, ids=str)
def test_no_single_byte_mutation_of_a_recorded_wire_is_accepted_altered(
    wire: WireFormat, case_id: str
) -> None:
    assert sweep(case_id, wire) == []


def test_the_lab_wire_does_accept_altered_replies() -> None:
    # The reason ndjson-lab exists only to reproduce the lab: the same sweep, no digest.
    altered = sweep("replace-file", WireFormat.NDJSON_LAB)
    assert altered
    assert all(content != RECORDING.case("replace-file").content for content in altered)


# --- d. the wires agree frame for frame ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Script:
    binding_sha256: str
    frames: tuple[Frame, ...]
    ignore_duplicates: bool
    per_frame_chunks: bool
    #: done's digest was made wrong on purpose (every wire but ndjson-lab carries it).
    tampered_digest: bool


def _deltas(draw: st.DrawFn, case_id: str) -> list[str]:
    """Random non-empty deltas, or the recorded reply cut at random points."""
    if draw(st.booleans()):
        return draw(st.lists(st.text(min_size=1, max_size=12), max_size=24))
    content = RECORDING.case(case_id).content
    offsets = draw(st.sets(st.integers(1, len(content) - 1), max_size=24))
    return _cut(content, offsets)


def _cut(text: str, offsets: set[int]) -> list[str]:
    points = [0, *sorted(offsets), len(text)]
    return [text[start:end] for start, end in pairwise(points)]


def _tampered(claim: DoneDigest) -> st.SearchStrategy[DoneDigest]:
    return st.sampled_from(
        [
            replace(claim, content_frames=claim.content_frames + 1),
            replace(claim, content_sha256="0" * 64),
            replace(claim, content_sha256=claim.content_sha256.upper()),
            replace(claim, content_sha256=""),
        ]
    )


PERTURBATIONS: Final = ("sequence", "nudge", "binding", "replay", "replay-later", "empty", "digest")


def _with_terminal(draw: st.DrawFn, binding: str, deltas: list[str]) -> list[Frame]:
    """The content frames with a terminal: last, sometimes anywhere (then frames follow it)."""
    frames = content_frames(binding, deltas)
    at_end = draw(st.sampled_from([True, True, False]), label="terminal last")
    position = len(deltas) if at_end else draw(st.integers(0, len(deltas)))
    kind = draw(
        st.sampled_from([FrameKind.DONE, FrameKind.CANCEL, FrameKind.ERROR]),
        label="terminal kind",
    )
    if kind is FrameKind.DONE:
        terminal = terminal_frame(binding, position + 1, kind, deltas[:position])
    else:
        # Any reason, including an empty or an over-long one (both wires must refuse those).
        reason = draw(st.one_of(st.just(f"controlled_local_{kind}"), st.text(max_size=300)))
        terminal = Frame(sequence=position + 1, kind=kind, binding_sha256=binding, reason=reason)
    frames.insert(position, terminal)
    return [replace(frame, sequence=index) for index, frame in enumerate(frames, start=1)]


def _perturb(draw: st.DrawFn, frames: list[Frame]) -> bool:
    """Perturb one frame of ``frames`` in place; True if that tampered with done's digest."""
    index = draw(st.integers(0, len(frames) - 1))
    frame = frames[index]
    how = draw(st.sampled_from(PERTURBATIONS))
    if how == "sequence":
        frames[index] = replace(frame, sequence=draw(SEQUENCES))
    elif how == "nudge":
        assert isinstance(frame.sequence, int)
        nudged = max(0, frame.sequence + draw(st.sampled_from([-2, -1, 1, 2])))
        frames[index] = replace(frame, sequence=nudged)
    elif how == "binding":
        frames[index] = replace(frame, binding_sha256=draw(BINDINGS))
    elif how == "replay":
        frames.insert(index + 1, frame)
    elif how == "replay-later":
        frames.insert(draw(st.integers(index + 1, len(frames))), frame)
    elif how == "empty" and frame.kind is FrameKind.CONTENT_DELTA:
        frames[index] = replace(frame, text="")
    elif how == "digest" and frame.done_digest is not None:
        frames[index] = replace(frame, done_digest=draw(_tampered(frame.done_digest)))
        return True
    return False


@st.composite
def scripts(draw: st.DrawFn) -> Script:
    """Frames as a producer might send them: usually well-formed, sometimes perturbed."""
    case_id = draw(st.sampled_from(CASE_IDS), label="case")
    binding = RECORDING.case(case_id).binding_sha256
    deltas = _deltas(draw, case_id)
    if draw(st.sampled_from([True, True, True, False]), label="terminal"):  # usually
        frames = _with_terminal(draw, binding, deltas)
    else:
        frames = content_frames(binding, deltas)
    tampered = False
    if (
        frames[-1:]
        and frames[-1].done_digest is not None
        and draw(st.booleans())
        and draw(st.booleans())
    ):
        frames[-1] = replace(frames[-1], done_digest=draw(_tampered(frames[-1].done_digest)))
        tampered = True
    perturbations = draw(st.integers(1, 3)) if draw(st.booleans(), label="perturb") else 0
    for _ in range(perturbations if frames else 0):
        tampered = _perturb(draw, frames) or tampered
    return Script(
        binding_sha256=binding,
        frames=tuple(frames),
        ignore_duplicates=draw(st.booleans(), label="ignore_duplicates"),
        per_frame_chunks=draw(st.booleans(), label="one frame per chunk"),
        tampered_digest=tampered,
    )


def run_script(script: Script, wire: WireFormat, binding: dict[str, Any]) -> Fed:
    encoded = [codec_for(wire).encode_frame(frame) for frame in script.frames]
    chunks = encoded if script.per_frame_chunks else [b"".join(encoded)]
    consumer = ReplyConsumer(
        binding, wire=wire, ignore_duplicates=script.ignore_duplicates, logger=QUIET
    )
    fed = feed(consumer, chunks, Ending.CLEAN)
    assert_well_formed(consumer, fed)
    return fed


def _binding_of(binding_sha256: str) -> dict[str, Any]:
    for case_id in CASE_IDS:
        case = RECORDING.case(case_id)
        if case.binding_sha256 == binding_sha256:
            return dict(case.binding)
    raise AssertionError(binding_sha256)


def comparable(doc: dict[str, Any]) -> dict[str, Any]:
    """Everything but the wire's name and its byte count."""
    stats = {key: value for key, value in doc["stats"].items() if key != "bytes_received"}
    return {
        **{key: value for key, value in doc.items() if key not in ("stats", "wire_format")},
        "stats": stats,
    }


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripts())
def test_both_default_wires_reach_the_same_verdict_on_the_same_frames(script: Script) -> None:
    binding = _binding_of(script.binding_sha256)

    lp = run_script(script, WireFormat.LENGTH_PREFIXED, binding).result
    nd = run_script(script, WireFormat.NDJSON, binding).result

    # Both carry and require done's digest: the same verdict, a tampered digest included.
    assert (lp["status"], lp["reason"]) == (nd["status"], nd["reason"])
    assert comparable(lp) == comparable(nd)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripts())
def test_the_lab_wire_differs_only_in_the_digest_it_does_not_carry(script: Script) -> None:
    binding = _binding_of(script.binding_sha256)

    lp = run_script(script, WireFormat.LENGTH_PREFIXED, binding).result
    lab = run_script(script, WireFormat.NDJSON_LAB, binding).result

    assert (lp["integrity"], lab["integrity"]) == ("sha256", "none")
    if lp["reason"] == Reason.CONTENT_DIGEST_MISMATCH.value:
        # The one legitimate difference: the lab's done carries no digest.
        assert script.tampered_digest
        assert lab["local_terminal"] == FrameKind.DONE.value
        assert lp["provisional_content"] == lab["provisional_content"]
        # done is counted before its digest is checked, so the frame counts agree.
        assert lp["stats"]["application_frames"] == lab["stats"]["application_frames"]
    elif lp["reason"] == Reason.INVALID_FRAME_SCHEMA.value and lab["reason"] != lp["reason"]:
        # A claim not of its form (upper case, empty) is done's shape: refused when it is
        # parsed, before its sequence and binding are checked and before it counts; the
        # lab's done has no claim to be malformed (it may still fail later, on its sequence).
        assert script.tampered_digest
        assert lp["provisional_content"] == lab["provisional_content"]
        applied = lp["stats"]["application_frames"]
        assert lab["stats"]["application_frames"] in (applied, applied + 1)
    else:
        assert (lp["status"], lp["reason"]) == (lab["status"], lab["reason"])
        assert without_integrity(comparable(lp)) == without_integrity(comparable(lab))


def without_integrity(doc: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in doc.items() if key != "integrity"}
