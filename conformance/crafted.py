"""The crafted vector groups: wires written byte by byte to reach every reason code that
wire content can cause, every precedence rule, UTF-8 cut at every byte of a character,
the length-prefixed wire's varint and length edges, and the canonical JSON's corners.

Each vector's verdict is the core's (``conformance.vectors.core_result``): the names and
descriptions here say what a vector exercises, never what it must conclude.
"""

from __future__ import annotations

from typing import Any

from conformance import craft, crafted_lp, crafted_rules, crafted_text
from conformance.craft import NDJSON_LAB, WIRES
from conformance.vectors import Group
from replywire.shared.frames import Frame, FrameKind
from replywire.shared.recording import BoundCase, Recording
from replywire.shared.vectors import End


def frames_group(case: BoundCase) -> Group:
    group = Group("frames")
    for wire in WIRES:
        _frames_on(group, case, wire)
        crafted_rules.frames_on(group, case, wire)
    return group


def _frames_on(group: Group, case: BoundCase, wire: str) -> None:
    """The frame rules on one wire."""
    content = case.content
    texts = craft.deltas(content)
    n = len(texts)
    frames = craft.content_frames(case, content)

    def add(
        name: str,
        description: str,
        sent: list[Frame],
        rule: str = "#frame-rules",
        end: End = End.EOF,
        duplicates: bool = False,
    ) -> None:
        chunks = craft.encode(wire, sent)
        group.add(
            name,
            description,
            rule,
            wire,
            chunks,
            case=case,
            end=end,
            ignore_duplicates=duplicates,
        )

    delta = craft.delta
    add(
        "first-sequence-2",
        "the first frame numbered 2",
        [delta(case, 2, texts[0]), *frames[1:]],
    )
    add(
        "first-sequence-0",
        "the first frame numbered 0",
        [delta(case, 0, texts[0]), *frames[1:]],
    )
    add("swapped-2-3", "frames 2 and 3 swapped", [frames[0], frames[2], frames[1], *frames[3:]])
    add(
        "done-sequence-skips",
        "done numbered one past its place",
        [*frames[:-1], craft.done(case, n + 2, texts)],
    )
    add(
        "foreign-binding-first",
        "frame 1 bound to another binding",
        [delta(case, 1, texts[0], "0" * 64), *frames[1:]],
    )
    add(
        "binding-uppercase",
        "frame 2's binding hash in uppercase",
        [frames[0], delta(case, 2, texts[1], case.binding_sha256.upper()), *frames[2:]],
    )
    done_foreign = Frame(
        sequence=n + 1,
        kind=FrameKind.DONE,
        binding_sha256="f" * 64,
        done_digest=frames[-1].done_digest,
    )
    add(
        "done-foreign-binding",
        "the done bound to another binding",
        [*frames[:-1], done_foreign],
    )
    add(
        "bad-sequence-and-binding",
        "frame 2 numbered 3 and bound elsewhere",
        [frames[0], delta(case, 3, texts[1], "0" * 64)],
        "#precedence",
    )
    add(
        "empty-delta",
        "a content delta with empty text",
        [frames[0], delta(case, 2, ""), *frames[1:]],
    )
    add(
        "empty-delta-bad-binding",
        "an empty content delta bound elsewhere",
        [frames[0], delta(case, 2, "", "0" * 64)],
        "#precedence",
    )
    # Terminals.
    for kind in (FrameKind.CANCEL, FrameKind.ERROR):
        k = kind.value
        for name, reason in (
            ("controlled", f"controlled_local_{k}"),
            (
                "registered-other",
                "provider_finish_SAFETY" if kind is FrameKind.ERROR else "consumer_cancelled",
            ),
            ("unregistered", "the user stopped it"),
            ("control-characters", "bad\x07thing\nhere\u202e"),
            ("256-chars", "r" * 256),
            ("257-chars", "r" * 257),
            ("256-wide-chars", "\U0001f600" * 256),
            ("empty", ""),
        ):
            add(
                f"{k}-{name}",
                f"a {k} terminal after two deltas, reason {reason[:24]!r}",
                [*frames[:2], craft.stop(case, 3, kind, reason)],
                "#reasons",
            )
        add(
            f"{k}-first",
            f"a {k} terminal as the first frame",
            [craft.stop(case, 1, kind, f"controlled_local_{k}")],
            "#reasons",
        )
        add(
            f"{k}-then-transport-error",
            f"a {k} terminal, then the transport breaks",
            [*frames[:2], craft.stop(case, 3, kind, f"controlled_local_{k}")],
            "#result-document",
            End.TRANSPORT_ERROR,
        )
    if wire != NDJSON_LAB:
        other = craft.done(case, n + 1, [*texts[:-1], texts[-1][::-1]])
        add(
            "done-digest-of-other-content",
            "a done whose SHA-256 is of other content",
            [*frames[:-1], other],
            "#digests",
        )
    # One letter of the answer altered on the way, the reply still valid and its citations
    # intact: only done's claim can tell (the digest), and ndjson-lab, which has none,
    # accepts the altered text (integrity none).
    at = content.index('"answer": "') + len('"answer": "')
    altered = content[:at] + content[at].swapcase() + content[at + 1 :]
    assert altered != content, "the answer starts with a letter"
    changed = at // 13  # craft.deltas cuts every 13 characters
    add(
        "altered-answer-letter",
        f"frame {changed + 1} altered on the way: one letter of the answer's case swapped",
        [
            *frames[:changed],
            delta(case, changed + 1, craft.deltas(altered)[changed]),
            *frames[changed + 1 :],
        ],
        "#digests",
    )
    add("done-then-delta", "a content delta after done", [*frames, delta(case, n + 2, "x")])
    add("done-twice", "done sent twice", [*frames, frames[-1]])
    add(
        "done-then-bad-sequence",
        "after done, a frame numbered 99",
        [*frames, delta(case, 99, "x", "0" * 64)],
        "#precedence",
    )
    add(
        "done-then-transport-error",
        "every frame, then the transport breaks",
        frames,
        "#result-document",
        End.TRANSPORT_ERROR,
    )
    add(
        "content-then-transport-error",
        "two deltas, then the transport breaks",
        frames[:2],
        "#result-document",
        End.TRANSPORT_ERROR,
    )
    add(
        "nothing-then-transport-error",
        "no bytes, then the transport breaks",
        [],
        "#result-document",
        End.TRANSPORT_ERROR,
    )
    add("content-then-eof", "every delta, no terminal, a clean end", frames[:-1])
    add(
        "done-no-content",
        "done with no content before it",
        [craft.done(case, 1, [])],
        "#reply-schema",
    )
    encoded = craft.encode(wire, frames)
    group.add(
        "partial-frame-then-transport-error",
        "every frame, the last cut short, then the transport breaks",
        "#result-document",
        wire,
        [*encoded[:-1], encoded[-1][:4]],
        case=case,
        end=End.TRANSPORT_ERROR,
    )
    # The duplicate policy.
    add(
        "duplicate-1-after-3",
        "frame 1 again after frame 3, with the duplicate policy",
        [*frames[:3], frames[0], *frames[3:]],
        duplicates=True,
    )
    add(
        "duplicate-1-after-3-no-policy",
        "frame 1 again after frame 3, without the policy",
        [*frames[:3], frames[0], *frames[3:]],
    )
    add(
        "conflicting-duplicate",
        "frame 2 again with other text, with the duplicate policy",
        [*frames[:3], delta(case, 2, "other"), *frames[3:]],
        duplicates=True,
    )
    add(
        "duplicate-ahead",
        "frame 5 before frame 3, with the duplicate policy",
        [*frames[:2], frames[4], *frames[2:]],
        duplicates=True,
    )
    add(
        "duplicate-done",
        "done sent twice, with the duplicate policy",
        [*frames, frames[-1]],
        duplicates=True,
    )
    add(
        "duplicate-foreign-binding",
        "frame 1 again bound elsewhere, with the duplicate policy",
        [*frames[:2], delta(case, 1, texts[0], "0" * 64), *frames[2:]],
        duplicates=True,
    )


