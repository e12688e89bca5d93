"""Every reason is a registered code: walked down every path that sets one, and read from
the source.

* **The walk** runs, without a network or a process, each path a reason comes from and
  collects every ``reason`` it produces, in the result documents (``reason`` and the
  events' ``reason``) and in the trace records of both sides: the fault catalogue on
  every wire and case, as the producer's recording source plans it and the consumer's
  gRPC edge judges it (``StreamSession._ended``, the producer's abort details included);
  the producer's refusals; the Gemini fake model's scripts (``harness/fake_gemini/``)
  through the provider adapter, checked against the outcomes ``tests/system/test_gemini.py``
  expects of the live runs; and the consumer's own endings (deadline, idle, Ctrl-C, a
  broken reader, gRPC's own statuses, every code as a status's details, free text as
  one). Each reason found must be in ``REASONS``.
* **The source** (``shared/``, ``producer/``, ``consumer/``): every string literal given
  as a reason (``reason=``, ``Reason(...)``, a ``reason``/``abort_details`` assignment, a
  ``"reason"`` key, the details of ``context.abort``, an error's reason) is a registered
  code, and none is an f-string.
* **A property**: a cancel or error terminal with any reason text never yields a result
  whose reason is outside the registry, and never ``complete``.

One file past 500 lines: the walk and the source read are one census of the reasons; split,
a path could be left out of both.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import logging
from collections.abc import Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import Any, Final

import grpc
import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from harness.fake_gemini.checks import validate
from harness.fake_gemini.protocol import HttpError, error_body
from harness.fake_gemini.scripts import DEFAULT_MODEL, SCRIPTS, Scripts
from replywire.consumer.client import ReplyClient
from replywire.consumer.options import StreamOptions
from replywire.consumer.reader import StreamEnded
from replywire.consumer.session import StreamSession
from replywire.producer.metrics import ProducerMetrics
from replywire.producer.sources.gemini.protocol import (
    DEFAULT_MAX_OUTPUT_TOKENS,
    ProviderStream,
    request_body,
)
from replywire.producer.sources.gemini.protocol import provider_error as provider_refusal
from replywire.producer.sources.recording import RecordingSource
from replywire.producer.states import ProducerStream, StreamInput, StreamState
from replywire.runtime.recording_file import load_recording
from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.consumer_limits import MAX_REASON_CHARS
from replywire.shared.errors import (
    MAX_DETAIL_CHARS,
    ProtocolFailure,
    ReplywireError,
    scrubbed_detail,
)
from replywire.shared.faults import Fault, FaultKind
from replywire.shared.frames import Frame, FrameKind, content_frames
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import CODES, Reason
from replywire.shared.replay import replay
from replywire.shared.requests import ReplyRequest, check_request
from replywire.shared.result import StreamResult
from replywire.shared.status import Status
from replywire.shared.wire import WireFormat, codec_for
from replywire.shared.wire.chunking import ChunkPlan
from tests.gemini_runs import SCRIPTS as LIVE_GEMINI_OUTCOMES

ROOT: Final = Path(__file__).resolve().parents[2]
RECORDING: Final = load_recording()
CASE_IDS: Final = RECORDING.case_ids
SOURCE: Final = RecordingSource(RECORDING)
Record = MutableMapping[str, Any]


# --- collecting reasons ----------------------------------------------------------------------


def reasons_in(result: StreamResult, records: Sequence[Record]) -> Iterator[tuple[str, object]]:
    """Every reason a result document and trace records carry, with where it was found."""
    document = result.to_dict()
    yield "result", document["reason"]
    for event in document["events"]:
        if "reason" in event:
            yield f"event {event['kind']}", event["reason"]
    for record in records:
        if record.get("reason") is not None:
            yield f"record {record['event']}", record["reason"]


def assert_registered(found: Iterator[tuple[str, object]], what: str) -> set[str]:
    seen: set[str] = set()
    for where, reason in found:
        if where == "result" and reason is None:
            continue  # complete
        assert isinstance(reason, str) and reason in CODES, f"{what}: {where} {reason!r}"
        seen.add(reason)
    return seen


def session_for(request: ReplyRequest, *, attempt: int = 0) -> StreamSession:
    """The consumer's gRPC edge for ``request``, with no call: chunks go to ``_apply`` and
    the call's ending to ``_ended``, as the reader hands them over."""
    options = StreamOptions(target="walk")
    sent = request.open_request()
    consumer = request.consumer(structlog.get_logger(), sent=sent)
    session = StreamSession(sent, consumer, options, structlog.get_logger(), ReplyClient(options))
    session.attempt = attempt
    return session


