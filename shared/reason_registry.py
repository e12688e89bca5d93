"""The reason registry: for every code, the status it produces, its gRPC code, its meaning.

A code carries the result status it produces and the gRPC status code the producer answers
with when it refuses a request for that reason. The gRPC mapping is kept here as a *name*
(``"FAILED_PRECONDITION"``) so this module stays free of grpc; the edges turn it into
``grpc.StatusCode[name]``. ``REASONS`` is the one table the docs' reason table and the
TypeScript consumer's are generated from (``tools.docs``,
``clients/typescript/scripts/make_tables.py``).

The live provider's finish reasons and error statuses (``shared.reasons.PROVIDER_FINISH_CODES``,
``PROVIDER_ERROR_CODES``) are registered codes like any other: their meanings are here, each
naming the provider's value (the code after its prefix).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from replywire.shared.reasons import Reason, provider_value
from replywire.shared.status import Status


@dataclass(frozen=True, slots=True)
class ReasonInfo:
    """What a code carries: the result's status, the gRPC code of a refusal, the meaning."""

    status: Status
    grpc_code: str
    meaning: str


def _info(status: Status, grpc_code: str, meaning: str) -> ReasonInfo:
    return ReasonInfo(status=status, grpc_code=grpc_code, meaning=meaning)


_R, _I, _E = Status.REFUSED, Status.INVALID, Status.ERROR
_POLICY, _INTERNAL = "FAILED_PRECONDITION", "INTERNAL"

#: Gemini's documented ``Candidate.FinishReason`` values other than STOP (which is ``done``),
#: by their codes: the gRPC code and what the value means (the Gemini API reference's words,
#: shortened).
_FINISHES: Final[dict[Reason, tuple[str, str]]] = {
    Reason.PROVIDER_FINISH_FINISH_REASON_UNSPECIFIED: (
        _INTERNAL,
        "no reason given (the default value, documented as unused)",
    ),
    Reason.PROVIDER_FINISH_MAX_TOKENS: (
        "RESOURCE_EXHAUSTED",
        "the reply reached the request's maxOutputTokens",
    ),
    Reason.PROVIDER_FINISH_SAFETY: (_POLICY, "the reply was flagged for safety"),
    Reason.PROVIDER_FINISH_RECITATION: (
        _POLICY,
        "the reply was flagged for recitation (copyright)",
    ),
    Reason.PROVIDER_FINISH_LANGUAGE: (_POLICY, "the reply's language is unsupported"),
    Reason.PROVIDER_FINISH_OTHER: (_INTERNAL, "stopped for a reason it does not name"),
    Reason.PROVIDER_FINISH_BLOCKLIST: (_POLICY, "the reply has forbidden terms"),
    Reason.PROVIDER_FINISH_PROHIBITED_CONTENT: (_POLICY, "the reply may have prohibited content"),
    Reason.PROVIDER_FINISH_SPII: (
        _POLICY,
        "the reply may have sensitive personally identifiable information",
    ),
    Reason.PROVIDER_FINISH_MALFORMED_FUNCTION_CALL: (
        _INTERNAL,
        "the model's function call is invalid",
    ),
    Reason.PROVIDER_FINISH_IMAGE_SAFETY: (_POLICY, "a generated image has safety violations"),
    Reason.PROVIDER_FINISH_IMAGE_PROHIBITED_CONTENT: (
        _POLICY,
        "a generated image has prohibited content",
    ),
    Reason.PROVIDER_FINISH_IMAGE_OTHER: (
        _INTERNAL,
        "image generation stopped for a reason it does not name",
    ),
    Reason.PROVIDER_FINISH_NO_IMAGE: (_INTERNAL, "an image was expected and none was generated"),
    Reason.PROVIDER_FINISH_IMAGE_RECITATION: (_POLICY, "a generated image may be a recitation"),
    Reason.PROVIDER_FINISH_UNEXPECTED_TOOL_CALL: (
        _INTERNAL,
        "the model called a tool, and the request enabled none",
    ),
    Reason.PROVIDER_FINISH_TOO_MANY_TOOL_CALLS: (
        _INTERNAL,
        "the model called too many tools in a row",
    ),
    Reason.PROVIDER_FINISH_MISSING_THOUGHT_SIGNATURE: (
        _INTERNAL,
        "the request lacks a thought signature",
    ),
    Reason.PROVIDER_FINISH_MALFORMED_RESPONSE: (_INTERNAL, "the model's response was malformed"),
}

