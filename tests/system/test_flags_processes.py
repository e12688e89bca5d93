"""The flag tables (``runtime.flags``): each validator at and past its edges, every flag
argparse knows in the generated documentation table (none hidden, none stale), every
producer flag's environment variable (a flag on the command line wins), and usage errors
that stay one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_usage_error_from_the_environment_is_exit_2_without_a_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "replywire.producer"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "REPLYWIRE_MAX_STREAMS": "0", "REPLYWIRE_PORT": "0"},
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "python -m producer: error: argument --max-streams: must be at least 1: 0 "
        "(try python -m producer --help)"
    )
    assert "Traceback" not in done.stderr
