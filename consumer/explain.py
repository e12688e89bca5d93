"""What a result means, in words a person reads: one sentence per reason code, and a hint
where one helps (what to run or change). Pure functions of the result and the request's
facts; the live view (``consumer.view``) prints them."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from replywire.consumer.reader import NOT_A_GRPC_SERVER
from replywire.consumer.security import TOKEN_ENV
from replywire.runtime.invocation import command, in_repository
from replywire.shared.faults import EXPECTED_OUTCOMES, FaultKind
from replywire.shared.questions import is_question
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import PROVIDER_ERROR_CODES, PROVIDER_FINISH_CODES, Reason
from replywire.shared.recording import DEVELOPMENT_CASES
from replywire.shared.result import StreamResult
from replywire.shared.status import Status

R = Reason

#: Every reason code, said as a person would (tests/unit/test_view.py checks that none is missing).
SENTENCES: Final[Mapping[Reason, str]] = {
    R.RECORDING_HASH_MISMATCH: "The recording file has changed: its SHA-256 is not the pinned one, "
    "so nothing in it is trusted.",
    R.DEVELOPMENT_CASE_REQUIRED: "The case asked for is not one of the recording's development "
    "cases.",
    R.RECORDED_REQUEST_MISMATCH: "The recording's messages do not hash to the request it says "
    "they were: the recording is inconsistent.",
    R.RECORDED_CONTEXT_MISMATCH: "The context sent with the request is not the context the "
    "recording selected.",
    R.REQUEST_BINDING_MISMATCH: "The binding sent with the request is not the recording's "
    "binding for this case.",
    R.INVALID_LOCAL_TERMINAL: "The request asked for an ending other than done, error or cancel.",
    R.INVALID_REQUEST: "The producer could not read the request (its wire format, chunking or "
    "fault).",
    R.FAULTS_NOT_ALLOWED: "A fault was asked of a producer that was not started to allow faults.",
    R.BINDING_NOT_CANONICAL: "The binding's bytes are not its canonical JSON (sorted keys, no "
    "whitespace, UTF-8), so no frame could be bound to the bytes sent.",
    R.FAULT_PARAMETER_OUT_OF_RANGE: "The fault's frame or byte count does not fit this reply, "
    "or the fault takes no such parameter.",
    R.PRODUCER_SHUTDOWN: "The producer shut down before the stream ended.",
    R.INTERNAL_ERROR: "The producer failed unexpectedly; its trace says why.",
    R.INVALID_TOKEN: "The producer did not accept the bearer token (none was sent, or one it "
    "does not know).",
    R.STREAM_LIMIT: "The producer is already serving as many streams as it allows.",
    R.PRODUCER_OVERLOADED: "The producer's gRPC dropped the request before its servicer saw "
    "it: too many new streams were waiting, or the producer was too busy to take it within "
    "30 s.",
    R.CONNECTION_AGED_OUT: "The connection reached the producer's maximum age and was closed "
    "before the stream ended.",
    R.RESUME_UNAVAILABLE: "The stream could not be resumed: the producer neither kept this "
    "reply nor can make it again.",
    R.RESUME_BINDING_MISMATCH: "The resumed request does not match the reply the producer kept.",
    R.GENERATOR_LOST: "The producer replica generating this reply went silent.",
    R.REPLY_ABANDONED: "Nobody came back for this reply within the producer's detach grace, "
    "so it stopped generating it.",
    R.CONSUMER_ALREADY_FINISHED: "Data arrived after the consumer had already reached its verdict.",
    R.TRANSPORT_REQUIRES_BYTES: "The transport handed over something that is not bytes.",
    R.STREAM_BYTE_LIMIT: "The stream sent more bytes than the consumer accepts "
    "(--max-stream-bytes).",
    R.INVALID_UTF8: "The stream's bytes are not valid UTF-8 text.",
    R.FRAME_BYTE_LIMIT: "A frame is larger than the consumer accepts (--max-frame-bytes).",
    R.FRAME_AFTER_TERMINAL: "A frame arrived after the stream's final frame.",
    R.INVALID_FRAME_JSON: "A frame is not valid JSON.",
    R.INVALID_FRAME_SCHEMA: "A frame does not have the shape the protocol requires.",
    R.INVALID_SEQUENCE: "A frame arrived out of order: one was skipped, repeated or reordered.",
    R.FRAME_REQUEST_MISMATCH: "A frame belongs to another request (its binding hash differs).",
    R.FRAME_COUNT_LIMIT: "The stream sent more frames than the consumer accepts (--max-frames).",
    R.INVALID_CONTENT_DELTA: "A piece of the reply's text is empty or not text.",
    R.CONTENT_LIMIT: "The reply grew longer than the consumer accepts (--max-content-chars).",
    R.INVALID_TERMINAL_REASON: "The producer ended the stream without a valid reason.",
    R.TRUNCATED_UTF8: "The stream stopped in the middle of a character.",
    R.TRUNCATED_FRAME: "The stream stopped in the middle of a frame: its last bytes never arrived.",
    R.INVALID_FRAME_HEADER: "A frame's header is malformed.",
    R.INVALID_FRAME_PAYLOAD: "A frame's contents are damaged: they do not decode.",
    R.UNKNOWN_FRAME_FIELD: "A frame carries fields the protocol does not know.",
    R.MISSING_FRAME_KIND: "A frame does not say what kind of frame it is.",
    R.CONTENT_DIGEST_MISMATCH: "The text received is not the text the producer sent: its "
    "checksum differs.",
    R.CONFLICTING_DUPLICATE: "A frame came twice with different contents.",
    R.INVALID_ANSWER_JSON: "The complete reply is not valid JSON.",
    R.INVALID_ANSWER_SCHEMA: "The complete reply does not have the required fields.",
    R.UNKNOWN_CONTEXT_CITATION: "The reply cites a source that was not in the context it was "
    "given.",
    R.STATUS_CITATION_MISMATCH: "The reply's citations contradict its status (an answer without "
    "sources, or no answer with sources).",
    R.PART_OUTSIDE_CHAT: "A frame carries a tool call, thought, usage or finish, and the reply "
    "asked for is not a chat turn.",
    R.FRAME_AFTER_FINISH: "Part of the turn arrived after the turn said it had finished.",
    R.INVALID_TOOL_CALL: "A piece of a tool call is malformed: its position, name or id do not "
    "fit the calls before it.",
    R.TOOL_CALL_LIMIT: "The turn made more tool calls than the consumer accepts.",
    R.INVALID_THOUGHT: "A piece of the model's thoughts is empty or not text.",
    R.INVALID_SIGNATURE: "A thought signature is empty, or belongs to no part of the turn.",
    R.INVALID_USAGE: "The token usage report holds a count that is not a whole number.",
    R.INVALID_FINISH: "The turn's finish reason is empty or too long.",
    R.CHAT_FINISH_MISSING: "The turn ended without saying why it finished.",
    R.TOOL_CALL_MALFORMED: "A tool call's arguments are not a JSON object (kept as they came).",
    R.TOOL_CALL_UNDECLARED: "The model called a tool the request did not declare.",
    R.TOOL_CALL_ARGUMENTS_INVALID: "A tool call's arguments do not fit the tool's declared "
    "parameters.",
    R.MISSING_TERMINAL: "The stream ended cleanly but without its final frame: the reply may be "
    "cut short.",
    R.TRANSPORT_IO_ERROR: "The connection to the producer failed.",
    R.DEADLINE_EXCEEDED: "The stream took longer than the consumer's deadline (--deadline-s).",
    R.IDLE_TIMEOUT: "Nothing arrived for longer than the idle timeout (--idle-timeout-s).",
    R.CONSUMER_CANCELLED: "The consumer was interrupted (Ctrl-C) and stopped the stream.",
    R.INVALID_TRANSPORT_MESSAGE: "The transport delivered a message that is not a chunk.",
    R.READER_FAILED: "The consumer's reader stopped unexpectedly; its trace says why.",
    R.SSE_INVALID_UTF8: "The model provider's event stream is not valid UTF-8.",
    R.SSE_MALFORMED_LINE: "The model provider's event stream has a malformed line.",
    R.SSE_UNKNOWN_FIELD: "The model provider's event stream has an unknown field.",
    R.SSE_EVENT_WITHOUT_DATA: "The model provider sent an event without data.",
    R.SSE_EVENT_TOO_LARGE: "The model provider sent an event larger than allowed.",
    R.PROVIDER_RATE_LIMITED: "The model provider is rate-limiting requests.",
    R.PROVIDER_UNAVAILABLE: "The model provider could not be reached or failed before answering.",
    R.PROVIDER_REJECTED: "The model provider rejected the request.",
    R.PROVIDER_AUTH_FAILED: "The model provider did not accept the API key.",
    R.PROVIDER_INVALID_EVENT: "The model provider sent a malformed event.",
    R.PROVIDER_CONNECTION_LOST: "The connection to the model provider broke mid-reply.",
    R.PROVIDER_EVENT_AFTER_FINISH: "The model provider kept sending after it had finished.",
    R.KIND_UNSUPPORTED: "This producer's source serves no reply of the kind asked for (the "
    "development text and chat replies come from the recording source, the producer's default).",
    R.PROVIDER_PART_UNSUPPORTED: "The model's turn held a part this reply cannot carry (a "
    "function call, an image, code or a thought); the text before it is kept, unaccepted.",
    R.BUDGET_EXHAUSTED: "The call could cost more than the remaining budget allows.",
    R.LEDGER_UNAVAILABLE: "The budget ledger could not be read or written, so no call was made.",
    R.CONTROLLED_LOCAL_CANCEL: "The producer cancelled the stream.",
    R.CONTROLLED_LOCAL_ERROR: "The producer ended the stream with an error.",
    R.CONTROLLED_TRANSPORT_ABORT: "The producer broke off the call mid-stream on purpose (a "
    "controlled fault).",
    R.UNREGISTERED_ERROR_TERMINAL: "The producer ended the stream with an error whose reason is "
    "not a known code; its words are under detail.",
    R.UNREGISTERED_CANCEL_TERMINAL: "The producer cancelled the stream with a reason that is not "
    "a known code; its words are under detail.",
    R.PROVIDER_FINISH_UNREGISTERED: "The model provider stopped for a reason this producer does "
    "not know; the producer's trace has it.",
    R.PROVIDER_ERROR_UNREGISTERED: "The model provider sent an error of a kind this producer "
    "does not know; the producer's trace has it.",
    R.IDENTITY_STREAM_LIMIT: "This caller already has as many streams open as it may.",
    R.REPLY_LOG_UNAVAILABLE: "The producer's reply log could not be read or written.",
    R.REPLY_LOG_LIMIT: "The reply outgrew the producer's reply log bounds.",
    R.REPLY_LOG_BEHIND: "The producer's shared reply log lost frames in a failover; "
    "the reply ends after the frames it kept.",
    R.REPLY_LOG_BUSY: "The producer already reads as many replies from its shared reply log "
    "as it allows (or this caller as many as it may); try later.",
    R.HEALTH_WATCH_LIMIT: "The producer already serves as many health watches as it allows.",
    R.HEALTH_LIST_LIMIT: "The producer has more health services than a health List answers.",
    R.METADATA_TOO_LARGE: "The call's metadata (its headers: token, trace context, anything "
    "added) was larger than the producer accepts (its --max-metadata-bytes).",
    # The provider's own finish reasons and error statuses, in the registry's words.
    **{
        reason: REASONS[reason].meaning[0].upper() + REASONS[reason].meaning[1:] + "."
        for reason in (*PROVIDER_FINISH_CODES, *PROVIDER_ERROR_CODES)
    },
}

#: The verdict's headline per status (``complete`` is the only accepted one).
HEADLINES: Final[Mapping[Status, str]] = {
    Status.COMPLETE: "accepted",
    Status.INCOMPLETE: "not accepted: incomplete",
    Status.CANCELLED: "not accepted: cancelled",
    Status.ERROR: "not accepted: error",
    Status.INVALID: "not accepted: invalid",
    Status.REFUSED: "not accepted: refused",
}

DEFAULT_TARGET: Final = "127.0.0.1:50051"


@dataclass(frozen=True, slots=True)
class Facts:
    """What the command line said, for the hints."""

    target: str = DEFAULT_TARGET
    fault: str | None = None
    idle_timeout_s: float | None = None
    deadline_s: float | None = None


def sentence(reason: str | None) -> str:
    """The reason in words ("" for none; the code itself for a code this table lacks)."""
    if reason is None:
        return ""
    try:
        return SENTENCES[Reason(reason)]
    except ValueError:
        return reason


def start_producer(target: str, *args: str) -> str:
    """The command that starts a producer at ``target``: make's, on this machine and in the
    repository; else the producer's own command (``runtime.invocation``)."""
    host, _, port = target.rpartition(":")
    if not in_repository() and port.isdigit() and port != "50051":
        args = ("--port", port, *args)
    if not in_repository() or host not in {"127.0.0.1", "localhost"} or not port.isdigit():
        return f"{command('producer')} {' '.join(args)}".rstrip()
    extra = f' ARGS="{" ".join(args)}"' if args else ""
    return f"make run-producer{'' if port == '50051' else f' PORT={port}'}{extra}"


