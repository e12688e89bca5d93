"""The layering, read from the source: what each layer may import directly.

``shared/`` and the pure Gemini protocol modules are sans-IO: they import nothing
that reaches the network, files, processes, threads or the clock (``shared.pb``'s
generated messages are data; its ``_grpc`` stubs are not, and only the edges
import them). ``shared/`` imports neither process nor ``runtime/`` (the I/O both
processes share); ``runtime/`` imports neither process; the two processes do not
import each other. Only direct imports are checked: a library
such as structlog may import asyncio itself without making its caller do I/O.

Above both processes, ``traces/`` (both sides' traces as one timeline) imports of the
processes only their machine specs (``producer.states``, ``consumer.reader_states``): the
timeline reads the state names from the machines themselves, so it cannot live in
``shared/`` or in one process. Its timeline and drawing are pure, like ``shared/``.
Neither process imports it.

``replywire/`` is the one import namespace (``replywire.shared`` is ``shared/``): the layers
below are named here by their folders. Its own modules (the commands, the demo, children)
sit on top: they may import every other package, and none imports them, so no process
reaches up for a command; only a process's ``__main__.py`` (``python -m producer`` in the
repository) calls its command in ``replywire.commands``.

``harness/`` (the fake Gemini server, the OTLP collector the tests use) may import them all.

``conformance/`` (the conformance kit) sits above both processes too, like ``harness/``,
but runs them only as commands (a consumer under test, the producer's ``--conformance``
mode): it imports ``shared/`` and ``runtime/`` alone, and nothing imports it. The vector
file's one form, which the producer's conformance mode also reads, is ``shared/vectors.py``
(pure: bytes in).

``native/`` picks which build of the hot modules is imported, compiled by mypyc or pure: the
``__init__`` of ``shared``, ``shared.wire`` and ``runtime`` call it, so it imports nothing of
the project. It reads files (its manifest, the sources' digests), as an import hook does,
never a stream's bytes.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[2]
#: The folders that are packages of the namespace (``replywire.shared`` is ``shared/``).
LINKED: Final = ("shared", "runtime", "producer", "consumer", "traces", "native")
#: Modules that reach the network, files, processes, threads or the clock (and gRPC's).
IO_MODULES: Final = frozenset(
    {
        "grpc", "grpc_health", "grpc_reflection", "asyncio", "httpx", "httpcore", "anyio",
        "socket", "ssl", "select", "selectors", "subprocess", "threading", "multiprocessing",
        "signal", "os", "io", "pathlib", "tempfile", "shutil", "fcntl", "time", "datetime",
        "logging", "sys", "runtime", "prometheus_client", "opentelemetry",
    }
)  # fmt: skip
PURE_PROVIDER_MODULES: Final = (
    "producer/sources/gemini/chat.py",
    "producer/sources/gemini/codes.py",
    "producer/sources/gemini/protocol.py",
    "producer/sources/gemini/settings.py",
    "producer/sources/gemini/sse.py",
)
PURE_TRACE_MODULES: Final = tuple(
    f"traces/{name}.py" for name in ("timeline", "table", "result_events", "svg", "page")
)
#: What traces/ may import of the processes: their machine specs (data).
MACHINE_SPECS: Final = ("producer.states", "consumer.reader_states")
#: The packages no other package imports: the conformance kit, and the command line on top.
NOTHING_IMPORTS: Final = ("conformance", "replywire")


def sources(folder: str) -> list[Path]:
    return sorted(
        path
        for path in (ROOT / folder).rglob("*.py")
        if "pb" not in path.relative_to(ROOT).parts[:2] and path.name != "__main__.py"
    )


def layer_name(module: str) -> str:
    """``replywire.shared.frames`` is ``shared.frames``; ``replywire.cli`` stays."""
    head, _, rest = module.partition(".")
    if head == "replywire" and rest.split(".")[0] in LINKED:
        return rest
    return module


def imports(path: Path) -> Iterator[str]:
    """Every module ``path`` imports, with ``from a import b`` also as ``a.b``."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (layer_name(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield layer_name(node.module)
            yield from (layer_name(f"{node.module}.{alias.name}") for alias in node.names)


def names(paths: list[Path]) -> list[str]:
    return [str(path.relative_to(ROOT)) for path in paths]


#: The producer's decisions, pure: where a delivery's frames come from.
PURE_DECISION_MODULES: Final = ("producer/delivery_plan.py",)
PURE: Final = sources("shared") + [
    ROOT / module
    for module in (*PURE_PROVIDER_MODULES, *PURE_TRACE_MODULES, *PURE_DECISION_MODULES)
]


@pytest.mark.parametrize("path", PURE, ids=names(PURE))
def test_pure_modules_import_no_io(path: Path) -> None:
    found = {
        module
        for module in imports(path)
        if module.split(".")[0] in IO_MODULES or module.endswith("_pb2_grpc")
    }
    assert not found


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        ("shared", ("producer", "consumer", "runtime", "traces", "harness", *NOTHING_IMPORTS)),
        ("runtime", ("producer", "consumer", "traces", "harness", *NOTHING_IMPORTS)),
        ("producer", ("consumer", "traces", "harness", *NOTHING_IMPORTS)),
        ("consumer", ("producer", "traces", "harness", *NOTHING_IMPORTS)),
        ("traces", ("harness", *NOTHING_IMPORTS)),
        ("harness", NOTHING_IMPORTS),
        ("conformance", ("producer", "consumer", "traces", "harness", "replywire")),
        (
            "native",
            ("shared", "runtime", "producer", "consumer", "traces", "harness", *NOTHING_IMPORTS),
        ),
    ],
)
def test_no_layer_imports_sideways_or_up(folder: str, forbidden: tuple[str, ...]) -> None:
    found = {
        (str(path.relative_to(ROOT)), module)
        for path in sources(folder)
        for module in imports(path)
        if module.split(".")[0] in forbidden
    }
    assert not found


def test_the_traces_import_only_the_machine_specs_of_the_processes() -> None:
    found = {
        (str(path.relative_to(ROOT)), module)
        for path in sources("traces")
        for module in imports(path)
        if module.split(".")[0] in ("producer", "consumer")
        and not any(module == spec or module.startswith(spec + ".") for spec in MACHINE_SPECS)
    }
    assert not found


@pytest.mark.parametrize("module", PURE_PROVIDER_MODULES)
def test_the_pure_provider_modules_use_only_each_other(module: str) -> None:
    allowed = {
        "producer.sources.gemini.codes",
        "producer.sources.gemini.protocol",
        "producer.sources.gemini.sse",
    }
    found = {
        name
        for name in imports(ROOT / module)
        if name.split(".")[0] == "producer"
        and not any(name == pure or name.startswith(pure + ".") for pure in allowed)
    }
    assert not found