def judged(session: StreamSession, chunks: Sequence[bytes], end: StreamEnded) -> StreamResult:
    """Apply the chunks until the core refuses one, then end as the call ended (no resume:
    the attempts are spent)."""
    for chunk in chunks:
        if not session._apply(chunk):
            return session.consumer.result()
    return session._ended(end)


def refused_over_grpc(error: ReplywireError) -> StreamEnded:
    """What the producer's ``context.abort`` sends for a refusal: its code as the details."""
    return StreamEnded(grpc.StatusCode[REASONS[error.reason].grpc_code], error.code)


#: Every reason the walk found, by path (the last test checks the paths' sum).
# The last test reads what the others found: the module runs in one process (make test's
# serial pass; under -n its tests would be spread over workers).
pytestmark = pytest.mark.serial

FOUND: dict[str, set[str]] = {}
#: The tests of this file that ran in this process: the guard at the end judges the walk only
#: when all of them did (pytest-xdist may share the file's tests among its workers).
RAN: set[str] = set()


@pytest.fixture(autouse=True)
def _ran(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    RAN.add(request.node.nodeid)


# --- the fault catalogue, every wire and case: one process and the gRPC edge ----------------

FAULTS: Final[tuple[FaultKind | None, ...]] = (None, *FaultKind)


@pytest.mark.parametrize("wire", list(WireFormat))
@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.value if f else "no-fault")
def test_the_fault_catalogue_ends_with_codes_in_one_process(
    wire: WireFormat, fault: FaultKind | None
) -> None:
    seen: set[str] = set()
    for case_id in CASE_IDS:
        for duplicates in (False, True):
            request = ReplyRequest.for_case(
                RECORDING,
                case_id,
                wire=wire,
                plan=ChunkPlan.parse("1,2,7,3,11"),
                fault=Fault(kind=fault) if fault else None,
                ignore_duplicates=duplicates,
            )
            with capture_logs() as records:
                result = replay(RECORDING, request, logger=structlog.get_logger())
            seen |= assert_registered(reasons_in(result, records), f"{case_id} {fault}")
    FOUND.setdefault("one process", set()).update(seen)


async def produce(sent: pb.OpenRequest, *, allow_faults: bool = True) -> tuple[
    list[bytes], StreamEnded
]:  # fmt: skip
    """What the producer's recording source sends for ``sent`` and how it ends the call:
    a refusal's code, the plan's abort details (UNAVAILABLE), or a clean end."""
    try:
        checked = check_request(sent, allow_faults=allow_faults)
        plan = await SOURCE.prepare(checked, identity="walk")
    except ReplywireError as refused:
        return [], refused_over_grpc(refused)
    chunks = [data async for data in plan.chunks() if isinstance(data, bytes)]
    if plan.abort_details is not None:
        return chunks, StreamEnded(grpc.StatusCode.UNAVAILABLE, plan.abort_details)
    return chunks, StreamEnded()


@pytest.mark.parametrize("wire", list(WireFormat))
@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.value if f else "no-fault")
def test_the_fault_catalogue_ends_with_codes_over_the_grpc_edge(
    wire: WireFormat, fault: FaultKind | None
) -> None:
    seen: set[str] = set()
    for case_id in CASE_IDS:
        request = ReplyRequest.for_case(
            RECORDING, case_id, wire=wire, fault=Fault(kind=fault) if fault else None
        )
        chunks, end = asyncio.run(produce(request.open_request()))
        if fault is FaultKind.TRANSPORT_ABORT:
            assert end.details == Reason.CONTROLLED_TRANSPORT_ABORT.value
        with capture_logs() as records:
            result = judged(session_for(request), chunks, end)
        seen |= assert_registered(reasons_in(result, records), f"{case_id} {fault}")
        assert result.status is not Status.COMPLETE or fault in {None, FaultKind.STALL}
    FOUND.setdefault("grpc edge", set()).update(seen)


