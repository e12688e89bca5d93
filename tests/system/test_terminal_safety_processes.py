"""Nothing a peer or a model sends reaches a terminal as a control sequence.

The rule (``shared/terminal_text.py``) for any text; then every place that draws text
from elsewhere: the console log lines, ``trace``'s table, the demo table, the view's
pieces; then the real thing: ``python -m consumer`` on a pseudo-terminal against a
hostile producer process (``tests/hostile_producer.py``), and ``python -m replywire``'s
``trace`` and ``join-traces`` fed a hostile trace file.
On the terminal no refused character arrives raw, their visible forms do, and the JSON
(``--result``, the document on stdout, ``join-traces``) holds the exact text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from replywire.shared.errors import scrubbed_detail
from replywire.shared.questions import build_question_binding
from tests import hostile_producer as hostile
from tests.hostile_input import H_SHOWN, TRACE_STREAM, H, hostile_records, refused, stream_id
from tests.processes import consumer_on_a_pty

pytestmark = pytest.mark.timeout(120)


COLUMNS = 160


#: A sequence rich and the log lines write themselves: colours, cursor moves, line erase,
#: cursor shown/hidden. Never a screen clear (J), never OSC, DCS or a one-byte C1 control.
OWN_SEQUENCE = re.compile(r"\x1b\[[0-9;?]*[mABCDGKhl]")


def on_a_pty(argv: list[str], timeout: float = 60.0, module: str = "consumer") -> tuple[int, bytes]:
    """``python -m consumer ARGV`` (or ``MODULE``) on a COLUMNS x 40 pseudo-terminal: its
    exit code and every byte it wrote to the terminal."""
    return consumer_on_a_pty(argv, rows=40, columns=COLUMNS, timeout=timeout, module=module)


def obeys_nothing(written: bytes) -> str:
    """The bytes a terminal received hold no refused character raw and no sequence but
    the consumer's own; what a person reads (own sequences and CRs removed)."""
    text = written.decode("utf-8")  # strict: no lone surrogate, no stray byte
    for raw in ("\x1b]", "\x1b\\", "\x1bP", "\x07", "\x9b", "\x1b[2J", "\x1b[31mRED"):
        assert raw not in text, repr(raw)
    plain = OWN_SEQUENCE.sub("", text)
    assert "\x1b" not in plain, repr(plain[plain.index("\x1b") - 40 :][:80])
    # CR is the terminal's own (the pty's CR LF, rich's redraws); no other refused one.
    assert not [char for char in plain if refused(char, multiline=True) and char != "\r"]
    return plain.replace("\r", "")


#: What a person reads for each hostile piece of the producer (its escapes, as text).
VISIBLE = (
    "\\x1b[2J",
    "\\x1b[31mRED",
    "\\x1b]0;PWNED\\x07",
    "\\x1b]52;c;cHduZWQ=\\x1b\\",
    "\\x9b2J",
    "\\u202eevil\\u202c \\u2066iso\\u2069",
    "del\\x7f cr\\r nel\\x85 nul\\x00",
    "[bold]not bold[/bold]",
)


PASSAGE = {
    "id": "doc\x1b]0;ID\x07\u202e",
    "text": "An existing file is overwritten.",
    "url": "https://example.com/\x1b[2J\u2066x\x9b",
}


def context_file(tmp_path: Path) -> Path:
    path = tmp_path / "context.json"
    path.write_text(json.dumps([PASSAGE]), encoding="utf-8")
    return path


def streamed(
    target: str, tmp_path: Path, scenario: str, *flags: str
) -> tuple[int, str, dict[str, Any]]:
    """``consumer stream --view`` of one scenario, its context hostile too: the exit code,
    what a person reads, the result document."""
    document = tmp_path / f"{scenario}.json"
    code, written = on_a_pty(
        ["stream", "--view", "--target", target, "--question", "Is the file overwritten?",
         "--context", str(context_file(tmp_path)), "--stream-id", scenario,
         "--result", str(document), "--resume-attempts", "0", *flags]
    )  # fmt: skip
    return code, obeys_nothing(written), json.loads(document.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("flag", "other"),
    [("--stream-id", ("--case", "utf8-write")), ("--case", ("--stream-id", "typed"))],
)
def test_an_id_a_person_typed_with_controls_is_refused_before_it_is_drawn(
    hostile_target: str, flag: str, other: tuple[str, str]
) -> None:
    """The protocol's ids are visible ASCII: such a stream id or case is one usage line,
    that does not repeat it, before any connection (so no view, trace or result draws it)."""
    code, written = on_a_pty(
        ["stream", "--view", "--target", hostile_target, *other, flag, stream_id("answer")]
    )  # fmt: skip
    seen = obeys_nothing(written)
    assert code == 2, seen
    assert seen.strip().splitlines() == [
        f"consumer: {flag} is not visible ASCII (the protocol's rule: 0 to 128 visible ASCII)"
    ]


