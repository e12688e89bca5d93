"""The producer's bound on pending streams without processes: ``--max-pending`` is one soft
and hard limit, its default and environment variable, and how the consumer names a stream
gRPC refused before the servicer (``producer_overloaded``).
(tests/system/test_concurrency_processes.py opens 3,000 streams at once.)"""

from __future__ import annotations

import grpc
import pytest

from replywire.consumer.client import ReplyClient
from replywire.consumer.options import StreamOptions
from replywire.consumer.reader import StreamEnded
from replywire.consumer.session import StreamSession
from replywire.producer.edge.server import server_options
from replywire.producer.flags import build_parser
from replywire.producer.settings import DEFAULT_MAX_PENDING, MAX_PENDING_S
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import Reason
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest
from replywire.shared.status import Status
from tests.runs import UTF8_CASE as CASE
from tests.runs import quiet


def test_pending_bound_is_one_limit_soft_and_hard() -> None:
    options = dict(server_options(max_streams=3, max_pending=7))
    assert options["grpc.server.max_pending_requests"] == 7
    assert options["grpc.server.max_pending_requests_hard_limit"] == 7
    assert options["grpc.server_max_unrequested_time_in_server"] == MAX_PENDING_S == 30
    default = dict(server_options())
    assert default["grpc.server.max_pending_requests"] == DEFAULT_MAX_PENDING == 10_000


def test_producer_overloaded_is_a_refusal_grpc_answers_cancelled() -> None:
    info = REASONS[Reason.PRODUCER_OVERLOADED]
    assert (info.status, info.grpc_code) == (Status.REFUSED, "CANCELLED")


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_max_pending_below_one_is_a_usage_error(value: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--max-pending", value])
    assert exit_info.value.code == 2


def test_max_pending_default_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_parser().parse_args([]).max_pending == DEFAULT_MAX_PENDING
    monkeypatch.setenv("REPLYWIRE_MAX_PENDING", "7")
    assert build_parser().parse_args([]).max_pending == 7
    assert build_parser().parse_args(["--max-pending", "9"]).max_pending == 9


@pytest.mark.parametrize(
    ("code", "details", "expected"),
    [
        # gRPC dropped it before the servicer (past --max-pending).
        ("CANCELLED", "CANCELLED", ("refused", "producer_overloaded")),
        # The producer's HTTP/2 layer refused it unprocessed: the connection's stream bound.
        (
            "UNAVAILABLE",
            "Stream removed (RST_STREAM (Received RST_STREAM with error code 7))",
            ("refused", "stream_limit"),
        ),
        # Anything else before a chunk stays a transport error.
        ("UNAVAILABLE", "Connection reset by peer", ("error", "transport_io_error")),
        ("CANCELLED", "Locally cancelled by application!", ("error", "transport_io_error")),
    ],
)
def test_how_the_transport_refused_a_stream_is_named(
    recording: Recording, code: str, details: str, expected: tuple[str, str]
) -> None:
    request = ReplyRequest(case_id=CASE, binding=recording.case(CASE).binding, stream_id="r")
    options = StreamOptions(target="x")
    session = StreamSession(
        request.open_request(), request.consumer(), options, quiet(), ReplyClient(options)
    )
    result = session._ended(StreamEnded(grpc.StatusCode[code], details))
    assert (result.status.value, result.reason) == expected
    assert result.transport == {"grpc_code": code, "grpc_details": details}
