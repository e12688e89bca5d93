"""A chat turn as the live view draws it (``consumer/view.py``, with ``rich``).

While a chat reply streams: below its text, each tool call as it arrives (its index, its
name and id, its arguments so far), the thoughts (marked as thoughts, dim), the last usage
and the finish reason, all inside the provisional panel: nothing is validated until the
end. Then, in the verdict: accepted, the calls with the arguments they parse to, the usage
line (and the ``usage_total_mismatch`` note when the result has it), the finish reason and
the number of signatures; not accepted, the refused call (the result's ``call``) and the
partial turn kept.

Every value here is the producer's choice (a model's through it): each is drawn through
``shared.terminal_text`` as a ``Text`` (never read as markup), so an escape sequence in a
call's name, its arguments or a thought is shown, never obeyed. Pure: it reads a turn
document (``ChatTurn.document``, the result's ``turn`` or its ``accepted_answer``) and
returns renderables.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from rich.table import Table
from rich.text import Text

from replywire.shared.chat_reply import USAGE_TOTAL_MISMATCH
from replywire.shared.chat_turn import ChatTurn
from replywire.shared.terminal_text import shown_line, shown_text

#: The longest call name or id, and the longest arguments, drawn (the arguments fold).
NAME_CHARS: Final = 80
ARGUMENT_CHARS: Final = 600
#: The thoughts shown: their last characters, at most so many lines.
THOUGHT_CHARS: Final = 400
THOUGHT_LINES: Final = 4
#: The calls the live view shows while a turn streams: the last ones (a turn may begin 128).
LIVE_CALLS: Final = 6
#: The usage counts as the usage line names them, in the usage part's field order.
USAGE_LABELS: Final = {
    "prompt_tokens": "prompt",
    "cached_tokens": "cached",
    "completion_tokens": "completion",
    "thoughts_tokens": "thoughts",
    "tool_use_prompt_tokens": "tool-use",
    "total_tokens": "total",
}
#: What each note says, after its code.
NOTE_WORDS: Final = {
    USAGE_TOTAL_MISMATCH: "the reported total is not the sum of its parts (kept as reported)",
}


def turn_so_far(turn: ChatTurn | None) -> Mapping[str, Any] | None:
    """A streaming chat reply's turn as applied so far (without its text, which the view
    reads as the provisional content); None for a reply of another kind. Reads only."""
    return None if turn is None else turn.document("")


def call_title(call: Mapping[str, Any]) -> Text:
    """``#index name · id``: a call as a verdict names it."""
    title = Text()
    title.append(f"#{call.get('index')} ", style="bold")
    title.append(shown_line(str(call.get("name", "")), NAME_CHARS), style="cyan")
    if call.get("id"):
        title.append(" · ", style="dim")
        title.append(shown_line(str(call["id"]), NAME_CHARS), style="dim")
    return title


def arguments_text(arguments: object) -> str:
    """A call's arguments as drawn: the raw text as it came, or the object it parsed to
    written as JSON; one line, at most ``ARGUMENT_CHARS``."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return shown_line(raw, ARGUMENT_CHARS)


def usage_line(usage: Mapping[str, Any]) -> Text:
    """``prompt 31 · cached 0 · completion 18 · thoughts 0 · tool-use 0 · total 49``."""
    line = Text()
    for number, (name, label) in enumerate(USAGE_LABELS.items()):
        if number:
            line.append(" · ", style="dim")
        line.append(f"{label} ")
        line.append(str(usage.get(name)), style="bold" if name == "total_tokens" else "")
    return line


def _thoughts(thoughts: str, style: str) -> Text:
    kept = "\n".join(thoughts[-THOUGHT_CHARS:].split("\n")[-THOUGHT_LINES:])
    block = Text()
    if len(kept) < len(thoughts):
        block.append(f"… {len(thoughts) - len(kept)} characters before\n", style="dim")
    block.append(shown_text(kept), style=style)
    return block


def turn_rows(
    rows: Table,
    turn: Mapping[str, Any],
    *,
    argument_style: str,
    notes: Sequence[str] = (),
    empty: bool = False,
    last_calls: int | None = None,
) -> None:
    """Add a turn's parts to ``rows`` (a two-column grid: label, value): its thoughts, its
    calls with their arguments (only the ``last_calls``, if given), its usage (and notes),
    its finish reason, its signatures. ``empty``: say so when there is no call (a verdict;
    a live turn just has none yet)."""
    if turn.get("thoughts"):
        rows.add_row("thoughts", _thoughts(str(turn["thoughts"]), "dim italic"))
    calls: Sequence[Mapping[str, Any]] = turn.get("tool_calls") or ()
    if last_calls is not None and len(calls) > last_calls:
        rows.add_row("calls", Text(f"… {len(calls) - last_calls} before", style="dim"))
        calls = calls[-last_calls:]
    for call in calls:
        rows.add_row("call", call_title(call))
        rows.add_row("", Text(arguments_text(call.get("arguments", "")), style=argument_style))
    if not calls and empty:
        rows.add_row("calls", Text("(none)", style="dim"))
    usage = turn.get("usage")
    if usage:
        rows.add_row("usage", usage_line(usage))
    for note in notes:
        said = Text(shown_line(note), style="yellow")
        said.append(f": {NOTE_WORDS.get(note, '')}" if note in NOTE_WORDS else "", style="dim")
        rows.add_row("note", said)
    finish = turn.get("finish_reason")
    if finish is not None:
        rows.add_row("finish", Text(shown_line(str(finish), NAME_CHARS), style="bold"))
    signatures = turn.get("signatures") or ()
    if signatures:
        rows.add_row("signatures", Text(str(len(signatures)), style="dim"))


def grid() -> Table:
    """The label-and-value grid every chat block is drawn in."""
    rows = Table.grid(padding=(0, 2))
    rows.add_column(style="bold", no_wrap=True)
    rows.add_column(overflow="fold")
    return rows


def live_turn(text_block: Text, turn: Mapping[str, Any]) -> Table:
    """The provisional panel's body for a chat reply: its text so far, then its parts."""
    rows = grid()
    rows.add_row("text", text_block)
    turn_rows(rows, turn, argument_style="italic yellow", last_calls=LIVE_CALLS)
    return rows


def accepted_turn(answer: Mapping[str, Any], notes: Sequence[str]) -> Table:
    """An accepted chat reply's turn: the text, the calls with their parsed arguments, the
    usage line and notes, the finish reason, the signatures."""
    rows = grid()
    text = str(answer.get("text", ""))
    rows.add_row(
        "text",
        Text(shown_text(text), style="bold") if text else Text("(no text)", style="dim"),
    )
    turn_rows(rows, answer, argument_style="green", notes=notes, empty=True)
    return rows


def refused_call(call: Mapping[str, Any]) -> Text:
    """The call a tool call reason refused (the result's ``call``)."""
    return call_title(call)
