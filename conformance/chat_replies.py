"""The ``chat`` group's turns (docs/protocol.md#chat-reply) on both default wires: turns of
every shape in several chunkings, fragments of two calls interleaved, usage reports that
replace one another, signatures of each part, the empty turn, the chat content digest of
a part dropped, reordered, altered or re-typed, every fault of the catalogue on a turn,
and chat frames under the duplicate policy. The frame rules, the wires' corners and the
limits are ``conformance.chat_rules``'s; both fill the one group, ``chat_group``.
"""

from __future__ import annotations

from typing import Final

from conformance import craft
from conformance.chat_craft import (
    call,
    chat_case,
    claim,
    finish,
    frames,
    signature,
    text,
    thought,
    usage,
)
from conformance.vectors import ROOT, Group
from replywire.shared.chat_frames import ChatItem
from replywire.shared.chat_recording import ChatRecording
from replywire.shared.digest import digest
from replywire.shared.errors import RequestRefused
from replywire.shared.faults import TIMING_FAULTS, Ending, Fault, FaultKind, transmit
from replywire.shared.frames import DoneDigest, content_sha256
from replywire.shared.recording import Recording
from replywire.shared.vectors import End
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import LAB_PATTERN, ChunkMode, ChunkPlan, cut

#: A chat reply rides the default wires (the lab's wire knows its own four kinds only).
CHAT_WIRES: Final = (craft.LP, craft.NDJSON)
PLANS: Final = {
    "frame": ChunkPlan(ChunkMode.FRAME),
    "whole": ChunkPlan(ChunkMode.WHOLE),
    "lab": ChunkPlan(ChunkMode.SIZES, (*LAB_PATTERN, 64)),
    "64": ChunkPlan(ChunkMode.SIZES, (64,)),
    "1": ChunkPlan(ChunkMode.SIZES, (1,)),
}
CHAT_RECORDING_PATH: Final = ROOT / "fixtures" / "chat-recording.json"
#: The 002 lab's turn: text, then two calls whose fragments interleave (call 1's last
#: before call 0's last), text again, the usage and the finish.
TURN_002: Final = (
    text("Reading "),
    call(0, '{"path":"', "read_file", "call-read"),
    call(1, '{"command":"', "shell", "call-shell"),
    call(1, 'pwd"}'),
    call(0, 'notes.py"}'),
    text("the files."),
    usage(18, 9, 27, cached=4),
    finish("tool_calls"),
)
#: Turns of every shape, each accepted (or, where named, refused after done).
TURNS: Final[dict[str, tuple[str, tuple[ChatItem, ...]]]] = {
    "002-interleaved": ("the 002 lab's turn: two calls' fragments interleaved", TURN_002),
    "three-calls-round-robin": (
        "three calls begun one after the other, then each one's last fragment in turn",
        (
            call(0, '{"path":', "read_file", "a"),
            call(1, '{"command":', "shell", "b"),
            call(2, '{"city":', "get_weather", "c"),
            call(0, '"a.txt"}'),
            call(1, '"ls"}', "shell", "b"),
            call(2, '"Oslo"}', "get_weather"),
            finish("tool_calls"),
        ),
    ),
    "one-character-fragments": (
        "a call's arguments one character a fragment, text between them",
        (
            call(0, "{", "get_weather", "w"),
            *(call(0, char) for char in '"city":"Lima"'),
            text("Looking"),
            call(0, "}"),
            text(" it up."),
            finish(),
        ),
    ),
    "text-only": (
        "text only, in three deltas, with usage and the finish",
        (text("Hello, "), text("here is "), text("the answer."), usage(10, 4, 14), finish()),
    ),
    "one-call": (
        "one call in one fragment",
        (call(0, '{"city":"Oslo"}', "get_weather", "c1"), finish("tool_calls")),
    ),
    "two-parallel-calls": (
        "text, then two calls one after the other, their arguments in two fragments each",
        (
            text("Checking both."),
            call(0, '{"city":', "get_weather", "c1"),
            call(0, '"Oslo"}'),
            call(1, '{"city":', "get_weather", "c2"),
            call(1, '"Lima"}'),
            usage(31, 18, 61, thoughts=12),
            finish("STOP"),
        ),
    ),
    "thought-signed": (
        "a thought summary in two deltas, its signature, a signed call, signed text",
        (
            thought("The user wants "),
            thought("two cities."),
            signature("thought", 0, "c2lnLXRob3VnaHQ="),
            call(0, '{"city":"Oslo"}', "get_weather", "c1"),
            signature("tool_call", 0, "c2lnLTE="),
            text("Oslo first."),
            signature("text", 0, "c2lnLXRleHQ="),
            finish("STOP"),
        ),
    ),
    "signatures-each-part": (
        "a signature of the text before any text, of two calls (the second first), of a thought",
        (
            signature("text", 0, "early"),
            call(0, '{"command":"pwd"}', "shell", ""),
            call(1, '{"command":"ls"}', "shell"),
            signature("tool_call", 1, "second"),
            signature("tool_call", 0, "first"),
            thought("Done."),
            signature("thought", 0, "t"),
            finish(),
        ),
    ),
    "call-no-id-empty-first-fragment": (
        "a call with no id whose first fragment has no arguments; later fragments repeat the name",
        (
            call(0, "", "read_file"),
            call(0, '{"path":', "read_file"),
            call(0, '"a.txt"}', "", ""),
            finish(),
        ),
    ),
    "empty-turn": ("an empty turn: the finish alone", (finish("STOP"),)),
    "empty-turn-usage": ("a finish, then usage", (finish("MAX_TOKENS"), usage(5, 0, 5))),
    "usage-replaced": (
        "three cumulative usage reports, one before the finish: the last counts",
        (
            usage(18, 1, 19),
            text("Hi."),
            usage(18, 2, 20),
            finish(),
            usage(18, 3, 21, cached=4),
        ),
    ),
    "usage-total-mismatch": (
        "a reported total that is not the sum of its components: a note, still accepted",
        (text("Hi."), usage(18, 9, 99, cached=4, thoughts=3), finish()),
    ),
    "usage-mismatch-then-right": (
        "a wrong total replaced by a right one: no note",
        (text("Hi."), usage(1, 1, 5), usage(18, 9, 30, thoughts=2, tool_use=1), finish()),
    ),
    "usage-max": (
        "usage counts of 2^64 - 1, kept exactly",
        (usage(2**64 - 1, 0, 2**64 - 1, cached=2**64 - 1), finish()),
    ),
    "unicode": (
        "astral characters, controls and escapes in text, thoughts, arguments and the finish",
        (
            text('Caf\u00e9 \U0001f600 \u2028 \x00 \\ " /'),
            thought("\u65e5\u672c\u8a9e \U00010348"),
            call(
                0,
                '{"city":"Z\u00fcrich \\ud83d\\ude00 \U0001f600","units":"celsius"}',
                "get_weather",
                "id-\u00e9",
            ),
            signature("tool_call", 0, "\U0001f600"),
            finish("\U0001f600" * 64),
        ),
    ),
    "code-points": (
        "minLength and maxLength count code points: three astral characters are three",
        (call(0, '{"code":"\U0001f600\U0001f4a9\U00010348"}', "code"), finish()),
    ),
    "integer-one-point-zero": (
        "an argument 1.0 where the schema wants an integer: an integer, as 2020-12 says",
        (call(0, '{"n": 1.0}', "count", "c1"), finish()),
    ),
    "arguments-white-space": (
        "arguments with JSON white space and keys in any order",
        (call(0, ' {\t"units" : "fahrenheit",\n"city":"Lima" } ', "get_weather"), finish()),
    ),
    "malformed-kept": (
        "a call whose arguments end early: refused, the call kept as it came",
        (text("Reading."), call(0, '{"path":', "read_file", "call-read"), finish("tool_calls")),
    ),
}


