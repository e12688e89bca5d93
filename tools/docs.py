"""Documentation generated from the code's own tables (the README embeds these verbatim).

python -m tools.docs    # prints the state diagram and the reason-code table
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path

from consumer.client import READER_TRANSITIONS, ReaderState
from producer.states import TRANSITIONS as PRODUCER_TRANSITIONS
from producer.states import StreamState
from shared.errors import EXIT_CODES, REASONS
from shared.faults import EXPECTED_OUTCOMES, FAULT_DESCRIPTIONS
from shared.machine import TRANSITIONS, ConsumerState
from shared.wire import WireFormat


def state_diagram() -> str:
    """A mermaid state diagram of the consumer core, one edge per table entry."""
    lines = ["```mermaid", "stateDiagram-v2", f"    [*] --> {ConsumerState.STREAMING.value}"]
    for (state, event), target in TRANSITIONS.items():
        lines.append(f"    {state.value} --> {target.value}: {event.value}")
    for final in ("complete", "incomplete", "cancelled", "error", "invalid"):
        lines.append(f"    {final} --> [*]")
    lines.append("```")
    return "\n".join(lines) + "\n"


def edge_diagram(states: type[StrEnum], edges: Iterable[tuple[StrEnum, StrEnum]]) -> str:
    """A mermaid diagram of a set of (from, to) edges, in the enum's order; the first is initial."""
    order = list(states)
    lines = ["```mermaid", "stateDiagram-v2", f"    [*] --> {order[0].value}"]
    for source, target in sorted(edges, key=lambda e: (order.index(e[0]), order.index(e[1]))):
        lines.append(f"    {source.value} --> {target.value}")
    lines.append("```")
    return "\n".join(lines) + "\n"


def producer_diagram() -> str:
    """The producer's per-stream states."""
    return edge_diagram(StreamState, PRODUCER_TRANSITIONS)


def reader_diagram() -> str:
    """The consumer's reader (flow control) states."""
    return edge_diagram(ReaderState, READER_TRANSITIONS)


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
        lines.append(f"| `{kind.value}` | {FAULT_DESCRIPTIONS[kind]} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


SECTIONS = {
    "state-diagram": state_diagram,
    "producer-diagram": producer_diagram,
    "reader-diagram": reader_diagram,
    "fault-table": fault_table,
    "reason-table": reason_table,
}


def update(text: str) -> str:
    """Rewrite every ``<!-- generated:NAME -->`` section of ``text``."""
    for name, render in SECTIONS.items():
        start, end = f"<!-- generated:{name} -->\n", f"<!-- /generated:{name} -->"
        head, _, rest = text.partition(start)
        _, _, tail = rest.partition(end)
        text = head + start + render() + end + tail
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description="print or update the generated documentation")
    parser.add_argument("--update", type=Path, help="rewrite the generated sections of this file")
    args = parser.parse_args()
    if args.update:
        args.update.write_text(update(args.update.read_text(encoding="utf-8")), encoding="utf-8")
        return
    for render in SECTIONS.values():
        print(render())


if __name__ == "__main__":
    main()
