"""The trace on a terminal: one short line per record, exactly; a slow reader's pauses
summarised per episode (every record at debug); the JSON trace unchanged."""

from __future__ import annotations

import contextlib
import io
import json
import re
from typing import Any

import pytest
import structlog

from replywire.runtime.console_logs import ConsoleLines
from replywire.runtime.logs import configure_logging

STREAM = "5f1c0de0a1b2c3d4e5f6"


class FakeTTY(io.StringIO):
    """A terminal, as far as configure_logging asks."""

    def isatty(self) -> bool:
        return True


def record(millis: int, event: str, **fields: Any) -> dict[str, Any]:
    return {
        "side": "consumer",
        "stream_id": STREAM,
        "case_id": "replace-file",
        "level": "info",
        "timestamp": f"2026-11-30T09:18:{55 + millis // 1000:02d}.{millis % 1000:03d}000Z",
        "event": event,
        **fields,
    }


def pause(millis: int, paused_ms: float) -> list[dict[str, Any]]:
    """The four records of one pause of the consumer's reader, as client.Reader logs them."""
    reader = {"component": "reader"}
    end = millis + int(paused_ms)
    return [
        record(millis, "reads_paused", **reader, queue_depth=8, chunks_read=13),
        record(
            millis,
            "state_changed",
            **reader,
            from_state="streaming",
            to_state="paused",
            input="queue_full",
        ),
        record(
            end,
            "state_changed",
            **reader,
            from_state="paused",
            to_state="streaming",
            input="queue_drained",
        ),
        record(end, "reads_resumed", **reader, paused_ms=paused_ms),
    ]


