"""What a process loads when it starts, read from a fresh interpreter: each module a start
imports is time every process pays (the tests start hundreds), and what the pure core loads
says whether it is pure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]


def test_a_producer_start_imports_neither_redis_nor_opentelemetry() -> None:
    """What a producer imports to start (``-X importtime`` lists every module): the Redis
    client only when a Redis is named (--reply-log, --ledger), OpenTelemetry only with
    tracing on. Each is a tenth of a second of every start, and the tests start hundreds."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "replywire.producer", "--version"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "replywire.producer.cli" in imported
    roots = {name.split(".")[0] for name in imported}
    assert not roots & {"redis", "opentelemetry"}, sorted(roots & {"redis", "opentelemetry"})


#: What importing the whole sans-IO core may load beyond the standard library's pure
#: modules: the project's own ``shared``, ``native`` (which picks the build), and the
#: protobuf runtime behind ``shared.pb``'s generated messages (data). The project's packages
#: are named within ``replywire`` (``replywire.shared`` is ``shared``).
CORE_MAY_LOAD: Final = frozenset({"shared", "native", "google"})
#: What it must not load: a logging library (the core takes a logger of its own protocol,
#: ``shared.trace_logger``), the clock's, the network's or a process's modules.
CORE_MUST_NOT_LOAD: Final = frozenset(
    {"structlog", "rich", "pygments", "logging", "asyncio", "grpc", "orjson", "redis", "httpx"}
)


def test_importing_the_core_loads_no_logging_library_and_no_io() -> None:
    """Every module of ``shared/`` (but ``shared.pb``'s gRPC stubs, which only the edges
    import) imported in a fresh interpreter: the third-party and
    project packages it loaded are only those listed, and none that writes or waits."""
    script = (
        "import sys, pkgutil, importlib, replywire.shared as shared\n"
        "for m in pkgutil.walk_packages(shared.__path__, 'replywire.shared.'):\n"
        "    if not m.name.endswith('_pb2_grpc'):\n"
        "        importlib.import_module(m.name)\n"
        "names = [n.removeprefix('replywire.') for n in sys.modules if n != 'replywire']\n"
        "print('\\n'.join(sorted({name.split('.')[0] for name in names})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    roots = set(done.stdout.split())
    assert not roots & CORE_MUST_NOT_LOAD, sorted(roots & CORE_MUST_NOT_LOAD)
    third_party = {
        root for root in roots
        if root not in sys.stdlib_module_names and not root.startswith("_")
    }  # fmt: skip
    assert third_party <= CORE_MAY_LOAD, sorted(third_party - CORE_MAY_LOAD)