def test_an_accepted_answer_and_its_citations_are_drawn_never_obeyed(
    hostile_target: str, tmp_path: Path
) -> None:
    code, seen, document = streamed(hostile_target, tmp_path, "answer")
    assert (code, document["status"]) == (0, "complete"), seen
    for shown in VISIBLE:
        assert shown in seen, shown
    assert "doc\\x1b]0;ID\\x07\\u202e" in seen  # the citation's id (and chunk id)
    assert "https://example.com/\\x1b[2J\\u2066x\\x9b" in seen  # its URL
    assert "stream answer" in seen  # the stream id the command line was given
    # The data is exact: the document holds the text as the model wrote it.
    assert document["accepted_answer"]["answer"] == hostile.ANSWER
    assert document["citations"][0]["source_id"] == PASSAGE["id"]
    assert document["citations"][0]["url"] == PASSAGE["url"]
    assert document["stream_id"] == "answer"


def test_raw_sequences_streaming_in_are_drawn_never_obeyed_and_refused(
    hostile_target: str, tmp_path: Path
) -> None:
    code, seen, document = streamed(hostile_target, tmp_path, "provisional")
    assert (code, document["status"], document["reason"]) == (6, "invalid", "invalid_answer_json")
    assert document["provisional_content"] == "".join(hostile.PROVISIONAL_DELTAS)
    for shown in VISIBLE:
        assert shown in seen, shown
    # While it streamed: the provisional panel drew the delta that ends with a lone ESC.
    assert re.search(r"lone ESC next:\\x1b +│", seen), "the lone ESC, drawn as its escape"
    assert "provisional: not validated yet" in seen


def test_an_error_terminal_and_a_status_from_the_peer_are_drawn_never_obeyed(
    hostile_target: str, tmp_path: Path
) -> None:
    code, seen, document = streamed(hostile_target, tmp_path, "error")
    assert (code, document["reason"]) == (5, "unregistered_error_terminal")
    assert document["detail"] == scrubbed_detail(hostile.ERROR_REASON)
    said = " ".join(seen.replace("│", " ").split())
    assert "boom \\x1b]0;PWNED\\x07\\x1b[2J\\x9b2J\\u202eevil\\u202c" in said
    assert "\\u2066iso\\u2069\\nsecond line" in said
    code, seen, document = streamed(hostile_target, tmp_path, "abort")
    assert (code, document["reason"]) == (5, "transport_io_error")
    said = " ".join(seen.replace("│", " ").split())
    assert "INTERNAL: aborted \\x1b]52;c;cHduZWQ=\\x1b\\\\x1b[31mRED\\x9b2J\\u202eevil" in said


def test_console_log_lines_and_the_document_on_a_terminal_obey_nothing(
    hostile_target: str, tmp_path: Path
) -> None:
    """No view: the trace's console lines (debug) and the JSON document, both on the
    terminal. (A hostile case id a person types is a usage line: the test above.)"""
    binding = tmp_path / "binding.json"
    passages = [{"id": PASSAGE["id"], "text": PASSAGE["text"], "url": PASSAGE["url"]}]
    binding.write_text(json.dumps(build_question_binding("Q?", passages)), encoding="utf-8")
    case = "question-case"
    code, written = on_a_pty(
        ["stream", "--no-view", "--log-format", "console", "--log-level", "debug",
         "--target", hostile_target, "--case", case, "--binding", str(binding),
         "--stream-id", "provisional"]
    )  # fmt: skip
    seen = obeys_nothing(written)
    assert code == 6, seen
    lines = seen.splitlines()
    opening = next(line for line in lines if " stream_opening " in line)
    assert "case_id=question-case " in opening
    assert "· provisio" in opening  # the stream id, as the console line shows one
    # The document on the terminal: the refused characters as JSON escapes, the same JSON.
    start = lines.index("{")
    document = json.loads("\n".join(lines[start : lines.index("}", start) + 1]))
    assert document["provisional_content"] == "".join(hostile.PROVISIONAL_DELTAS)
    assert document["stream_id"] == "provisional"


def test_trace_and_join_traces_on_a_terminal_obey_nothing(tmp_path: Path) -> None:
    trace = tmp_path / "hostile.jsonl"
    records = [*hostile_records(TRACE_STREAM), *hostile_records("second" + H)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    page = tmp_path / "page.html"
    runs = {
        "table": ["trace", str(trace), "--stream", "<svg/onload", "--out", str(page)],
        "streams": ["trace", str(trace)],
        "unknown": ["trace", str(trace), "--stream", "nothing-like-it"],
        "joined": ["join-traces", str(trace)],
    }
    seen: dict[str, str] = {}
    for name, argv in runs.items():
        code, written = on_a_pty(argv, module="replywire")
        seen[name] = obeys_nothing(written)
        assert code == (2 if name == "unknown" else 0), seen[name]
    assert "note" + H_SHOWN in seen["table"]
    assert "stream <svg/onload=alert(1)>" + H_SHOWN in seen["table"]
    assert "second" + H_SHOWN in seen["streams"]
    assert "streams: <svg/onload=alert(1)>" + H_SHOWN in " ".join(seen["unknown"].split())
    # join-traces: each line is the record exactly (its escapes are JSON's).
    joined = [json.loads(line) for line in seen["joined"].splitlines()]
    assert sorted(map(canonical, joined)) == sorted(map(canonical, records))
    html = page.read_text(encoding="utf-8")
    assert "<svg/onload" not in html and "&lt;svg/onload=alert(1)&gt;" in html


def canonical(record: Mapping[str, Any]) -> str:
    return json.dumps(record, sort_keys=True)
