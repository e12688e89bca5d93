"""``python -m conformance.testee``: the Python core behind the kit's line protocol.

In, one JSON object a line (a whole vector will do: other keys are ignored)::

    {"id": "...", "wire": "lp" | "ndjson" | "ndjson-lab", "binding": {...},
     "chunks": ["<base64>", ...], "end": "eof" | "transport_error",
     "limits": {"max_stream_bytes": 65536, ...}, "ignore_duplicates": false}

Out, one JSON object a line, in the order of the input, each flushed::

    {"id": "...", "status": "...", "reason": ..., "detail": ..., "frames": N, "bytes": N,
     "provisional_content": "...", "accepted_answer": {...} | null, "citations": [...]}

(a chat reply's with its ``turn``, its ``notes`` and, for a call refused, the ``call``),
or ``{"id": <its id, or null>, "error": "<why>"}`` for a line that is not valid input. The
chunks are fed in order until the core refuses one, then the input ends as ``end`` says
(``shared.replay.consume``). ``--mutant NAME`` serves a core with one check turned off
(``conformance.mutants``): a runner that passes it has missed that check.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import sys
from collections.abc import Iterable, Sequence
from typing import IO, Any

from conformance.mutants import MUTANTS, applied, core_is_compiled
from conformance.vectors import chat_keys
from replywire.native import PURE_ENV
from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.consumer_limits import Limits
from replywire.shared.errors import ConfigurationError
from replywire.shared.faults import Ending, Transmission
from replywire.shared.replay import consume
from replywire.shared.vectors import LIMIT_KEYS, WIRES
from replywire.shared.wire import WireFormat


class BadInput(ValueError):
    """A line that is not valid input: answered with ``error``."""


def _limits(limits: object) -> Limits | None:
    if limits is None:
        return None
    if not isinstance(limits, dict) or any(key not in LIMIT_KEYS for key in limits):
        raise BadInput("limits: an object of " + ", ".join(LIMIT_KEYS))
    try:
        return Limits(**limits)
    except ValueError as error:  # a limit that is not a positive integer
        raise BadInput(str(error)) from error


def _request(obj: object) -> tuple[str, ReplyConsumer, Transmission]:
    if not isinstance(obj, dict):
        raise BadInput("a line is one JSON object")
    vector_id = obj.get("id")
    if not isinstance(vector_id, str):
        raise BadInput("id must be a string")
    wire, binding, chunks, end = (obj.get(key) for key in ("wire", "binding", "chunks", "end"))
    if wire not in WIRES:
        raise BadInput(f"wire must be one of {', '.join(WIRES)}")
    if not isinstance(binding, dict):
        raise BadInput("binding must be an object")
    if not isinstance(chunks, list) or not all(isinstance(chunk, str) for chunk in chunks):
        raise BadInput("chunks must be a list of base64 strings")
    if end not in ("eof", "transport_error"):
        raise BadInput("end must be eof or transport_error")
    limits = _limits(obj.get("limits"))
    ignore_duplicates = obj.get("ignore_duplicates", False)
    if type(ignore_duplicates) is not bool:
        raise BadInput("ignore_duplicates must be true or false")
    try:
        data = tuple(base64.b64decode(chunk.encode("ascii"), validate=True) for chunk in chunks)
    except (binascii.Error, UnicodeEncodeError) as error:
        raise BadInput("a chunk is not base64") from error
    consumer = ReplyConsumer(
        binding, wire=WireFormat(wire), limits=limits, ignore_duplicates=ignore_duplicates
    )
    ending = Ending.TRANSPORT_ERROR if end == "transport_error" else Ending.CLEAN
    return vector_id, consumer, Transmission(frames=(), chunks=data, ending=ending)


def answer(line: str) -> dict[str, Any]:
    """The answer to one input line."""
    try:
        obj = json.loads(line)
    except ValueError:
        return {"id": None, "error": "not a JSON line"}
    vector_id = obj.get("id") if isinstance(obj, dict) else None
    vector_id = vector_id if isinstance(vector_id, str) else None
    try:
        vector_id, consumer, transmission = _request(obj)
        result = consume(consumer, transmission)
    except BadInput as error:
        return {"id": vector_id, "error": str(error)}
    except (KeyError, TypeError, ConfigurationError) as error:  # a binding it cannot use
        return {"id": vector_id, "error": f"the binding cannot be used: {error!r}"[:200]}
    except Exception as error:  # a fault of the core (or a mutant's): this vector fails
        return {"id": vector_id, "error": f"the core failed: {error!r}"[:200]}
    return {
        "id": vector_id,
        "status": result.status.value,
        "reason": result.reason,
        "detail": result.detail,
        "frames": result.stats.application_frames,
        "bytes": result.stats.bytes_received,
        "provisional_content": result.provisional_content,
        "accepted_answer": result.accepted_answer,
        "citations": [dict(citation) for citation in result.citations],
        **chat_keys(result),
    }


def serve(lines: Iterable[str], out: IO[str]) -> None:
    for line in lines:
        if not line.strip():
            continue
        out.write(json.dumps(answer(line), ensure_ascii=True) + "\n")
        out.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance.testee",
        description="The Python consumer core behind the conformance kit's line protocol "
        "(docs/conformance.md): a vector a line in, a result a line out.",
    )
    parser.add_argument(
        "--mutant",
        choices=sorted(MUTANTS),
        help="turn one check of the core off (for the kit's own test)",
    )
    args = parser.parse_args(argv)
    if args.mutant is not None and core_is_compiled() and argv is None:
        # A mutant patches the pure core: this process again, on the pure build.
        os.execve(
            sys.executable,
            [sys.executable, "-m", "conformance.testee", *sys.argv[1:]],
            {**os.environ, PURE_ENV: "1"},
        )
    with applied(args.mutant):
        serve(sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
