"""A peer with no token cannot write into the producer's trace beyond the stated bounds.

Raw HTTP/2 requests (``bench.peer_headers``), each with a header whose value is not
UTF-8 (gRPC logs such a value whole, twice, before the servicer sees the request), of 1
KiB, 64 KiB and 256 KiB, and a burst of 300, against a real producer that requires a
token, its trace in a file: the trace's bytes per request are bounded by
``runtime.library_logs``' bounds, whatever the header's size. A header gRPC refuses on
its own (a metadata bound) is measured the same way: no record may be unbounded either.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.peer_headers import CASES, LIFECYCLE, Measured, measure
from replywire.runtime.library_logs import (
    FOREIGN_LOG_EVENT,
    RECORD_FRAME_BYTES,
    SUPPRESSED_EVENT,
    LibraryLogBounds,
)
from replywire.shared.errors import MAX_DETAIL_CHARS
from tests.processes import ROOT

pytestmark = pytest.mark.timeout(180)

#: One record of each kind a window, and no window ends during a test: the bound below
#: then holds for any number of requests. Set through the environment, which a producer
#: without these flags ignores (so the test runs, and fails, on one without the bounds).
BOUNDS = LibraryLogBounds(burst=1, interval_s=3600.0)
ENV = {
    "REPLYWIRE_LIBRARY_LOG_BURST": str(BOUNDS.burst),
    "REPLYWIRE_LIBRARY_LOG_INTERVAL_S": str(BOUNDS.interval_s),
}
#: The kinds of library record one such request makes: gRPC's ``Invalid encoding on %s``.
KINDS = 1
#: ``request_unauthenticated``: the peer's address (a scrubbed detail) and the frame.
UNAUTHENTICATED_BYTES = 4 * MAX_DETAIL_CHARS + RECORD_FRAME_BYTES


def bound(requests: int) -> int:
    """The most trace bytes ``requests`` such requests may cost: a refusal record each,
    and per kind ``burst`` library records and one that tells what was suppressed."""
    library = KINDS * (BOUNDS.burst + 1) * BOUNDS.max_record_bytes
    return requests * UNAUTHENTICATED_BYTES + library


@pytest.mark.parametrize(("case", "size", "requests"), CASES, ids=[case[0] for case in CASES])
def test_trace_bytes_per_request_are_bounded_whatever_the_header(
    case: str, size: int, requests: int
) -> None:
    measured = measure(case, size, requests, env=ENV)
    print(json.dumps(measured.report()))  # the figures (pytest -s)
    # Every request was answered: by the servicer (invalid_token), or by gRPC itself (a
    # refusal of its own, a GOAWAY or a closed connection, e.g. past a metadata bound).
    ended = measured.ended
    assert ended["unanswered"] == 0 or ended["goaway"] or ended["closed"], ended
    assert measured.trace_bytes <= bound(requests), measured.report()
    assert_records_bounded(measured)
    assert_counts_add_up(measured)


def assert_records_bounded(measured: Measured) -> None:
    for line in measured.lines:
        record = json.loads(line)
        if record["event"] in (FOREIGN_LOG_EVENT, SUPPRESSED_EVENT):
            assert len(line) <= BOUNDS.max_record_bytes, record
        else:
            assert len(line) <= UNAUTHENTICATED_BYTES, record


def assert_counts_add_up(measured: Measured) -> None:
    stopped = measured.stopped
    records = [json.loads(line) for line in measured.lines]
    library = [r for r in records if r["event"] in (FOREIGN_LOG_EVENT, SUPPRESSED_EVENT)]
    written = sum(r["event"] == FOREIGN_LOG_EVENT for r in records)
    assert stopped["library_logs_written"] == written
    assert stopped["library_logs_suppressed"] == sum(r.get("suppressed", 0) for r in library)
    assert written <= KINDS * BOUNDS.burst
    refused = sum(r["event"] == "request_unauthenticated" for r in records)
    assert stopped["requests_unauthenticated"] == refused
    if refused:  # the servicer saw these requests: gRPC logged each header first
        assert stopped["library_logs_written"] + stopped["library_logs_suppressed"] >= refused


def test_the_command_prints_each_case() -> None:
    """``.venv/bin/python -m bench.peer_headers`` (docs/security.md), with the default
    bounds: one JSON report, a case each, every request's records counted."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.peer_headers"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
        check=True,
    )
    report = json.loads(done.stdout)
    assert [entry["case"] for entry in report] == [case for case, _, _ in CASES]
    defaults = LibraryLogBounds()
    for entry, (_, size, requests) in zip(report, CASES, strict=True):
        assert (entry["header_bytes"], entry["requests"]) == (size, requests)
        assert not set(entry["records"]) & LIFECYCLE
        library = KINDS * (defaults.burst + 1) * defaults.max_record_bytes
        assert entry["trace_bytes"] <= requests * UNAUTHENTICATED_BYTES + library, entry
