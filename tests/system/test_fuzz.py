"""Fuzz the producer's request parsing over real gRPC: only documented refusals, always healthy.

Hypothesis sends raw bytes and structured ``OpenRequest`` messages to a real
producer process. Every answer is OK or a refusal whose details are a reason code
of the registry, with that code's gRPC status; after every example a valid
request is still served, and at the end the producer's trace has no failed
stream. ``make test`` runs a few hundred examples; ``make fuzz`` runs
``REPLYWIRE_FUZZ_EXAMPLES`` (100,000 in all by default there).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Final

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replywire.shared.digest import canonical_json
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import Reason
from replywire.shared.recording import DEVELOPMENT_CASES, Recording
from tests.processes import Producer, producer

#: Examples per strategy (two strategies): REPLYWIRE_FUZZ_EXAMPLES in all.
EXAMPLES: Final = max(1, int(os.environ.get("REPLYWIRE_FUZZ_EXAMPLES", "400")) // 2)
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)

pytestmark = pytest.mark.timeout(max(180, EXAMPLES // 50))


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Producer, grpc.Channel]]:
    with producer(tmp_path_factory.mktemp("fuzz"), "--log-level", "warning") as p:
        with grpc.insecure_channel(p.target) as channel:
            yield p, channel
        assert p.process.poll() is None, "the producer died"


def _open(channel: grpc.Channel, payload: bytes) -> tuple[str, str]:
    call = channel.unary_stream("/replywire.v1.ReplyStream/Open", None, None)
    try:
        for _ in call(payload, timeout=30):
            pass
    except grpc.RpcError as error:
        return error.code().name, error.details() or ""
    return "OK", ""


def _documented(outcome: tuple[str, str]) -> bool:
    code, details = outcome
    if code == "OK":
        return True
    try:
        reason = Reason(details)
    except ValueError:
        return False
    return REASONS[reason].grpc_code == code


def _healthy(channel: grpc.Channel, recording: Recording) -> bool:
    valid = pb.OpenRequest(
        case_id="replace-file",
        binding_json=canonical_json(recording.case("replace-file").binding),
        whole_body=True,
    )
    return _open(channel, valid.SerializeToString()) == ("OK", "")


@given(payload=st.binary(max_size=512))
@FUZZ
def test_raw_bytes(
    fuzzed: tuple[Producer, grpc.Channel], recording: Recording, payload: bytes
) -> None:
    _, channel = fuzzed
    outcome = _open(channel, payload)
    assert _documented(outcome), outcome
    assert _healthy(channel, recording)


def _requests(recording: Recording) -> st.SearchStrategy[pb.OpenRequest]:
    bindings = [canonical_json(recording.case(case).binding) for case in DEVELOPMENT_CASES]
    binding = st.one_of(
        st.sampled_from(bindings),
        st.builds(
            lambda data, at, byte: data[:at] + bytes([byte]) + data[at + 1 :],
            st.sampled_from(bindings),
            st.integers(0, 3000),
            st.integers(0, 255),
        ),
        st.binary(max_size=256),
        st.text(max_size=64).map(str.encode),
    )
    return st.builds(
        pb.OpenRequest,
        case_id=st.one_of(st.sampled_from(DEVELOPMENT_CASES), st.text(max_size=160)),
        binding_json=binding,
        wire_format=st.integers(0, 5),
        chunk_sizes=st.lists(st.integers(0, 2**32 - 1), max_size=70),
        fault=st.builds(
            pb.Fault,
            kind=st.integers(0, 14),
            target_frame=st.integers(0, 2**32 - 1),
            byte_count=st.integers(0, 2**32 - 1),
            stall_ms=st.integers(0, 2**32 - 1),
        ),
        stream_id=st.text(max_size=160),
        chunk_interval_ms=st.one_of(st.integers(0, 1), st.integers(60_001, 2**32 - 1)),
        whole_body=st.booleans(),
    )


@given(data=st.data())
@FUZZ
def test_structured_requests(
    fuzzed: tuple[Producer, grpc.Channel], recording: Recording, data: st.DataObject
) -> None:
    _, channel = fuzzed
    request = data.draw(_requests(recording))
    outcome = _open(channel, request.SerializeToString())
    assert _documented(outcome), (request, outcome)
    assert _healthy(channel, recording)


def test_the_fuzzed_producer_never_failed(fuzzed: tuple[Producer, grpc.Channel]) -> None:
    """Runs after the two above (same module, same producer, its trace at warning): an
    unexpected error in a stream is logged ``stream_failed`` at error level."""
    producer_, _ = fuzzed
    assert producer_.process.poll() is None
    assert not [r for r in producer_.trace() if r["event"] == "stream_failed"]