def reply_group(case: BoundCase) -> Group:
    group = Group("reply")
    ids = craft.source_ids(case)
    reply = craft.reply
    contents: list[tuple[str, str, str]] = [
        (
            "answered",
            "a valid answered reply citing one source",
            reply("answered", "Yes.", ids[:1]),
        ),
        (
            "answered-two-sources",
            "a valid reply citing two sources, in reverse order",
            reply("answered", "Yes.", ids[::-1]),
        ),
        ("not-in-docs", "a valid not_in_docs reply", reply("not_in_docs", "No.", [])),
        (
            "whitespace-around",
            "a valid reply with whitespace around it",
            "\n " + reply("answered", "Yes.", ids[:1]) + " \n",
        ),
        (
            "non-ascii-answer",
            "a valid reply whose answer is not ASCII",
            reply("answered", "Oui, \u00e9t\u00e9 \U0001f600.", ids[:1]),
        ),
        ("not-json", "a reply that is not JSON", "Yes, it is."),
        ("truncated-json", "a reply cut short", reply("answered", "Yes.", ids[:1])[:-3]),
        (
            "duplicate-key",
            "a reply with the answer key twice",
            '{"status": "answered", "answer": "a", "answer": "b", "source_ids": ["ID"]}'.replace(
                "ID", ids[0]
            ),
        ),
        (
            "nan",
            "a reply with NaN in it",
            '{"status": "answered", "answer": "a", "source_ids": ["ID"], "x": NaN}'.replace(
                "ID", ids[0]
            ),
        ),
        ("array", "a reply that is a JSON array", "[1, 2]"),
        ("empty", "an empty reply (content of one space)", " "),
        ("missing-source-ids", "no source_ids", reply("answered", "Yes.")),
        ("extra-key", "an extra key", reply("answered", "Yes.", ids[:1], extra=1)),
        ("status-other", "status maybe", reply("maybe", "Yes.", ids[:1])),
        ("status-number", "status 1", reply(1, "Yes.", ids[:1])),  # type: ignore[arg-type]
        ("answer-empty", "an empty answer", reply("answered", "", ids[:1])),
        ("answer-blank", "an answer of spaces", reply("answered", "   ", ids[:1])),
        ("answer-number", "an answer that is a number", reply("answered", 42, ids[:1])),
        (
            "answer-lone-surrogate",
            "an answer holding an escaped lone surrogate",
            '{"status": "answered", "answer": "a\\ud800b", "source_ids": ["ID"]}'.replace(
                "ID", ids[0]
            ),
        ),
        ("source-ids-string", "source_ids a string", reply("answered", "Yes.", ids[0])),
        ("source-ids-number", "source_ids [1]", reply("answered", "Yes.", [1])),
        ("source-ids-empty-string", 'source_ids [""]', reply("answered", "Yes.", [""])),
        (
            "source-ids-duplicate",
            "a source cited twice",
            reply("answered", "Yes.", [ids[0], ids[0]]),
        ),
        (
            "unknown-citation",
            "a source outside the bound context",
            reply("answered", "Yes.", ["not-in-context"]),
        ),
        ("answered-without-sources", "answered, citing nothing", reply("answered", "Yes.", [])),
        (
            "not-in-docs-with-source",
            "not_in_docs, citing a source",
            reply("not_in_docs", "No.", ids[:1]),
        ),
        (
            "not-in-docs-unknown-source",
            "not_in_docs citing a source outside the context",
            reply("not_in_docs", "No.", ["not-in-context"]),
        ),
        (
            "duplicate-unknown-sources",
            "an unknown source cited twice",
            reply("answered", "Yes.", ["nope", "nope"]),
        ),
        (
            "blank-answer-unknown-source",
            "a blank answer and an unknown source",
            reply("answered", " ", ["nope"]),
        ),
    ]
    for wire in WIRES:
        for name, description, content in contents:
            rule = (
                "#precedence"
                if name
                in {
                    "not-in-docs-unknown-source",
                    "duplicate-unknown-sources",
                    "blank-answer-unknown-source",
                }
                else "#reply-schema"
            )
            chunks = craft.encode(wire, craft.content_frames(case, content))
            group.add(name, description, rule, wire, chunks, case=case)
    for wire in WIRES:
        crafted_rules.reply_on(group, case, wire)
    return group


