"""Many streams at once on one producer, across real processes: 3,000 concurrent streams
all complete; past ``--max-streams`` the servicer refuses ``stream_limit``; past
``--max-pending`` gRPC drops a request before the servicer sees it (a bare ``CANCELLED``),
which the consumer reports as ``producer_overloaded``, never as an unexplained error.

No time is asserted: these tests count outcomes (the bench measures the rates)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from replywire.consumer.client import ReplyClient, stream_reply
from replywire.consumer.options import StreamOptions
from replywire.producer.settings import DEFAULT_MAX_STREAMS
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest
from tests.processes import producer
from tests.producer_records import finals, stopped_record
from tests.runs import UTF8_CASE as CASE
from tests.runs import quiet


def outcome(result: dict[str, object]) -> tuple[object, object]:
    return result["status"], result["reason"]


async def on_clients(
    target: str, recording: Recording, streams: int, clients: int
) -> list[dict[str, object]]:
    """``streams`` streams at once, spread over ``clients`` ReplyClients (one connection
    each); their result documents."""
    case = recording.case(CASE)
    log = quiet()
    options = StreamOptions(target=target, deadline_s=110.0)

    async def one(client: ReplyClient, index: int) -> dict[str, object]:
        request = ReplyRequest(case_id=CASE, binding=case.binding, stream_id=f"many-{index}")
        return (await client.stream(request, logger=log)).to_dict()

    kept = [ReplyClient(options) for _ in range(clients)]
    try:
        return list(await asyncio.gather(*(one(kept[i % clients], i) for i in range(streams))))
    finally:
        for client in kept:
            await client.close()


# A load, not a path: its processes are not measured (tests/conftest.py).
@pytest.mark.no_cover
@pytest.mark.timeout(240)
def test_3000_concurrent_streams_on_one_producer_all_complete(
    tmp_path: Path, recording: Recording
) -> None:
    streams = 3000
    assert streams < DEFAULT_MAX_STREAMS  # the producer's defaults serve them all
    with producer(tmp_path) as p:
        results = asyncio.run(on_clients(p.target, recording, streams, clients=10))
        stopped = stopped_record(p)
    assert Counter(map(outcome, results)) == {("complete", None): streams}
    assert (stopped["streams_opened"], stopped["streams_completed"]) == (streams, streams)


def test_past_max_pending_the_consumer_says_producer_overloaded(
    tmp_path: Path, recording: Recording
) -> None:
    """A burst of 200 on their own connections at a producer that serves 3 and lets gRPC
    hold 2: every stream completes, is refused stream_limit by the servicer, or is dropped
    by gRPC and named producer_overloaded; the producer's trace has exactly the first two."""
    burst = 200
    case = recording.case(CASE)

    async def one(target: str, index: int) -> dict[str, object]:
        request = ReplyRequest(case_id=CASE, binding=case.binding, stream_id=f"burst-{index}")
        options = StreamOptions(target=target, deadline_s=60.0)
        return (await stream_reply(request, options, logger=quiet())).to_dict()

    async def all_at_once(target: str) -> list[dict[str, object]]:
        return list(await asyncio.gather(*(one(target, i) for i in range(burst))))

    with producer(tmp_path, "--max-streams", "3", "--max-pending", "2") as p:
        results = asyncio.run(all_at_once(p.target))
        stopped = stopped_record(p)
        # Read once the producer has stopped: a stream's final record is written at the end
        # of the event-loop pass that logged it, which may come after gRPC sent the stream's
        # status (the consumer's result); the stopped record comes after all of them.
        ended = finals(p)
    outcomes = Counter(map(outcome, results))
    assert set(outcomes) <= {
        ("complete", None),
        ("refused", "stream_limit"),
        ("refused", "producer_overloaded"),
    }, outcomes
    assert sum(outcomes.values()) == burst
    assert outcomes["refused", "producer_overloaded"] > 0
    overloaded = [r for r in results if r["reason"] == "producer_overloaded"]
    assert {(r["transport"]["grpc_code"], r["transport"]["grpc_details"]) for r in overloaded} == {  # type: ignore[index]
        ("CANCELLED", "CANCELLED")
    }
    # The servicer saw every other stream, and only those.
    seen = burst - outcomes["refused", "producer_overloaded"]
    assert stopped["streams_opened"] == len(ended) == seen
    assert Counter(r["to_state"] for r in ended.values()) == Counter(
        completed=outcomes["complete", None], refused=outcomes["refused", "stream_limit"]
    )
