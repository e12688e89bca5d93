"""Text on the wire: UTF-8 cut at every byte of 2-, 3- and 4-byte characters, bytes that are
not UTF-8, a stream that ends inside a character, and the NDJSON wires line by line (JSON,
keys, types, line ends, done's digest).
"""

from __future__ import annotations

import json
from typing import Final

from conformance import craft
from conformance.craft import LP, NDJSON, NDJSON_LAB, NDJSON_WIRES, WIRES
from conformance.vectors import Group
from replywire.shared.recording import BoundCase
from replywire.shared.vectors import End

#: Characters of each UTF-8 width, as they appear in the crafted answer.
WIDE: Final = {2: "\u00e9", 3: "\u20ac", 4: "\U0001f600"}
#: Byte sequences that are not UTF-8.
BAD_UTF8: Final = {
    "lone-continuation": b"\x80",
    "cut-2-byte": b"\xc3x",
    "cut-3-byte": b"\xe2\x82x",
    "cut-4-byte": b"\xf0\x9f\x98x",
    "overlong": b"\xc0\x80",
    "surrogate": b"\xed\xa0\x80",
    "over-max": b"\xf4\x90\x80\x80",
    "ff": b"\xff",
}


def _stream(wire: str, case: BoundCase, content: str) -> bytes:
    return b"".join(craft.encode(wire, craft.content_frames(case, content)))


def utf8_group(case: BoundCase) -> Group:
    group = Group("utf8")
    content = craft.answered(case, f"Caf{WIDE[2]} costs 5{WIDE[3]} {WIDE[4]} ok")
    for wire in WIRES:
        wire_bytes = _stream(wire, case, content)
        for width, char in WIDE.items():
            encoded = char.encode("utf-8")
            where = wire_bytes.index(encoded)
            for offset in range(width + 1):
                group.add(
                    f"split-{width}-byte-at-{offset}",
                    f"two chunks cut {offset} bytes into a {width}-byte character",
                    "#wire-ndjson" if wire != LP else "#wire-lp",
                    wire,
                    craft.split_at(wire_bytes, where + offset),
                    case=case,
                )
            for cut in range(1, width):
                group.add(
                    f"end-inside-{width}-byte-after-{cut}",
                    f"the stream ends {cut} bytes into a {width}-byte character",
                    "#frame-rules",
                    wire,
                    [wire_bytes[: where + cut]],
                    case=case,
                )
        where = wire_bytes.index(WIDE[4].encode("utf-8"))
        group.add(
            "4-byte-in-four-chunks",
            "a 4-byte character cut into four chunks of one byte",
            "#wire-ndjson" if wire != LP else "#wire-lp",
            wire,
            craft.split_at(wire_bytes, where + 1, where + 2, where + 3),
            case=case,
        )
        group.add(
            "one-byte-chunks",
            "the whole stream in chunks of one byte",
            "#frame-rules",
            wire,
            craft.sized(wire_bytes, 1),
            case=case,
        )
        for name, bad in BAD_UTF8.items():
            text = b"ok " + bad + b" ok"
            if wire == LP:
                first = craft.lp(craft.pb_frame(1, case.binding_sha256, 3, craft.pb_text(text)))
            else:
                first = (
                    b'{"sequence":1,"kind":"content_delta","binding_sha256":"'
                    + case.binding_sha256.encode()
                    + b'","text":"'
                    + text
                    + b'"}\n'
                )
            group.add(
                f"invalid-{name}",
                f"a content delta whose text holds {bad!r}: not UTF-8",
                "#wire-lp" if wire == LP else "#wire-ndjson",
                wire,
                [first],
                case=case,
            )
        # Precedence: a fragment's UTF-8 is checked (NDJSON) before any line in it.
        bad_sequence = craft.encode(wire, [craft.delta(case, 2, "x")])[0]
        group.add(
            "bad-sequence-then-invalid-byte",
            "one chunk: a whole frame with sequence 2, then a byte that is not UTF-8",
            "#precedence",
            wire,
            [bad_sequence + b"\xff"],
            case=case,
        )
    for wire in NDJSON_WIRES:
        for name, escaped in (
            ("surrogate-pair-escape", "\\ud83d\\ude00"),
            ("lone-surrogate-escape", "\\ud800"),
            ("reversed-surrogate-escapes", "\\ude00\\ud83d"),
        ):
            opening = (
                '{"sequence":1,"kind":"content_delta","binding_sha256":"'
                + case.binding_sha256
                + '","text":"'
                + escaped
                + '"}'
            )
            group.add(
                name,
                f"a content delta whose JSON text is {escaped}",
                "#wire-ndjson",
                wire,
                [craft.line(opening)],
                case=case,
            )
    return group


