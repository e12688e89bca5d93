"""The live view of a chat reply, drawn into a recording console from a core fed the
turn's frames (tests/system/test_view_processes.py draws one streamed by a producer):
while it streams, each call as it arrives, the thoughts, all provisional; then an
accepted turn with two calls and its usage, a call the request did not declare refused
and named, and a hostile producer's escapes shown escaped, never obeyed."""

from __future__ import annotations

import io
import re
from collections.abc import Sequence

import pytest
from rich.console import Console

from replywire.consumer.chat_view import turn_so_far
from replywire.consumer.explain import Facts
from replywire.consumer.view import LiveView, Progress, live_renderable
from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.digest import digest
from replywire.shared.errors import ProtocolFailure
from replywire.shared.result import StreamResult
from replywire.shared.status import Status
from replywire.shared.wire import WireFormat
from tests import chat_turns as turns
from tests.hostile_input import H_SHOWN, H, refused
from tests.timeline_reading import rejected_rows

pytestmark = pytest.mark.timeout(60)

WIRE = WireFormat.LENGTH_PREFIXED


def recorded_console(color_system: str | None = None) -> Console:
    return Console(
        record=True,
        file=io.StringIO(),
        force_terminal=True,
        width=80,
        color_system=color_system,  # type: ignore[arg-type]
    )


def fed(
    items: Sequence[turns.Item], binding: dict[str, object], frames: int | None = None
) -> ReplyConsumer:
    """A core fed the turn's first ``frames`` frames (all of them and done: None)."""
    consumer = ReplyConsumer(binding, wire=WIRE)
    chunks = turns.encoded(WIRE, turns.frames(digest(binding), items))
    for chunk in chunks[:frames]:
        try:
            consumer.receive_data(chunk)
        except ProtocolFailure:
            break
    return consumer


def drawn_live(consumer: ReplyConsumer, console: Console) -> list[str]:
    """The provisional panel and status line as the ticker draws them mid-stream."""
    progress = Progress(
        state=consumer.state.value,
        frames=consumer.stats.application_frames,
        bytes=consumer.stats.bytes_received,
        queue_depth=0,
        queue_size=8,
        reading="flowing",
        reconnects=0,
        elapsed_s=0.1,
        text=consumer.provisional_content,
        turn=turn_so_far(consumer.turn),
    )
    console.print(live_renderable(progress))
    return [line.rstrip() for line in console.export_text().splitlines()]


def verdict(result: StreamResult, console: Console) -> str:
    LiveView(console, Facts()).show_verdict(result, None)
    return console.export_text()


#: Two calls whose fragments interleave, a thought, a signature, usage (its total off by
#: three: the note), the finish: 002's example with the rest of a turn.
ACCEPTED = (
    turns.thought("Two calls."),
    *turns.EXAMPLE[:-2],
    turns.signature("tool_call", 0, "c2lnLTE="),
    turns.usage(18, 9, 30, cached=4),
    turns.finish("STOP"),
)


def test_a_chat_turn_streams_provisional_and_is_accepted_with_its_calls_and_usage() -> None:
    binding = turns.chat_binding()
    # Mid-stream: the thought, the text so far, both calls with their first fragments.
    live = drawn_live(fed(ACCEPTED, binding, frames=4), recorded_console())
    assert [line[2:-1].rstrip() for line in live[1:7]] == [
        "text      Reading",
        "thoughts  Two calls.",
        "call      #0 read_file · c1",
        '          {"path":',
        "call      #1 shell · c2",
        '          {"comm',
    ]
    assert live[0].startswith("╭─ provisional: not validated yet ─")
    assert re.fullmatch(r"● streaming  frames 4  \d+ B  queue 0/8  reads flowing  .*", live[-1])
    # Then every frame and done: accepted, the arguments as the objects they parse to.
    result = fed(ACCEPTED, binding).end_of_stream()
    assert result.status is Status.COMPLETE and result.notes == ["usage_total_mismatch"]
    drawn = verdict(result, recorded_console())
    assert rejected_rows(drawn, "accepted") == [
        "text        Reading the files.",
        "thoughts    Two calls.",
        "call        #0 read_file · c1",
        '            {"path": "notes.py"}',
        "call        #1 shell · c2",
        '            {"command": "pwd"}',
        "usage       prompt 18 · cached 4 · completion 9 · thoughts 0 · tool-use 0 ·",
        "            total 30",
        "note        usage_total_mismatch: the reported total is not the sum of its",
        "            parts (kept as reported)",
        "finish      STOP",
        "signatures  1",
    ]


