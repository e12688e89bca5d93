"""``make bench``'s pass of the pure build: the same sides, the hot modules not compiled.

    REPLYWIRE_PURE=1 BENCH_SIZE=tiny|full .venv/bin/python -m bench.pure --out FILE

``python -m bench`` runs this as a child process with ``REPLYWIRE_PURE=1`` in its
environment when the build it runs is the compiled one, so the child and every server and
client it starts import the pure build; it writes, as JSON into ``FILE``: the build it ran
(``native.running().describe()``), ``bench.streams``' sequential section (every chunking,
all five sides) and its middle concurrency row (1,000 streams at the full size), and
``bench.paced`` at its plan's middle N (1,000 at the full size), every side but the SSE
stack (the same code in either build), the plan's rounds, no search for the largest N.
``bench.report`` sets them beside the compiled run's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import paced, streams
from bench.common import Size, bench_size
from replywire.native import PURE_ENV, running

#: The pure pass's bound: a stuck pass fails ``make bench`` instead of hanging it.
TIMEOUT_S = {"tiny": 300.0, "full": 3600.0}


def run(size: Size) -> dict[str, Any]:
    started = time.time()
    out: dict[str, Any] = {"build": running().describe()}
    out["streams"] = streams.pure_pass(size)
    out["paced"] = paced.pure_pass(size)
    out["duration_s"] = round(time.time() - started, 1)
    return out


def pure_pass(size: Size, out: Path) -> dict[str, Any]:
    """``make bench``'s second pass: this module as a child with ``REPLYWIRE_PURE=1``, when
    the running build is the compiled one; else why not (``skipped``)."""
    build = running()
    if build.build != "compiled":
        return {"skipped": f"compiled build not available: {build.describe()}"}
    environment = {**os.environ, PURE_ENV: "1", "BENCH_SIZE": size}
    subprocess.run(
        [sys.executable, "-m", "bench.pure", "--out", str(out)],
        env=environment,
        timeout=TIMEOUT_S[size],
        check=True,
    )
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.write_text(json.dumps(run(bench_size()), indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