def _unknown_case(result: StreamResult, facts: Facts) -> str | None:
    if is_question(result.case_id):  # --question: the recording serves its own cases only
        return "this producer's source answers no questions: start it with " + (
            f"`{start_producer(facts.target, '--source gemini')}`"
        )
    detail = result.detail or ""
    match = re.match(r"unknown case '([^']*)'", detail)
    if match is None:
        return detail or None
    close = difflib.get_close_matches(match.group(1), DEVELOPMENT_CASES, n=1)
    return detail + (f" (did you mean {close[0]!r}?)" if close else "")


def _transport(result: StreamResult, facts: Facts) -> str:
    tries = result.stats.reconnects + 1
    if (result.transport or {}).get("message") == NOT_A_GRPC_SERVER:
        return (
            f"{facts.target} is not a gRPC server (it answered, but not in HTTP/2): "
            "is --target the producer's port?"
        )
    if result.stats.bytes_received == 0:
        tried = f" (tried {tries} times)" if tries > 1 else ""
        return (
            f"no producer at {facts.target}{tried}: start one with `{start_producer(facts.target)}`"
        )
    resumes = "a resume" if tries == 2 else f"{tries - 1} resumes"
    resumed = f" and {resumes} did not mend it" if tries > 1 else ""
    if facts.fault == FaultKind.STALL:  # a stall pauses the producer; it breaks nothing
        return (
            f"the producer at {facts.target} went away during the stall{resumed} "
            f"(--fault stall only pauses it); is it still running? "
            f"(`{start_producer(facts.target)}`)"
        )
    return (
        f"the connection to {facts.target} broke mid-stream{resumed}; "
        f"is the producer still running? (`{start_producer(facts.target)}`)"
    )