def ndjson_group(case: BoundCase) -> Group:
    group = Group("ndjson")
    content = case.content
    texts = craft.deltas(content)
    for wire in NDJSON_WIRES:
        encoded = craft.encode(wire, craft.content_frames(case, content))
        rest = encoded[1:]
        good = craft.delta_object(case, 1, texts[0])

        def first(line: bytes, name: str, description: str, rule: str = "#wire-ndjson") -> None:
            group.add(name, description, rule, wire, [line, *rest], case=case)  # noqa: B023

        dumped = craft.line(good).decode()[:-1]
        first(b"#" + craft.line(good)[1:], "not-json", "a line that is not JSON")
        first(b"\n", "empty-line", "an empty line")
        first(craft.line(dumped[:-1] + ',"text":"again"}'), "duplicate-key", "a duplicate key")
        first(craft.line(dumped.replace('"sequence":1', '"sequence":NaN')), "nan", "sequence NaN")
        first(craft.line(dumped[:-1] + ",}"), "trailing-comma", "a trailing comma")
        first(b"\xef\xbb\xbf" + craft.line(good), "bom", "a UTF-8 byte order mark first")
        first(craft.line("[1]"), "array", "a JSON array")
        first(craft.line('"frame"'), "string", "a JSON string")
        first(
            craft.line({k: v for k, v in good.items() if k != "binding_sha256"}),
            "missing-key",
            "no binding_sha256",
        )
        first(craft.line({**good, "extra": 1}), "extra-key", "an extra key")
        first(craft.line({**good, "kind": "delta"}), "unknown-kind", "kind delta")
        first(craft.line({**good, "kind": 3}), "kind-number", "kind 3")
        first(craft.line({**good, "kind": ["content_delta"]}), "kind-list", "kind a list")
        for name, value in (
            ("string", "1"),
            ("float", 1.0),
            ("true", True),
            ("zero", 0),
            ("negative", -1),
            ("two", 2),
            ("null", None),
            ("huge", 18446744073709551617),
        ):
            first(
                craft.line({**good, "sequence": value}),
                f"sequence-{name}",
                f"sequence {value!r}",
                "#frame-rules",
            )
        first(
            craft.line(dumped.replace('"sequence":1', '"sequence":1e0')),
            "sequence-exponent",
            "sequence 1e0",
            "#frame-rules",
        )
        for name, value in (
            ("number", 1),
            ("uppercase", case.binding_sha256.upper()),
            ("empty", ""),
            ("null", None),
        ):
            first(
                craft.line({**good, "binding_sha256": value}),
                f"binding-{name}",
                f"binding_sha256 {value!r}",
                "#frame-rules",
            )
        texts_of: tuple[tuple[str, object], ...] = (
            ("number", 1),
            ("null", None),
            ("empty", ""),
            ("list", ["x"]),
        )
        for name, text in texts_of:
            first(
                craft.line({**good, "text": text}),
                f"text-{name}",
                f"text {text!r}",
                "#frame-rules",
            )
        first(
            craft.line({**good, "sequence": "1", "binding_sha256": 1}),
            "bad-sequence-and-binding",
            "sequence '1' and binding 1",
            "#precedence",
        )
        first(
            craft.line({**good, "extra": 1, "sequence": 9}),
            "extra-key-and-bad-sequence",
            "an extra key and sequence 9",
            "#precedence",
        )
        first(craft.line(dumped + "\r"), "crlf", "a line ending in CR LF")
        first(craft.line(" " + dumped + " "), "spaces", "spaces around the object")
        first(
            craft.line(dumped.replace('"kind"', '"\\u006bind"')),
            "escaped-key",
            "the key kind escaped",
        )
        spaced = json.dumps(good, ensure_ascii=False, separators=(", ", ": "))
        first(craft.line(spaced), "spaced", "spaces after the separators")
        body = encoded[:-1]
        last = len(texts) + 1
        done = craft.done_object(wire, case, last, texts)
        other = NDJSON_LAB if wire == NDJSON else NDJSON

        def final(line: bytes, name: str, description: str, rule: str = "#digests") -> None:
            group.add(name, description, rule, wire, [*body, line], case=case)  # noqa: B023

        final(
            craft.line(craft.done_object(other, case, last, texts)),
            "done-other-wire",
            f"the done of the {other} wire",
        )
        if wire == NDJSON:
            for name, key, value in (
                ("frames-string", "content_frames", "3"),
                ("frames-float", "content_frames", float(len(texts))),
                ("frames-true", "content_frames", True),
                ("sha256-null", "content_sha256", None),
                ("sha256-empty", "content_sha256", ""),
                ("frames-off-by-one", "content_frames", len(texts) - 1),
            ):
                final(
                    craft.line({**done, key: value}), f"done-{name}", f"done with {key} {value!r}"
                )
        final(craft.line(done)[:-1], "done-no-newline", "done without its newline", "#frame-rules")
        final(
            craft.line(done) + b"{",
            "done-then-partial-line",
            "done, then an unfinished line",
            "#frame-rules",
        )
        group.add("empty-stream", "no bytes at all", "#frame-rules", wire, [], case=case)
        group.add(
            "empty-chunk",
            "an empty chunk between frames",
            "#frame-rules",
            wire,
            [encoded[0], b"", *rest],
            case=case,
        )
        trailing_white_space(group, case, wire, encoded)
        unfinished_long_line(group, case, wire, encoded)
    return group


