"""The live view's words without a terminal: every reason code has a sentence and every
status a headline, hints say what to run, a tail keeps the end, and an unknown case is
refused in words while piped output keeps the JSON. (tests/system/test_view_processes.py
draws real streams.)"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from replywire.consumer import cli
from replywire.consumer.explain import HEADLINES, SENTENCES, Facts, hint, sentence, start_producer
from replywire.consumer.view import STREAM_ID_CHARS, final_line, tail
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import Reason
from replywire.shared.result import Stats, StreamResult
from replywire.shared.status import Status
from tests.timeline_reading import rejected_rows

pytestmark = pytest.mark.timeout(120)


def test_every_reason_code_has_a_sentence_and_every_status_a_headline() -> None:
    assert set(SENTENCES) == set(Reason)
    for reason, said in SENTENCES.items():
        assert said[0].isupper() and said.endswith("."), reason
        assert reason.value not in said, "a sentence, not the code again"
    assert len(set(SENTENCES.values())) == len(SENTENCES), "each code says something else"
    assert set(HEADLINES) == set(Status)
    assert sentence(None) == "" and sentence("not_a_code") == "not_a_code"


def failed(reason: Reason, **fields: Any) -> StreamResult:
    return StreamResult(
        status=REASONS[reason].status,
        reason=reason.value,
        case_id="replace-file",
        wire_format="lp",
        **fields,
    )


def test_hints_say_what_to_run() -> None:
    assert (
        hint(failed(Reason.TRANSPORT_IO_ERROR), Facts())
        == "no producer at 127.0.0.1:50051: start one with `make run-producer`"
    )
    tried = failed(Reason.TRANSPORT_IO_ERROR, stats=Stats(reconnects=3))
    assert hint(tried, Facts(target="127.0.0.1:50061")) == (
        "no producer at 127.0.0.1:50061 (tried 4 times): start one with "
        "`make run-producer PORT=50061`"
    )
    unknown = failed(
        Reason.DEVELOPMENT_CASE_REQUIRED,
        detail="unknown case 'replace-fil'; known: utf8-write, replace-file",
    )
    assert hint(unknown, Facts()) == (
        "unknown case 'replace-fil'; known: utf8-write, replace-file (did you mean 'replace-file'?)"
    )
    assert hint(failed(Reason.IDLE_TIMEOUT), Facts(idle_timeout_s=0.5)) == (
        "nothing for 0.5 s; for a slow producer raise --idle-timeout-s"
    )
    assert hint(failed(Reason.INVALID_SEQUENCE), Facts()) is None
    assert start_producer("10.0.0.7:50051", "--allow-faults") == "python -m producer --allow-faults"
    assert start_producer("localhost:50051", "--allow-faults") == (
        'make run-producer ARGS="--allow-faults"'
    )


def test_hints_name_the_real_cause_not_the_fault_or_the_case_list() -> None:
    gone = failed(Reason.TRANSPORT_IO_ERROR, stats=Stats(bytes_received=120, reconnects=1))
    assert hint(gone, Facts(fault="stall")) == (
        "the producer at 127.0.0.1:50051 went away during the stall and a resume did not mend "
        "it (--fault stall only pauses it); is it still running? (`make run-producer`)"
    )
    for reason in (Reason.PRODUCER_SHUTDOWN, Reason.GENERATOR_LOST):
        assert hint(failed(reason, stats=Stats(bytes_received=120)), Facts(fault="omit")) is None
    # A fault that asks for exactly this ending is still named, and so is any other fault.
    assert hint(gone, Facts(fault="transport-abort")) == (
        "--fault transport-abort asked the producer for this: the consumer caught it"
    )
    idle = failed(Reason.IDLE_TIMEOUT, stats=Stats(bytes_received=120))
    assert hint(idle, Facts(fault="stall")) == (
        "--fault stall asked the producer for this: the consumer caught it"
    )
    question = StreamResult(
        status=Status.REFUSED,
        reason=Reason.DEVELOPMENT_CASE_REQUIRED.value,
        case_id="question-0123456789abcdef",
        wire_format="lp",
        detail="unknown case 'question-0123456789abcdef'; known: utf8-write, replace-file",
    )
    assert hint(question, Facts()) == (
        "this producer's source answers no questions: start it with "
        '`make run-producer ARGS="--source gemini"`'
    )
    assert hint(question, Facts(target="10.0.0.7:50051")) == (
        "this producer's source answers no questions: start it with "
        "`python -m producer --source gemini`"
    )


@pytest.mark.parametrize(
    ("stream_id", "shown"),
    [
        ("stall-kill", "stall-kill"),  # a user's own id, whole (it was cut to stall-ki)
        ("x" * STREAM_ID_CHARS, "x" * STREAM_ID_CHARS),
        ("cb8ecba566d841d4b1207bf63a294917", "cb8ecba566d841d4b1207bf…"),  # the consumer's own
        ("run-" + "7" * 124, "run-" + "7" * 19 + "…"),
        ("a\x1b[2Jb", "a\\x1b[2Jb"),  # never obeyed (the rule of shared/terminal_text.py)
    ],
)
def test_the_final_line_shows_the_stream_id_whole_or_with_an_ellipsis(
    stream_id: str, shown: str
) -> None:
    line = final_line(failed(Reason.TRUNCATED_FRAME, stream_id=stream_id), 1.0).plain
    assert line.endswith(f"  stream {shown}")
    assert len(shown) <= STREAM_ID_CHARS


def test_tail_keeps_the_end_and_counts_what_it_left_out() -> None:
    assert tail("short") == ("short", 0)
    text = "\n".join(f"line {n}" for n in range(30))
    shown, hidden = tail(text, lines=3)
    assert shown == "line 27\nline 28\nline 29"
    assert hidden == len(text) - len(shown)


def test_an_unknown_case_is_refused_in_words_and_piped_output_keeps_the_json(
    tmp_path: Path,
) -> None:
    out = io.StringIO()
    argv = ["stream", "--case", "replace-fil", "--view", "--log-level", "critical"]
    assert cli.main(argv, out) == 7
    rows = rejected_rows(out.getvalue(), "not accepted: refused")
    assert rows[:2] == [
        "status  refused · development_case_required",
        "why     The case asked for is not one of the recording's development cases.",
    ]
    said = " ".join(" ".join(rows).split())
    assert "hint unknown case 'replace-fil'; known: utf8-write, replace-file," in said
    assert said.endswith("(did you mean 'replace-file'?)")
    assert "{" not in out.getvalue(), "the view alone: the document goes to --result"
    # With --result the document is written there too; without a view it is stdout alone.
    document = tmp_path / "result.json"
    assert cli.main([*argv, "--result", str(document)], io.StringIO()) == 7
    assert json.loads(document.read_text())["reason"] == "development_case_required"
    piped = io.StringIO()
    assert cli.main(["stream", "--case", "replace-fil", "--log-level", "critical"], piped) == 7
    assert json.loads(piped.getvalue())["reason"] == "development_case_required"
