"""``python -m replywire.native.build``: compile the hot modules with mypyc into
``.compiled/`` (what ``make setup`` runs), or say why the pure build stays.

It compiles when a C compiler (``cc``, or ``$CC``) and Python's headers (``Python.h``) are
there and ``REPLYWIRE_PURE`` is not ``1``; otherwise it says so and exits 0: the pure build
runs. A build whose manifest matches the sources is not made again. The C sources and object
files go to ``.compiled/build/``; the extension modules to ``.compiled/<package>/``; the
manifest (the sources' SHA-256, the interpreter's extension suffix) is written last, so a
build that failed half-way is never selected.

``--check`` exits 1 when a compiler and headers are there but no fresh build is (what CI
asserts after ``make setup``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import sysconfig
import time
from pathlib import Path

from replywire.native import (
    BUILD_DIR,
    GROUP,
    HOT_MODULES,
    MANIFEST,
    PURE_ENV,
    ROOT,
    manifest_for,
    sources_digest,
)


def missing_toolchain() -> str | None:
    """What lacks for compiling (None: a C compiler and Python's headers are there)."""
    compiler = os.environ.get("CC", "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler})"
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not headers.is_file():
        return f"no Python headers ({headers}; Debian: apt-get install python3-dev)"
    return None


def fresh() -> bool:
    try:
        manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(manifest == manifest_for(sources_digest()))


def compile_hot_modules() -> None:
    """mypyc over the hot modules, one group, built with setuptools into ``BUILD_DIR``."""
    from mypyc.build import mypycify  # noqa: PLC0415 (only when compiling)
    from setuptools import Distribution  # type: ignore[import-untyped]  # noqa: PLC0415

    MANIFEST.unlink(missing_ok=True)
    work = BUILD_DIR / "build"
    # The last build's modules go first: one no longer compiled would still be found in
    # front of its source, and fail to load from the new group's shared library.
    for previous in BUILD_DIR.glob("*"):
        if previous.is_dir() and previous != work:
            shutil.rmtree(previous)
        elif previous.is_file():
            previous.unlink()
    digests = sources_digest()
    os.chdir(ROOT)  # mypy reads pyproject.toml's [tool.mypy] from here
    extensions = mypycify(
        # by the package's links, so that mypyc names each module as it is imported
        [str(Path(*module.split(".")).with_suffix(".py")) for module in HOT_MODULES],
        target_dir=str(work / "c"),
        group_name=GROUP,
        opt_level="3",
    )
    distribution = Distribution({"name": "replywire-native", "ext_modules": extensions})
    build_ext = distribution.get_command_obj("build_ext")
    build_ext.build_lib = str(BUILD_DIR)
    build_ext.build_temp = str(work / "obj")
    build_ext.inplace = False
    distribution.run_command("build_ext")
    MANIFEST.write_text(json.dumps(manifest_for(digests), indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m replywire.native.build", description=__doc__)
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if a C compiler and headers are there but no fresh compiled build is",
    )
    args = parser.parse_args(argv)
    lacking = missing_toolchain()
    if args.check:
        if lacking is None and not fresh():
            print("native: a C compiler is here but the compiled build is missing or stale")
            return 1
        return 0
    if os.environ.get(PURE_ENV) == "1":
        print(f"setup: {PURE_ENV}=1: the hot modules are not compiled", file=sys.stderr)
        return 0
    if lacking is not None:
        print(f"setup: {lacking}: the pure-Python build runs", file=sys.stderr)
        return 0
    if fresh():
        return 0
    started = time.monotonic()
    print(f"setup: compiling {len(HOT_MODULES)} modules with mypyc", file=sys.stderr)
    compile_hot_modules()
    print(f"setup: compiled in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
