"""The ``text`` group: text replies (docs/protocol.md#text-reply) on both default wires.

Each vector is a text binding (``shared.texts``) and a transmission of its text in deltas
of six code points, as the development text source makes it: texts of every shape (the
empty text, one code point, a delta's edge, white space only, controls, astral
characters, a grounded reply's JSON taken as text), the chunkings, every fault of the
catalogue, and ``done`` claims that do not match what was sent. A text is accepted as it
came; every frame rule is the grounded reply's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from conformance import craft
from conformance.vectors import Group
from replywire.shared.digest import digest
from replywire.shared.errors import RequestRefused
from replywire.shared.faults import TIMING_FAULTS, Ending, Fault, FaultKind, transmit
from replywire.shared.frames import DoneDigest, Frame, FrameKind, content_sha256, frames_from_deltas
from replywire.shared.recording import BoundCase
from replywire.shared.texts import build_text_binding, text_case, text_deltas
from replywire.shared.vectors import End
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkMode, ChunkPlan

#: Text replies carry on the default wires (the lab's wire is grounded-only).
TEXT_WIRES: Final = (craft.LP, craft.NDJSON)
TEXTS: Final = {
    "empty": "",
    "one": "x",
    "six": "abcdef",
    "seven": "abcdefg",
    "alphabet": "abcdefghijklmnopqrstuvwxyz0123456789",
    "blank": "   \t\n  ",
    "controls": "a\x00b\x1bc\x7fd\u2028e\u202ef",
    "astral": "\U0001f600\U0001f4a9 naïve café 日本語 \U00010348\U0001f600",
    "json": '{"status": "answered", "answer": "An answer.", "source_ids": []}',
}
PLANS: Final = {
    "frame": ChunkPlan(ChunkMode.FRAME),
    "whole": ChunkPlan(ChunkMode.WHOLE),
    "1": ChunkPlan(ChunkMode.SIZES, (1,)),
    "lab": ChunkPlan(ChunkMode.SIZES, (1, 2, 7, 3, 11, 64)),
}
#: The 004 lab's faults aim at event 3.
TARGET: Final = 3


def case_of(text: str) -> BoundCase:
    """The development text source's case for ``text`` (its binding, its deltas)."""
    return text_case(build_text_binding(text), text)


def _end(ending: Ending) -> End:
    return End.TRANSPORT_ERROR if ending is Ending.TRANSPORT_ERROR else End.EOF


def text_group() -> Group:
    group = Group("text")
    alphabet = case_of(TEXTS["alphabet"])
    for wire in TEXT_WIRES:
        for name, text in TEXTS.items():
            case = case_of(text)
            for plan_name, plan in PLANS.items():
                sent = transmit(case, wire=WireFormat(wire), plan=plan)
                group.add(
                    f"{name}.{plan_name}",
                    f"the text {name!r} ({len(text)} code points), chunks: {plan.describe()}",
                    "#text-reply",
                    wire,
                    sent.chunks,
                    case=case,
                )
        _faults(group, alphabet, wire)
        _claims(group, wire)
    return group


def _faults(group: Group, case: BoundCase, wire: str) -> None:
    """Every fault of the catalogue on a text, the targeted ones at event 3."""
    foreign = digest({"foreign_to": case.binding_sha256})
    for kind in FaultKind:
        if kind in TIMING_FAULTS:
            continue
        target = TARGET if kind in (FaultKind.OMIT, FaultKind.REPEAT, FaultKind.CORRUPT,
                                    FaultKind.FOREIGN_BINDING) else None  # fmt: skip
        byte_count = 3 if kind is FaultKind.TRUNCATE_TAIL else None
        fault = Fault(kind=kind, target_frame=target, byte_count=byte_count)
        try:
            sent = transmit(
                case, wire=WireFormat(wire), plan=PLANS["frame"], fault=fault,
                foreign_binding_sha256=foreign,
            )  # fmt: skip
        except RequestRefused:  # a fault the catalogue refuses for this text makes no vector
            continue
        policies = (False, True) if kind is FaultKind.REPEAT else (False,)
        for ignore in policies:
            group.add(
                f"fault-{kind.value}" + (".with-duplicate-policy" if ignore else ""),
                f"fault {kind.value} on a text of six deltas"
                + (" (duplicates ignored)" if ignore else ""),
                "#text-reply",
                wire,
                sent.chunks,
                case=case,
                end=_end(sent.ending),
                ignore_duplicates=ignore,
            )


def _claims(group: Group, wire: str) -> None:
    """``done`` claims that are not what was sent: refused whatever the text."""
    empty = case_of("")
    short = case_of("abcdefgh")
    sha = empty.binding_sha256

    def claim(frames: Sequence[Frame], sequence: int, text: str, count: int) -> list[Frame]:
        done = Frame(
            sequence=sequence,
            kind=FrameKind.DONE,
            binding_sha256=frames[0].binding_sha256 if frames else sha,
            done_digest=DoneDigest(content_sha256=content_sha256(text), content_frames=count),
        )
        return [*frames, done]

    deltas = frames_from_deltas(short.binding_sha256, list(text_deltas("abcdefgh")))[:-1]
    for name, case, frames, description in (
        ("empty-claims-one-frame", empty, claim([], 1, "", 1), "an empty text claimed as one"),
        ("empty-claims-text", empty, claim([], 1, "x", 0), "an empty text claimed as 'x'"),
        ("claims-no-frames", short, claim(deltas, 3, "abcdefgh", 0), "two deltas claimed as none"),
        ("claims-other-text", short, claim(deltas, 3, "abcdefgH", 2), "the digest of another text"),
        ("done-then-delta", empty, [*claim([], 1, "", 0), *frames_from_deltas(sha, ["x"])[:1]],
         "a delta after the empty text's done"),
    ):  # fmt: skip
        group.add(name, description, "#text-reply", wire, craft.encode(wire, frames), case=case)
