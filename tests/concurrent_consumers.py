"""``python -m tests.concurrent_consumers --target T [--target T2] --count N``: N consumers at
once in one process (:func:`tests.processes.concurrent_replies`, spread over the targets),
so that many can run on another test host (``ip netns exec HOST ...``, tests/netns.py)
without one process each. Prints their result documents, in order, as one JSON list."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from replywire.runtime.recording_file import load_recording
from tests.processes import concurrent_replies


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.concurrent_consumers")
    parser.add_argument("--target", action="append", required=True, help="a producer (repeat)")
    parser.add_argument("--count", type=int, required=True, help="consumers at once")
    parser.add_argument("--case", default="replace-file", help="the development case")
    parser.add_argument("--stream-prefix", default="stream-", help="stream ids: PREFIX0, ...")
    parser.add_argument("--deadline-s", type=float, default=60.0, help="each one's deadline")
    args = parser.parse_args(argv)
    ids = [f"{args.stream_prefix}{index}" for index in range(args.count)]
    results = concurrent_replies(
        args.target, load_recording(), args.case, ids, deadline_s=args.deadline_s
    )
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
