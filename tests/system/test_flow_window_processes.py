"""A paused consumer holds its stream to ``--window-bytes``, counted on the wire.

A counting HTTP/2 proxy (bench/window_proxy.py) sits between a real producer process
and a consumer that takes one chunk and stops (queue 1): it reads the window the
consumer announces, every WINDOW_UPDATE it returns, and the DATA bytes the producer
sends. gRPC returns a paused stream's window once more after the reader's last read
(consumer/channels.py ``announced_window``); the consumer announces half the window, so
the producer gets at most the window past the chunks the consumer has read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from bench import memory
from bench.window_proxy import StreamWindow
from replywire.consumer.channels import announced_window
from tests.gemini_runs import HOLD_S
from tests.processes import Producer, producer


@pytest.fixture(scope="module")
def debug_producer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Producer]:
    with producer(tmp_path_factory.mktemp("flow"), "--log-level", "debug") as p:
        yield p


@pytest.mark.parametrize("window", [1024, 4096])
def test_a_paused_consumer_holds_the_producer_to_the_window(
    debug_producer: Producer, window: int
) -> None:
    measured = asyncio.run(
        memory.paused_stream(debug_producer.port, window, HOLD_S, debug_producer.trace_path)
    )
    per_chunk = memory.PER_CHUNK  # 8: gRPC's 5-byte message header and a 3-byte Chunk
    read = memory.QUEUE + memory.HELD  # the queue, the reader's chunk, the one applied
    paused: StreamWindow = measured["paused"]["wire"]
    end: StreamWindow = measured["end"]["wire"]
    # The consumer announced half the window (its SETTINGS, on the wire).
    assert measured["announced"] == announced_window(window) == window // 2
    # Paused: the producer used every byte of window it was given, and the consumer
    # returned some (at least the chunks it read) in WINDOW_UPDATEs, at most the rest.
    assert measured["paused"]["blocked"] is True
    assert paused.data_bytes == measured["announced"] + paused.returned
    assert read * per_chunk <= paused.returned <= measured["announced"] + read * per_chunk
    # The producer's count is what went on the wire: its transport holds no counted
    # chunk back (a partial message at the end is not a sent chunk).
    assert measured["paused"]["chunks"] == paused.data_bytes // per_chunk
    assert measured["end"]["chunks"] == end.data_bytes // per_chunk
    # The bound, while paused and after the consumer stopped (its Cancel is a write).
    bound = window // per_chunk + read
    assert memory.bound(measured["announced"])["chunks"] == bound
    assert measured["paused"]["chunks"] <= bound
    assert measured["end"]["chunks"] <= bound
    assert end.data_bytes <= window + read * per_chunk
    assert measured["consumer_ended"] == "incomplete:consumer_cancelled"
