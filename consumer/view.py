"""The consumer's live view on a terminal (``python -m consumer stream``, with ``rich``).

While a reply streams: the provisional text as it arrives, marked provisional (it is
not validated until the end), a chat reply's calls, thoughts, usage and finish below it
(``consumer/chat_view.py``), and a status line (state, frames, bytes, queue depth, reads
flowing or paused, reconnects, elapsed). Then one verdict block: **accepted**, with the
answer and its numbered citations (a chat reply: its turn), or **not accepted**, with the
status, the reason in words, the refused call, the partial text (and turn) kept, and a
hint where one helps.

The view only reads: ``stream_reply`` hands it the session (``observer``), and a
ticker in the same event loop draws what the session holds a few times a second. A
stream without a view does no work for one.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TextIO

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from replywire.consumer.chat_view import (
    accepted_turn,
    live_turn,
    refused_call,
    turn_rows,
    turn_so_far,
)
from replywire.consumer.explain import HEADLINES, Facts, hint, sentence
from replywire.consumer.reader_states import ReaderState
from replywire.consumer.session import StreamSession
from replywire.runtime.console_logs import OWN_STYLES
from replywire.shared.result import StreamResult
from replywire.shared.status import Status
from replywire.shared.terminal_text import shown_line, shown_text

#: Draws per second while a reply streams.
REFRESH_PER_S: Final = 12.0
#: The provisional and partial text shown: its last lines, at most this many characters.
TEXT_LINES: Final = 12
TEXT_CHARS: Final = 1200
#: The longest citation field, detail and hint drawn (each one line).
FIELD_CHARS: Final = 300
HINT_CHARS: Final = 1000
#: The longest stream id drawn on the final line: a longer one (the consumer's own
#: 32-digit ids among them) is cut with a visible ``…``, what it shows a prefix that
#: ``make trace STREAM=`` takes; the result document holds it whole.
STREAM_ID_CHARS: Final = 24


@dataclass(frozen=True, slots=True)
class Progress:
    """What the status line shows, read from a running session."""

    state: str
    frames: int
    bytes: int
    queue_depth: int
    queue_size: int
    reading: str
    reconnects: int
    elapsed_s: float
    text: str
    #: A chat reply's turn so far (``ChatTurn.document``, its text aside); None otherwise.
    turn: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, session: StreamSession | None, elapsed_s: float) -> Progress:
        if session is None:
            return cls("connecting", 0, 0, 0, 0, "not yet", 0, elapsed_s, "")
        reader, consumer = session.reader, session.consumer
        stats = consumer.stats
        reader_state = reader.state if reader is not None else ReaderState.CONNECTING
        connecting = reader_state is ReaderState.CONNECTING and not consumer.finished
        return cls(
            state="connecting" if connecting else consumer.state.value,
            frames=stats.application_frames,
            bytes=stats.bytes_received,
            queue_depth=reader.queue.qsize() if reader is not None else 0,
            queue_size=session.options.queue_size,
            reading={ReaderState.PAUSED: "paused", ReaderState.ENDED: "ended"}.get(
                reader_state, "flowing"
            ),
            reconnects=stats.reconnects,
            elapsed_s=elapsed_s,
            text=consumer.provisional_content,
            turn=turn_so_far(consumer.turn),
        )


def tail(text: str, lines: int = TEXT_LINES, chars: int = TEXT_CHARS) -> tuple[str, int]:
    """The end of ``text`` that fits (its last ``lines`` lines, ``chars`` characters) and
    how many characters before it are not shown."""
    kept = "\n".join(text.splitlines()[-lines:]) if text.count("\n") >= lines else text
    kept = kept[-chars:]
    return kept, len(text) - len(kept)


def field(value: object, style: str = "", limit: int = FIELD_CHARS) -> Text:
    """Text from elsewhere drawn as one line (``shared.terminal_text``): controls shown,
    never obeyed, and never read as rich markup (a ``Text``, not a string)."""
    return Text(shown_line(str(value), limit), style=style)


def _text_block(text: str, style: str) -> Text:
    shown, hidden = tail(text)
    block = Text()
    if hidden:
        block.append(f"… {hidden} characters before\n", style="dim")
    block.append(shown_text(shown), style=style)
    return block


def status_line(progress: Progress) -> Text:
    reading_style = "yellow" if progress.reading == "paused" else "green"
    line = Text()
    line.append(f"● {progress.state}", style="bold cyan")
    line.append(f"  frames {progress.frames}  {progress.bytes} B")
    if progress.queue_size:
        line.append(f"  queue {progress.queue_depth}/{progress.queue_size}")
    line.append("  reads ")
    line.append(progress.reading, style=reading_style)
    line.append(f"  reconnects {progress.reconnects}  {progress.elapsed_s:.1f} s")
    return line


def live_renderable(progress: Progress) -> RenderableType:
    text = progress.text or "(nothing yet)"
    block = _text_block(text, "italic yellow")
    provisional = Panel(
        block if progress.turn is None else live_turn(block, progress.turn),
        title="provisional: not validated yet",
        title_align="left",
        border_style="yellow",
        box=box.ROUNDED,
    )
    return Group(provisional, status_line(progress))


def final_line(result: StreamResult, elapsed_s: float) -> Text:
    stats, flow = result.stats, result.flow
    line = Text()
    line.append(result.status.value, style="bold green" if result.accepted else "bold red")
    line.append(f"  frames {stats.application_frames}  {stats.bytes_received} B")
    if flow is not None:
        line.append(f"  paused {flow.reads_paused}×")
    line.append(f"  reconnects {stats.reconnects}  {elapsed_s:.1f} s")
    if result.stream_id:
        line.append(f"  stream {shown_line(result.stream_id, STREAM_ID_CHARS)}", style="dim")
    return line


def _citations(citations: Sequence[Mapping[str, Any]]) -> Text:
    block = Text()
    for number, citation in enumerate(citations, start=1):
        block.append(f"[{number}] ", style="bold")
        block.append(field(citation.get("source_id", ""), "cyan"))
        block.append(" · ", style="dim")
        block.append(field(citation.get("chunk_id", ""), "dim"))
        block.append("\n  ")
        block.append(field(citation.get("url", ""), "blue"))
        block.append("\n")
    block.rstrip()
    return block


def accepted_block(result: StreamResult) -> Panel:
    answer = result.accepted_answer or {}
    if result.turn is not None:  # a chat reply: its turn
        return _accepted(accepted_turn(answer, result.notes or ()))
    body = Text()
    if answer.get("status") == "not_in_docs":
        body.append("Not in the documents: ", style="bold")
    body.append(shown_text(str(answer.get("answer", ""))), style="bold")
    parts: list[RenderableType] = [body]
    if result.citations:
        parts += [Text(""), _citations(result.citations)]
    if result.integrity == "none":
        parts.append(Text("integrity: none (ndjson-lab: the text was not checksummed)", "dim"))
    return _accepted(Group(*parts))


def _accepted(body: RenderableType) -> Panel:
    return Panel(
        body,
        title=HEADLINES[Status.COMPLETE],
        title_align="left",
        border_style="green",
        box=box.ROUNDED,
    )


def _detail(result: StreamResult) -> str | None:
    transport = result.transport or {}
    details = transport.get("grpc_details") or transport.get("message")
    if details and transport.get("grpc_code"):
        details = f"{transport['grpc_code']}: {details}"
    found = details or result.detail
    return str(found)[:300] if found else None


def rejected_block(result: StreamResult, facts: Facts) -> Panel:
    rows = Table.grid(padding=(0, 2))
    rows.add_column(style="bold", no_wrap=True)
    rows.add_column(overflow="fold")
    rows.add_row("status", field(f"{result.status.value} · {result.reason}"))
    rows.add_row("why", field(sentence(result.reason), limit=HINT_CHARS))
    advice = hint(result, facts)
    if (detail := _detail(result)) and not (advice and detail in advice):
        rows.add_row("detail", field(detail, "dim"))
    if result.call is not None:
        rows.add_row("call", refused_call(result.call))
    if result.provisional_content:
        partial = _text_block(result.provisional_content, "italic yellow")
        label = f"partial ({len(result.provisional_content)} chars kept, not validated)"
        rows.add_row("text", Text(label, style="dim"))
        rows.add_row("", partial)
    else:
        nothing = "(no text)" if result.first_output else "(nothing arrived)"
        rows.add_row("text", Text(nothing, style="dim"))
    if result.turn is not None and _has_parts(result.turn):  # a chat reply's partial turn
        rows.add_row("turn", Text("partial (kept as it came, not validated)", style="dim"))
        turn_rows(rows, result.turn, argument_style="italic yellow", notes=result.notes or ())
    if advice:
        rows.add_row("hint", field(advice, "bold", HINT_CHARS))
    return Panel(
        rows,
        title=HEADLINES[result.status],
        title_align="left",
        border_style="red",
        box=box.ROUNDED,
    )


def _has_parts(turn: Mapping[str, Any]) -> bool:
    return any(turn.get(key) for key in ("thoughts", "tool_calls", "usage", "signatures")) or (
        turn.get("finish_reason") is not None
    )


def verdict_block(result: StreamResult, facts: Facts) -> Panel:
    return accepted_block(result) if result.accepted else rejected_block(result, facts)


class LiveView:
    """Draws one stream on ``console``: live while it runs (only on a terminal), then the
    verdict. ``attach`` is the ``observer`` ``stream_reply`` takes."""

    def __init__(self, console: Console, facts: Facts, *, redirect_stderr: bool = False) -> None:
        self.console = console
        self.facts = facts
        self._redirect_stderr = redirect_stderr
        self._session: StreamSession | None = None
        self._started = time.monotonic()

    def attach(self, session: StreamSession) -> None:
        self._session = session

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._started

    def progress(self) -> Progress:
        return Progress.of(self._session, self.elapsed_s)

    @contextlib.asynccontextmanager
    async def showing(self) -> AsyncIterator[None]:
        """Draw the stream while the body runs (nothing when the console is no terminal)."""
        self._started = time.monotonic()
        if not self.console.is_terminal:
            yield
            return
        live = Live(
            live_renderable(self.progress()),
            console=self.console,
            auto_refresh=False,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        stderr = sys.stderr
        with live:
            if self._redirect_stderr:
                sys.stderr = Above(self.console, stderr)
            ticker = asyncio.create_task(self._tick(live))
            try:
                yield
            finally:
                ticker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await ticker
                sys.stderr = stderr

    async def _tick(self, live: Live) -> None:
        while True:
            live.update(live_renderable(self.progress()), refresh=True)
            await asyncio.sleep(1 / REFRESH_PER_S)

    def show_verdict(self, result: StreamResult, result_path: Path | None) -> None:
        self.console.print(final_line(result, self.elapsed_s), soft_wrap=True)
        self.console.print(verdict_block(result, self.facts))
        if result_path is not None:
            shown = shown_line(str(result_path), HINT_CHARS)
            self.console.print(Text(f"result document: {shown}", "dim"), soft_wrap=True)
        else:
            self.console.print(Text("the full result document: add --result FILE", style="dim"))


#: The console log lines' own colours: the only escape sequences kept from stderr.
_OWN_STYLES: Final = re.compile(f"({OWN_STYLES.pattern})")


def colours_only(line: str) -> str:
    """A line written to stderr with the console log lines' colours kept and everything
    else a terminal would obey shown (``shared.terminal_text``): the log lines' values are
    shown already; whatever else reaches stderr is shown here."""
    parts = _OWN_STYLES.split(line)
    return "".join(
        part if index % 2 else shown_line(part, None) for index, part in enumerate(parts)
    )


class Above(io.TextIOBase):
    """Lines written to stderr while the view is live: printed above the live area, each
    as one line (the terminal wraps it, so it stays one line to copy)."""

    def __init__(self, console: Console, original: TextIO) -> None:
        self._console = console
        self._original = original
        self._pending = ""

    def write(self, text: str) -> int:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            self._console.print(Text.from_ansi(colours_only(line)), soft_wrap=True)
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.write("\n")

    def isatty(self) -> bool:
        return self._original.isatty()


class FollowStderr(io.TextIOBase):
    """Whatever ``sys.stderr`` is when written to: the trace reaches the live view's
    redirect (it prints log records above the live area) instead of drawing through it."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()
