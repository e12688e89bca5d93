"""A hostile producer for tests: ``python -m tests.hostile_producer --port 0``.

A real grpc.aio server that speaks ``replywire.v1.ReplyStream`` as a producer under a
hostile model (or a hostile peer) would: its frames are well formed and bound to the
request (the binding digest of the bytes the consumer sent), so the consumer judges
them, but the text they carry holds what a terminal would obey. Which reply it sends is
chosen by a word in the request's stream id:

* ``answer``: a reply that is valid JSON whose answer holds every hostile sequence
  JSON-escaped (``\\u001b``), citing the first passage of the consumer's own context;
  the consumer accepts it (``complete``);
* ``provisional``: content deltas with the hostile sequences raw (one delta ends with a
  lone ESC, the next begins with the rest of its sequence), a pause after each so a live
  view draws them, then ``done``: refused ``invalid`` / ``invalid_answer_json``;
* ``error``: a few such deltas, then an error terminal whose reason is hostile text
  (``error`` / ``unregistered_error_terminal``, the text under ``detail``);
* ``abort``: no frame; the call ends ``INTERNAL`` with hostile status details;
* ``chat-…`` (a chat binding for the fake model ``fake-chat-turn``): that model's turn as
  the producer makes it (the fake's script through the source's chat adapter), altered on
  the way and renumbered, its ``done`` the true turn's: ``chat-intact`` unaltered,
  ``chat-drop-call`` without call 1's frame, ``chat-swap`` with its text and the usage
  after it swapped, ``chat-swap-calls`` with call 1 before call 0 (and its signature).

Prints ``listening on 127.0.0.1:PORT`` when it serves; stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any, Final

import grpc

from replywire.shared.digest import canonical_digest
from replywire.shared.frames import Frame, FrameKind, frames_from_deltas
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.wire import WireFormat, codec_for
from replywire.shared.wire.lp import encode_frame

#: Each kind of sequence a terminal would obey, and text that would be read as markup.
CSI: Final = "\x1b[2J"  # clear the screen
SGR: Final = "\x1b[31mRED"  # a colour
OSC_BEL: Final = "\x1b]0;PWNED\x07"  # the window title, BEL-terminated
OSC_ST: Final = "\x1b]52;c;cHduZWQ=\x1b\\"  # write the clipboard, ST-terminated
C1_CSI: Final = "\x9b2J"  # the one-byte CSI
BIDI: Final = "\u202eevil\u202c \u2066iso\u2069"  # an override and an isolate
OTHERS: Final = "del\x7f cr\r nel\x85 nul\x00"
MARKUP: Final = "[bold]not bold[/bold]"
HOSTILE: Final = (CSI, SGR, OSC_BEL, OSC_ST, C1_CSI, BIDI, OTHERS, MARKUP)

#: The accepted answer: one hostile piece a line.
ANSWER: Final = "Yes, it is overwritten.\n" + "\n".join(HOSTILE)
#: The raw deltas of the refused reply: a lone ESC ends one, its sequence begins the next.
PROVISIONAL_DELTAS: Final = (
    "Provisional " + OSC_BEL + "\n",
    CSI + SGR + "\n" + C1_CSI + "\n",
    BIDI + "\n" + "lone ESC next:\x1b",
    "[2J" + OSC_ST + "\n" + MARKUP + "\n",
    OTHERS,
)
ERROR_REASON: Final = "boom " + OSC_BEL + CSI + C1_CSI + BIDI + "\nsecond line"
ABORT_DETAILS: Final = "aborted " + OSC_ST + SGR + C1_CSI + BIDI
#: The pause after each delta of the refused reply (a live view draws 12 times a second),
#: and after the one that ends with a lone ESC (drawn several times, even on a busy host).
PAUSE_S: Final = 0.2
HELD_S: Final = 0.8


def _reply_deltas(binding: dict[str, Any]) -> list[str]:
    cited = binding["selected_context"][0]["source_id"]
    reply = {"status": "answered", "answer": ANSWER, "source_ids": [cited]}
    text = json.dumps(reply)  # ASCII: every hostile character JSON-escaped
    return [text[i : i + 40] for i in range(0, len(text), 40)]


def _chat_turn(binding_json: bytes) -> list[Frame]:
    """The fake model's chat turn for this binding, as the Gemini source frames it."""
    import structlog  # noqa: PLC0415 - only the chat words need the producer's adapter

    from harness.fake_gemini.checks import validate  # noqa: PLC0415
    from harness.fake_gemini.scripts import Scripts  # noqa: PLC0415
    from replywire.producer.sources.gemini.chat import ChatFrames, chat_request_body  # noqa: PLC0415
    from replywire.producer.sources.gemini.protocol import ProviderStream  # noqa: PLC0415

    binding = json.loads(binding_json)
    model = binding["request"]["model"]
    body = json.loads(json.dumps(chat_request_body(binding, max_output_tokens=1024)))
    stream = ProviderStream(
        canonical_digest(binding_json), structlog.get_logger(), adapter_type=ChatFrames
    )
    frames: list[Frame] = []
    for step in Scripts().plan(validate(model, body), {"headers": {}}):
        frames += stream.receive_data(step.data)
    return frames + stream.end_of_input()


