"""Documentation generated from the code's own tables (the docs embed these verbatim).

python -m tools.docs                          # prints the diagrams and tables
python -m tools.docs --update                 # rewrites the generated sections of every doc file
python -m tools.docs --update docs/protocol.md  # ... of these files only
python -m tools.docs --update --run           # also the sample output, from a real `make demo` run
                                              # and real consumer runs (tools/view_samples.py)

A generated section is the text between ``<!-- generated:NAME -->`` and
``<!-- /generated:NAME -->`` in whichever doc file holds it (``doc_files()``: the README,
docs/*.md, bench/README.md, fixtures/PROVENANCE.md); a name not registered here is left
as it is. Sample output comes from a real run with its varying values (pid, port,
temporary directory) replaced by fixed ones; tests/system/test_cli_processes.py runs the
demo and compares.
"""

from __future__ import annotations

import argparse
import functools
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from replywire.consumer.flags import FLAGS as CONSUMER_FLAGS
from replywire.consumer.reader_states import SPEC as READER_SPEC
from replywire.flags import FLAGS as REPLYWIRE_FLAGS
from replywire.producer.flags import FLAGS as PRODUCER_FLAGS
from replywire.producer.states import SPEC as PRODUCER_SPEC
from replywire.runtime.flags import Flag, FlagGroup, FlagTable
from replywire.shared.consumer_core import SPEC as CORE_SPEC
from replywire.shared.faults import (
    EXPECTED_OUTCOMES,
    FAULT_DESCRIPTIONS,
    RESUMED_OUTCOMES,
    RESUMED_RECONNECTS,
)
from replywire.shared.fsm import MachineSpec
from replywire.shared.reason_registry import REASONS
from replywire.shared.status import EXIT_CODES
from replywire.shared.wire import WireFormat
from tools import view_samples


def spec_diagram(spec: MachineSpec[Any, Any]) -> str:
    """A mermaid diagram of a machine: one labelled edge per table entry, its final states."""
    lines = ["```mermaid", "stateDiagram-v2", f"    [*] --> {spec.initial.value}"]
    for state, event, target in spec.edges():
        lines.append(f"    {state.value} --> {target.value}: {event.value}")
    for final in spec.states:
        if final in spec.final:
            lines.append(f"    {final.value} --> [*]")
    lines.append("```")
    return "\n".join(lines) + "\n"


def state_diagram() -> str:
    """The consumer core's states: the only path to complete."""
    return spec_diagram(CORE_SPEC)


def producer_diagram() -> str:
    """The producer's per-stream states."""
    return spec_diagram(PRODUCER_SPEC)


def reader_diagram() -> str:
    """The consumer's reader (flow control) states."""
    return spec_diagram(READER_SPEC)


def reason_table() -> str:
    lines = [
        "| code | status | exit | gRPC code | meaning |",
        "|---|---|---|---|---|",
    ]
    for reason, info in REASONS.items():
        lines.append(
            f"| `{reason.value}` | {info.status.value} | {EXIT_CODES[info.status]} "
            f"| {info.grpc_code} | {info.meaning} |"
        )
    return "\n".join(lines) + "\n"


