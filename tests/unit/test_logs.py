"""Logs are an interface: the fields every record has, levels, and secrets kept out."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import io
import json
import logging
import warnings
from collections.abc import MutableMapping
from typing import Any

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from replywire.runtime.logs import (
    MAX_FLUSH_DELAY_MS,
    REDACTED,
    JsonLine,
    TraceWriter,
    _iso_utc,
    configure_logging,
    flush_delay_ms,
    register_secret,
)


def records(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_the_interface_fields() -> None:
    out = io.StringIO()
    configure_logging("producer", log_format="json", stream=out)
    structlog.contextvars.bind_contextvars(stream_id="abc")
    structlog.get_logger().info("state_changed", from_state="received", to_state="verified")
    (record,) = records(out)
    assert record["event"] == "state_changed"
    assert record["level"] == "info"
    assert record["side"] == "producer"
    assert record["stream_id"] == "abc"
    assert isinstance(record["timestamp"], str) and record["timestamp"].endswith("Z")


def test_stream_id_is_null_outside_a_stream() -> None:
    out = io.StringIO()
    configure_logging("consumer", log_format="json", stream=out)
    structlog.get_logger().warning("started")
    assert records(out)[0]["stream_id"] is None


def test_auto_is_json_off_a_tty_and_console_renders_text() -> None:
    out = io.StringIO()
    configure_logging("consumer", log_format="auto", stream=out)
    structlog.get_logger().info("hello")
    assert records(out)[0]["event"] == "hello"
    text = io.StringIO()
    configure_logging("consumer", log_format="console", stream=text)
    structlog.get_logger().info("hello")
    assert "hello" in text.getvalue()
    with pytest.raises(json.JSONDecodeError):
        json.loads(text.getvalue())


def test_level_filters_debug() -> None:
    out = io.StringIO()
    configure_logging("consumer", log_format="json", level="info", stream=out)
    structlog.get_logger().debug("chunk_received")
    structlog.get_logger().info("kept")
    assert [r["event"] for r in records(out)] == ["kept"]
    with pytest.raises(ValueError):
        configure_logging("consumer", level="loud")


def test_secrets_never_reach_a_record() -> None:
    out = io.StringIO()
    configure_logging("producer", log_format="json", stream=out)
    register_secret("AIzaSy-test-secret-value")
    log = structlog.get_logger()
    log.info("request", api_key="AIzaSy-test-secret-value", headers={"x-goog-api-key": "k"})
    log.error("failed", detail="url ...?key=AIzaSy-test-secret-value&alt=sse")
    text = out.getvalue()
    assert "AIzaSy-test-secret-value" not in text
    first, second = records(out)
    assert first["api_key"] == REDACTED
    assert first["headers"] == {"x-goog-api-key": REDACTED}
    assert second["detail"] == f"url ...?key={REDACTED}&alt=sse"


@pytest.mark.parametrize("log_format", ["json", "console"])
def test_tracebacks_are_rendered_and_scrubbed_on_both_paths(log_format: str) -> None:
    out = io.StringIO()
    configure_logging("producer", log_format=log_format, stream=out)  # type: ignore[arg-type]
    register_secret("AIzaSy-traceback-secret")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # structlog warns when format_exc_info precedes a console
        try:
            raise RuntimeError("upstream said key=AIzaSy-traceback-secret")
        except RuntimeError:
            structlog.get_logger().exception("stream_failed")
    text = out.getvalue()
    assert "AIzaSy-traceback-secret" not in text
    assert f"RuntimeError: upstream said key={REDACTED}" in text
    if log_format == "json":
        (record,) = records(out)
        assert "Traceback (most recent call last)" in str(record["exception"])


def test_a_batched_trace_writes_a_loop_pass_at_once_and_before_the_loop_waits() -> None:
    out = io.StringIO()
    configure_logging("producer", log_format="json", stream=out, batched=True, flush_delay_s=0)
    log = structlog.get_logger()
    seen: list[int] = []

    async def scenario() -> None:
        log.info("first")
        log.info("second")
        seen.append(len(records(out)))  # the same pass: not written yet
        await asyncio.sleep(0)  # the loop's next pass wrote both
        seen.append(len(records(out)))
        log.info("third")
        await asyncio.sleep(0.01)  # the loop waited: written before it did
        seen.append(len(records(out)))
        await asyncio.get_running_loop().run_in_executor(None, log.info, "from_a_thread")
        seen.append(len(records(out)))  # another thread's record: at once

    asyncio.run(scenario())
    assert seen == [0, 2, 3, 4]
    assert [r["event"] for r in records(out)] == ["first", "second", "third", "from_a_thread"]


@pytest.mark.parametrize("delay_s", [0, 0.005])
def test_a_batched_trace_keeps_what_a_closed_loop_left_for_the_next_writer(delay_s: float) -> None:
    out = io.StringIO()
    configure_logging(
        "consumer", log_format="json", stream=out, batched=True, flush_delay_s=delay_s
    )
    log = structlog.get_logger()
    loop = asyncio.new_event_loop()

    def last_words() -> None:
        log.info("before_close")  # its flush is scheduled on a loop that never runs again
        loop.stop()

    loop.call_soon(last_words)
    loop.run_forever()
    loop.close()
    assert records(out) == []

    async def next_loop() -> None:
        log.info("in_the_next_loop")
        await asyncio.sleep(delay_s * 2)

    asyncio.run(next_loop())
    assert [r["event"] for r in records(out)] == ["before_close", "in_the_next_loop"]
    log.info("outside_a_loop")  # no loop: at once
    assert records(out)[-1]["event"] == "outside_a_loop"


class SteppedLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock moves only when the test moves it (``now``): its timers
    fire at exactly the instant they were set for, whatever the machine's load."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def time(self) -> float:
        return self.now


async def passes(count: int = 3) -> None:
    """Let the loop run a few passes (the clock standing still)."""
    for _ in range(count):
        await asyncio.sleep(0)


def test_a_batched_trace_holds_records_for_the_delay_at_most_and_a_full_batch_not_at_all() -> None:
    out = io.StringIO()
    writer = TraceWriter(out, flush_delay_s=0.05, max_batch=3)
    renderer = JsonLine("producer")
    seen: list[int] = []
    loop = SteppedLoop()

    async def scenario() -> None:
        writer.keep(renderer, {"event": "first", "timestamp": 0.0})  # kept at 0.0
        writer.msg('{"event":"second"}')
        await passes()  # passes later: still held (the delay has not passed)
        seen.append(len(records(out)))
        loop.now = 0.049
        await passes()
        seen.append(len(records(out)))  # still held, a moment before the delay
        loop.now = 0.05
        await passes()
        seen.append(len(records(out)))  # written once the delay passed, not later
        for n in range(3):  # the third fills the batch: all three at once
            writer.msg(json.dumps({"event": f"bound_{n}"}))
            seen.append(len(records(out)))

    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert seen == [0, 0, 2, 2, 2, 5]
    assert records(out)[0] == {"event": "first", "timestamp": "1970-01-01T00:00:00Z",
                               "side": "producer", "stream_id": None}  # fmt: skip
    with pytest.raises(ValueError):
        TraceWriter(out, flush_delay_s=-1)
    with pytest.raises(ValueError):
        TraceWriter(out, max_batch=0)


@pytest.mark.parametrize("held", [True, False])
def test_a_held_record_is_the_one_structlog_s_own_chain_renders(held: bool) -> None:
    """The trace logger's shorter way (fields kept, rendered with the batch; or at once,
    with a list among them) gives the same record as structlog's filtering logger running
    the configured chain."""
    out = io.StringIO()
    configure_logging("producer", log_format="json", stream=out, batched=True, flush_delay_s=0)
    config = structlog.get_config()
    plain = structlog.wrap_logger(
        config["logger_factory"](),
        processors=config["processors"],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
    )
    fast = structlog.get_logger()
    register_secret("s3cr3t-value")
    fields: dict[str, object] = {
        "from_state": "a",
        "to_state": None,
        "bytes": 3,
        "share": 0.5,
        "flag": True,
        "note": "has s3cr3t-value in it",
        "token": "abc",
    }
    if not held:
        fields["items"] = [1, "s3cr3t-value"]

    async def scenario() -> None:
        structlog.contextvars.bind_contextvars(stream_id="s-1")
        for logger in (plain, fast):
            logger.bind(case_id="c").info("state_changed", **fields)
            logger.debug("not_written")
        await asyncio.sleep(0.01)

    asyncio.run(scenario())
    structlog.contextvars.clear_contextvars()
    first, second = records(out)
    assert str(first.pop("timestamp")) <= str(second.pop("timestamp"))
    assert first == second
    assert first["note"] == "has [redacted] in it" and first["token"] == REDACTED
    assert first["stream_id"] == "s-1" and first.get("items", [1, REDACTED]) == [1, REDACTED]


def test_a_record_with_a_value_that_can_change_is_rendered_at_once() -> None:
    out = io.StringIO()
    configure_logging("consumer", log_format="json", stream=out, batched=True)
    log = structlog.get_logger()
    kept: list[object] = []

    async def scenario() -> None:
        items = ["before"]
        log.info("listed", items=items)
        items.append("after")  # the record says what was logged
        log.info("fixed", count=1)
        kept.extend(writer._lines)
        await asyncio.sleep(0.02)

    writer: TraceWriter = structlog.get_config()["logger_factory"]()

    asyncio.run(scenario())
    assert [type(item) for item in kept] == [str, tuple]  # rendered, held as fields
    assert [(r["event"], r.get("items")) for r in records(out)] == [
        ("listed", ["before"]),
        ("fixed", None),
    ]


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0), ("5", 5), (str(MAX_FLUSH_DELAY_MS), MAX_FLUSH_DELAY_MS),  # at the bounds
     (str(MAX_FLUSH_DELAY_MS + 1), None), ("-1", None), ("0.5", None), ("soon", None)],
)  # fmt: skip
def test_the_trace_flush_delay_is_whole_ms_within_its_bound(text: str, value: int | None) -> None:
    if value is None:
        with pytest.raises(argparse.ArgumentTypeError):
            flush_delay_ms(text)
    else:
        assert flush_delay_ms(text) == value


def test_a_held_record_that_cannot_be_rendered_is_named_and_the_batch_is_written() -> None:
    out = io.StringIO()
    writer = TraceWriter(out, flush_delay_s=0)
    renderer = JsonLine("consumer")
    writer.keep(renderer, {"event": "broken", "timestamp": "not seconds"})
    writer.keep(renderer, {"event": "fine", "timestamp": 0.0})
    writer.flush()
    broken, fine = records(out)
    assert broken == {"event": "trace_record_unrendered", "record_event": "broken",
                      "error": "TypeError", "level": "error"}  # fmt: skip
    assert fine["event"] == "fine"


@given(st.floats(min_value=0, max_value=2.0**33, allow_nan=False), st.integers(0, 2**33))
def test_a_record_s_timestamp_is_the_datetime_iso_text_of_its_seconds(
    seconds: float, whole: int
) -> None:
    """The per-second cache gives datetime's own text (rounded half to even, to the
    microsecond, ``.ffffff`` left out at zero), for any seconds and across seconds."""
    for value in (seconds, whole + 0.0000005, whole + 0.9999995, float(whole), seconds):
        expected = datetime.datetime.fromtimestamp(value, tz=datetime.UTC).isoformat()
        assert _iso_utc(value) == expected.replace("+00:00", "Z")


def test_a_processor_between_the_stream_context_and_the_line_runs_on_the_shorter_way() -> None:
    """A chain with a processor of its own between ``merge_contextvars`` and ``JsonLine``
    (the benchmark's first-chunk clock) keeps the shorter way: the processor sees every
    record with its stream context, may change it or drop it (``DropEvent``)."""
    out = io.StringIO()
    configure_logging("consumer", log_format="json", stream=out, batched=True, flush_delay_s=0)
    merge, line = structlog.get_config()["processors"]
    seen: list[tuple[str, object]] = []

    def note(logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> Any:
        seen.append((event_dict["event"], event_dict.get("stream_id")))
        if event_dict["event"] == "dropped":
            raise structlog.DropEvent
        event_dict["noted"] = True
        return event_dict

    structlog.configure(processors=[merge, note, line])

    async def scenario() -> None:
        structlog.contextvars.bind_contextvars(stream_id="s-2")
        log = structlog.get_logger()
        log.info("kept")
        log.info("dropped")
        log.debug("below_the_level")
        await asyncio.sleep(0.01)

    asyncio.run(scenario())
    structlog.contextvars.clear_contextvars()
    assert seen == [("kept", "s-2"), ("dropped", "s-2")]
    (record,) = records(out)
    assert (record["event"], record["noted"], record["stream_id"]) == ("kept", True, "s-2")
