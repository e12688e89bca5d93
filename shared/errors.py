"""One exception family with stable reason codes.

Every way a stream can fail or be refused has a reason code (a short
snake_case string that never changes once published). A code carries the
result status it produces and the gRPC status code the producer answers with
when it refuses a request for that reason. The gRPC mapping is kept here as a
*name* (``"FAILED_PRECONDITION"``) so this module stays free of grpc; the edges
turn it into ``grpc.StatusCode[name]``.

Codes marked "lab" are the ones of the lab's ``stream_core`` and mean exactly
what they mean there.

Why one file: the registry is one table (code, status, exit, gRPC code, meaning) that the
docs' reason table is generated from and every edge reads; the helpers that keep a reason a
code (``registered``, ``scrubbed_detail``) belong with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class Status(StrEnum):
    """Final status of one stream, as written into the result document."""

    COMPLETE = "complete"
    INCOMPLETE = "incomplete"
    CANCELLED = "cancelled"
    ERROR = "error"
    INVALID = "invalid"
    REFUSED = "refused"


#: Exit codes of every consumer command, by final status (2 = usage or configuration).
EXIT_CODES: dict[Status, int] = {
    Status.COMPLETE: 0,
    Status.INCOMPLETE: 3,
    Status.CANCELLED: 4,
    Status.ERROR: 5,
    Status.INVALID: 6,
    Status.REFUSED: 7,
}
EXIT_USAGE = 2


@dataclass(frozen=True, slots=True)
class ReasonInfo:
    status: Status
    grpc_code: str
    meaning: str


class Reason(StrEnum):
    # --- recording and binding (lab) -------------------------------------
    RECORDING_HASH_MISMATCH = "recording_hash_mismatch"
    DEVELOPMENT_CASE_REQUIRED = "development_case_required"
    RECORDED_REQUEST_MISMATCH = "recorded_request_mismatch"
    RECORDED_CONTEXT_MISMATCH = "recorded_context_mismatch"
    REQUEST_BINDING_MISMATCH = "request_binding_mismatch"
    INVALID_LOCAL_TERMINAL = "invalid_local_terminal"
    # --- producer request checks (ours) ----------------------------------
    INVALID_REQUEST = "invalid_request"
    FAULTS_NOT_ALLOWED = "faults_not_allowed"
    BINDING_NOT_CANONICAL = "binding_not_canonical"
    FAULT_PARAMETER_OUT_OF_RANGE = "fault_parameter_out_of_range"
    # --- the producer's own endings (ours) --------------------------------
    PRODUCER_SHUTDOWN = "producer_shutdown"
    INTERNAL_ERROR = "internal_error"
    INVALID_TOKEN = "invalid_token"
    STREAM_LIMIT = "stream_limit"
    PRODUCER_OVERLOADED = "producer_overloaded"
    CONNECTION_AGED_OUT = "connection_aged_out"
    RESUME_UNAVAILABLE = "resume_unavailable"
    RESUME_BINDING_MISMATCH = "resume_binding_mismatch"
    GENERATOR_LOST = "generator_lost"
    REPLY_ABANDONED = "reply_abandoned"
    IDENTITY_STREAM_LIMIT = "identity_stream_limit"
    REPLY_LOG_UNAVAILABLE = "reply_log_unavailable"
    REPLY_LOG_LIMIT = "reply_log_limit"
    REPLY_LOG_BUSY = "reply_log_busy"
    HEALTH_WATCH_LIMIT = "health_watch_limit"
    HEALTH_LIST_LIMIT = "health_list_limit"
    METADATA_TOO_LARGE = "metadata_too_large"
    # --- consumer input (lab) --------------------------------------------
    CONSUMER_ALREADY_FINISHED = "consumer_already_finished"
    TRANSPORT_REQUIRES_BYTES = "transport_requires_bytes"
    STREAM_BYTE_LIMIT = "stream_byte_limit"
    INVALID_UTF8 = "invalid_utf8"
    FRAME_BYTE_LIMIT = "frame_byte_limit"
    FRAME_AFTER_TERMINAL = "frame_after_terminal"
    INVALID_FRAME_JSON = "invalid_frame_json"
    INVALID_FRAME_SCHEMA = "invalid_frame_schema"
    INVALID_SEQUENCE = "invalid_sequence"
    FRAME_REQUEST_MISMATCH = "frame_request_mismatch"
    FRAME_COUNT_LIMIT = "frame_count_limit"
    INVALID_CONTENT_DELTA = "invalid_content_delta"
    CONTENT_LIMIT = "content_limit"
    INVALID_TERMINAL_REASON = "invalid_terminal_reason"
    TRUNCATED_UTF8 = "truncated_utf8"
    TRUNCATED_FRAME = "truncated_frame"
    # --- length-prefixed wire and integrity (ours) -----------------------
    INVALID_FRAME_HEADER = "invalid_frame_header"
    INVALID_FRAME_PAYLOAD = "invalid_frame_payload"
    UNKNOWN_FRAME_FIELD = "unknown_frame_field"
    MISSING_FRAME_KIND = "missing_frame_kind"
    CONTENT_DIGEST_MISMATCH = "content_digest_mismatch"
    CONFLICTING_DUPLICATE = "conflicting_duplicate"
    # --- a terminal whose reason is not a code (ours) ----------------------
    UNREGISTERED_ERROR_TERMINAL = "unregistered_error_terminal"
    UNREGISTERED_CANCEL_TERMINAL = "unregistered_cancel_terminal"
    # --- final reply (lab) -----------------------------------------------
    INVALID_ANSWER_JSON = "invalid_answer_json"
    INVALID_ANSWER_SCHEMA = "invalid_answer_schema"
    UNKNOWN_CONTEXT_CITATION = "unknown_context_citation"
    STATUS_CITATION_MISMATCH = "status_citation_mismatch"
    # --- how a stream ended without a verdict (lab) -----------------------
    MISSING_TERMINAL = "missing_terminal"
    TRANSPORT_IO_ERROR = "transport_io_error"
    # --- the consumer gave up (ours) ---------------------------------------
    DEADLINE_EXCEEDED = "deadline_exceeded"
    IDLE_TIMEOUT = "idle_timeout"
    CONSUMER_CANCELLED = "consumer_cancelled"
    INVALID_TRANSPORT_MESSAGE = "invalid_transport_message"
    READER_FAILED = "reader_failed"
    # --- the provider's SSE stream (ours) --------------------------------
    SSE_INVALID_UTF8 = "sse_invalid_utf8"
    SSE_MALFORMED_LINE = "sse_malformed_line"
    SSE_UNKNOWN_FIELD = "sse_unknown_field"
    SSE_EVENT_WITHOUT_DATA = "sse_event_without_data"
    SSE_EVENT_TOO_LARGE = "sse_event_too_large"
    # --- the live provider (ours) ------------------------------------------
    PROVIDER_RATE_LIMITED = "provider_rate_limited"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    PROVIDER_REJECTED = "provider_rejected"
    PROVIDER_AUTH_FAILED = "provider_auth_failed"
    PROVIDER_INVALID_EVENT = "provider_invalid_event"
    PROVIDER_CONNECTION_LOST = "provider_connection_lost"
    PROVIDER_EVENT_AFTER_FINISH = "provider_event_after_finish"
    BUDGET_EXHAUSTED = "budget_exhausted"
    LEDGER_UNAVAILABLE = "ledger_unavailable"
    # --- the live provider's finishReason other than STOP (Gemini's, error terminals) ---
    PROVIDER_FINISH_FINISH_REASON_UNSPECIFIED = "provider_finish_FINISH_REASON_UNSPECIFIED"
    PROVIDER_FINISH_MAX_TOKENS = "provider_finish_MAX_TOKENS"
    PROVIDER_FINISH_SAFETY = "provider_finish_SAFETY"
    PROVIDER_FINISH_RECITATION = "provider_finish_RECITATION"
    PROVIDER_FINISH_LANGUAGE = "provider_finish_LANGUAGE"
    PROVIDER_FINISH_OTHER = "provider_finish_OTHER"
    PROVIDER_FINISH_BLOCKLIST = "provider_finish_BLOCKLIST"
    PROVIDER_FINISH_PROHIBITED_CONTENT = "provider_finish_PROHIBITED_CONTENT"
    PROVIDER_FINISH_SPII = "provider_finish_SPII"
    PROVIDER_FINISH_MALFORMED_FUNCTION_CALL = "provider_finish_MALFORMED_FUNCTION_CALL"
    PROVIDER_FINISH_IMAGE_SAFETY = "provider_finish_IMAGE_SAFETY"
    PROVIDER_FINISH_IMAGE_PROHIBITED_CONTENT = "provider_finish_IMAGE_PROHIBITED_CONTENT"
    PROVIDER_FINISH_IMAGE_OTHER = "provider_finish_IMAGE_OTHER"
    PROVIDER_FINISH_NO_IMAGE = "provider_finish_NO_IMAGE"
    PROVIDER_FINISH_IMAGE_RECITATION = "provider_finish_IMAGE_RECITATION"
    PROVIDER_FINISH_UNEXPECTED_TOOL_CALL = "provider_finish_UNEXPECTED_TOOL_CALL"
    PROVIDER_FINISH_TOO_MANY_TOOL_CALLS = "provider_finish_TOO_MANY_TOOL_CALLS"
    PROVIDER_FINISH_MISSING_THOUGHT_SIGNATURE = "provider_finish_MISSING_THOUGHT_SIGNATURE"
    PROVIDER_FINISH_MALFORMED_RESPONSE = "provider_finish_MALFORMED_RESPONSE"
    PROVIDER_FINISH_UNREGISTERED = "provider_finish_unregistered"
    # --- an error object in the live provider's stream, by its status (error terminals) ---
    PROVIDER_ERROR_CANCELLED = "provider_error_CANCELLED"
    PROVIDER_ERROR_UNKNOWN = "provider_error_UNKNOWN"
    PROVIDER_ERROR_INVALID_ARGUMENT = "provider_error_INVALID_ARGUMENT"
    PROVIDER_ERROR_DEADLINE_EXCEEDED = "provider_error_DEADLINE_EXCEEDED"
    PROVIDER_ERROR_NOT_FOUND = "provider_error_NOT_FOUND"
    PROVIDER_ERROR_ALREADY_EXISTS = "provider_error_ALREADY_EXISTS"
    PROVIDER_ERROR_PERMISSION_DENIED = "provider_error_PERMISSION_DENIED"
    PROVIDER_ERROR_RESOURCE_EXHAUSTED = "provider_error_RESOURCE_EXHAUSTED"
    PROVIDER_ERROR_FAILED_PRECONDITION = "provider_error_FAILED_PRECONDITION"
    PROVIDER_ERROR_ABORTED = "provider_error_ABORTED"
    PROVIDER_ERROR_OUT_OF_RANGE = "provider_error_OUT_OF_RANGE"
    PROVIDER_ERROR_UNIMPLEMENTED = "provider_error_UNIMPLEMENTED"
    PROVIDER_ERROR_INTERNAL = "provider_error_INTERNAL"
    PROVIDER_ERROR_UNAVAILABLE = "provider_error_UNAVAILABLE"
    PROVIDER_ERROR_DATA_LOSS = "provider_error_DATA_LOSS"
    PROVIDER_ERROR_UNAUTHENTICATED = "provider_error_UNAUTHENTICATED"
    PROVIDER_ERROR_UNREGISTERED = "provider_error_unregistered"
    # --- terminals the producer sends in controlled faults (lab) ----------
    CONTROLLED_LOCAL_CANCEL = "controlled_local_cancel"
    CONTROLLED_LOCAL_ERROR = "controlled_local_error"
    CONTROLLED_TRANSPORT_ABORT = "controlled_transport_abort"

    @property
    def status(self) -> Status:
        return REASONS[self].status

    @property
    def grpc_code(self) -> str:
        return REASONS[self].grpc_code


def _info(status: Status, grpc_code: str, meaning: str) -> ReasonInfo:
    return ReasonInfo(status=status, grpc_code=grpc_code, meaning=meaning)


_R, _I, _E = Status.REFUSED, Status.INVALID, Status.ERROR
_POLICY, _INTERNAL = "FAILED_PRECONDITION", "INTERNAL"

#: Gemini's documented ``Candidate.FinishReason`` values other than STOP (which is ``done``):
#: the value, the gRPC code, what it means (the Gemini API reference's words, shortened).
_FINISHES: Final[dict[Reason, tuple[str, str, str]]] = {
    Reason.PROVIDER_FINISH_FINISH_REASON_UNSPECIFIED: (
        "FINISH_REASON_UNSPECIFIED",
        _INTERNAL,
        "no reason given (the default value, documented as unused)",
    ),
    Reason.PROVIDER_FINISH_MAX_TOKENS: (
        "MAX_TOKENS",
        "RESOURCE_EXHAUSTED",
        "the reply reached the request's maxOutputTokens",
    ),
    Reason.PROVIDER_FINISH_SAFETY: ("SAFETY", _POLICY, "the reply was flagged for safety"),
    Reason.PROVIDER_FINISH_RECITATION: (
        "RECITATION",
        _POLICY,
        "the reply was flagged for recitation (copyright)",
    ),
    Reason.PROVIDER_FINISH_LANGUAGE: ("LANGUAGE", _POLICY, "the reply's language is unsupported"),
    Reason.PROVIDER_FINISH_OTHER: ("OTHER", _INTERNAL, "stopped for a reason it does not name"),
    Reason.PROVIDER_FINISH_BLOCKLIST: ("BLOCKLIST", _POLICY, "the reply has forbidden terms"),
    Reason.PROVIDER_FINISH_PROHIBITED_CONTENT: (
        "PROHIBITED_CONTENT",
        _POLICY,
        "the reply may have prohibited content",
    ),
    Reason.PROVIDER_FINISH_SPII: (
        "SPII",
        _POLICY,
        "the reply may have sensitive personally identifiable information",
    ),
    Reason.PROVIDER_FINISH_MALFORMED_FUNCTION_CALL: (
        "MALFORMED_FUNCTION_CALL",
        _INTERNAL,
        "the model's function call is invalid",
    ),
    Reason.PROVIDER_FINISH_IMAGE_SAFETY: (
        "IMAGE_SAFETY",
        _POLICY,
        "a generated image has safety violations",
    ),
    Reason.PROVIDER_FINISH_IMAGE_PROHIBITED_CONTENT: (
        "IMAGE_PROHIBITED_CONTENT",
        _POLICY,
        "a generated image has prohibited content",
    ),
    Reason.PROVIDER_FINISH_IMAGE_OTHER: (
        "IMAGE_OTHER",
        _INTERNAL,
        "image generation stopped for a reason it does not name",
    ),
    Reason.PROVIDER_FINISH_NO_IMAGE: (
        "NO_IMAGE",
        _INTERNAL,
        "an image was expected and none was generated",
    ),
    Reason.PROVIDER_FINISH_IMAGE_RECITATION: (
        "IMAGE_RECITATION",
        _POLICY,
        "a generated image may be a recitation",
    ),
    Reason.PROVIDER_FINISH_UNEXPECTED_TOOL_CALL: (
        "UNEXPECTED_TOOL_CALL",
        _INTERNAL,
        "the model called a tool, and the request enabled none",
    ),
    Reason.PROVIDER_FINISH_TOO_MANY_TOOL_CALLS: (
        "TOO_MANY_TOOL_CALLS",
        _INTERNAL,
        "the model called too many tools in a row",
    ),
    Reason.PROVIDER_FINISH_MISSING_THOUGHT_SIGNATURE: (
        "MISSING_THOUGHT_SIGNATURE",
        _INTERNAL,
        "the request lacks a thought signature",
    ),
    Reason.PROVIDER_FINISH_MALFORMED_RESPONSE: (
        "MALFORMED_RESPONSE",
        _INTERNAL,
        "the model's response was malformed",
    ),
}

#: ``google.rpc.Code`` names other than OK, as the ``status`` of an error object in the
#: provider's stream (the gRPC code is the same name), and what each means.
_PROVIDER_ERRORS: Final[dict[Reason, tuple[str, str]]] = {
    Reason.PROVIDER_ERROR_CANCELLED: ("CANCELLED", "the provider cancelled the call"),
    Reason.PROVIDER_ERROR_UNKNOWN: ("UNKNOWN", "an error the provider does not classify"),
    Reason.PROVIDER_ERROR_INVALID_ARGUMENT: ("INVALID_ARGUMENT", "it found the request invalid"),
    Reason.PROVIDER_ERROR_DEADLINE_EXCEEDED: ("DEADLINE_EXCEEDED", "its deadline passed"),
    Reason.PROVIDER_ERROR_NOT_FOUND: ("NOT_FOUND", "something the call needs does not exist"),
    Reason.PROVIDER_ERROR_ALREADY_EXISTS: ("ALREADY_EXISTS", "something it made already exists"),
    Reason.PROVIDER_ERROR_PERMISSION_DENIED: ("PERMISSION_DENIED", "the key may not do this"),
    Reason.PROVIDER_ERROR_RESOURCE_EXHAUSTED: ("RESOURCE_EXHAUSTED", "a quota or rate limit"),
    Reason.PROVIDER_ERROR_FAILED_PRECONDITION: (
        "FAILED_PRECONDITION",
        "the provider is not in a state to answer",
    ),
    Reason.PROVIDER_ERROR_ABORTED: ("ABORTED", "the call was aborted (a conflict)"),
    Reason.PROVIDER_ERROR_OUT_OF_RANGE: ("OUT_OF_RANGE", "a value is out of its range"),
    Reason.PROVIDER_ERROR_UNIMPLEMENTED: ("UNIMPLEMENTED", "the provider does not do this"),
    Reason.PROVIDER_ERROR_INTERNAL: ("INTERNAL", "the provider failed internally"),
    Reason.PROVIDER_ERROR_UNAVAILABLE: ("UNAVAILABLE", "the provider is overloaded or down"),
    Reason.PROVIDER_ERROR_DATA_LOSS: ("DATA_LOSS", "the provider lost data"),
    Reason.PROVIDER_ERROR_UNAUTHENTICATED: ("UNAUTHENTICATED", "the key was not accepted"),
}
#: A finishReason value (other than STOP) -> its code; a value not here is
#: ``provider_finish_unregistered``.
PROVIDER_FINISHES: Final[Mapping[str, Reason]] = {
    name: reason for reason, (name, _, _) in _FINISHES.items()
}
#: An error object's ``status`` -> its code; any other is ``provider_error_unregistered``.
PROVIDER_ERROR_STATUSES: Final[Mapping[str, Reason]] = {
    name: reason for reason, (name, _) in _PROVIDER_ERRORS.items()
}

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
    Reason.LEDGER_UNAVAILABLE: _info(
        _E, "UNAVAILABLE", "the budget ledger cannot be read or written: no call is made"
    ),
    Reason.BUDGET_EXHAUSTED: _info(
        _R, "RESOURCE_EXHAUSTED", "the call's worst-case cost would exceed the budget"
    ),
    **{
        reason: _info(_E, grpc_code, f"the provider finished with {name}: {meaning}")
        for reason, (name, grpc_code, meaning) in _FINISHES.items()
    },
    Reason.PROVIDER_FINISH_UNREGISTERED: _info(
        _E,
        "INTERNAL",
        "the provider finished with a finishReason not listed above (the producer's trace "
        "has it: provider_reason_unregistered)",
    ),
    **{
        reason: _info(
            _E, name, f"an error event of the provider's stream, status {name}: {meaning}"
        )
        for reason, (name, meaning) in _PROVIDER_ERRORS.items()
    },
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

#: Every registered code by its text: how text from elsewhere (a terminal's reason, a gRPC
#: status's details, a reply log's ending) is looked up without raising.
CODES: Final[Mapping[str, Reason]] = {reason.value: reason for reason in Reason}


def registered(text: object) -> Reason | None:
    """The registered code ``text`` is, or None (any other text, or not text at all)."""
    return CODES.get(text) if isinstance(text, str) else None


#: The longest ``detail`` of a result (and of a trace record that carries text from elsewhere).
MAX_DETAIL_CHARS: Final = 256
#: Where a detail was cut at the bound.
CUT_MARK: Final = "\u2026"


def scrubbed_detail(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    """Free text made fit to show: every character that is not printable (control and
    format characters: C0, DEL, C1, bidi overrides, zero-width marks, line separators,
    surrogates) shown escaped as Python writes it (``\\n``, ``\\x1b``, ``\\u202e``), never
    raw; at most ``limit`` characters, cut with ``…`` at the end (never inside an
    escape). Idempotent: scrubbed text is returned as it is."""
    if len(text) <= limit and text.isprintable():
        return text
    pieces: list[str] = []
    size = 0
    for char in text[: limit + 1]:  # every character shows as one or more
        piece = char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        pieces.append(piece)
        size += len(piece)
        if size > limit:
            break
    if size <= limit:
        return "".join(pieces)
    while pieces and size + len(CUT_MARK) > limit:
        size -= len(pieces.pop())
    return "".join(pieces) + CUT_MARK


#: How a shared reply ended without its terminal that its readers are told as that reason
#: (the producer's status details, also to a late resume), never resumed: the consumer
#: ends with it, not with ``transport_io_error``.
REPLY_ENDINGS: frozenset[Reason] = frozenset(
    {
        Reason.GENERATOR_LOST,
        Reason.REPLY_ABANDONED,
        Reason.REPLY_LOG_UNAVAILABLE,
        Reason.REPLY_LOG_LIMIT,
    }
)


class ReplywireError(Exception):
    """Base of the family: every failure carries a stable reason code."""

    def __init__(self, reason: Reason, detail: str = "") -> None:
        super().__init__(f"{reason.value}: {detail}" if detail else reason.value)
        self.reason = reason
        self.detail = detail
        #: Extra facts for the edge to pass on (e.g. gRPC trailing metadata: a retry delay).
        self.metadata: dict[str, str] = {}

    @property
    def code(self) -> str:
        return self.reason.value


class ConfigurationError(Exception):
    """A command cannot start with its flags or files (exit 2, a one-line message)."""


class InvalidTransition(RuntimeError):
    """A caller fired an input its machine's table has no entry for (``shared.fsm``): a bug,
    never a verdict. Here, not in ``shared.fsm``: mypyc, which compiles that module, cannot
    compile a subclass of ``RuntimeError``."""


class ProtocolFailure(ReplywireError):
    """The consumer refused the bytes or frames it was given (status invalid)."""


class RequestRefused(ReplywireError):
    """The request could not be bound or served (status refused)."""