def chat_group(recording: Recording) -> Group:
    """The ``chat`` group: these turns, and the rules and corners of ``chat_rules``."""
    from conformance import chat_rules  # noqa: PLC0415 (each module fills half the group)

    group = Group("chat")
    for wire in CHAT_WIRES:
        _turns(group, wire)
        _recorded(group, wire)
        _digests(group, wire)
        _faults(group, wire)
        _duplicates(group, wire)
    chat_rules.rules_of(group, recording)
    return group


def _turns(group: Group, wire: str) -> None:
    for name, (description, items) in TURNS.items():
        chat = chat_case(items)
        encoded = craft.encode(wire, frames(chat, items))
        plans = PLANS if name == "002-interleaved" else {"frame": PLANS["frame"]}
        if name in ("text-only", "thought-signed", "unicode"):
            plans = {key: PLANS[key] for key in ("frame", "whole", "lab")}
        for plan_name, plan in plans.items():
            group.add(
                f"{name}.{plan_name}",
                f"{description}; chunks: {plan.describe()}",
                "#chat-reply",
                wire,
                cut(encoded, plan),
                case=chat,
            )
    no_tools = chat_case(TURN_002, tools=())
    group.add(
        "002-no-tools-declared",
        "the 002 turn for a request that declares no tool: its first call is undeclared",
        "#chat-reply",
        wire,
        craft.encode(wire, frames(no_tools, TURN_002)),
        case=no_tools,
    )