def _faults(result: StreamResult, facts: Facts) -> str:
    return "the producer refuses faults: start it with " + (
        f"`{start_producer(facts.target, '--allow-faults')}`"
    )


def _idle(result: StreamResult, facts: Facts) -> str:
    return f"nothing for {facts.idle_timeout_s} s; for a slow producer raise --idle-timeout-s"


def _deadline(result: StreamResult, facts: Facts) -> str:
    return f"the stream took over {facts.deadline_s} s; raise --deadline-s for a long reply"


def _token(result: StreamResult, facts: Facts) -> str:
    return f"give a token the producer knows: --auth-token-file FILE or {TOKEN_ENV}"


def _busy(result: StreamResult, facts: Facts) -> str:
    return "the producer is at its --max-streams; try again in a moment"


def _overloaded(result: StreamResult, facts: Facts) -> str:
    return (
        "too many streams arrived at once (its --max-pending), or it was too busy to take "
        "this one within 30 s; try again in a moment"
    )


def _rate_limited(result: StreamResult, facts: Facts) -> str | None:
    delay = (result.transport or {}).get("retry-delay")
    return f"the provider asks to retry after {delay}" if delay else None


HINTS: Final[Mapping[Reason, Callable[[StreamResult, Facts], str | None]]] = {
    R.DEVELOPMENT_CASE_REQUIRED: _unknown_case,
    R.TRANSPORT_IO_ERROR: _transport,
    R.FAULTS_NOT_ALLOWED: _faults,
    R.IDLE_TIMEOUT: _idle,
    R.DEADLINE_EXCEEDED: _deadline,
    R.INVALID_TOKEN: _token,
    R.STREAM_LIMIT: _busy,
    R.PRODUCER_OVERLOADED: _overloaded,
    R.PROVIDER_RATE_LIMITED: _rate_limited,
}


#: Reasons that say the producer or the connection went away, not what a fault asked for.
GONE: Final = frozenset(
    {R.TRANSPORT_IO_ERROR, R.PRODUCER_SHUTDOWN, R.GENERATOR_LOST, R.CONNECTION_AGED_OUT}
)


def fault_caused(reason: Reason, fault: str) -> bool:
    """Whether ``fault`` explains ``reason``: a producer or connection that went away is
    blamed on a fault only where the fault asks for exactly that (``transport-abort``)."""
    if reason not in GONE:
        return True
    try:
        kind = FaultKind(fault)
    except ValueError:
        return False
    return any(outcome.reason == reason.value for outcome in EXPECTED_OUTCOMES[kind].values())


def hint(result: StreamResult, facts: Facts) -> str | None:
    """What to do about a result that was not accepted, where something helps."""
    if result.accepted or result.reason is None:
        return None
    try:
        reason = Reason(result.reason)
    except ValueError:
        return None
    if (
        facts.fault is not None
        and result.stats.bytes_received
        and fault_caused(reason, facts.fault)
    ):
        return f"--fault {facts.fault} asked the producer for this: the consumer caught it"
    advise = HINTS.get(reason)
    return advise(result, facts) if advise is not None else None
