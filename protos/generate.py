"""Generates the Python code of ``protos/shared/pb/replywire.proto``: ``shared/pb/``'s
``replywire_pb2.py`` and ``replywire_pb2_grpc.py``, with mypy-protobuf's ``.pyi`` stubs when
its plugins are there. ``make setup`` runs it into the repository; a build of the
distribution (``setup.py``) into the wheel's tree, so that ``pip install`` of a clean clone or
of the sdist has the generated code that is never committed.

``protoc -Iprotos`` names the file ``shared/pb/replywire.proto`` and so writes
``from shared.pb import replywire_pb2`` into the ``_grpc`` module; the packages are imported as
``replywire.shared...`` (one namespace: docs/operations.md#installing-replywire), so that
import, the stub's and the generated module's own name are rewritten to it, each checked to
occur exactly once. It imports nothing but the standard library and grpcio-tools: the build
runs it with nothing of replywire's dependencies installed.

Usage: ``python protos/generate.py OUT`` (OUT holds ``shared/pb/``; ``.`` in the repository).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

PROTOS = Path(__file__).resolve().parent
PROTO = "shared/pb/replywire.proto"
#: (generated file, text protoc writes, what it becomes): each must occur exactly once.
RENAMES = (
    (
        "replywire_pb2_grpc.py",
        "from shared.pb import replywire_pb2 as",
        "from replywire.shared.pb import replywire_pb2 as",
    ),
    ("replywire_pb2.py", "'shared.pb.replywire_pb2'", "'replywire.shared.pb.replywire_pb2'"),
    (
        "replywire_pb2_grpc.pyi",
        "from shared.pb import replywire_pb2 as",
        "from replywire.shared.pb import replywire_pb2 as",
    ),
)


def plugins() -> list[str]:
    """protoc's arguments for mypy-protobuf's two plugins, or none when they are not here."""
    found = [
        (name, shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name))
        for name in ("protoc-gen-mypy", "protoc-gen-mypy_grpc")
    ]
    if not all(path for _, path in found):
        return []
    return [f"--plugin={name}={path}" for name, path in found] + [
        f"--{name.removeprefix('protoc-gen-')}_out=." for name, _ in found
    ]


def generate(out: Path) -> list[Path]:
    """The generated files, written under ``out`` and renamed; raises when protoc fails."""
    from grpc_tools import protoc  # type: ignore[import-untyped]  # noqa: PLC0415 - build only

    out.mkdir(parents=True, exist_ok=True)
    include = Path(protoc.__file__).parent / "_proto"  # the well-known types
    arguments = [f"-I{PROTOS}", f"-I{include}", "--python_out=.", "--grpc_python_out=."]
    arguments += plugins()
    arguments = [a.replace("_out=.", f"_out={out}") for a in arguments]
    if protoc.main(["protoc", *arguments, str(PROTOS / PROTO)]) != 0:
        raise SystemExit(f"protoc failed on {PROTOS / PROTO}")
    package = out / "shared" / "pb"
    written = []
    for name, before, after in RENAMES:
        path = package / name
        if not path.exists():  # a stub without mypy-protobuf
            continue
        text = path.read_text(encoding="utf-8")
        if text.count(before) != 1:
            raise SystemExit(f"{path}: expected {before!r} once, found {text.count(before)}")
        path.write_text(text.replace(before, after), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.rsplit("Usage: ", 1)[1].strip(), file=sys.stderr)
        return 2
    generate(Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
