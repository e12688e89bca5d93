"""Write clients/typescript/test/fixtures/: inputs and the Python reference's answers to them.

Run from the repository root with its venv (``make setup`` first):

    .venv/bin/python clients/typescript/scripts/make_fixtures.py

Every expected value comes from the Python code itself (``shared.consumer_core``,
``shared.wire``, ``shared.digest``, ``shared.errors``, ``shared.reason_registry``), never
from the TypeScript one:

* ``bindings/CASE.json`` - the development cases' bindings (for the CLI, and the tests);
* ``core.json`` - core cases in the testee's line protocol with the Python core's answers:
  the development cases x wires x faults x chunkings, hand-made broken frames of both wires,
  terminal reasons, replies, limits at and past the edge, sequence and binding faults;
* ``prefixes.json`` - one reply per wire, and the verdict of every prefix of it;
* ``lp_payloads.json`` - length-prefixed payloads at the varint and length edges, and the
  reason (or the frame) the reference's parser gives each;
* ``json.json`` - floats as Python's repr writes them, values and their canonical digests,
  texts strict JSON refuses or accepts;
* ``text.json`` - texts and their scrubbed details, ``strip()`` and ``isprintable()``;
* ``tables.json`` - the reason registry, to check src/generated.ts is current;
* ``transmissions.json`` - one case's chunks per wire and the result document the Python
  consumer writes for them (the CLI's hermetic tests serve these from a fake producer);
* ``text_kind.json`` - a text binding (docs/protocol.md#text-binding), text replies and
  broken ones on every wire with the Python core's result documents, and the document of a
  grounded binding's empty stream (which names no kind).

One file past 500 lines: one run writes every fixture from the same Python code, so the
TypeScript suite reads one consistent snapshot.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import random
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.consumer_limits import Limits
from replywire.shared.digest import canonical_json, digest, strict_json
from replywire.shared.errors import ProtocolFailure, scrubbed_detail
from replywire.shared.faults import Ending, Fault, FaultKind, transmit
from replywire.shared.frames import DoneDigest, Frame, FrameKind, frames_from_deltas, split_content
from replywire.shared.reason_registry import REASONS
from replywire.shared.recording import DEVELOPMENT_CASES, Recording
from replywire.shared.wire import WireFormat, codec_for
from replywire.shared.wire.chunking import ChunkPlan, cut
from replywire.shared.wire.lp import frame_with_header, parse_frame

ROOT = Path(__file__).resolve().parents[3]
OUT = Path(__file__).resolve().parent.parent / "test" / "fixtures"
RECORDING = Recording.from_bytes((ROOT / "fixtures" / "recording.json").read_bytes())
WIRES = (WireFormat.LENGTH_PREFIXED, WireFormat.NDJSON, WireFormat.NDJSON_LAB)
LP, ND, LAB = WIRES
PLANS = {name: ChunkPlan.parse(name) for name in ("frame", "whole", "1", "1,2,7,3,11")}
MAIN = "replace-file"
Case = dict[str, Any]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def answer(case: Case, binding: dict[str, Any]) -> dict[str, Any]:
    """The Python core's answer to one case of the testee's protocol."""
    consumer = ReplyConsumer(
        binding,
        wire=WireFormat(case["wire"]),
        limits=Limits(**case.get("limits", {})),
        ignore_duplicates=case.get("ignore_duplicates", False),
    )
    for chunk in case["chunks"]:
        try:
            consumer.receive_data(base64.b64decode(chunk))
        except ProtocolFailure:
            break
    end = consumer.end_of_stream if case["end"] == "eof" else consumer.transport_error
    document = end().to_dict()
    return {
        "id": case["id"],
        "status": document["status"],
        "reason": document["reason"],
        "detail": document.get("detail"),
        "frames": document["stats"]["application_frames"],
        "bytes": document["stats"]["bytes_received"],
        "provisional_content": document["provisional_content"],
        "accepted_answer": document["accepted_answer"],
        "citations": document["citations"],
    }


class Cases:
    """Core cases, their bindings named once (a binding is ~3 KB: not one per case)."""

    def __init__(self) -> None:
        self.bindings: dict[str, dict[str, Any]] = {}
        self.cases: list[Case] = []

    def add(
        self,
        name: str,
        wire: WireFormat,
        binding: str,
        chunks: list[bytes],
        end: str = "eof",
        **extra: Any,
    ) -> None:
        case = {"id": name, "wire": wire.value, "binding": binding}
        case |= {"chunks": [b64(chunk) for chunk in chunks], "end": end, **extra}
        case["expected"] = answer(case, self.bindings[binding])
        self.cases.append(case)


def encode(wire: WireFormat, frames: list[Frame]) -> list[bytes]:
    codec = codec_for(wire)
    return [codec.encode_frame(frame) for frame in frames]


def reply_frames(text: str, terminal: FrameKind = FrameKind.DONE, reason: str | None = None):
    sha = RECORDING.case(MAIN).binding_sha256
    return frames_from_deltas(sha, list(split_content(text)), terminal, reason)


def development(cases: Cases) -> None:
    for case_id in RECORDING.case_ids:
        case = RECORDING.case(case_id)
        foreign = RECORDING.foreign_binding_sha256(case_id)
        for wire in WIRES:
            for kind in (None, *FaultKind):
                for plan_name in ("frame", "1,2,7,3,11") if case_id == MAIN else ("frame",):
                    fault = Fault(kind=kind) if kind else None
                    sent = transmit(
                        case,
                        wire=wire,
                        plan=PLANS[plan_name],
                        fault=fault,
                        foreign_binding_sha256=foreign,
                    )
                    end = "transport_error" if sent.ending is Ending.TRANSPORT_ERROR else "eof"
                    name = f"dev/{case_id}/{wire.value}/{kind or 'none'}/{plan_name}"
                    cases.add(name, wire, case_id, list(sent.chunks), end)
            clean = list(transmit(case, wire=wire, plan=PLANS["frame"]).chunks)
            cases.add(
                f"dev/{case_id}/{wire.value}/then-error", wire, case_id, clean, "transport_error"
            )
            repeated = transmit(
                case, wire=wire, plan=PLANS["frame"], fault=Fault(kind=FaultKind.REPEAT)
            )
            for policy in (True, False):
                name = f"dev/{case_id}/{wire.value}/repeat-ignore-{policy}"
                cases.add(name, wire, case_id, list(repeated.chunks), ignore_duplicates=policy)


def delta_line(sequence: str, text: str, binding: str = "", keys: str = "") -> str:
    """An NDJSON content_delta line with raw JSON for its sequence and text (``keys``: raw
    members put before the kind)."""
    bound = json.dumps(binding or RECORDING.case(MAIN).binding_sha256)
    kind = '"kind":"content_delta"'
    return f'{{"sequence":{sequence},{keys}{kind},"binding_sha256":{bound},"text":{text}}}'


def ndjson_lines(cases: Cases) -> None:
    sha = RECORDING.case(MAIN).binding_sha256
    lines = {
        "duplicate-key": delta_line("1", '"x"', keys='"sequence":1,'),
        "nan": delta_line("NaN", '"x"'),
        "infinity": delta_line("-Infinity", '"x"'),
        "float-sequence": delta_line("1.0", '"x"'),
        "exponent-sequence": delta_line("1e0", '"x"'),
        "bool-sequence": delta_line("true", '"x"'),
        "string-sequence": delta_line('"1"', '"x"'),
        "huge-sequence": delta_line("18446744073709551617", '"x"'),
        "4300-digits": delta_line("1" * 4300, '"x"'),
        "4301-digits": delta_line("1" * 4301, '"x"'),
        "bom": "\ufeff" + delta_line("1", '"x"'),
        "whitespace": " \t" + delta_line("1", '"x"') + " \r",
        "blank": "",
        "array": "[1]",
        "extra-key": delta_line("1", '"x"', keys='"x":1,'),
        "missing-key": delta_line("1", '"x"').replace(',"text":"x"', ""),
        "unknown-kind": delta_line("1", '"x"').replace("content_delta", "delta"),
        "number-text": delta_line("1", "1"),
        "empty-text": delta_line("1", '""'),
        "lone-surrogate": delta_line("1", '"\\ud800"'),
        "surrogate-pair": delta_line("1", '"\\ud83d\\ude00"'),
        "control-char": delta_line("1", '"a\x01"'),
        "foreign-binding": delta_line("1", '"x"', binding=sha.upper()),
        "number-binding": delta_line("1", '"x"').replace(json.dumps(sha), "1"),
        "gap": delta_line("2", '"x"'),
        # Well inside and well past CPython's recursion bound: where exactly it falls depends
        # on how deep the caller's stack is (test/json.test.ts pins the TypeScript bound).
        "nested-900": delta_line("1", "[" * 900 + "]" * 900),
        "nested-1100": delta_line("1", "[" * 1100 + "]" * 1100),
        "nested-object-900": delta_line("1", '{"a":' * 900 + "1" + "}" * 900),
        "nested-object-1100": delta_line("1", '{"a":' * 1100 + "1" + "}" * 1100),
    }
    for name, line in lines.items():
        for wire in (ND, LAB):
            cases.add(f"ndjson/{name}/{wire.value}", wire, MAIN, [line.encode() + b"\n"])
    good = delta_line("1", '"x"').encode() + b"\n"
    for name, chunks in {
        "invalid-utf8": [good, b"\xff\n"],
        "invalid-utf8-fails-the-fragment": [good + b"\xff"],
        "overlong": [good[:30] + b"\xc0\x80" + good[30:]],
        "split-character": [good[:30] + b"\xc3", b"\xa9" + good[30:]],
    }.items():
        for wire in (ND, LAB):
            cases.add(f"ndjson/{name}/{wire.value}", wire, MAIN, chunks)
    frames = reply_frames(RECORDING.case(MAIN).content)
    sha256 = hashlib.sha256(RECORDING.case(MAIN).content.encode()).hexdigest()
    body, count = encode(ND, frames[:-1]), len(frames) - 1
    done = f'{{"sequence":{count + 1},"kind":"done","binding_sha256":"{sha}"'
    dones = {
        "digest": f'{done},"content_sha256":"{sha256}","content_frames":{count}}}',
        "lab": done + "}",
        "wrong-count": f'{done},"content_sha256":"{sha256}","content_frames":{count + 1}}}',
        "float-count": f'{done},"content_sha256":"{sha256}","content_frames":{count}.0}}',
        "upper-digest": f'{done},"content_sha256":"{sha256.upper()}","content_frames":{count}}}',
    }
    for name, line in dones.items():
        for wire in (ND, LAB):
            chunks = [*body, line.encode() + b"\n"]
            cases.add(f"done/{name}/{wire.value}", wire, MAIN, chunks)
            cases.add(f"done/{name}/{wire.value}/then-frame", wire, MAIN, [*chunks, b"x\n"])


def lp_frames(cases: Cases) -> None:
    frames = reply_frames(RECORDING.case(MAIN).content)
    good = encode(LP, frames)
    for flag in (1, 0x80, 0xFF):
        cases.add(f"lp/flag-{flag}", LP, MAIN, [bytes([flag]) + good[0][1:]])
        cases.add(f"lp/flag-{flag}-after-two", LP, MAIN, [*good[:2], bytes([flag, 0, 0, 0, 1])])
    for length in (8192, 8193, 2**32 - 1):
        header = struct.pack(">BI", 0, length)
        cases.add(f"lp/declared-{length}", LP, MAIN, [header])
        cases.add(f"lp/declared-{length}/split", LP, MAIN, [header[:2], header[2:]])
    for size in range(1, 5):
        cases.add(f"lp/header-{size}-bytes", LP, MAIN, [good[0][:size]])
    sha, count = frames[0].binding_sha256, len(frames) - 1
    content = RECORDING.case(MAIN).content
    for name, claim in {
        "upper": DoneDigest(
            content_sha256=hashlib.sha256(content.encode()).hexdigest().upper(),
            content_frames=count,
        ),
        "empty": DoneDigest(content_sha256="", content_frames=0),
    }.items():
        done = Frame(sequence=count + 1, kind=FrameKind.DONE, binding_sha256=sha, done_digest=claim)
        cases.add(f"lp/done-{name}", LP, MAIN, good[:-1] + encode(LP, [done]))
    payloads = {
        "unknown-field": b"\x08\x01\x1a\x03\x0a\x01x\x38\x01",
        "no-kind": b"\x08\x01",
        "bad-utf8": b"\x08\x01\x1a\x04\x0a\x02\xc3\x28",
        "wire-type-7": b"\x0f",
    }
    for name, payload in payloads.items():
        cases.add(f"lp/payload-{name}", LP, MAIN, [frame_with_header(payload)])
    cases.add("lp/after-done", LP, MAIN, [*good, good[0]])
    cases.add("lp/after-done-bad-header", LP, MAIN, [*good, b"\x01\x00\x00\x00\x00"])
    cases.add("lp/after-done-partial", LP, MAIN, [*good, b"\x00\x00"])


def terminals(cases: Cases) -> None:
    reasons = [
        "controlled_local_cancel",
        "controlled_local_error",
        "invalid_utf8",
        "provider_finish_MAX_TOKENS",
        "because I said so",
        "a\nb\x1b[31m\u202e\u200b\x7f\x85",
        "é" * 256,
        "é" * 257,
        "😀" * 256,
        "😀" * 257,
        "\t" * 300,
        "\u0378 \U000e0001 \U0001fae9",
    ]
    for kind in (FrameKind.CANCEL, FrameKind.ERROR):
        for index, reason in enumerate(reasons):
            frames = reply_frames("half", kind, reason)
            for wire in WIRES:
                name = f"terminal/{kind.value}/{index}/{wire.value}"
                cases.add(name, wire, MAIN, encode(wire, frames))
                limits = {"max_reason_chars": 1000}
                cases.add(name + "/long-limit", wire, MAIN, encode(wire, frames), limits=limits)


def reply_text(status: str, answer: str, ids: str, more: str = "") -> str:
    """A reply with raw JSON for its answer and source ids (``more``: raw members after)."""
    return f'{{"status": "{status}", "answer": {answer}, "source_ids": [{ids}]{more}}}'


def replies(cases: Cases) -> None:
    ids = [row["source_id"] for row in RECORDING.case(MAIN).binding["selected_context"]]
    first = json.dumps(ids[0])
    texts = {
        "answered": reply_text("answered", '"yes"', first),
        "not-in-docs": reply_text("not_in_docs", '"no"', ""),
        "not-in-docs-cited": reply_text("not_in_docs", '"no"', first),
        "answered-uncited": reply_text("answered", '"yes"', ""),
        "unknown-source": reply_text("answered", '"yes"', '"nope"'),
        "duplicate-source": reply_text("answered", '"y"', f"{first}, {first}"),
        "blank-answer": reply_text("answered", '" \\u3000\\u0085\\u001c"', first),
        "zero-width-answer": reply_text("answered", '"\\u200b"', first),
        "lone-surrogate-answer": reply_text("answered", '"\\ud800"', first),
        "extra-key": reply_text("answered", '"y"', first, ', "x": 1'),
        "duplicate-key": reply_text("answered", '"y"', first, ', "status": "answered"'),
        "not-json": "yes",
        "nested-900": reply_text("answered", '"y"', first, ', "x": ' + "[" * 900 + "]" * 900),
        "nested-1100": reply_text("answered", '"y"', first, ', "x": ' + "[" * 1100 + "]" * 1100),
    }
    for name, text in texts.items():
        for wire in WIRES:
            cases.add(f"reply/{name}/{wire.value}", wire, MAIN, encode(wire, reply_frames(text)))


def limits(cases: Cases) -> None:
    frames = reply_frames(RECORDING.case(MAIN).content)
    content = len(RECORDING.case(MAIN).content)
    for wire in WIRES:
        encoded = encode(wire, frames)
        total = sum(map(len, encoded))
        longest = max(map(len, encoded)) - (5 if wire is LP else 1)
        edges = {
            "stream": ("max_stream_bytes", total),
            "frame": ("max_frame_bytes", longest),
            "frames": ("max_frames", len(frames)),
            "content": ("max_content_chars", content),
        }
        for name, (key, edge) in edges.items():
            for value in (edge, edge - 1):
                for plan in ("frame", "1"):
                    case = f"limits/{name}-{value}/{wire.value}/{plan}"
                    cases.add(case, wire, MAIN, cut(encoded, PLANS[plan]), limits={key: value})
        if wire is not LP:
            for extra in (b"", b"\xc3", b"\xe2\x82", b"\xed\xa0"):
                for size in (8192, 8193, 8194):
                    line = b"x" * (size - len(extra)) + extra
                    cases.add(
                        f"limits/unterminated-{size}-{extra.hex()}/{wire.value}", wire, MAIN, [line]
                    )


def sequences(cases: Cases) -> None:
    for wire in WIRES:
        encoded = encode(wire, reply_frames(RECORDING.case(MAIN).content))
        cases.add(f"seq/swap/{wire.value}", wire, MAIN, [encoded[1], encoded[0], *encoded[2:]])
        frames = reply_frames(RECORDING.case(MAIN).content)
        other = Frame(
            sequence=2,
            kind=FrameKind.CONTENT_DELTA,
            binding_sha256=frames[0].binding_sha256,
            text="z",
        )
        chunks = [*encoded[:3], *encode(wire, [other]), *encoded[3:]]
        for policy in (True, False):
            name = f"seq/conflict-ignore-{policy}/{wire.value}"
            cases.add(name, wire, MAIN, chunks, ignore_duplicates=policy)
        for other in RECORDING.case_ids:
            if other != MAIN:
                cases.add(f"seq/bound-to-{other}/{wire.value}", wire, other, encoded)


def prefixes() -> dict[str, Any]:
    """A multi-byte reply per wire, and the verdict of every prefix of it (clean end)."""
    text = json.dumps(
        {"status": "not_in_docs", "answer": "é€😀 𝄞 “q” ☃\u2028", "source_ids": []},
        ensure_ascii=False,
    )
    binding = RECORDING.case(MAIN).binding
    out = {}
    for wire in WIRES:
        data = b"".join(encode(wire, reply_frames(text)))
        verdicts = []
        for size in range(len(data) + 1):
            consumer = ReplyConsumer(binding, wire=wire)
            with contextlib.suppress(ProtocolFailure):
                consumer.receive_data(data[:size])
            result = consumer.end_of_stream()
            stats = result.stats
            verdicts.append([result.status.value, result.reason, stats.application_frames])
        out[wire.value] = {"data": b64(data), "verdicts": verdicts, "content": text}
    return out


def varint(value: int, size: int | None = None) -> bytes:
    """``value`` as a varint, padded to ``size`` bytes with continuation bits."""
    out = bytearray()
    while True:
        out.append(value & 0x7F)
        value >>= 7
        if not value:
            break
        out[-1] |= 0x80
    while size is not None and len(out) < size:
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


def lp_payload_cases() -> Iterator[tuple[str, bytes]]:
    sha = RECORDING.case(MAIN).binding_sha256.encode()
    inner = b"\x0a\x01x"
    for size in range(1, 12):
        yield f"sequence-{size}-bytes", b"\x08" + varint(1, size) + b"\x1a\x03" + inner
        yield f"tag-{size}-bytes", varint(0x08, size) + b"\x01\x1a\x03" + inner
        yield f"length-{size}-bytes", b"\x08\x01\x1a" + varint(3, size) + inner
        yield (
            f"inner-length-{size}-bytes",
            b"\x08\x01\x1a" + bytes([2 + size]) + b"\x0a" + varint(1, size) + b"x",
        )
    for value in (0, 1, 2**63 - 1, 2**63, 2**64 - 1):
        yield f"sequence-{value}", b"\x08" + varint(value) + b"\x1a\x03" + inner
        # With a digest of its form (64 lowercase hex), so only content_frames is at an edge.
        claim = b"\x0a\x40" + b"0123456789abcdef" * 4 + b"\x10" + varint(value)
        yield f"done-frames-{value}", b"\x08\x01\x22" + bytes([len(claim)]) + claim
    yield "sequence-2**64", b"\x08" + bytes([0xFF] * 9 + [0x02]) + b"\x1a\x03" + inner
    yield "sequence-11-bytes-value", b"\x08" + bytes([0xFF] * 10 + [0x01])
    yield "binding", b"\x08\x01\x12" + bytes([len(sha)]) + sha + b"\x1a\x03" + inner
    more = {
        "empty": b"",
        "unknown-field": b"\x08\x01\x1a\x03" + inner + b"\x38\x01",
        "unknown-nested": b"\x08\x01\x1a\x05\x0a\x01x\x10\x01",
        "two-kinds": b"\x08\x01\x1a\x03" + inner + b"\x22\x00",
        "repeated": b"\x08\x01\x08\x01\x1a\x03" + inner,
        "wire-type-7": b"\x0f",
        "field-0": b"\x02\x00",
        "wire-type-mismatch": b"\x0a\x00",
        "truncated-varint": b"\x08\x81",
        "overrun": b"\x08\x01\x1a\x09" + inner,
        "bad-utf8": b"\x08\x01\x1a\x04\x0a\x02\xc3\x28",
        "surrogate-utf8": b"\x08\x01\x1a\x05\x0a\x03\xed\xa0\x80",
        "bom-text": b"\x08\x01\x1a\x06\x0a\x04\xef\xbb\xbfx",
        "empty-delta": b"\x08\x01\x1a\x00",
        "cancel": b"\x08\x01\x32\x03" + inner,
        "error-empty": b"\x08\x01\x2a\x00",
        "group": b"\x08\x01\x1a\x03" + inner + b"\x0b\x0c",
        "fixed64": b"\x08\x01\x09" + b"\x00" * 8,
        "huge-field": varint(2**35 << 3),
        "no-kind": b"\x08\x05",
    }
    yield from more.items()


def lp_payloads() -> list[dict[str, Any]]:
    out = []
    for name, payload in lp_payload_cases():
        entry: dict[str, Any] = {"name": name, "payload": b64(payload)}
        try:
            frame = parse_frame(payload)
        except ProtocolFailure as failure:
            entry["reason"] = failure.reason.value
        else:
            entry["frame"] = {
                "sequence": str(frame.sequence),
                "kind": frame.kind.value,
                "binding_sha256": frame.binding_sha256,
                "text": frame.text,
                "reason": frame.reason,
                "done": None
                if frame.done_digest is None
                else [frame.done_digest.content_sha256, str(frame.done_digest.content_frames)],
            }
        out.append(entry)
    return out


def json_fixtures() -> dict[str, Any]:
    rng = random.Random(21)
    floats = [
        0.0,
        -0.0,
        1.0,
        1e16,
        1e15,
        1e-4,
        1e-5,
        0.1,
        2.5,
        1e22,
        5e-324,
        1.7976931348623157e308,
    ]
    floats += [rng.uniform(-1e6, 1e6) for _ in range(200)]
    floats += [rng.random() * 10.0 ** rng.randint(-30, 30) for _ in range(400)]
    floats += [struct.unpack("<d", rng.randbytes(8))[0] for _ in range(400)]
    floats = [value for value in floats if value == value]  # noqa: PLR0124 - drops NaN
    values = [
        {"b": 1, "a": [1.0, True, None, 'é\n"\\\x00\x7f\u2028'], "\U0001f600": 1, "\ue000": 2},
        [2**64, -(2**70), 0.5, 1e16, -0.0],
        {"": {}, "z": [], "A": "\ud7ff"},
        RECORDING.case(MAIN).binding,
    ]
    canonical = [
        {"value": json.dumps(v), "canonical": canonical_json(v).decode(), "digest": digest(v)}
        for v in values
    ]
    texts = [
        "1",
        "1.0",
        "-0",
        "1e400",
        '{"a":1,"a":2}',
        "NaN",
        "[1,]",
        "01",
        '"\\ud800"',
        " [] ",
        "\ufeff1",
        '{"__proto__":1}',
        "[" * 50 + "]" * 50,
        "1" * 4301,
        '"\\u00e9"',
        "tru",
    ]
    strict = []
    for text in texts:
        try:
            strict_json(text)
        except (ValueError, RecursionError):
            strict.append({"text": text, "ok": False})
        else:
            strict.append({"text": text, "ok": True})
    return {
        "floats": [[struct.pack("<d", value).hex(), repr(value)] for value in floats],
        "canonical": canonical,
        "strict": strict,
    }


def text_fixtures() -> dict[str, Any]:
    rng = random.Random(7)
    samples = [
        "plain",
        "a\nb",
        "\x1b[31mred",
        "\u202e",
        "é" * 300,
        "\n" * 200,
        "x" * 255 + "\t",
        "\U000e0001",
        "\u0378",
        "\U0001fae9",
        "\U00031350",
        "a\u2028b",
        "\x85",
        "…" * 257,
    ]
    for _ in range(120):
        size = rng.randint(0, 300)
        samples.append(
            "".join(
                chr(rng.choice([rng.randint(0, 0x2FFF), rng.randint(0, 0x10FFFF)]))
                for _ in range(size)
            )
            .encode("utf-8", "replace")
            .decode("utf-8")
        )
    points = [rng.randint(0, 0x10FFFF) for _ in range(3000)] + list(range(0x2100))
    return {
        "scrubbed": [[text, scrubbed_detail(text)] for text in samples],
        "strip": [[text, text.strip()] for text in samples[:100]],
        "printable": [[point, chr(point).isprintable()] for point in points],
    }


def transmissions() -> dict[str, Any]:
    case = RECORDING.case(MAIN)
    out = {}
    for wire in WIRES:
        sent = transmit(case, wire=wire, plan=PLANS["frame"])
        consumer = ReplyConsumer(case.binding, wire=wire)
        for chunk in sent.chunks:
            consumer.receive_data(chunk)
        out[wire.value] = {
            "chunks": [b64(chunk) for chunk in sent.chunks],
            "document": consumer.end_of_stream().to_dict(),
        }
    return out


TEXT_MESSAGES = [["human", "Say something."]]
TEXT_BINDING: dict[str, Any] = {
    "kind": "text",
    "case_id": "text-0123456789abcdef",
    "request_sha256": digest(TEXT_MESSAGES),
    "messages": TEXT_MESSAGES,
}
#: tests/unit/test_text_kind.py's texts: the empty text, one character, ASCII, and astral.
TEXTS = ("", "x", "Hello, world: a text reply.", "naïve café \U0001f600 日本語のテキスト")


def six(text: str) -> list[str]:
    """Six-code-point deltas, as the 004 lab cuts them."""
    return [text[at : at + 6] for at in range(0, len(text), 6)]


def judged(binding: dict[str, Any], wire: WireFormat, chunks: list[bytes], end: str) -> Any:
    """The Python core's result document for ``chunks``, then the end."""
    consumer = ReplyConsumer(binding, wire=wire)
    for chunk in chunks:
        try:
            consumer.receive_data(chunk)
        except ProtocolFailure:
            return consumer.result().to_dict()
    return (consumer.end_of_stream() if end == "eof" else consumer.transport_error()).to_dict()