#: White space after the last line feed: JSON's, and two that only Unicode calls white space;
#: U+FEFF, which some trims take away, is not white space at all.
TRAILING: Final = {
    "space": " ",
    "cr": "\r",
    "json-white-space": " \t\r ",
    "nbsp": "\u00a0",
    "ideographic-space": "\u3000",
    "bom": "\ufeff",
}


def trailing_white_space(group: Group, case: BoundCase, wire: str, encoded: list[bytes]) -> None:
    """Bytes after the last line feed that are only white space, then a clean end: an
    unfinished frame, as any other bytes there."""
    for name, text in TRAILING.items():
        group.add(
            f"done-then-{name}",
            f"done, then {text!r} without a line feed, then a clean end",
            "#wire-ndjson",
            wire,
            [*encoded, text.encode()],
            case=case,
        )
    group.add(
        "content-then-space",
        "content frames, no terminal, then a space without a line feed, then a clean end",
        "#wire-ndjson",
        wire,
        [*encoded[:-1], b" "],
        case=case,
    )
    group.add(
        "white-space-line",
        "a line of a space and a tab first",
        "#wire-ndjson",
        wire,
        [b" \t\n", *encoded],
        case=case,
    )


def unfinished_long_line(group: Group, case: BoundCase, wire: str, encoded: list[bytes]) -> None:
    """A line without its line feed yet, over a frame limit of 100 bytes: refused with the
    chunk that takes it over, not when its line feed comes; the bytes of a 4-byte character
    begun and not complete are not counted until it is."""
    limit = 100
    line = craft.line(craft.delta_object(case, 1, "ab" + WIDE[4] + "cd"))
    rest = encoded[1:]
    wide = line.index(WIDE[4].encode())

    def add(name: str, description: str, chunks: list[bytes], size: int, end: End) -> None:
        group.add(
            name,
            f"frame limit {size}: {description}",
            "#wire-ndjson",
            wire,
            chunks,
            case=case,
            end=end,
            limits={"max_frame_bytes": size},
        )

    over = line[: limit + 1]
    add(
        "unfinished-line-over-limit",
        "101 bytes of a line, then a clean end",
        [over],
        limit,
        End.EOF,
    )
    add(
        "unfinished-line-over-limit-then-error",
        "101 bytes of a line, then a broken transport",
        [over],
        limit,
        End.TRANSPORT_ERROR,
    )
    add(
        "unfinished-line-over-limit-then-rest",
        "101 bytes of a line, then the rest of it and of the stream",
        [over, line[limit + 1 :], *rest],
        limit,
        End.EOF,
    )
    add(
        "unfinished-line-at-limit-then-error",
        "100 bytes of a line, then a broken transport",
        [line[:limit]],
        limit,
        End.TRANSPORT_ERROR,
    )
    for cut in (1, 2, 3):
        add(
            f"unfinished-line-at-limit-pending-{cut}-then-error",
            f"a line's {wide} bytes and {cut} of a 4-byte character, then a broken transport",
            [line[: wide + cut]],
            wide,
            End.TRANSPORT_ERROR,
        )
    add(
        "unfinished-line-at-limit-pending-3-then-rest",
        f"a line's {wide} bytes and 3 of a 4-byte character, then the rest of the stream",
        [line[: wide + 3], line[wide + 3 :], *rest],
        wide,
        End.EOF,
    )
    add(
        "unfinished-line-past-limit-pending-1-then-error",
        f"a line's {wide} bytes and 1 of a 4-byte character, then a broken transport",
        [line[: wide + 1]],
        wide - 1,
        End.TRANSPORT_ERROR,
    )
