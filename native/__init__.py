"""Which build of the hot modules is imported: the mypyc-compiled one or the pure-Python one.

The hot modules (``HOT_MODULES``: the wire decoders and encoders, the consumer core and its
checks) are plain, ``mypy --strict`` Python, and that source is the reference. ``make
setup`` also compiles them with mypyc (``python -m replywire.native.build``) when it finds a
C compiler and Python's headers, into ``.compiled/`` (git-ignored), never next to the ``.py``
files: ``.compiled/replywire/shared/fsm.cpython-311-x86_64-linux-gnu.so`` and so on, and the
group's shared runtime library ``.compiled/replywire/shared/native__mypyc.*.so`` that every
module's ``.so`` loads. An installed wheel carries no compiled build: it runs pure.

The packages that hold hot modules (``shared``, ``shared.wire``, ``runtime``) call
``package_path`` in their ``__init__``: it puts the compiled build's folder in front of the
package's ``__path__``, so the import system finds the compiled ``.so`` before the ``.py``.
It does that only when

* ``REPLYWIRE_PURE`` is not ``1`` (``REPLYWIRE_PURE=1`` forces the pure build), and
* ``.compiled/manifest.json`` says the build was made from the very sources on disk (their
  SHA-256) by this Python: a source changed since (and ``make setup`` not run) makes the
  whole build pure, never a mix of old compiled code and new source.

``running()`` says what was actually imported (a module's file ends in the extension suffix
or in ``.py``), which ``--version`` and the producer's start record report.

This package imports nothing of the project (everything else imports it, through the
packages' ``__init__``); it reads the manifest and the sources once per process.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Final

#: The modules compiled by mypyc, in the one group whose shared library is ``GROUP``. Left
#: pure, and why: docs/operations.md#the-compiled-build (``runtime.logs``,
#: ``shared.consumer_limits``).
HOT_MODULES: Final = (
    "replywire.shared.digest",
    "replywire.shared.frames",
    "replywire.shared.reply",
    "replywire.shared.fsm",
    "replywire.shared.consumer_content",
    "replywire.shared.frame_checks",
    "replywire.shared.chat_turn",
    "replywire.shared.consumer_machine",
    "replywire.shared.consumer_core",
    "replywire.shared.wire.base",
    "replywire.shared.wire.buffer",
    "replywire.shared.wire.lp",
    "replywire.shared.wire.ndjson",
)
#: mypyc's group name: its shared library is the module ``shared.native__mypyc``.
GROUP: Final = "replywire.shared.native"
#: The folder that holds the packages: in the repository its root (``replywire/shared`` is a
#: link to ``shared/``), once installed the ``replywire`` package itself.
ROOT: Final = Path(__file__).resolve().parents[1]
BUILD_DIR: Final = ROOT / ".compiled"
MANIFEST: Final = BUILD_DIR / "manifest.json"
PURE_ENV: Final = "REPLYWIRE_PURE"
#: This interpreter's suffix of extension modules (``.cpython-311-x86_64-linux-gnu.so``).
EXTENSION_SUFFIX: Final = importlib.machinery.EXTENSION_SUFFIXES[0]
#: Whether these packages run from the repository (its ``Makefile`` beside them) or are
#: installed: what a command prints names the command as it runs (``runtime.invocation``),
#: and a compiled build comes from ``make setup``, in the repository only.
IN_REPOSITORY: Final = (ROOT / "Makefile").is_file()
NO_BUILD_HINT: Final = ": make setup makes one" if IN_REPOSITORY else ""


@dataclass(frozen=True)
class Selection:
    """The build the packages' ``__path__`` points at, and why."""

    compiled: bool
    why: str


def source_of(module: str) -> Path:
    """A hot module's source: ``replywire.shared.frames`` is ``shared/frames.py`` under ``ROOT``."""
    return ROOT.joinpath(*module.split(".")[1:]).with_suffix(".py")


def sources_digest() -> dict[str, str]:
    """Each hot module's source, by SHA-256: what the manifest of a fresh build holds."""
    return {
        module: hashlib.sha256(source_of(module).read_bytes()).hexdigest() for module in HOT_MODULES
    }


def manifest_for(digests: dict[str, str]) -> dict[str, object]:
    return {"extension_suffix": EXTENSION_SUFFIX, "modules": digests}


@cache
def selected() -> Selection:
    """The compiled build when it exists, is fresh and is not refused; else the pure one."""
    if os.environ.get(PURE_ENV) == "1":
        return Selection(compiled=False, why=f"{PURE_ENV}=1")
    try:
        manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return Selection(compiled=False, why=f"no compiled build{NO_BUILD_HINT}")
    if manifest != manifest_for(sources_digest()):
        return Selection(compiled=False, why="the compiled build is stale: make setup rebuilds it")
    return Selection(compiled=True, why="")


def package_path(path: list[str], package: str) -> list[str]:
    """``path`` (a package's ``__path__``) with the compiled build's folder first when the
    compiled build is selected."""
    if not selected().compiled:
        return path
    return [str(BUILD_DIR.joinpath(*package.split("."))), *path]


@dataclass(frozen=True)
class Running:
    """What the hot modules were imported from."""

    compiled: tuple[str, ...]
    pure: tuple[str, ...]
    why: str

    @property
    def build(self) -> str:
        """``compiled`` (every hot module), ``pure`` (none) or ``mixed``."""
        if not self.compiled:
            return "pure"
        return "compiled" if not self.pure else "mixed"

    def describe(self) -> str:
        """One line: the build, and which modules (or why pure), named within ``replywire``."""
        if self.build == "pure":
            return f"pure ({self.why})" if self.why else "pure"
        compiled, pure = _short(self.compiled), _short(self.pure)
        if self.build == "compiled":
            return f"compiled (mypyc: {compiled})"
        return f"mixed (compiled: {compiled}; pure: {pure})"

    def as_record(self) -> dict[str, object]:
        """The start record's fields: the build (which modules: ``--version``)."""
        return {"build": self.build}


def _short(modules: tuple[str, ...]) -> str:
    return ", ".join(module.removeprefix("replywire.") for module in modules)


def is_compiled(module: str) -> bool:
    origin = getattr(importlib.import_module(module), "__file__", None) or ""
    return origin.endswith(EXTENSION_SUFFIX)


def running() -> Running:
    """The hot modules as imported in this process (imports them)."""
    compiled = tuple(module for module in HOT_MODULES if is_compiled(module))
    pure = tuple(module for module in HOT_MODULES if module not in compiled)
    return Running(compiled=compiled, pure=pure, why=selected().why)


def version_line() -> str:
    """``--version``'s line: the project's version and the build of its hot modules."""
    import importlib.metadata  # noqa: PLC0415 - 27 ms of every start, for --version alone

    try:
        version = importlib.metadata.version("replywire")
    except importlib.metadata.PackageNotFoundError:  # the source tree, not installed
        version = "unknown"
    return f"replywire {version}, {running().describe()}"