def text_kind() -> dict[str, Any]:
    sha = digest(TEXT_BINDING)
    cases = []

    def add(
        name: str, wire: WireFormat, frames: list[Frame], plan: str = "frame", end: str = "eof"
    ) -> None:
        chunks = cut(encode(wire, frames), PLANS[plan])
        document = judged(TEXT_BINDING, wire, chunks, end)
        case = {"id": name, "wire": wire.value, "chunks": [b64(chunk) for chunk in chunks]}
        cases.append({**case, "end": end, "document": document})

    for wire in WIRES:
        for index, text in enumerate(TEXTS):
            replied = frames_from_deltas(sha, six(text))
            for plan in ("frame", "1,2,7,3,11"):
                add(f"text/{index}/{wire.value}/{plan}", wire, replied, plan)
        frames = frames_from_deltas(sha, six("abcdefghijklmnop"))
        add(f"missing-frame/{wire.value}", wire, [frames[0], *frames[2:]])
        add(f"unterminated/{wire.value}", wire, frames[:-1])
        add(f"then-error/{wire.value}", wire, frames, end="transport_error")
        cancel = frames_from_deltas(sha, ["half"], FrameKind.CANCEL, "controlled_local_cancel")
        add(f"cancel/{wire.value}", wire, cancel)
    grounded = ReplyConsumer({"case_id": "x"}).end_of_stream().to_dict()
    return {"binding": TEXT_BINDING, "texts": list(TEXTS), "cases": cases, "grounded": grounded}


def write(name: str, value: Any) -> None:
    path = OUT / name
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(value, ensure_ascii=False, indent=1) + "\n"
    if not path.exists() or path.read_text(encoding="utf-8") != text:  # unchanged: left as it is
        path.write_text(text, encoding="utf-8")


def main() -> None:
    cases = Cases()
    for case_id in DEVELOPMENT_CASES:
        binding = RECORDING.case(case_id).binding
        cases.bindings[case_id] = dict(binding)
        write(f"bindings/{case_id}.json", binding)
    for build in (development, ndjson_lines, lp_frames, terminals, replies, limits, sequences):
        build(cases)
    write("core.json", {"bindings": cases.bindings, "cases": cases.cases})
    write("prefixes.json", prefixes())
    write("lp_payloads.json", lp_payloads())
    write("json.json", json_fixtures())
    write("text.json", text_fixtures())
    write("tables.json", {"reasons": [[r.value, i.status.value] for r, i in REASONS.items()]})
    write("transmissions.json", transmissions())
    write("text_kind.json", text_kind())
    print(f"wrote {OUT}: {len(cases.cases)} core cases", file=sys.stderr)


if __name__ == "__main__":
    main()
