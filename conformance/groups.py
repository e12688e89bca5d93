"""The vector groups made from the recording and the fault catalogue, and the limits at and
past each edge; the crafted wires are in ``conformance.crafted``. One file per group."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Final

from conformance import craft, crafted
from conformance.chat_replies import chat_group
from conformance.craft import WIRES
from conformance.text_replies import text_group
from conformance.vectors import ROOT, Group, core_result
from replywire.shared.errors import RequestRefused
from replywire.shared.faults import (
    DEFAULT_TRUNCATE_BYTES,
    TIMING_FAULTS,
    Ending,
    Fault,
    FaultKind,
    transmit,
)
from replywire.shared.frames import FrameKind
from replywire.shared.recording import BoundCase, Recording
from replywire.shared.vectors import End, Vector
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import LAB_PATTERN, ChunkMode, ChunkPlan

#: Each group's file (without ``.json``) and its one-line description.
GROUPS: Final = {
    "recording": "every development case of the recording, on every wire, in several chunkings",
    "faults": "the fault catalogue on every case and wire, and at every parameter edge",
    "limits": "every limit at and past its edge, custom and default",
    "utf8": "UTF-8 split at each byte of 2-, 3- and 4-byte characters; invalid and cut UTF-8",
    "lp": "the length-prefixed wire byte by byte: header, varints, fields, lengths",
    "ndjson": "the NDJSON wires line by line: JSON, keys, types, line ends",
    "frames": "sequence, binding, terminals, duplicates and how the input ends",
    "reply": "the reply schema, its citations, and the rules' precedence",
    "canonical": "bindings whose canonical JSON has every corner: key order, escapes, numbers",
    "text": "text replies: every shape of text, the chunkings, the faults, claims that differ",
    "chat": "chat replies: every chat frame rule and reason, turns, digests, faults, wire corners",
}

PLANS: Final = {
    "frame": ChunkPlan(ChunkMode.FRAME),
    "whole": ChunkPlan(ChunkMode.WHOLE),
    "lab": ChunkPlan(ChunkMode.SIZES, LAB_PATTERN),
    "64": ChunkPlan(ChunkMode.SIZES, (64,)),
}
RECORDING_PATH: Final = ROOT / "fixtures" / "recording.json"


def _end(ending: Ending) -> End:
    return End.TRANSPORT_ERROR if ending is Ending.TRANSPORT_ERROR else End.EOF


def recording_group(recording: Recording) -> Group:
    group = Group("recording")
    for case_id in recording.case_ids:
        case = recording.case(case_id)
        for wire in WIRES:
            plans = dict(PLANS)
            if case_id == recording.case_ids[0]:
                plans["1"] = ChunkPlan(ChunkMode.SIZES, (1,))
            for plan_name, plan in plans.items():
                sent = transmit(case, wire=WireFormat(wire), plan=plan)
                group.add(
                    f"{case_id}.{plan_name}",
                    f"the recorded reply of {case_id}, chunks: {plan.describe()}",
                    "#frame-rules",
                    wire,
                    sent.chunks,
                    case=case,
                )
    return group


_FAULT_RULES: Final = {
    FaultKind.CANCEL: "#reasons",
    FaultKind.ERROR: "#reasons",
    FaultKind.EOF_BEFORE_TERMINAL: "#frame-rules",
    FaultKind.TRANSPORT_ABORT: "#result-document",
    FaultKind.TRUNCATE_TAIL: "#frame-rules",
    FaultKind.OMIT: "#frame-rules",
    FaultKind.REPEAT: "#frame-rules",
    FaultKind.CORRUPT: "#frame-rules",
    FaultKind.FOREIGN_BINDING: "#frame-rules",
    FaultKind.ABORT_AFTER_DONE: "#result-document",
}
_TARGETED: Final = (FaultKind.OMIT, FaultKind.REPEAT, FaultKind.CORRUPT, FaultKind.FOREIGN_BINDING)


def faults_group(recording: Recording) -> Group:
    group = Group("faults")
    kinds = [kind for kind in FaultKind if kind not in TIMING_FAULTS]

    def add(
        case: BoundCase, wire: str, make: Callable[[], Fault], name: str, plan: str = "frame"
    ) -> None:
        try:
            fault = make()
            sent = transmit(
                case,
                wire=WireFormat(wire),
                plan=PLANS[plan],
                fault=fault,
                foreign_binding_sha256=recording.foreign_binding_sha256(case.case_id),
            )
        except RequestRefused:  # a fault or parameter the catalogue refuses makes no vector
            return
        group.add(
            f"{case.case_id}.{name}" + ("" if plan == "frame" else f".{plan}"),
            f"fault {fault.kind.value} ({name}) on {case.case_id}, chunks: {plan}",
            _FAULT_RULES.get(fault.kind, "#frame-rules"),
            wire,
            sent.chunks,
            case=case,
            end=_end(sent.ending),
            ignore_duplicates=name.endswith("with-duplicate-policy"),
        )

    for case_id in recording.case_ids:
        case = recording.case(case_id)
        for wire in WIRES:
            for kind in kinds:
                add(case, wire, partial(Fault, kind=kind), kind.value)
    first = recording.case(recording.case_ids[0])
    for wire in WIRES:
        for kind in kinds:
            add(first, wire, partial(Fault, kind=kind), kind.value, plan="lab")
        for make, name in _fault_edges(first, wire):
            add(first, wire, make, name)
    return group


def _fault_edges(case: BoundCase, wire: str) -> list[tuple[Callable[[], Fault], str]]:
    """Each fault's parameters at their edges: the first frames, the last content frame and
    one past it; the bytes of a header, of the done frame, of the whole stream, and past."""
    edges: list[tuple[Callable[[], Fault], str]] = []
    content_frames = len(craft.deltas(case.content))
    for kind in _TARGETED:
        for frame in sorted({1, 2, content_frames - 1, content_frames, content_frames + 1}):
            edges.append(
                (partial(Fault, kind=kind, target_frame=frame), f"{kind.value}-frame-{frame}")
            )
    for frame in (1, content_frames):
        name = f"repeat-frame-{frame}-with-duplicate-policy"
        edges.append((partial(Fault, kind=FaultKind.REPEAT, target_frame=frame), name))
    encoded = craft.encode(wire, craft.content_frames(case, case.content))
    last, total = len(encoded[-1]), sum(len(part) for part in encoded)
    counts = {1, 2, DEFAULT_TRUNCATE_BYTES, 4, 5, 6, last - 1, last, last + 1, total - 1, total}
    for count in sorted(counts | {total + 1}):
        fault = partial(Fault, kind=FaultKind.TRUNCATE_TAIL, byte_count=count)
        edges.append((fault, f"truncate-tail-{count}-bytes"))
    return edges


def limits_group(recording: Recording) -> Group:
    group = Group("limits")
    case = recording.case(recording.case_ids[0])
    emoji = craft.answered(case, "Smile " + "\U0001f600" * 10)
    for wire in WIRES:
        plain = tuple(craft.encode(wire, craft.content_frames(case, case.content)))
        cancel = tuple(
            craft.encode(wire, craft.content_frames(case, case.content, terminal=FrameKind.CANCEL))
        )
        wide = tuple(craft.encode(wire, craft.content_frames(case, emoji)))
        for limit, chunks, status, what in (
            ("max_stream_bytes", plain, "complete", "bytes of the stream (headers and all)"),
            ("max_frame_bytes", plain, "complete", "bytes of the largest frame"),
            ("max_content_chars", plain, "complete", "characters of the content"),
            ("max_content_chars", wide, "complete", "code points (not UTF-16 units)"),
            ("max_frames", plain, "complete", "frames, the terminal counted"),
            ("max_reason_chars", cancel, "cancelled", "characters of the cancel reason"),
        ):

            def passes(
                value: int,
                limit: str = limit,
                chunks: tuple[bytes, ...] = chunks,
                status: str = status,
                wire: str = wire,
            ) -> bool:
                result = core_result(case.binding, wire, chunks, End.EOF, {limit: value})
                return bool(result["status"] == status)

            edge = craft.smallest(passes, 1, 1 << 20)
            tag = "wide" if chunks is wide else "plain"
            for value, where in ((edge, "at"), (edge - 1, "past")):
                group.add(
                    f"{limit}.{tag}.{where}-edge",
                    f"{limit} = {value}: {where} the edge ({edge} {what})",
                    "#limits",
                    wire,
                    chunks,
                    case=case,
                    limits={limit: value},
                )
        _default_edges(group, case, wire)
    return group


def _default_edges(group: Group, case: BoundCase, wire: str) -> None:
    """The default limits at and past their edges, with replies grown to reach them."""

    def grown(pad: Callable[[int], str], size: int) -> Callable[[int], tuple[bytes, ...]]:
        def chunks(count: int) -> tuple[bytes, ...]:
            content = craft.answered(case, "Pad " + pad(count))
            return tuple(craft.encode(wire, craft.content_frames(case, content, size)))

        return chunks

    # Bytes: 4-byte characters (then ASCII) so the stream grows a byte at a time.
    byte_pad = grown(lambda n: "\U0001f600" * (n // 4) + "a" * (n % 4), 2000)
    for name, chunks_of, high in (
        ("max_stream_bytes", byte_pad, 70_000),
        ("max_frame_bytes", grown(lambda n: "a" * n, 1 << 20), 9_000),
        ("max_content_chars", grown(lambda n: "a" * n, 4000), 17_000),
    ):

        def fails(count: int, chunks_of: Callable[[int], tuple[bytes, ...]] = chunks_of) -> bool:
            status: str = core_result(case.binding, wire, chunks_of(count), End.EOF)["status"]
            return status != "complete"

        edge = craft.smallest(fails, 1, high)
        reason = core_result(case.binding, wire, chunks_of(edge), End.EOF)["reason"]
        for count, where in ((edge - 1, "at"), (edge, "past")):
            chunks = chunks_of(count)
            group.add(
                f"default-{name}.{where}-edge",
                f"the default {name} {where} its edge ({sum(map(len, chunks))} bytes; "
                f"one more: {reason})",
                "#limits",
                wire,
                chunks,
                case=case,
            )
    # 1,001 frames do not fit in the default stream bytes: the byte limit comes first.
    texts = ["x"] * 1000
    frames = [craft.delta(case, index, "x") for index in range(1, 1001)]
    frames.append(craft.done(case, 1001, texts))
    group.add(
        "default-max_frames.past-edge",
        "1,001 frames at the default limits: the stream byte limit is reached first",
        "#precedence",
        wire,
        craft.encode(wire, frames),
        case=case,
    )


def build_groups(recording_path: Path = RECORDING_PATH) -> dict[str, list[Vector]]:
    """Every group's vectors, in ``GROUPS`` order."""
    recording = Recording.from_bytes(recording_path.read_bytes())
    made = {
        "recording": recording_group(recording),
        "faults": faults_group(recording),
        "limits": limits_group(recording),
        **crafted.crafted_groups(recording),
        "text": text_group(),
        "chat": chat_group(recording),
    }
    return {name: made[name].vectors for name in GROUPS}