def _bound(case: BoundCase, corner: Any) -> BoundCase:
    """``case`` with ``corner`` inside its binding's ``corpus_identity`` (an object the binding
    schema leaves open): the binding keeps its six keys and stays valid under the schema."""
    identity = {**case.binding["corpus_identity"], "conformance_corner": corner}
    return craft.rebound(case, {**case.binding, "corpus_identity": identity})


def canonical_group(case: BoundCase) -> Group:
    """Bindings with every corner of the canonical JSON (in ``corpus_identity``): each frame
    carries the digest of the canonical bytes, which a consumer must compute alike or refuse
    every frame."""
    group = Group("canonical")
    corners: dict[str, tuple[str, Any]] = {
        "key-order-non-bmp": (
            "keys ordered by code point, not UTF-16 unit",
            {"\uff61": 1, "\U0001f600": 2, "a": 3, "\u00e9": 4},
        ),
        "escapes": (
            "strings with quotes, backslashes, controls and separators",
            {"s": 'q"b\\c\u0000\u001f\u007f/\u2028\u2029\ufeff'},
        ),
        "non-ascii": ("non-ASCII kept raw", {"s": "\u00e9\u20ac\U0001f600"}),
        "integers": ("integers, large and negative", [0, -1, 2**53 + 1, -(2**63), 10**30]),
        "floats": ("floats as the reference writes them", [1.0, 0.1, 1e21, 1e-7, -0.0, 1.5e300]),
        "literals": ("true, false, null, empty array and object", [True, False, None, [], {}]),
        "nested-keys": (
            "nested objects, keys sorted at every level",
            {"b": {"z": 1, "a": [{"y": 2, "x": 3}]}, "a": 0},
        ),
    }
    for wire in WIRES:
        for name, (description, corner) in corners.items():
            bound = _bound(case, corner)
            group.add(
                name,
                f"a binding with {description}",
                "#canonical-json",
                wire,
                craft.encode(wire, craft.content_frames(bound, case.content)),
                case=case,
                binding=bound.binding,
            )
        mismatched = _bound(case, {"b": 1, "a": 2})
        frames = craft.content_frames(case, case.content)
        group.add(
            "digest-of-other-binding",
            "frames carrying the recording's digest, another binding bound",
            "#digests",
            wire,
            craft.encode(wire, frames),
            case=case,
            binding=mismatched.binding,
        )
    return group


def crafted_groups(recording: Recording) -> dict[str, Group]:
    case = recording.case(recording.case_ids[1])
    return {
        "utf8": crafted_text.utf8_group(case),
        "lp": crafted_lp.lp_group(case),
        "ndjson": crafted_text.ndjson_group(case),
        "frames": frames_group(case),
        "reply": reply_group(case),
        "canonical": canonical_group(case),
    }
