"""Documentation generated from the code's own tables (the README embeds these verbatim).

python -m shared.docs    # prints the state diagram and the reason-code table
"""

from __future__ import annotations

from shared.errors import EXIT_CODES, REASONS
from shared.faults import EXPECTED_OUTCOMES, FAULT_DESCRIPTIONS
from shared.machine import TRANSITIONS, ConsumerState
from shared.wire import WireFormat


def state_diagram() -> str:
    """A mermaid state diagram of the consumer core, one edge per table entry."""
    lines = ["```mermaid", "stateDiagram-v2", f"    [*] --> {ConsumerState.STREAMING.value}"]
    for (state, event), target in TRANSITIONS.items():
        lines.append(f"    {state.value} --> {target.value}: {event.value}")
    for state in ("complete", "incomplete", "cancelled", "error", "invalid"):
        lines.append(f"    {state} --> [*]")
    lines.append("```")
    return "\n".join(lines) + "\n"


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
        "| fault | what the producer does | length-prefixed | NDJSON |",
        "|---|---|---|---|",
    ]
    for kind, outcomes in EXPECTED_OUTCOMES.items():
        cells = [
            f"{outcomes[wire].status.value} / `{outcomes[wire].reason}`"
            for wire in (WireFormat.LENGTH_PREFIXED, WireFormat.NDJSON)
        ]
        lines.append(f"| `{kind.value}` | {FAULT_DESCRIPTIONS[kind]} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    print(state_diagram())
    print(reason_table())
    print(fault_table())


if __name__ == "__main__":
    main()
