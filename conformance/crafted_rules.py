"""Crafted vectors for five rules that a consumer could flip and still pass every other
vector: a frame numbered 0 under the duplicate policy, a scrubbed ``detail`` past its
bound (and the backslashes in it), an answer blank under one definition of white space
only, and a ``source_id`` that two rows of the bound context share (docs/protocol.md:
frame rules, scrubbing, the reply). ``conformance.crafted`` adds them to its ``frames``
and ``reply`` groups; each is named for its rule, and a mutant of the core
(``conformance.mutants``) fails it.
"""

from __future__ import annotations

from typing import Final

from conformance import craft
from conformance.vectors import Group
from replywire.shared.frames import FrameKind
from replywire.shared.recording import BoundCase
from replywire.shared.vectors import End

#: A reason whose scrubbed form is well past 256 code points, with the cut inside an escape:
#: a backslash, ESC, a printable non-ASCII letter, a bidi override, a letter (5 code points,
#: 13 once scrubbed), to the reason's longest (256).
_MIXED_REASON: Final = ("\\\x1b\u00e9\u202ea" * 52)[:256]

#: Answers that are blank under one definition of white space and not another.
_BLANK_ANSWERS: Final = (
    (
        "answer-blank-information-separators",
        "an answer of U+001C-U+001F (white space here, not JavaScript's)",
        "\u001c\u001d\u001e\u001f",
    ),
    ("answer-blank-next-line", "an answer of U+0085 (white space here, not JavaScript's)", "\x85"),
    (
        "answer-blank-no-break-spaces",
        "an answer of U+00A0, U+2007, U+202F (white space here, not Java's)",
        "\u00a0\u2007\u202f",
    ),
    (
        "answer-blank-every-white-space",
        "an answer of all 29 white space code points",
        "".join(chr(code) for code in range(0x110000) if chr(code).isspace()),
    ),
    (
        "answer-byte-order-mark",
        "an answer of U+FEFF (white space in JavaScript, not here)",
        "\ufeff",
    ),
    (
        "answer-not-white-space",
        "an answer of U+180E, U+200B, U+2060 (no white space here)",
        "\u180e\u200b\u2060",
    ),
)


def frames_on(group: Group, case: BoundCase, wire: str) -> None:
    """Sequence 0 under the duplicate policy, and scrubbed details, on one wire."""
    _sequence_zero(group, case, wire)
    for kind in (FrameKind.CANCEL, FrameKind.ERROR):
        _details(group, case, wire, kind)


def _sequence_zero(group: Group, case: BoundCase, wire: str) -> None:
    """A frame numbered 0 with the duplicate policy on: never a duplicate."""
    texts = craft.deltas(case.content)
    frames = craft.content_frames(case, case.content)
    for name, description, sent in (
        (
            "duplicate-policy-sequence-0-first",
            "a frame numbered 0 (frame 1's text) first, with the duplicate policy",
            [craft.delta(case, 0, texts[0]), *frames],
        ),
        (
            "duplicate-policy-sequence-0-after-3",
            "a frame numbered 0 (frame 3's text) after frame 3, with the duplicate policy",
            [*frames[:3], craft.delta(case, 0, texts[2]), *frames[3:]],
        ),
    ):
        group.add(
            name,
            description,
            "#frame-rules",
            wire,
            craft.encode(wire, sent),
            case=case,
            ignore_duplicates=True,
        )


def _details(group: Group, case: BoundCase, wire: str, kind: FrameKind) -> None:
    """Unregistered terminal reasons whose scrubbed detail holds backslashes or passes 256."""
    frames = craft.content_frames(case, case.content)[:2]
    k = kind.value
    for name, description, reason, limits in (
        (
            "backslashes",
            "backslashes that read like escapes (C:\\new\\x1b\\u202e), and a real U+202E",
            "C:\\new\\x1b\\u202e \\\\ \u202e",
            None,
        ),
        (
            "scrubbed-256",
            "252 letters and BEL: 256 code points once scrubbed",
            "r" * 252 + "\a",
            None,
        ),
        (
            "scrubbed-257",
            "253 letters and BEL: 257 code points once scrubbed",
            "r" * 253 + "\a",
            None,
        ),
        (
            "scrubbed-mixed-256",
            "256 code points of backslashes, ESC, e-acute, U+202E and letters (665 scrubbed)",
            _MIXED_REASON,
            None,
        ),
        (
            "reason-limit-300",
            "300 letters under a reason limit of 300: the detail is still cut at 256",
            "r" * 300,
            {"max_reason_chars": 300},
        ),
    ):
        group.add(
            f"{k}-detail-{name}",
            f"a {k} terminal after two deltas, its reason {description}",
            "#reasons",
            wire,
            craft.encode(wire, [*frames, craft.stop(case, 3, kind, reason)]),
            case=case,
            end=End.EOF,
            limits=limits,
        )


def reply_on(group: Group, case: BoundCase, wire: str) -> None:
    """Blank by the document's white space only, and a repeated source id, on one wire."""
    ids = craft.source_ids(case)
    for name, description, answer in _BLANK_ANSWERS:
        content = craft.reply("answered", answer, ids[:1])
        chunks = craft.encode(wire, craft.content_frames(case, content))
        group.add(name, description, "#reply-schema", wire, chunks, case=case)
    repeated = _repeated_source_id(case)
    for name, description, cited in (
        ("repeated-source-id-last-row", "citing a source id two context rows share", ids[:1]),
        (
            "repeated-source-id-and-another",
            "citing another source, then the source id two context rows share",
            [ids[-1], ids[0]],
        ),
    ):
        content = craft.reply("answered", "Yes.", cited)
        group.add(
            name,
            description,
            "#reply-schema",
            wire,
            craft.encode(wire, craft.content_frames(repeated, content)),
            case=case,
            binding=repeated.binding,
        )


def _repeated_source_id(case: BoundCase) -> BoundCase:
    """``case`` bound to its context and, last, a second row with the first row's source id
    and its own chunk id, text and URL: a citation shows which row it came from."""
    rows = list(case.binding["selected_context"])
    first = rows[0]
    again = {
        "chunk_id": first["chunk_id"] + ":last-row",
        "source_id": first["source_id"],
        "text": "The last row with this source id: the one a citation of it resolves to.",
        "url": "https://replywire.invalid/context/last-row",
    }
    return craft.rebound(case, {**case.binding, "selected_context": [*rows, again]})