def _index_of(frames: list[Frame], kind: FrameKind, call: int | None = None) -> int:
    return next(
        i
        for i, frame in enumerate(frames)
        if frame.kind is kind and (call is None or getattr(frame.part, "index", None) == call)
    )


def _altered(frames: list[Frame], word: str) -> list[Frame]:
    """The turn's frames altered as ``word`` says, renumbered from 1 (its done unchanged)."""
    frames = list(frames)
    if word == "chat-drop-call":
        del frames[_index_of(frames, FrameKind.TOOL_CALL, 1)]
    elif word == "chat-swap":
        text = _index_of(frames, FrameKind.CONTENT_DELTA)
        frames[text], frames[text + 1] = frames[text + 1], frames[text]
    elif word == "chat-swap-calls":
        first, second = (_index_of(frames, FrameKind.TOOL_CALL, c) for c in (0, 1))
        frames[first : second + 1] = [frames[second], *frames[first:second]]
    return [replace(frame, sequence=n) for n, frame in enumerate(frames, start=1)]


class Hostile(pb_grpc.ReplyStreamServicer):
    async def Open(  # noqa: N802 - the generated servicer's name
        self, request: pb.OpenRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.Chunk]:
        bound = canonical_digest(request.binding_json)
        name = request.stream_id
        if "abort" in name:
            await context.abort(grpc.StatusCode.INTERNAL, ABORT_DETAILS)
        if name.startswith("chat-"):
            ndjson = request.wire_format == pb.NDJSON
            codec = codec_for(WireFormat.NDJSON if ndjson else WireFormat.LENGTH_PREFIXED)
            for frame in _altered(_chat_turn(request.binding_json), name):
                yield pb.Chunk(data=codec.encode_frame(frame))
            return
        if "answer" in name:
            deltas, pause, ending = _reply_deltas(json.loads(request.binding_json)), 0.0, None
        elif "provisional" in name:
            deltas, pause, ending = list(PROVISIONAL_DELTAS), PAUSE_S, None
        elif "error" in name:
            deltas, pause, ending = list(PROVISIONAL_DELTAS[:2]), PAUSE_S, ERROR_REASON
        else:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "invalid_request")
        if ending is None:
            frames = frames_from_deltas(bound, deltas)
        else:
            frames = frames_from_deltas(bound, deltas, FrameKind.ERROR, ending)
        for frame in frames:
            yield pb.Chunk(data=encode_frame(frame))
            if pause:
                held = isinstance(frame.text, str) and frame.text.endswith("\x1b")
                await asyncio.sleep(HELD_S if held else pause)

    async def Cancel(  # noqa: N802
        self, request: pb.CancelRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CancelReply:
        return pb.CancelReply(cancelled=False)


async def serve(port: int) -> None:
    server = grpc.aio.server()
    pb_grpc.add_ReplyStreamServicer_to_server(Hostile(), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"listening on 127.0.0.1:{bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(grace=0.5)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.hostile_producer")
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(serve(parser.parse_args().port))


if __name__ == "__main__":
    main()