def test_a_call_the_request_did_not_declare_is_refused_and_named() -> None:
    binding = turns.chat_binding((turns.READ_FILE,))  # shell is not declared
    result = fed(turns.EXAMPLE, binding).end_of_stream()
    assert (result.status, result.reason) == (Status.INVALID, "tool_call_undeclared")
    rows = rejected_rows(verdict(result, recorded_console()), "not accepted: invalid")
    assert rows == [
        "status  invalid · tool_call_undeclared",
        "why     The model called a tool the request did not declare.",
        "call    #1 shell · c2",
        "text    partial (18 chars kept, not validated)",
        "        Reading the files.",
        "turn    partial (kept as it came, not validated)",
        "call    #0 read_file · c1",
        '        {"path":"notes.py"}',
        "call    #1 shell · c2",
        '        {"command":"pwd"}',
        "usage   prompt 18 · cached 4 · completion 9 · thoughts 0 · tool-use 0 ·",
        "        total 27",
        "finish  STOP",
    ]


#: A hostile producer's turn: every text it chooses holds sequences a terminal obeys.
HOSTILE = (
    turns.text("Hello " + H),
    turns.thought("thinking " + H),
    turns.call(0, '{"path":"' + H + '"}', name="read_file" + H, call_id="c" + H),
    turns.finish("STOP" + H),
)


@pytest.mark.parametrize("color_system", [None, "truecolor"])
def test_a_hostile_turn_is_shown_escaped_never_obeyed(color_system: str | None) -> None:
    binding = turns.chat_binding()
    live_console = recorded_console(color_system)
    live = "\n".join(drawn_live(fed(HOSTILE, binding, frames=3), live_console))
    result = fed(HOSTILE, binding).end_of_stream()
    assert (result.status, result.reason) == (Status.INVALID, "tool_call_malformed")
    console = recorded_console(color_system)
    drawn = verdict(result, console)
    for text in (live, drawn):
        assert "Hello " + H_SHOWN in text
        assert "thinking " + H_SHOWN in text
        assert "read_file" + H_SHOWN in text
        assert "c" + H_SHOWN in text
        assert '{"path":"' + H_SHOWN + '"}' in text
    assert "STOP" + H_SHOWN in drawn
    assert "call      #0 read_file" + H_SHOWN in drawn  # the refused call, named
    # What reached the terminal: rich's own colours, and nothing else a terminal obeys.
    for written in (live_console.file, console.file):
        assert isinstance(written, io.StringIO)
        bare = re.sub(r"\x1b\[[0-9;]*m", "", written.getvalue())
        assert not [char for char in bare if refused(char, multiline=True)]


def test_while_a_long_turn_streams_the_last_calls_are_drawn() -> None:
    """A turn may begin 128 calls: the live panel keeps its last few, counting the rest."""
    items = [turns.text("Many.")]
    items += [turns.call(n, "{}", name=f"tool_{n}", call_id=f"c{n}") for n in range(10)]
    live = drawn_live(fed(items, turns.chat_binding(), frames=11), recorded_console())
    rows = [line[2:-1].rstrip() for line in live[1:-2]]
    assert rows[:3] == ["text   Many.", "calls  … 4 before", "call   #4 tool_4 · c4"]
    assert rows[-2:] == ["call   #9 tool_9 · c9", "       {}"]
