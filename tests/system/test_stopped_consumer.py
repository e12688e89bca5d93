"""A consumer stopped (SIGSTOP) while it holds a stream: its process answers nothing, its
kernel still keeps the TCP connection open. The producer's keepalive lets it go: a ping
after ``--keepalive-s`` of silence, unanswered within ``--keepalive-timeout-s``, closes
the connection, and the stream ends ``cancelled_by_consumer`` / ``consumer_cancelled``.

gRPC 1.85 waited for a keepalive ping's answer its general ping timeout (1 minute), not
the keepalive timeout: the stream was let go 20 + 60 s after the stop, not 20 + 10. The
test uses a 1 s keepalive and 1 s timeout; the delay it measures is printed (``-s``),
never asserted (docs/operations.md#limits has the figures).
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.processes import consumer_process, producer, wait_for
from tests.producer_records import finals

pytestmark = pytest.mark.timeout(120)


def record_time(record: dict[str, Any]) -> float:
    return datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00")).timestamp()


def stalled(trace_path: Path) -> dict[str, Any] | None:
    for line in trace_path.read_text().splitlines():
        record = json.loads(line)
        if record.get("to_state") == "stalled":
            return record
    return None


@pytest.mark.parametrize("stop_after_s", [0.5, 4.0], ids=["early", "after-pings"])
def test_a_stopped_consumer_is_let_go_by_the_keepalive(tmp_path: Path, stop_after_s: float) -> None:
    """Stopped early in a stall, and later, once the producer has pinged it a few times
    while it answered (gRPC stopped pinging after 2 pings without data by default)."""
    with producer(
        tmp_path, "--allow-faults", "--keepalive-s", "1", "--keepalive-timeout-s", "1"
    ) as p:
        target = f"127.0.0.1:{p.port}"
        args = ("--case", "replace-file", "--fault", "stall", "--stall-ms", "100000",
                "--deadline-s", "200", "--idle-timeout-s", "200")  # fmt: skip
        with consumer_process(tmp_path, target, *args) as consumer:
            wait_for(lambda: stalled(p.trace_path) is not None, timeout=30)
            time.sleep(stop_after_s)
            os.kill(consumer.pid, signal.SIGSTOP)
            stopped_at = time.time()
            try:
                wait_for(lambda: len(finals(p)) == 1, timeout=60)
            finally:
                os.kill(consumer.pid, signal.SIGCONT)
        ((stream_id, final),) = finals(p).items()
    assert (final["from_state"], final["to_state"]) == ("stalled", "cancelled_by_consumer")
    assert (final["input"], final["reason"]) == ("consumer_cancelled", "consumer_cancelled")
    print(
        f"stream {stream_id}: let go {record_time(final) - stopped_at:.1f} s after SIGSTOP "
        "(keepalive 1 s + timeout 1 s)"
    )