def refusal_requests() -> Iterator[tuple[str, pb.OpenRequest, bool]]:
    """Requests the producer refuses, each for a reason of its own."""
    request = ReplyRequest.for_case(RECORDING, "replace-file")
    held_out = ReplyRequest(case_id="held-out", binding=request.binding)
    yield "held-out case", held_out.open_request(), True
    other = ReplyRequest(case_id="replace-file", binding=RECORDING.case("utf8-write").binding)
    yield "another binding", other.open_request(), True
    faulted = ReplyRequest.for_case(RECORDING, "replace-file", fault=Fault(kind=FaultKind.OMIT))
    yield "faults not allowed", faulted.open_request(), False
    malformed = request.open_request()
    malformed.wire_format = 99  # type: ignore[assignment]  # a value no wire has
    yield "malformed", malformed, True
    spaced = request.open_request()
    spaced.binding_json += b" "
    yield "binding not canonical", spaced, True
    past = ReplyRequest.for_case(
        RECORDING, "replace-file", fault=Fault(kind=FaultKind.OMIT, target_frame=10)
    )
    yield "fault frame past the reply", past.open_request(), True


def test_the_producers_refusals_are_codes_the_consumer_reports() -> None:
    seen: set[str] = set()
    for what, sent, allow_faults in refusal_requests():
        chunks, end = asyncio.run(produce(sent, allow_faults=allow_faults))
        assert not chunks and end.details in CODES, what
        request = ReplyRequest.for_case(RECORDING, "replace-file")
        with capture_logs() as records:
            result = judged(session_for(request), chunks, end)
        assert (result.status, result.reason) == (Status.REFUSED, end.details), what
        seen |= assert_registered(reasons_in(result, records), what)
    assert len(seen) == 6
    FOUND.setdefault("refusals", set()).update(seen)


# --- the Gemini fake model's scripts, through the provider adapter ----------------------------


def gemini_run(model: str, wire: WireFormat) -> tuple[StreamResult, list[Record]]:
    """One call of the fake model ``model`` as the Gemini source makes it frames (HTTP error,
    events, a reset, an event after the finish), judged at the consumer's gRPC edge."""
    case = RECORDING.case("replace-file")
    request = ReplyRequest.for_case(RECORDING, case.case_id, wire=wire)
    fake = Scripts()
    body = request_body(case.binding, max_output_tokens=DEFAULT_MAX_OUTPUT_TOKENS)
    turn = validate(model, body)
    with capture_logs() as records:
        try:
            steps = fake.plan(turn, {"headers": {"x-goog-api-key": "walk-key"}})
        except HttpError as answer:
            raw = error_body(answer.code, answer.status, answer.message, answer.details)
            refusal = provider_refusal(answer.code, raw)
            return judged(session_for(request), [], refused_over_grpc(refusal)), records
        stream = ProviderStream(case.binding_sha256, structlog.get_logger())
        frames: list[Frame] = []
        for step in steps:
            if step.kind == "reset":
                frames += stream.failure(Reason.PROVIDER_CONNECTION_LOST)
                break
            frames += stream.receive_data(step.data)
            if stream.closed:
                break
        else:
            frames += stream.end_of_input()
        codec = codec_for(wire)
        chunks = [codec.encode_frame(frame) for frame in frames]
        if stream.abort is not None:
            end = StreamEnded(grpc.StatusCode.UNAVAILABLE, stream.abort)
        else:
            end = StreamEnded()
        return judged(session_for(request), chunks, end), records


#: Scripts tests/system/test_gemini.py does not list; the rest complete (the usage ones: the ledger
#: rejects their usage, the stream is whole).
OTHER_GEMINI_OUTCOMES: Final = {"fake-echo-key": ("refused", "provider_rejected", 7)}


@pytest.mark.parametrize("wire", list(WireFormat))
@pytest.mark.parametrize("model", [DEFAULT_MODEL, *SCRIPTS])
def test_the_gemini_scripts_end_with_codes(model: str, wire: WireFormat) -> None:
    result, records = gemini_run(model, wire)
    seen = assert_registered(reasons_in(result, records), model)
    expected = {**OTHER_GEMINI_OUTCOMES, **LIVE_GEMINI_OUTCOMES}.get(model, ("complete", None, 0))
    # The same outcome as the live run through both processes (tests/system/test_gemini.py).
    assert (result.status.value, result.reason) == expected[:2]
    FOUND.setdefault("gemini", set()).update(seen)


# --- the consumer's own endings ---------------------------------------------------------------