#: ``google.rpc.Code`` names other than OK, as the ``status`` of an error object in the
#: provider's stream, by their codes (the gRPC code is the same name): what each means.
_PROVIDER_ERRORS: Final[dict[Reason, str]] = {
    Reason.PROVIDER_ERROR_CANCELLED: "the provider cancelled the call",
    Reason.PROVIDER_ERROR_UNKNOWN: "an error the provider does not classify",
    Reason.PROVIDER_ERROR_INVALID_ARGUMENT: "it found the request invalid",
    Reason.PROVIDER_ERROR_DEADLINE_EXCEEDED: "its deadline passed",
    Reason.PROVIDER_ERROR_NOT_FOUND: "something the call needs does not exist",
    Reason.PROVIDER_ERROR_ALREADY_EXISTS: "something it made already exists",
    Reason.PROVIDER_ERROR_PERMISSION_DENIED: "the key may not do this",
    Reason.PROVIDER_ERROR_RESOURCE_EXHAUSTED: "a quota or rate limit",
    Reason.PROVIDER_ERROR_FAILED_PRECONDITION: "the provider is not in a state to answer",
    Reason.PROVIDER_ERROR_ABORTED: "the call was aborted (a conflict)",
    Reason.PROVIDER_ERROR_OUT_OF_RANGE: "a value is out of its range",
    Reason.PROVIDER_ERROR_UNIMPLEMENTED: "the provider does not do this",
    Reason.PROVIDER_ERROR_INTERNAL: "the provider failed internally",
    Reason.PROVIDER_ERROR_UNAVAILABLE: "the provider is overloaded or down",
    Reason.PROVIDER_ERROR_DATA_LOSS: "the provider lost data",
    Reason.PROVIDER_ERROR_UNAUTHENTICATED: "the key was not accepted",
}


def _provider_finish(reason: Reason, grpc_code: str, meaning: str) -> ReasonInfo:
    return _info(_E, grpc_code, f"the provider finished with {provider_value(reason)}: {meaning}")


def _provider_error(reason: Reason, meaning: str) -> ReasonInfo:
    status = provider_value(reason)
    return _info(_E, status, f"an error event of the provider's stream, status {status}: {meaning}")


