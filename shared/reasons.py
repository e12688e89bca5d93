"""The protocol's reason codes: every code there is, and how text is looked up as one.

Every way a stream can fail or be refused has a reason code (a short snake_case string that
never changes once published): a member of ``Reason``. Codes marked "lab" are the ones of
the lab's ``stream_core`` and mean exactly what they mean there. What each code carries (its
status, its gRPC code) and means is the registry's (``shared.reason_registry.REASONS``).

The live provider's own finish reasons and error statuses are codes too
(``provider_finish_<REASON>``, ``provider_error_<STATUS>``): ``PROVIDER_FINISH_CODES`` and
``PROVIDER_ERROR_CODES`` are those codes, each its provider value after the prefix
(``provider_value``); which value of the wire is which code is the provider source's to
look up (``producer.sources.gemini.codes``).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final


class Reason(StrEnum):
    """Every registered code; what each carries and means is its entry in
    ``shared.reason_registry.REASONS``."""

    # --- recording and binding (lab) -------------------------------------
    RECORDING_HASH_MISMATCH = "recording_hash_mismatch"
    DEVELOPMENT_CASE_REQUIRED = "development_case_required"
    RECORDED_REQUEST_MISMATCH = "recorded_request_mismatch"
    RECORDED_CONTEXT_MISMATCH = "recorded_context_mismatch"
    REQUEST_BINDING_MISMATCH = "request_binding_mismatch"
    KIND_UNSUPPORTED = "kind_unsupported"
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
    REPLY_LOG_BEHIND = "reply_log_behind"
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
    # --- chat frames (ours) ----------------- ----------------------------
    PART_OUTSIDE_CHAT = "part_outside_chat"
    FRAME_AFTER_FINISH = "frame_after_finish"
    INVALID_TOOL_CALL = "invalid_tool_call"
    TOOL_CALL_LIMIT = "tool_call_limit"
    INVALID_THOUGHT = "invalid_thought"
    INVALID_SIGNATURE = "invalid_signature"
    INVALID_USAGE = "invalid_usage"
    INVALID_FINISH = "invalid_finish"
    # --- a terminal whose reason is not a code (ours) ----------------------
    UNREGISTERED_ERROR_TERMINAL = "unregistered_error_terminal"
    UNREGISTERED_CANCEL_TERMINAL = "unregistered_cancel_terminal"
    # --- final reply (lab) -----------------------------------------------
    INVALID_ANSWER_JSON = "invalid_answer_json"
    INVALID_ANSWER_SCHEMA = "invalid_answer_schema"
    UNKNOWN_CONTEXT_CITATION = "unknown_context_citation"
    STATUS_CITATION_MISMATCH = "status_citation_mismatch"
    # --- final chat reply (ours) -----------------------------------------
    CHAT_FINISH_MISSING = "chat_finish_missing"
    TOOL_CALL_MALFORMED = "tool_call_malformed"
    TOOL_CALL_UNDECLARED = "tool_call_undeclared"
    TOOL_CALL_ARGUMENTS_INVALID = "tool_call_arguments_invalid"
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
    PROVIDER_PART_UNSUPPORTED = "provider_part_unsupported"
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


#: What the codes of the provider's own values begin with; the rest is the value.
PROVIDER_FINISH_PREFIX: Final = "provider_finish_"
PROVIDER_ERROR_PREFIX: Final = "provider_error_"


def _provider_codes(prefix: str, other: Reason) -> tuple[Reason, ...]:
    return tuple(r for r in Reason if r.value.startswith(prefix) and r is not other)


#: The codes of the provider's finish reasons other than STOP (a value not among them is
#: ``provider_finish_unregistered``), and of the ``status`` of its stream's error objects
#: (any other is ``provider_error_unregistered``).
PROVIDER_FINISH_CODES: Final = _provider_codes(
    PROVIDER_FINISH_PREFIX, Reason.PROVIDER_FINISH_UNREGISTERED
)
PROVIDER_ERROR_CODES: Final = _provider_codes(
    PROVIDER_ERROR_PREFIX, Reason.PROVIDER_ERROR_UNREGISTERED
)


def provider_value(reason: Reason) -> str:
    """The provider's own value a provider code stands for: ``MAX_TOKENS`` for
    ``provider_finish_MAX_TOKENS``, ``UNAVAILABLE`` for ``provider_error_UNAVAILABLE``."""
    return reason.value.removeprefix(PROVIDER_FINISH_PREFIX).removeprefix(PROVIDER_ERROR_PREFIX)


#: Every registered code by its text: how text from elsewhere (a terminal's reason, a gRPC
#: status's details, a reply log's ending) is looked up without raising.
CODES: Final[Mapping[str, Reason]] = {reason.value: reason for reason in Reason}


def registered(text: object) -> Reason | None:
    """The registered code ``text`` is, or None (any other text, or not text at all)."""
    return CODES.get(text) if isinstance(text, str) else None