#: How a call can end, as the reader hands it over: ours, gRPC's, the producer's (every
#: code as a status's details), and free text from a peer that says anything.
CALL_ENDINGS: Final[tuple[StreamEnded, ...]] = (
    StreamEnded(),
    StreamEnded(idle=True),
    StreamEnded(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"),
    StreamEnded(broken=Reason.READER_FAILED, details="RuntimeError"),
    StreamEnded(broken=Reason.INVALID_TRANSPORT_MESSAGE, details="NoneType"),
    StreamEnded(broken=Reason.READER_FAILED, details="no ending"),
    StreamEnded(grpc.StatusCode.CANCELLED, "CANCELLED"),
    StreamEnded(grpc.StatusCode.UNAVAILABLE, "Received RST_STREAM with error code 7"),
    StreamEnded(grpc.StatusCode.UNAVAILABLE, "Socket closed"),
    StreamEnded(grpc.StatusCode.INTERNAL, "because I said so\x1b[2J"),
    StreamEnded(grpc.StatusCode.UNKNOWN, "x" * 10_000),
    *(StreamEnded(grpc.StatusCode[REASONS[reason].grpc_code], reason.value) for reason in Reason),
    *(StreamEnded(grpc.StatusCode.UNAVAILABLE, reason.value) for reason in Reason),
)


@pytest.mark.parametrize("applied", [0, 3], ids=["before-any-chunk", "mid-stream"])
@pytest.mark.parametrize("attempt", [0, 1], ids=["first-call", "resumed"])
def test_every_way_a_call_ends_is_a_code(applied: int, attempt: int) -> None:
    request = ReplyRequest.for_case(RECORDING, "replace-file", wire=WireFormat.NDJSON)
    chunks, _ = asyncio.run(produce(request.open_request()))
    seen: set[str] = set()
    for end in CALL_ENDINGS:
        with capture_logs() as records:
            result = judged(session_for(request, attempt=attempt), chunks[:applied], end)
        seen |= assert_registered(reasons_in(result, records), repr(end)[:80])
        document = result.to_dict()
        for text in [document.get("detail"), *(document.get("transport") or {}).values()]:
            assert text is None or scrubbed_detail(str(text)) == text  # shown, never raw
    FOUND.setdefault("call endings", set()).update(seen)


def test_a_code_in_the_details_decides_whether_a_broken_call_resumes() -> None:
    def resumable(details: str) -> bool:
        return StreamEnded(grpc.StatusCode.UNAVAILABLE, details).resumable

    # Named transport breaks resume (the controlled abort too: it is a fault of the first
    # delivery only); a named verdict does not; any other text is gRPC's own: it resumes.
    assert resumable("controlled_transport_abort") and resumable("producer_shutdown")
    assert resumable("Socket closed") and resumable("controlled_transport_abortx")
    assert not resumable("provider_event_after_finish") and not resumable("generator_lost")


@pytest.mark.parametrize(
    "reason", [Reason.DEADLINE_EXCEEDED, Reason.IDLE_TIMEOUT, Reason.CONSUMER_CANCELLED]
)
def test_the_consumer_giving_up_is_a_code(reason: Reason) -> None:
    case = RECORDING.case("replace-file")
    with capture_logs() as records:
        consumer = ReplyConsumer(case.binding, logger=structlog.get_logger())
        result = consumer.abort(reason)
    assert_registered(reasons_in(result, records), reason.value)
    assert result.reason == reason.value
    FOUND.setdefault("call endings", set()).add(reason.value)


def test_the_walk_reached_the_reasons_it_exists_for(request: pytest.FixtureRequest) -> None:
    """Guards the walk itself: it ran (in this process, the whole file) and met the codes that
    come from the peer, not only the consumer's own."""
    walk = {  # the tests above this one in this file: the walk
        item.nodeid
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and item.module is request.module
        and item.function.__code__.co_firstlineno < request.function.__code__.co_firstlineno
    }
    if not walk <= RAN:
        pytest.skip("run with the rest of this file, in one process")
    found = set().union(*FOUND.values())
    assert {"one process", "grpc edge", "gemini", "call endings"} <= set(FOUND)
    for code in (
        "controlled_local_cancel",
        "controlled_local_error",
        "provider_finish_MAX_TOKENS",
        "provider_error_UNAVAILABLE",
        "provider_invalid_event",
        "provider_connection_lost",
        "provider_rate_limited",
        "transport_io_error",
        "missing_terminal",
        "invalid_sequence",
        "producer_overloaded",
        "stream_limit",
    ):
        assert code in found, code
    assert found <= set(CODES)


# --- the producer's own records ---------------------------------------------------------------


def test_a_reason_the_producer_fires_that_is_not_a_code_is_recorded_as_internal_error() -> None:
    ended: list[tuple[StreamState, str]] = []
    with capture_logs() as records:
        stream = ProducerStream(
            structlog.get_logger(), "walk", on_final=lambda state, why: ended.append((state, why))
        )
        stream.fire(StreamInput.REFUSE, reason="because I said so\x1b[2J", detail="d")
    assert ended == [(StreamState.REFUSED, "internal_error")]
    warning, final = records[-2:]
    assert (warning["event"], warning["value"], warning["reason"]) == (
        "reason_unregistered",
        "because I said so\\x1b[2J",
        "internal_error",
    )
    assert (final["to_state"], final["reason"], final["detail"]) == (
        "refused",
        "internal_error",
        "d",
    )
    stream = ProducerStream(structlog.get_logger(), "walk")
    stream.fire(StreamInput.REFUSE, reason=Reason.STREAM_LIMIT)
    assert stream.reason == "stream_limit"


def test_the_streams_metric_labels_only_codes() -> None:
    metrics = ProducerMetrics()
    metrics.stream_ended("refused", "faults_not_allowed")
    metrics.stream_ended("aborted", "controlled_transport_abort")
    metrics.stream_ended("completed", "")
    for text in ("because I said so", "x" * 1000, "provider_finish_max_tokens"):
        metrics.stream_ended("failed", text)
    labels = {
        (sample.labels["outcome"], sample.labels["reason"]): sample.value
        for family in metrics.registry.collect()
        if family.name == "replywire_streams_ended"
        for sample in family.samples
        if sample.name == "replywire_streams_ended_total"
    }
    assert labels == {
        ("refused", "faults_not_allowed"): 1,
        ("aborted", "controlled_transport_abort"): 1,
        ("completed", ""): 1,
        ("failed", "internal_error"): 3,
    }


# --- the source ---------------------------------------------------------------------------------

#: Errors whose first argument is their reason (a ``Reason``, never text).
REASON_ERRORS: Final = frozenset(
    {"ReplywireError", "ProtocolFailure", "RequestRefused", "ProviderError", "LogEnded"}
)
#: Names that hold a reason code when a literal is assigned to them ("" is "none").
REASON_NAMES: Final = frozenset({"reason", "abort_details"})


def _name(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)


def _call_reasons(node: ast.Call) -> Iterator[tuple[str, ast.expr]]:
    for keyword in node.keywords:
        if keyword.arg == "reason":
            yield "reason=", keyword.value
    name = _name(node.func)
    if (name == "Reason" or name in REASON_ERRORS) and node.args:
        yield f"{name}(...)", node.args[0]
    if name == "abort" and len(node.args) >= 2:
        yield "abort(code, details)", node.args[1]


def reason_literals(tree: ast.AST) -> Iterator[tuple[int, str, ast.expr]]:
    """Every expression given as a reason: ``reason=``, ``Reason(x)``, an error's first
    argument, ``context.abort(code, details)``, ``reason = x`` and ``{"reason": x}``."""
    for node in ast.walk(tree):
        found: list[tuple[str, ast.expr]] = []
        if isinstance(node, ast.Call):
            found += _call_reasons(node)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [(f"{_name(t)} =", node.value) for t in targets if _name(t) in REASON_NAMES]
        elif isinstance(node, ast.Dict):
            found += [
                ('{"reason": ...}', value)
                for key, value in zip(node.keys, node.values, strict=True)
                if isinstance(key, ast.Constant) and key.value == "reason"
            ]
        yield from ((getattr(node, "lineno", 0), how, value) for how, value in found)


def unregistered_literals(source: str) -> list[str]:
    found = []
    for line, how, value in reason_literals(ast.parse(source)):
        if isinstance(value, ast.JoinedStr):
            found.append(f"{line}: {how} an f-string {ast.unparse(value)}")
        elif isinstance(value, ast.Constant) and value.value and value.value not in CODES:
            found.append(f"{line}: {how} {value.value!r}")  # "" is "no reason"
    return found


SOURCES: Final = sorted(
    path
    for folder in ("shared", "producer", "consumer", "traces", "harness", "replywire")
    for path in (ROOT / folder).rglob("*.py")
    if "pb" not in path.relative_to(ROOT).parts[:2]
    # The fake Gemini server's reasons are Google's (API_KEY_INVALID, ...), not ours.
    and Path("harness/fake_gemini") not in path.relative_to(ROOT).parents
)


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_reason_literal_in_the_source_is_a_code(path: Path) -> None:
    assert unregistered_literals(path.read_text(encoding="utf-8")) == []


def test_the_source_check_sees_what_it_must() -> None:
    source = """
ProtocolFailure("invalid_sequence")
ProtocolFailure("not a code")
stream.fire(StreamInput.FAIL, reason="because I said so")
stream.fire(StreamInput.FAIL, reason=f"controlled_local_{kind}")
Reason("no_such_code")
await context.abort(grpc.StatusCode.UNAVAILABLE, "controlled_transport_abortt")
self.abort_details = "controlled_transport_abort"
reason = "made_up"
event = {"kind": "x", "reason": "free text"}
self.reason = ""
"""
    lines = sorted(int(finding.split(":")[0]) for finding in unregistered_literals(source))
    assert lines == [3, 4, 5, 6, 7, 9, 10]


# --- a property: any terminal reason ------------------------------------------------------------

TERMINAL_TEXTS: Final = st.one_of(
    st.sampled_from(sorted(CODES)),
    st.text(max_size=MAX_REASON_CHARS + 44),
    st.text(st.characters(codec="utf-8", categories=["Cc", "Cf", "Zl", "Zp", "Zs"]), max_size=80),
)


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from([FrameKind.ERROR, FrameKind.CANCEL]),
    text=TERMINAL_TEXTS,
    wire=st.sampled_from(list(WireFormat)),
    deltas=st.integers(0, 3),
    case_id=st.sampled_from(CASE_IDS),
)
def test_any_terminal_reason_gives_a_code_never_complete(
    kind: FrameKind, text: str, wire: WireFormat, deltas: int, case_id: str
) -> None:
    case = RECORDING.case(case_id)
    frames = content_frames(case.binding_sha256, [case.content[i] for i in range(deltas)])
    frames.append(
        Frame(sequence=deltas + 1, kind=kind, binding_sha256=case.binding_sha256, reason=text)
    )
    codec = codec_for(wire)
    quiet = structlog.wrap_logger(
        structlog.ReturnLogger(), wrapper_class=structlog.make_filtering_bound_logger(logging.INFO)
    )
    consumer = ReplyConsumer(case.binding, wire=wire, logger=quiet)
    with contextlib.suppress(ProtocolFailure):
        consumer.receive_data(b"".join(codec.encode_frame(frame) for frame in frames))
    document = consumer.end_of_stream().to_dict()
    assert document["status"] != "complete" and document["accepted_answer"] is None
    assert document["reason"] in CODES
    stopped = "cancelled" if kind is FrameKind.CANCEL else "error"
    if not text or len(text) > MAX_REASON_CHARS:
        assert (document["status"], document["reason"]) == ("invalid", "invalid_terminal_reason")
    elif text in CODES:
        assert (document["status"], document["reason"]) == (stopped, text)
        assert "detail" not in document
    else:
        expected = f"unregistered_{kind.value}_terminal"
        assert (document["status"], document["reason"]) == (stopped, expected)
        assert document["detail"] == scrubbed_detail(text)
        assert document["detail"].isprintable() and len(document["detail"]) <= MAX_DETAIL_CHARS


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=600), limit=st.integers(1, 300))
def test_a_scrubbed_detail_is_printable_bounded_and_stays_as_it_is(text: str, limit: int) -> None:
    shown = scrubbed_detail(text, limit)
    assert shown.isprintable() and len(shown) <= limit
    assert scrubbed_detail(shown, limit) == shown
    if text.isprintable() and len(text) <= limit:
        assert shown == text
    elif not shown.endswith("\u2026"):
        assert len(text) <= limit  # only cut text is marked


def test_every_code_has_its_registry_entry() -> None:
    assert set(REASONS) == set(Reason) and set(CODES) == {reason.value for reason in Reason}
    for reason in Reason:
        assert reason.value.isidentifier() and reason.value.isascii()
        assert REASONS[reason].grpc_code in grpc.StatusCode.__members__
