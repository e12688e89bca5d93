"""What the consumer core keeps of a long reply while it streams: the content as a few joined
parts and the per-delta events as runs of integers, giving the same text and the same
events as one part and one event object per frame would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from replywire.shared.consumer_content import JOIN_EVERY, Content, EventLog
from replywire.shared.result import DuplicateDropped, Event, TerminalReceived, content_received


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=8), max_size=5 * JOIN_EVERY))
def test_the_content_is_every_part_in_order_and_its_parts_stay_few(texts: list[str]) -> None:
    content = Content()
    for text in texts:
        content.append(text, text.encode("utf-8", "surrogatepass"))
    assert content.text == "".join(texts)
    assert (content.frames, content.characters) == (len(texts), sum(map(len, texts)))
    assert len(content._parts) <= len(texts) // JOIN_EVERY + JOIN_EVERY


def test_a_long_reply_is_held_in_a_part_per_join() -> None:
    content = Content()
    for _ in range(10 * JOIN_EVERY):
        content.append("abc", b"abc")
    assert len(content._parts) == 10 and content.text == "abc" * 10 * JOIN_EVERY


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["content", "duplicate", "terminal"]), max_size=200))
def test_the_event_log_gives_the_events_in_the_order_they_happened(kinds: list[str]) -> None:
    log, expected = EventLog(), list[Event]()
    sequence = characters = 0
    for kind in kinds:
        if kind == "content":
            sequence, characters = sequence + 1, characters + 3
            log.content(sequence, characters)
            expected.append(content_received(sequence, characters))
        elif kind == "duplicate":
            event = DuplicateDropped(max(sequence, 1))
            log.append(event)
            expected.append(event)
        else:
            terminal = TerminalReceived("done", sequence + 1)
            log.append(terminal)
            expected.append(terminal)
    assert log.events() == tuple(expected)


def test_deltas_not_in_sequence_start_a_run_of_their_own() -> None:
    log = EventLog()
    for sequence, characters in ((1, 2), (2, 4), (5, 9), (6, 10)):
        log.content(sequence, characters)
    assert [e.to_dict()["sequence"] for e in log.events()] == [1, 2, 5, 6]
    assert [e.to_dict()["characters_received"] for e in log.events()] == [2, 4, 9, 10]