def _recorded(group: Group, wire: str) -> None:
    """Every case of the chat recording, as the recording source serves it."""
    recording = ChatRecording.from_bytes(CHAT_RECORDING_PATH.read_bytes())
    for case_id in recording.case_ids:
        chat = recording.case(case_id)
        for plan_name in ("frame", "lab"):
            sent = transmit(chat, wire=WireFormat(wire), plan=PLANS[plan_name])
            group.add(
                f"recorded-{case_id}.{plan_name}",
                f"the recorded turn of {case_id}, chunks: {PLANS[plan_name].describe()}",
                "#chat-reply",
                wire,
                sent.chunks,
                case=chat,
            )


#: The 002 turn, each way a claim can differ from what arrived.
_002 = list(TURN_002)


def _digests(group: Group, wire: str) -> None:
    """``done`` claims the 002 turn; what arrived is not it (docs/protocol.md#chat-digest)."""
    chat = chat_case(TURN_002)
    retyped = [*_002[:4], text('notes.py"}'), *_002[5:]]
    altered = [*_002[:4], call(0, 'notes.pY"}'), *_002[5:]]
    renamed = [*_002[:1], call(0, '{"path":"', "read_file", "call-reaD"), *_002[2:]]
    thought_for_text = [*_002[:5], thought("the files."), *_002[6:]]
    text_claim = DoneDigest(
        content_sha256=content_sha256("Reading the files."), content_frames=len(_002)
    )
    for name, sent, claimed, description in (
        ("part-dropped", _002[:3] + _002[4:], _002, "call 1's last fragment never sent"),
        (
            "part-reordered",
            [*_002[:3], _002[4], _002[3], *_002[5:]],
            _002,
            "call 0's last fragment and call 1's swapped (each still a valid fragment)",
        ),
        ("part-altered", altered, _002, "one character of call 0's arguments changed"),
        ("call-retyped-as-text", retyped, _002, "call 0's last fragment sent as a text delta"),
        ("id-altered", renamed, _002, "call 0's id changed in one character"),
        ("thought-for-text", thought_for_text, _002, "the second text sent as a thought"),
        ("usage-dropped", _002[:6] + _002[7:], _002, "the usage never sent"),
        (
            "part-added",
            [*_002[:7], usage(18, 9, 27, cached=4), _002[7]],
            _002,
            "the usage sent twice (the claim counts one)",
        ),
        ("claims-text-only", _002, text_claim, "done claims the digest of the text alone"),
        (
            "claims-one-frame-less",
            _002,
            DoneDigest(content_sha256=claim(_002).content_sha256, content_frames=len(_002) - 1),
            "done claims one content frame less",
        ),
    ):
        group.add(
            f"digest-{name}",
            f"the 002 turn's claim, {description}: content_digest_mismatch",
            "#chat-digest",
            wire,
            craft.encode(wire, frames(chat, sent, claimed=claimed)),
            case=chat,
        )


