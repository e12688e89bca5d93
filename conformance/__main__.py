"""``python -m conformance``: run the conformance kit, write its vectors, or test its mutants.

* ``run --core COMMAND``: the core mode against a command speaking the line protocol;
* ``run --wire TEMPLATE``: the wire mode against a consumer CLI (``conformance.wire_mode``);
* ``generate [--check]``: the vectors (``conformance.generate``);
* ``mutants``: the core mode against every mutant of the Python core (each must fail).

``run`` prints a table per mode (by expected reason: vectors, passed, failed) and the
failures, and exits 0 only when every vector passed.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from conformance import core_mode, generate, wire_mode
from conformance.mutants import MUTANTS
from conformance.report import Report
from conformance.vectors import ROOT, VECTORS_DIR, load_all
from replywire.shared.vectors import Mode, Vector, VectorError


def smoke(vectors: Sequence[Vector]) -> list[Vector]:
    """The first vector of each wire and expected reason, and of each group and wire: every
    reason on every wire once, every group's requests (a text reply's too) once, in a
    fraction of the time."""
    seen: set[tuple[str, object]] = set()
    chosen = []
    for vector in vectors:
        if Mode.WIRE not in vector.modes:
            continue
        keys = {
            (vector.wire, vector.expected["reason"]),
            (vector.wire, "group:" + vector.id.split(".", 1)[0]),
        }
        if not keys <= seen:
            seen |= keys
            chosen.append(vector)
    return chosen


def _selected(args: argparse.Namespace) -> list[Vector]:
    vectors = load_all(args.vectors)
    if args.only:
        vectors = [vector for vector in vectors if fnmatch.fnmatchcase(vector.id, args.only)]
    return vectors


def run(args: argparse.Namespace) -> int:
    if args.core is None and args.wire is None:
        print("conformance run: give --core COMMAND, --wire TEMPLATE, or both", file=sys.stderr)
        return 2
    vectors = _selected(args)
    ok = True
    if args.core is not None:
        started = time.monotonic()
        report = Report("core", core_mode.run_core(
            args.core, vectors, cwd=ROOT, batch=args.batch, timeout_s=args.timeout_s
        ))  # fmt: skip
        report.write(sys.stdout)
        print(f"core mode: {time.monotonic() - started:.1f} s\n", flush=True)
        ok &= report.passed and bool(report.outcomes)
    if args.wire is not None:
        chosen = smoke(vectors) if args.smoke else vectors
        started = time.monotonic()
        outcomes = wire_mode.run_wire(
            args.wire, chosen, vectors_dir=args.vectors, cwd=ROOT, jobs=args.jobs,
            timeout_s=args.timeout_s,
        )  # fmt: skip
        report = Report("wire" + (" (smoke subset)" if args.smoke else ""), outcomes)
        report.write(sys.stdout)
        print(f"wire mode: {time.monotonic() - started:.1f} s\n", flush=True)
        ok &= report.passed and bool(report.outcomes)
    return 0 if ok else 1


def mutants(args: argparse.Namespace) -> int:
    """Each mutant against the vectors: the table, and exit 1 if one passes them all."""
    vectors = _selected(args)
    width = max(map(len, ("mutant", *MUTANTS)))
    print(f"{'mutant':<{width}}  failed  of  vectors failed (first ids)")
    caught = True
    for name in sorted(MUTANTS):
        command = f"{sys.executable} -m conformance.testee --mutant {name}"
        outcomes = core_mode.run_core(
            command, vectors, cwd=ROOT, timeout_s=args.timeout_s, batch=len(vectors) or 1
        )
        failed = [outcome.vector.id for outcome in outcomes if not outcome.passed]
        caught &= bool(failed)
        print(f"{name:<{width}}  {len(failed):>6}  {len(outcomes):>3}  {', '.join(failed[:3])}")
    return 0 if caught else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance",
        description="replywire's conformance kit (docs/conformance.md).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name, helped in (
        ("run", "run the vectors against a consumer, in the core mode, the wire mode or both"),
        ("mutants", "run the core mode against every mutant of the Python core"),
    ):
        command = commands.add_parser(name, help=helped, description=helped)
        command.add_argument("--vectors", type=Path, default=VECTORS_DIR,
                             help="the folder of vector files")  # fmt: skip
        command.add_argument("--only", metavar="GLOB", help="only the vectors whose id matches")
        command.add_argument("--timeout-s", type=float, default=60.0,
                             help="bound on a batch (core) or a CLI run (wire)")  # fmt: skip
        if name == "run":
            command.add_argument("--core", metavar="COMMAND",
                                 help="a command speaking the line protocol")  # fmt: skip
            command.add_argument("--wire", metavar="TEMPLATE",
                                 help="a consumer CLI's command template")  # fmt: skip
            command.add_argument("--smoke", action="store_true",
                                 help="wire mode: the first vector of each wire and "
                                 "expected reason only")  # fmt: skip
            command.add_argument("--jobs", type=int, default=wire_mode.DEFAULT_JOBS,
                                 help="wire mode: CLI processes at once")  # fmt: skip
            command.add_argument("--batch", type=int, default=core_mode.DEFAULT_BATCH,
                                 help="core mode: vectors per process")  # fmt: skip
    commands.add_parser("generate", help="write the vectors (see its --help)", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == "generate":
        return generate.main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        return run(args) if args.command == "run" else mutants(args)
    except VectorError as error:
        print(f"conformance: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