REASONS: dict[Reason, ReasonInfo] = {
    Reason.RECORDING_HASH_MISMATCH: _info(
        _R, "FAILED_PRECONDITION", "the recording file does not have its pinned SHA-256"
    ),
    Reason.DEVELOPMENT_CASE_REQUIRED: _info(
        _R, "FAILED_PRECONDITION", "the case is not on the development allowlist"
    ),
    Reason.RECORDED_REQUEST_MISMATCH: _info(
        _R, "FAILED_PRECONDITION", "the recorded messages do not hash to the recorded request"
    ),
    Reason.RECORDED_CONTEXT_MISMATCH: _info(
        _R, "FAILED_PRECONDITION", "the supplied context differs from the selected context"
    ),
    Reason.KIND_UNSUPPORTED: _info(
        _R, "FAILED_PRECONDITION", "the producer's source serves no reply of the request's kind"
    ),
    Reason.REQUEST_BINDING_MISMATCH: _info(
        _R, "FAILED_PRECONDITION", "the request's binding differs from the recording's"
    ),
    Reason.INVALID_LOCAL_TERMINAL: _info(
        _R, "INVALID_ARGUMENT", "a terminal other than done, error or cancel was asked for"
    ),
    Reason.INVALID_REQUEST: _info(
        _R,
        "INVALID_ARGUMENT",
        "the request is malformed (wire format, chunking, ids, the binding's size or depth, "
        "the fault's kind or bounds)",
    ),
    Reason.FAULTS_NOT_ALLOWED: _info(
        _R, "PERMISSION_DENIED", "a fault was asked of a producer that does not allow faults"
    ),
    Reason.BINDING_NOT_CANONICAL: _info(
        _R,
        "INVALID_ARGUMENT",
        "the request's binding bytes are not the canonical JSON of a value (sorted keys, "
        "compact, UTF-8)",
    ),
    Reason.FAULT_PARAMETER_OUT_OF_RANGE: _info(
        _R,
        "INVALID_ARGUMENT",
        "a fault's frame or byte count does not fit the reply, or the fault takes no such "
        "parameter",
    ),
    Reason.PRODUCER_SHUTDOWN: _info(
        _E, "UNAVAILABLE", "the producer stopped before the stream ended (after its grace)"
    ),
    Reason.INTERNAL_ERROR: _info(
        _E, "INTERNAL", "the producer failed unexpectedly; its trace holds the detail"
    ),
    Reason.INVALID_TOKEN: _info(
        _R, "UNAUTHENTICATED", "no bearer token, or one the producer does not know"
    ),
    Reason.STREAM_LIMIT: _info(
        _R, "RESOURCE_EXHAUSTED", "the producer already serves --max-streams streams; try later"
    ),
    Reason.PRODUCER_OVERLOADED: _info(
        _R,
        "CANCELLED",
        "gRPC dropped the request before the producer saw it (over --max-pending waiting, "
        "or one waited 30 s); try later",
    ),
    Reason.CONNECTION_AGED_OUT: _info(
        _E, "UNAVAILABLE", "the stream's connection outlived --max-connection-age-s and its grace"
    ),
    Reason.RESUME_UNAVAILABLE: _info(
        _R, "NOT_FOUND", "a resume of a reply this producer neither logged nor can regenerate"
    ),
    Reason.RESUME_BINDING_MISMATCH: _info(
        _R, "FAILED_PRECONDITION", "a resume whose binding differs from the logged reply's"
    ),
    Reason.GENERATOR_LOST: _info(
        _E, "UNAVAILABLE", "the replica generating a shared reply went silent (its lease lapsed)"
    ),
    Reason.REPLY_ABANDONED: _info(
        _E, "UNAVAILABLE", "no consumer came back within --detach-grace-s: generation stopped"
    ),
    Reason.IDENTITY_STREAM_LIMIT: _info(
        _R,
        "RESOURCE_EXHAUSTED",
        "the caller already has --max-streams-per-identity streams open; try later",
    ),
    Reason.REPLY_LOG_UNAVAILABLE: _info(
        _E, "UNAVAILABLE", "the reply log could not be read or written: the reply ended there"
    ),
    Reason.REPLY_LOG_LIMIT: _info(
        _E,
        "RESOURCE_EXHAUSTED",
        "the reply outgrew --reply-log-max-frames or --reply-log-max-bytes: generation stopped",
    ),
    Reason.REPLY_LOG_BUSY: _info(
        _R,
        "RESOURCE_EXHAUSTED",
        "the producer already reads --reply-log-replies-read replies from the shared log (or "
        "the caller --reply-log-replies-read-per-identity); try later",
    ),
    Reason.REPLY_LOG_BEHIND: _info(
        _E,
        "UNAVAILABLE",
        "the shared reply log lost frames it had acknowledged (a store's failover): "
        "the reply ends after the frames it kept",
    ),
    Reason.HEALTH_WATCH_LIMIT: _info(
        _R, "RESOURCE_EXHAUSTED", "the producer already serves --max-health-watches Watch streams"
    ),
    Reason.HEALTH_LIST_LIMIT: _info(
        _R, "RESOURCE_EXHAUSTED", "health List: more than 100 services registered (none listed)"
    ),
    Reason.METADATA_TOO_LARGE: _info(
        _R,
        "RESOURCE_EXHAUSTED",
        "the request's metadata was past the producer's --max-metadata-bytes (refused before "
        "any of it was read)",
    ),
    Reason.CONSUMER_ALREADY_FINISHED: _info(
        _I, "INTERNAL", "input arrived after the consumer had finished"
    ),
    Reason.TRANSPORT_REQUIRES_BYTES: _info(_I, "INTERNAL", "a transport fragment was not bytes"),
    Reason.STREAM_BYTE_LIMIT: _info(
        _I, "RESOURCE_EXHAUSTED", "more bytes than the stream byte limit"
    ),
    Reason.INVALID_UTF8: _info(_I, "DATA_LOSS", "the bytes are not valid UTF-8"),
    Reason.FRAME_BYTE_LIMIT: _info(
        _I, "RESOURCE_EXHAUSTED", "a frame (or a declared frame length) exceeds the frame limit"
    ),
    Reason.FRAME_AFTER_TERMINAL: _info(_I, "DATA_LOSS", "a frame arrived after the terminal"),
    Reason.INVALID_FRAME_JSON: _info(_I, "DATA_LOSS", "an NDJSON frame is not strict JSON"),
    Reason.INVALID_FRAME_SCHEMA: _info(
        _I,
        "DATA_LOSS",
        "a frame has the wrong shape (also: a done whose content_sha256 is not 64 lowercase "
        "hex characters, absent or empty included, or whose content_frames is not an integer >= 0)",
    ),
    Reason.INVALID_SEQUENCE: _info(
        _I, "DATA_LOSS", "a sequence number is not the next one (gap, reorder, replay)"
    ),
    Reason.FRAME_REQUEST_MISMATCH: _info(
        _I, "DATA_LOSS", "a frame carries another request's binding hash"
    ),
    Reason.FRAME_COUNT_LIMIT: _info(_I, "RESOURCE_EXHAUSTED", "more frames than the frame limit"),
    Reason.INVALID_CONTENT_DELTA: _info(_I, "DATA_LOSS", "a content delta is empty or not text"),
    Reason.CONTENT_LIMIT: _info(
        _I, "RESOURCE_EXHAUSTED", "the assembled content exceeds the content limit"
    ),
    Reason.INVALID_TERMINAL_REASON: _info(
        _I, "DATA_LOSS", "an error/cancel terminal has no valid reason"
    ),
    Reason.TRUNCATED_UTF8: _info(_I, "DATA_LOSS", "the input ended inside a UTF-8 character"),
    Reason.TRUNCATED_FRAME: _info(_I, "DATA_LOSS", "the input ended inside a frame"),
    Reason.INVALID_FRAME_HEADER: _info(
        _I, "DATA_LOSS", "a length-prefixed frame's flag byte is not 0"
    ),
    Reason.INVALID_FRAME_PAYLOAD: _info(
        _I, "DATA_LOSS", "a length-prefixed payload is not a well-formed Frame message"
    ),
    Reason.UNKNOWN_FRAME_FIELD: _info(_I, "DATA_LOSS", "a Frame payload carries unknown fields"),
    Reason.MISSING_FRAME_KIND: _info(_I, "DATA_LOSS", "a Frame payload sets no kind"),
    Reason.CONTENT_DIGEST_MISMATCH: _info(
        _I, "DATA_LOSS", "done's content digest or count differs from what was assembled"
    ),
    Reason.CONFLICTING_DUPLICATE: _info(
        _I, "DATA_LOSS", "an applied sequence number came again with different bytes"
    ),
    Reason.PART_OUTSIDE_CHAT: _info(
        _I,
        "DATA_LOSS",
        "a chat frame (tool call, thought, signature, usage, finish) in a reply not of kind chat",
    ),
    Reason.FRAME_AFTER_FINISH: _info(
        _I,
        "DATA_LOSS",
        "a chat content frame other than usage after the turn's finish (a second finish included)",
    ),
    Reason.INVALID_TOOL_CALL: _info(
        _I,
        "DATA_LOSS",
        "a tool call fragment breaks its rules (index not the next call's or a begun "
        "one's, no name, an id or name that changed, empty arguments continuing a call, "
        "not text)",
    ),
    Reason.TOOL_CALL_LIMIT: _info(
        _I, "RESOURCE_EXHAUSTED", "the turn begins more tool calls than the tool call limit"
    ),
    Reason.INVALID_THOUGHT: _info(_I, "DATA_LOSS", "a thought is empty or not text"),
    Reason.INVALID_SIGNATURE: _info(
        _I,
        "DATA_LOSS",
        "a thought signature is empty, not text, of an unknown part, or of a call "
        "not begun or already signed",
    ),
    Reason.INVALID_USAGE: _info(
        _I, "DATA_LOSS", "a usage count is not an integer from 0 to 2^64 - 1"
    ),
    Reason.INVALID_FINISH: _info(
        _I, "DATA_LOSS", "a finish reason is not a string of 1 to 64 code points"
    ),
    Reason.UNREGISTERED_ERROR_TERMINAL: _info(
        _E,
        "INTERNAL",
        "an error terminal whose reason is not a registered code (its text is in detail)",
    ),
    Reason.UNREGISTERED_CANCEL_TERMINAL: _info(
        Status.CANCELLED,
        "CANCELLED",
        "a cancel terminal whose reason is not a registered code (its text is in detail)",
    ),
    Reason.INVALID_ANSWER_JSON: _info(_I, "DATA_LOSS", "the reply is not strict JSON"),
    Reason.INVALID_ANSWER_SCHEMA: _info(
        _I, "DATA_LOSS", "the reply does not have the exact schema"
    ),
    Reason.UNKNOWN_CONTEXT_CITATION: _info(
        _I, "DATA_LOSS", "the reply cites a source outside the bound context"
    ),
    Reason.STATUS_CITATION_MISMATCH: _info(
        _I, "DATA_LOSS", "answered without citations, or not_in_docs with citations"
    ),
    Reason.CHAT_FINISH_MISSING: _info(
        _I, "DATA_LOSS", "a chat reply ended done without a finish frame"
    ),
    Reason.TOOL_CALL_MALFORMED: _info(
        _I,
        "DATA_LOSS",
        "a tool call's arguments are not a JSON object (kept raw in the turn; the call is in call)",
    ),
    Reason.TOOL_CALL_UNDECLARED: _info(
        _I, "DATA_LOSS", "a tool call names no tool the request declared (the call is in call)"
    ),
    Reason.TOOL_CALL_ARGUMENTS_INVALID: _info(
        _I,
        "DATA_LOSS",
        "a tool call's arguments are not valid against its tool's parameters (the call is in call)",
    ),
    Reason.MISSING_TERMINAL: _info(
        Status.INCOMPLETE, "UNAVAILABLE", "the input ended cleanly but no terminal arrived"
    ),
    Reason.TRANSPORT_IO_ERROR: _info(
        _E, "UNAVAILABLE", "the transport failed: no connection, or it broke mid-stream"
    ),
    Reason.DEADLINE_EXCEEDED: _info(
        Status.INCOMPLETE, "DEADLINE_EXCEEDED", "the consumer's overall deadline passed"
    ),
    Reason.IDLE_TIMEOUT: _info(
        Status.INCOMPLETE, "DEADLINE_EXCEEDED", "no chunk arrived within the idle timeout"
    ),
    Reason.CONSUMER_CANCELLED: _info(
        Status.INCOMPLETE, "CANCELLED", "the consumer was interrupted (Ctrl-C) and cancelled"
    ),
    Reason.INVALID_TRANSPORT_MESSAGE: _info(
        _E, "INTERNAL", "the transport delivered a message that is not a Chunk"
    ),
    Reason.READER_FAILED: _info(
        _E, "INTERNAL", "the consumer's reader stopped unexpectedly (its trace has why)"
    ),
    Reason.SSE_INVALID_UTF8: _info(
        _E, "UNAVAILABLE", "the provider's SSE stream is not UTF-8, or ends inside a character"
    ),
    Reason.SSE_MALFORMED_LINE: _info(
        _E, "UNAVAILABLE", "a line of the provider's SSE stream is neither a field nor a comment"
    ),
    Reason.SSE_UNKNOWN_FIELD: _info(
        _E, "UNAVAILABLE", "the provider's SSE stream has a field other than data and event"
    ),
    Reason.SSE_EVENT_WITHOUT_DATA: _info(
        _E, "UNAVAILABLE", "an event of the provider's SSE stream has fields but no data"
    ),
    Reason.SSE_EVENT_TOO_LARGE: _info(
        _E, "UNAVAILABLE", "an event of the provider's SSE stream exceeds the event byte limit"
    ),
    Reason.PROVIDER_RATE_LIMITED: _info(
        _R, "RESOURCE_EXHAUSTED", "the provider answered 429; the retry delay is in the result"
    ),
    Reason.PROVIDER_UNAVAILABLE: _info(
        _E, "UNAVAILABLE", "the provider could not be reached or answered 5xx before the stream"
    ),
    Reason.PROVIDER_REJECTED: _info(
        _R, "FAILED_PRECONDITION", "the provider refused the request (400 / 404)"
    ),
    Reason.PROVIDER_AUTH_FAILED: _info(
        _R, "PERMISSION_DENIED", "the provider refused the API key (401 / 403)"
    ),
    Reason.PROVIDER_INVALID_EVENT: _info(
        _E, "INTERNAL", "a provider event was malformed SSE or not strict JSON (error terminal)"
    ),
    Reason.PROVIDER_CONNECTION_LOST: _info(
        _E, "UNAVAILABLE", "the provider's response broke off mid-stream (error terminal)"
    ),
    Reason.PROVIDER_EVENT_AFTER_FINISH: _info(
        _E, "UNAVAILABLE", "the provider sent an event after its finish reason (RPC aborted)"
    ),
    Reason.PROVIDER_PART_UNSUPPORTED: _info(
        _E,
        "UNIMPLEMENTED",
        "the provider's turn holds a part this reply cannot carry (a function call, inline "
        "data, code, a thought, or a part it does not know): the text before it is kept, "
        "nothing after it is read (error terminal)",
    ),
    Reason.LEDGER_UNAVAILABLE: _info(
        _E, "UNAVAILABLE", "the budget ledger cannot be read or written: no call is made"
    ),
    Reason.BUDGET_EXHAUSTED: _info(
        _R, "RESOURCE_EXHAUSTED", "the call's worst-case cost would exceed the budget"
    ),
    **{
        reason: _provider_finish(reason, grpc_code, meaning)
        for reason, (grpc_code, meaning) in _FINISHES.items()
    },
    Reason.PROVIDER_FINISH_UNREGISTERED: _info(
        _E,
        "INTERNAL",
        "the provider finished with a finishReason not listed above (the producer's trace "
        "has it: provider_reason_unregistered)",
    ),
    **{reason: _provider_error(reason, meaning) for reason, meaning in _PROVIDER_ERRORS.items()},
    Reason.PROVIDER_ERROR_UNREGISTERED: _info(
        _E,
        "INTERNAL",
        "an error event of the provider's stream without one of the statuses above (the "
        "producer's trace has it: provider_reason_unregistered)",
    ),
    Reason.CONTROLLED_LOCAL_CANCEL: _info(
        Status.CANCELLED, "CANCELLED", "the producer sent a cancel terminal"
    ),
    Reason.CONTROLLED_LOCAL_ERROR: _info(_E, "INTERNAL", "the producer sent an error terminal"),
    Reason.CONTROLLED_TRANSPORT_ABORT: _info(
        _E, "UNAVAILABLE", "the producer ended the RPC mid-stream on purpose (a controlled fault)"
    ),
}


#: How a shared reply ended without its terminal that its readers are told as that reason
#: (the producer's status details, also to a late resume), never resumed: the consumer
#: ends with it, not with ``transport_io_error``.
REPLY_ENDINGS: frozenset[Reason] = frozenset(
    {
        Reason.GENERATOR_LOST,
        Reason.REPLY_ABANDONED,
        Reason.REPLY_LOG_UNAVAILABLE,
        Reason.REPLY_LOG_LIMIT,
        Reason.REPLY_LOG_BEHIND,
    }
)