def fault_table() -> str:
    lines = [
        "| fault | what the producer does | length-prefixed | NDJSON (and ndjson-lab) |",
        "|---|---|---|---|",
    ]
    for kind, outcomes in EXPECTED_OUTCOMES.items():
        assert outcomes[WireFormat.NDJSON_LAB] == outcomes[WireFormat.NDJSON], kind
        cells = [
            f"{outcomes[wire].status.value} / `{outcomes[wire].reason}`"
            if outcomes[wire].reason
            else f"{outcomes[wire].status.value} (in one process; see below)"
            for wire in (WireFormat.LENGTH_PREFIXED, WireFormat.NDJSON)
        ]
        resumed = RESUMED_OUTCOMES.get(kind)
        if resumed is not None:
            assert resumed.reason is None and RESUMED_RECONNECTS == 1, kind
            cells = [
                f"{resumed.status.value} after one reconnect (the default resume); {cell} "
                "with `--resume-attempts 0` (and in one process)"
                for cell in cells
            ]
        lines.append(f"| `{kind.value}` | {FAULT_DESCRIPTIONS[kind]} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def flag_names(flag: Flag) -> list[str]:
    """How a flag is named in its table's first cell: its option strings (``--no-NAME`` too
    for a toggle), or a positional argument's metavar."""
    if flag.positional:
        return [(flag.metavar or flag.name) + (" …" if flag.nargs in ("+", "*") else "")]
    names = list(flag.names)
    if flag.action == "toggle":
        names += [f"--no-{name[2:]}" for name in flag.names]
    return names


def flag_default(flag: Flag) -> str:
    """The table's default: what ``shown`` says, else the table's own value (never the
    environment's: the docs are the same wherever they are made, and hold no secret)."""
    if flag.shown:
        return flag.shown
    if flag.action == "switch" or flag.default is None:
        return "off"
    value = flag.default
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def flag_environment(table: FlagTable, flag: Flag) -> str:
    name = table.env_name(flag)
    if name is None:
        return "—"
    return f"`{name}=1`" if flag.action == "switch" else f"`{name}`"


def group_heading(group: FlagGroup) -> str:
    """A row naming the commands and the group's title, before its flags (none for the
    untitled group of a one-command process)."""
    name = ", ".join(f"`{command}`" for command in group.commands)
    if group.title is not None:
        name = f"{name}: {group.title}" if name else group.title
    if not name:
        return ""
    about = f" — {group.description}" if group.description else ""
    return f"| **{_cell(name)}**{_cell(about)} | | | |"


def flag_table(table: FlagTable) -> str:
    """A process's flags as one markdown table: flag, environment, default, meaning."""
    lines = ["| flag | environment | default | meaning |", "|---|---|---|---|"]
    for group in table.groups:
        heading = group_heading(group)
        if heading:
            lines.append(heading)
        for flag in group.flags:
            names = ", ".join(f"`{name}`" for name in flag_names(flag))
            lines.append(
                f"| {_cell(names)} | {flag_environment(table, flag)} "
                f"| {_cell(flag_default(flag))} | {_cell(flag.meaning)} |"
            )
    return "\n".join(lines) + "\n"


def producer_flags() -> str:
    """``python -m producer``'s flags (producer/flags.py)."""
    return flag_table(PRODUCER_FLAGS)


def consumer_flags() -> str:
    """``python -m consumer``'s flags, by command (consumer/flags.py)."""
    return flag_table(CONSUMER_FLAGS)


def replywire_flags() -> str:
    """``python -m replywire``'s flags, by command (replywire/flags.py)."""
    return flag_table(REPLYWIRE_FLAGS)


#: The values a demo run varies in, as the README shows them.
DEMO_PID, DEMO_PORT, DEMO_DIR = "48213", "41927", "/tmp/replywire-demo-ucbfiika"
ROOT = Path(__file__).resolve().parent.parent


def normalize_demo(text: str) -> str:
    """A demo run's output with its pid, port and temporary directory fixed."""
    text = re.sub(
        r"producer pid \d+ on 127\.0\.0\.1:\d+",
        f"producer pid {DEMO_PID} on 127.0.0.1:{DEMO_PORT}",
        text,
    )
    return re.sub(r"\S*/replywire-demo-[A-Za-z0-9_]+", DEMO_DIR, text)


def demo_block(output: str) -> str:
    """The README's ``make demo`` sample: a console block of the normalized output."""
    return "```console\n$ make demo\n" + normalize_demo(output) + "```\n"


def demo_output() -> str:
    """Run the demo (a real producer process) and render its sample."""
    run = subprocess.run(
        [sys.executable, "-m", "replywire", "demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return demo_block(run.stdout)


#: Sections rendered from a real run: slow, so only with --run (and checked by their tests).
RUN_SECTIONS: dict[str, Callable[[], str]] = {
    "demo-output": demo_output,
    **{name: functools.partial(view_samples.section, name) for name in view_samples.NAMES},
}

SECTIONS = {
    "state-diagram": state_diagram,
    "producer-diagram": producer_diagram,
    "reader-diagram": reader_diagram,
    "fault-table": fault_table,
    "reason-table": reason_table,
    "producer-flags": producer_flags,
    "consumer-flags": consumer_flags,
    "replywire-flags": replywire_flags,
}


#: The documentation, as globs from the repository's root (tests/unit/test_docs.py checks that
#: no other Markdown file is left out but bench/results.md, which ``make bench`` writes).
DOC_GLOBS: tuple[str, ...] = (
    "README.md",
    "docs/*.md",
    "bench/README.md",
    "fixtures/PROVENANCE.md",
    "clients/typescript/README.md",
)


def doc_files() -> list[Path]:
    """Every documentation file, in a fixed order."""
    return [path for pattern in DOC_GLOBS for path in sorted(ROOT.glob(pattern))]


def update(text: str, sections: Mapping[str, Callable[[], str]] | None = None) -> str:
    """Rewrite the ``<!-- generated:NAME -->`` sections of ``text`` that these renderers
    know; each rendered once, only if the text has it. Other text is left as it is."""
    for name, render in (SECTIONS if sections is None else sections).items():
        start, end = f"<!-- generated:{name} -->\n", f"<!-- /generated:{name} -->"
        pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.DOTALL)
        if not pattern.search(text):
            continue
        text = (start + render() + end).join(pattern.split(text))
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description="print or update the generated documentation")
    parser.add_argument(
        "--update",
        type=Path,
        nargs="*",
        metavar="FILE",
        help="rewrite the generated sections of these files (none: every doc file)",
    )
    parser.add_argument(
        "--run", action="store_true", help="also the sample output of real runs (make demo)"
    )
    args = parser.parse_args()
    if args.update is not None:
        sections = {**SECTIONS, **RUN_SECTIONS} if args.run else SECTIONS
        # Each section rendered at most once, whichever files hold it (a run is slow).
        once = {name: functools.cache(render) for name, render in sections.items()}
        for path in args.update or doc_files():
            before = path.read_text(encoding="utf-8")
            after = update(before, once)
            if after != before:
                path.write_text(after, encoding="utf-8")
        return
    for render in SECTIONS.values():
        print(render())


if __name__ == "__main__":
    main()