def render(renderer: ConsoleLines, records: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for one in records:
        with contextlib.suppress(structlog.DropEvent):
            lines += renderer(None, one["level"], dict(one)).splitlines()
    return lines


OPENING = record(
    1,
    "stream_opening",
    target="127.0.0.1:50061",
    mode="stream",
    queue_size=8,
    window_bytes=65536,
    resume_attempts=3,
)
FIRST = record(
    2,
    "state_changed",
    component="reader",
    from_state="connecting",
    to_state="streaming",
    input="first_message",
)
TERMINAL = record(
    900,
    "state_changed",
    component="core",
    from_state="streaming",
    to_state="terminal_received",
    input="terminal_frame",
    reason=None,
    sequence=10,
)
FINISHED = record(
    901,
    "stream_finished",
    status="complete",
    reason=None,
    bytes_received=943,
    transport_fragments=943,
    application_frames=10,
    reconnects=0,
    discarded_bytes=0,
)


def test_a_record_is_one_short_line_event_and_change_first() -> None:
    lines = render(ConsoleLines(colors=False), [OPENING, FIRST, TERMINAL, FINISHED])
    assert lines == [
        "09:18:55.001 stream_opening case_id=replace-file target=127.0.0.1:50061 mode=stream "
        "queue_size=8 window_bytes=65536 resume_attempts=3 · 5f1c0de0",
        "09:18:55.002 state_changed reader: connecting -> streaming input=first_message · 5f1c0de0",
        "09:18:55.900 state_changed core: streaming -> terminal_received input=terminal_frame "
        "sequence=10 · 5f1c0de0",
        "09:18:55.901 stream_finished status=complete bytes_received=943 transport_fragments=943 "
        "application_frames=10 · 5f1c0de0",
    ]


def test_context_is_shown_again_only_when_it_changes_and_never_side_or_none() -> None:
    renderer = ConsoleLines(colors=False)
    producer = {"side": "producer", "stream_id": "s1", "level": "info"}
    records: list[dict[str, Any]] = [
        {**producer, "timestamp": "2026-11-30T09:18:55.331382Z", "event": "state_changed",
         "from_state": None, "to_state": "received", "case_id": "replace-file",
         "peer": "ipv4:127.0.0.1:53166"},
        {**producer, "timestamp": "2026-11-30T09:18:55.331787Z", "event": "state_changed",
         "from_state": "received", "to_state": "verified", "case_id": "replace-file",
         "peer": "ipv4:127.0.0.1:53166", "chunks": "1,2,7,3,11", "fault": None,
         "wire": "ndjson-lab"},
        {**producer, "timestamp": "2026-11-30T09:18:55.358399Z", "event": "state_changed",
         "from_state": "streaming", "to_state": "completed", "case_id": "replace-file",
         "peer": "ipv4:127.0.0.1:53999", "bytes_sent": 1427, "chunks_sent": 299},
        {"side": "producer", "stream_id": None, "level": "warning",
         "timestamp": "2026-11-30T09:18:56.000000Z", "event": "producer_listening",
         "recording_sha256": "f018294e73fd2e5dcb8d770475ee3d0c8a8c5c1a7ab0bec4bb908ff656a0cf35",
         "detail": "two words", "empty": ""},
    ]  # fmt: skip
    assert render(renderer, records) == [
        "09:18:55.331 state_changed -> received case_id=replace-file peer=ipv4:127.0.0.1:53166 "
        "· s1",
        "09:18:55.331 state_changed received -> verified chunks=1,2,7,3,11 wire=ndjson-lab · s1",
        "09:18:55.358 state_changed streaming -> completed peer=ipv4:127.0.0.1:53999 "
        "bytes_sent=1427 chunks_sent=299 · s1",
        "09:18:56.000 WARNING producer_listening recording_sha256=f018294e73fd… "
        "detail='two words' empty=''",
    ]


def test_the_trace_id_is_context_and_the_span_id_is_left_to_the_json_trace() -> None:
    ids = {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}
    records = [
        record(0, "stream_opening", **ids, span_id="00f067aa0ba902b7"),
        record(1, "stream_finished", **ids, span_id="b7ad6b7169203331", status="complete"),
    ]
    assert render(ConsoleLines(colors=False), records) == [
        "09:18:55.000 stream_opening case_id=replace-file "
        "trace_id=4bf92f3577b34da6a3ce929d0e0e4736 · 5f1c0de0",
        "09:18:55.001 stream_finished status=complete · 5f1c0de0",
    ]


def test_a_pause_episode_is_one_record_with_its_count_and_duration() -> None:
    episode = [one for start in (10, 20, 30) for one in pause(start, 2.5)]
    lines = render(ConsoleLines(colors=False), [OPENING, FIRST, *episode, TERMINAL])
    assert lines[2:] == [
        "09:18:55.010 reads_paused_episode pauses=3 paused_ms=7.5 over_ms=22.0 · 5f1c0de0",
        "09:18:55.900 state_changed core: streaming -> terminal_received input=terminal_frame "
        "sequence=10 · 5f1c0de0",
    ]


def test_pauses_far_apart_are_separate_episodes_and_other_streams_do_not_end_one() -> None:
    other = {**FIRST, "stream_id": "another-stream-id"}
    records = [*pause(10, 1), other, *pause(20, 1), *pause(1500, 1), FINISHED]
    lines = render(ConsoleLines(colors=False), records)
    assert lines == [
        "09:18:55.002 state_changed reader: connecting -> streaming input=first_message "
        "case_id=replace-file · another-",
        "09:18:55.010 reads_paused_episode pauses=2 paused_ms=2.0 over_ms=11.0 · 5f1c0de0",
        "09:18:56.500 reads_paused_episode pauses=1 paused_ms=1.0 over_ms=1.0 · 5f1c0de0",
        "09:18:55.901 stream_finished status=complete case_id=replace-file bytes_received=943 "
        "transport_fragments=943 application_frames=10 · 5f1c0de0",
    ]


def test_at_debug_every_pause_record_is_printed() -> None:
    lines = render(ConsoleLines(colors=False, summarise_pauses=False), [*pause(10, 2), TERMINAL])
    assert [line.split(" ", 2)[1] for line in lines] == [
        "reads_paused",
        "state_changed",
        "state_changed",
        "reads_resumed",
        "state_changed",
    ]
    assert "reader: streaming -> paused input=queue_full" in lines[1]


def log_pauses(count: int) -> None:
    """``count`` pauses of one stream's reader through the configured logger, then its end."""
    structlog.contextvars.bind_contextvars(stream_id=STREAM)
    log = structlog.get_logger().bind(case_id="replace-file", component="reader")
    for _ in range(count):
        log.info("reads_paused", queue_depth=8, chunks_read=13)
        log.info("state_changed", from_state="streaming", to_state="paused", input="queue_full")
        log.info("state_changed", from_state="paused", to_state="streaming", input="queue_drained")
        log.info("reads_resumed", paused_ms=0.5)
    log.info("state_changed", from_state="streaming", to_state="ended", input="ended", why="eof")
    structlog.contextvars.clear_contextvars()


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_a_slow_reader_on_a_terminal_is_two_lines_and_its_json_trace_keeps_every_pause() -> None:
    tty = FakeTTY()
    configure_logging("consumer", log_format="auto", stream=tty)
    log_pauses(900)
    lines = ANSI.sub("", tty.getvalue()).splitlines()
    assert len(lines) == 2
    assert re.fullmatch(
        r"\d\d:\d\d:\d\d\.\d{3} reads_paused_episode pauses=900 paused_ms=450\.0 over_ms=\S+ "
        r"· 5f1c0de0",
        lines[0],
    )
    assert lines[1].endswith(
        "state_changed reader: streaming -> ended input=ended case_id=replace-file why=eof "
        "· 5f1c0de0"
    )
    assert "\x1b[" in tty.getvalue(), "a terminal gets colours"

    out = io.StringIO()
    configure_logging("consumer", log_format="auto", stream=out)
    log_pauses(900)
    events = [json.loads(line)["event"] for line in out.getvalue().splitlines()]
    assert events.count("reads_paused") == events.count("reads_resumed") == 900
    assert events.count("state_changed") == 1801


def test_at_debug_the_terminal_shows_every_pause() -> None:
    tty = FakeTTY()
    configure_logging("consumer", log_format="console", level="debug", stream=tty)
    log_pauses(5)
    assert len(tty.getvalue().splitlines()) == 21


@pytest.mark.parametrize("colors", [False, True])
def test_an_exception_is_rendered_under_its_line(colors: bool) -> None:
    renderer = ConsoleLines(colors=colors)
    try:
        raise RuntimeError("boom")
    except RuntimeError as error:
        text = renderer(None, "error", record(5, "reader_failed", level="error", exc_info=error))
    first, *rest = ANSI.sub("", text).splitlines()
    assert first == "09:18:55.005 ERROR reader_failed case_id=replace-file · 5f1c0de0"
    assert rest[0] == "Traceback (most recent call last):"
    assert rest[-1] == "RuntimeError: boom"