def _end(ending: Ending) -> End:
    return End.TRANSPORT_ERROR if ending is Ending.TRANSPORT_ERROR else End.EOF


#: The targeted faults, aimed at a content frame of any kind.
_TARGETED: Final = (FaultKind.OMIT, FaultKind.REPEAT, FaultKind.CORRUPT, FaultKind.FOREIGN_BINDING)


def _faults(group: Group, wire: str) -> None:
    """Every fault of the catalogue on the 002 turn; the targeted ones at their default
    (frame 3, a tool_call), at frame 1 (text), at the usage and at the finish."""
    chat = chat_case(TURN_002)
    foreign = digest({"foreign_to": chat.binding_sha256})
    kinds = [kind for kind in FaultKind if kind not in TIMING_FAULTS]
    runs: list[tuple[str, Fault, bool]] = []
    for kind in kinds:
        byte_count = 3 if kind is FaultKind.TRUNCATE_TAIL else None
        runs.append((kind.value, Fault(kind=kind, byte_count=byte_count), False))
    runs.append(("repeat.with-duplicate-policy", Fault(kind=FaultKind.REPEAT), True))
    for kind in _TARGETED:
        for frame, part in ((1, "text"), (7, "usage"), (8, "finish")):
            fault = Fault(kind=kind, target_frame=frame)
            runs.append((f"{kind.value}-frame-{frame}-{part}", fault, False))
    runs.append(
        ("repeat-finish.with-duplicate-policy", Fault(kind=FaultKind.REPEAT, target_frame=8), True)
    )
    for name, fault, ignore in runs:
        try:
            sent = transmit(
                chat,
                wire=WireFormat(wire),
                plan=PLANS["frame"],
                fault=fault,
                foreign_binding_sha256=foreign,
            )
        except RequestRefused:  # a fault the catalogue refuses for this turn makes no vector
            continue
        group.add(
            f"fault-{name}",
            f"fault {fault.kind.value} on the 002 turn"
            + (f" at content frame {fault.target_frame}" if fault.target_frame else "")
            + (" (duplicates ignored)" if ignore else ""),
            "#faults",
            wire,
            sent.chunks,
            case=chat,
            end=_end(sent.ending),
            ignore_duplicates=ignore,
        )


def _duplicates(group: Group, wire: str) -> None:
    """Chat frames sent again under the duplicate policy: the same bytes are dropped, a
    different frame under an applied sequence is ``conflicting_duplicate``."""
    chat = chat_case(TURN_002)
    encoded = craft.encode(wire, frames(chat, TURN_002))
    other = craft.encode(
        wire, frames(chat, [*_002[:1], call(0, '{"path":"x', "read_file", "call-read"), *_002[2:]])
    )
    for name, chunks, description in (
        (
            "call-again-after-3",
            [*encoded[:3], encoded[1], *encoded[3:]],
            "call 0's first fragment sent again after frame 3",
        ),
        (
            "every-part-twice",
            [part for frame in encoded[:-1] for part in (frame, frame)] + encoded[-1:],
            "every content frame sent twice in a row",
        ),
        (
            "usage-again",
            [*encoded[:7], encoded[6], *encoded[7:]],
            "the usage sent again right after it",
        ),
        (
            "conflicting-call",
            [*encoded[:2], other[1], *encoded[2:]],
            "frame 2 again with other arguments",
        ),
    ):
        for ignore in (True, False):
            group.add(
                f"duplicate-{name}" + (".with-duplicate-policy" if ignore else ""),
                description + (" (duplicates ignored)" if ignore else ""),
                "#frame-rules",
                wire,
                chunks,
                case=chat,
                ignore_duplicates=ignore,
            )
