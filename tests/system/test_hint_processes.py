"""Hints that name the real cause, against real producer processes: a producer killed
during ``--fault stall`` went away (the stall did not do it), and a question sent to the
recording producer says which source answers questions."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from replywire.consumer.client import stream_reply
from replywire.consumer.explain import Facts, hint
from replywire.consumer.options import StreamOptions
from replywire.runtime.recording_file import load_recording
from replywire.shared.faults import Fault, FaultKind
from replywire.shared.questions import build_question_binding
from replywire.shared.requests import ReplyRequest
from replywire.shared.result import StreamResult
from replywire.shared.status import Status
from replywire.shared.wire.chunking import ChunkPlan
from tests.processes import producer

pytestmark = pytest.mark.timeout(120)


def test_a_producer_killed_during_a_stall_is_said_to_have_gone(tmp_path: Path) -> None:
    stall = Fault(kind=FaultKind.STALL, target_frame=2, stall_ms=60_000)
    request = ReplyRequest.for_case(
        load_recording(),
        "replace-file",
        stream_id="hint-stall-kill",
        fault=stall,
        plan=ChunkPlan.parse("20"),
    )
    with producer(tmp_path, "--allow-faults") as served:
        options = StreamOptions(
            target=served.target, resume_attempts=1, resume_backoff_s=0.05, idle_timeout_s=60
        )

        async def kill_in_the_stall() -> None:
            await asyncio.sleep(1.5)  # the first frame is out; the producer stalls 60 s
            os.kill(served.process.pid, signal.SIGKILL)

        async def run() -> StreamResult:
            killer = asyncio.create_task(kill_in_the_stall())
            result = await stream_reply(request, options)
            await killer
            return result

        result = asyncio.run(run())
    assert (result.status, result.reason) == (Status.ERROR, "transport_io_error")
    assert result.stats.bytes_received > 0
    said = hint(result, Facts(target=served.target, fault="stall"))
    assert said is not None and "asked the producer" not in said
    assert said.startswith(
        f"the producer at {served.target} went away during the stall and a resume did not "
        "mend it (--fault stall only pauses it); is it still running?"
    ), said


def test_a_question_to_the_recording_producer_names_the_source_that_answers(
    tmp_path: Path,
) -> None:
    binding = build_question_binding(
        "Does write_text overwrite?",
        [{"id": "p1", "text": "It overwrites the file.", "url": "https://example.org/p1"}],
    )
    request = ReplyRequest(case_id=binding["case_id"], binding=binding, stream_id="hint-question")
    with producer(tmp_path) as served:  # the recording source, as `make run-producer` starts
        result = asyncio.run(stream_reply(request, StreamOptions(target=served.target)))
    assert (result.status, result.reason) == (Status.REFUSED, "development_case_required")
    port = served.target.rsplit(":", 1)[1]
    assert hint(result, Facts(target=served.target)) == (
        "this producer's source answers no questions: start it with "
        f'`make run-producer PORT={port} ARGS="--source gemini"`'
    )
