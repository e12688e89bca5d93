"""``python -m conformance.generate``: write the conformance vectors (``--check``: compare).

The vectors come from three places: the recording (every development case on every wire
and several chunkings), the fault catalogue (``shared.faults``) at every parameter edge,
and wires crafted byte by byte (``conformance.groups``). Each vector's ``expected`` is the
Python core's verdict (``conformance.vectors.core_result``). Nothing here is random and
nothing depends on the clock: the same tree writes the same bytes, which a unit test checks
against the committed files. After the core changes, this one command regenerates them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from conformance.groups import GROUPS, build_groups
from conformance.vectors import VECTORS_DIR
from replywire.shared.vectors import Vector, dump_vectors


def rendered(groups: dict[str, list[Vector]]) -> dict[str, bytes]:
    """Each group's file name and bytes."""
    return {
        f"{name}.json": dump_vectors(name, GROUPS[name], vectors)
        for name, vectors in groups.items()
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance.generate",
        description="Write the conformance vectors from the recording, the fault catalogue and "
        "crafted wires, each with the Python core's verdict.",
    )
    parser.add_argument("--out", type=Path, default=VECTORS_DIR, help="the vectors' folder")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file would change"
    )
    args = parser.parse_args(argv)
    groups = build_groups()
    files = rendered(groups)
    out: Path = args.out
    stale = (
        sorted(path.name for path in out.glob("*.json") if path.name not in files)
        if out.is_dir()
        else []
    )
    changed = [
        name
        for name, data in files.items()
        if not (out / name).is_file() or (out / name).read_bytes() != data
    ]
    total = sum(len(vectors) for vectors in groups.values())
    if args.check:
        for name in changed + stale:
            print(f"conformance: {out / name} is not what the generator writes", file=sys.stderr)
        return 1 if changed or stale else 0
    out.mkdir(parents=True, exist_ok=True)
    for name in stale:
        (out / name).unlink()
    for name in changed:
        (out / name).write_bytes(files[name])
    print(f"{total} vectors in {len(files)} files under {out} ({len(changed)} rewritten)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
