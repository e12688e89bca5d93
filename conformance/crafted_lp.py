"""The length-prefixed wire written byte by byte: the header's flag and declared length, the
protobuf payload's varints, tags, wire types, repeated and unknown fields, and the done's
digest, each with the core's verdict.
"""

from __future__ import annotations

from typing import Any

from conformance import craft
from conformance.craft import LP
from conformance.vectors import Group
from replywire.shared.frames import content_sha256
from replywire.shared.recording import BoundCase
from replywire.shared.vectors import End


def lp_group(case: BoundCase) -> Group:
    """The length-prefixed wire only: every vector's first frame is made by hand."""
    group = Group("lp")
    content = case.content
    texts = craft.deltas(content)
    frames = craft.content_frames(case, content)
    encoded = craft.encode(LP, frames)
    wire_bytes = b"".join(encoded)
    rest = encoded[1:]
    binding = case.binding_sha256
    first_text = craft.pb_text(texts[0])

    def first(payload: bytes, **header: Any) -> list[bytes]:
        return [craft.lp(payload, **header), *rest]

    def add(name: str, description: str, chunks: list[bytes], rule: str = "#wire-lp") -> None:
        group.add(name, description, rule, LP, chunks, case=case)

    for offset in range(1, 5):
        add(
            f"header-split-{offset}",
            f"the first header cut after {offset} bytes",
            craft.split_at(wire_bytes, offset),
        )
    add("header-flag-1", "flag byte 1", first(craft.pb_frame(1, binding, 3, first_text), flag=1))
    add(
        "header-flag-128",
        "flag byte 0x80",
        first(craft.pb_frame(1, binding, 3, first_text), flag=128),
    )
    add(
        "length-over-limit-no-body",
        "a header declaring 8,193 bytes, and no body",
        [craft.lp(b"", length=8193)],
    )
    add(
        "length-max-no-body",
        "a header declaring 2^32-1 bytes, and no body",
        [craft.lp(b"", length=(1 << 32) - 1)],
    )
    add(
        "flag-and-length-bad",
        "flag 1 and a declared length over the limit",
        [craft.lp(b"", flag=1, length=8193)],
        "#precedence",
    )
    add("length-zero", "an empty payload (declared length 0)", first(b""))
    add("no-kind", "sequence and binding, no kind", first(craft.pb_frame(1, binding)))
    add("no-sequence", "no sequence field (0)", first(craft.pb_frame(None, binding, 3, first_text)))
    add(
        "sequence-2-byte-varint",
        "sequence 1 as a 2-byte varint (not minimal)",
        [
            craft.lp(
                b"\x08\x81\x00"
                + craft.field_bytes(2, binding.encode())
                + craft.field_bytes(3, first_text)
            ),
            *rest,
        ],
    )
    add(
        "sequence-10-byte-varint",
        "sequence 1 as a 10-byte varint",
        [
            craft.lp(
                b"\x08"
                + craft.padded_varint(1, 10)
                + craft.field_bytes(2, binding.encode())
                + craft.field_bytes(3, first_text)
            ),
            *rest,
        ],
    )
    add(
        "sequence-varint-over-64-bits",
        "a 10-byte sequence varint with bits past 64",
        first(b"\x08" + b"\x81" + b"\x80" * 8 + b"\x02" + craft.field_bytes(2, binding.encode())),
    )
    add(
        "sequence-11-byte-varint",
        "an 11-byte sequence varint",
        first(b"\x08" + craft.padded_varint(1, 11) + craft.field_bytes(2, binding.encode())),
    )
    add(
        "sequence-max-uint64",
        "sequence 2^64-1",
        first(craft.pb_frame((1 << 64) - 1, binding, 3, first_text)),
    )
    add(
        "truncated-varint",
        "a payload ending inside a varint",
        first(craft.field_bytes(2, binding.encode()) + b"\x08\x81"),
    )
    add(
        "length-padded-varint",
        "the binding's length as a 2-byte varint (not minimal)",
        [
            craft.lp(
                craft.field_varint(1, 1)
                + b"\x12\xc0\x00"
                + binding.encode()
                + craft.field_bytes(3, first_text)
            ),
            *rest,
        ],
    )
    add(
        "string-overruns",
        "a string field longer than the payload",
        first(craft.field_varint(1, 1) + b"\x12\x7f" + binding.encode()),
    )
    add(
        "unknown-field-varint",
        "an unknown field 7 (varint)",
        first(craft.pb_frame(1, binding, 3, first_text) + craft.field_varint(7, 1)),
    )
    add(
        "unknown-field-group",
        "an unknown field 7 with wire type 3 (start group)",
        first(craft.pb_frame(1, binding, 3, first_text) + craft.tag(7, 3) + craft.tag(7, 4)),
    )
    add(
        "unknown-field-fixed64",
        "an unknown field 15 with wire type 1",
        first(craft.pb_frame(1, binding, 3, first_text) + craft.tag(15, 1) + b"\x00" * 8),
    )
    add(
        "unknown-field-in-delta",
        "an unknown field 2 inside content_delta",
        first(craft.pb_frame(1, binding, 3, first_text + craft.field_varint(2, 1))),
    )
    add(
        "unknown-field-before-bad-sequence",
        "an unknown field in a frame with sequence 5",
        first(craft.pb_frame(5, binding, 3, first_text) + craft.field_varint(9, 1)),
        "#precedence",
    )
    add(
        "sequence-twice",
        "the sequence field given twice",
        first(craft.pb_frame(1, binding, 3, first_text) + craft.field_varint(1, 1)),
    )
    add(
        "binding-twice",
        "the binding field given twice",
        first(craft.pb_frame(1, binding, 3, first_text) + craft.field_bytes(2, binding.encode())),
    )
    add(
        "two-kinds",
        "content_delta and done in one frame",
        first(craft.pb_frame(1, binding, 3, first_text) + craft.field_bytes(4, b"")),
    )
    add(
        "text-twice",
        "content_delta's text given twice",
        first(craft.pb_frame(1, binding, 3, first_text + first_text)),
    )
    add(
        "repeated-and-unknown",
        "a repeated sequence, then an unknown field",
        first(
            craft.pb_frame(1, binding, 3, first_text)
            + craft.field_varint(1, 1)
            + craft.field_varint(7, 1)
        ),
        "#precedence",
    )
    add(
        "sequence-as-bytes",
        "the sequence field with wire type 2",
        first(craft.field_bytes(1, b"\x01") + craft.field_bytes(2, binding.encode())),
    )
    add(
        "binding-as-varint",
        "the binding field with wire type 0",
        first(craft.field_varint(1, 1) + craft.field_varint(2, 1)),
    )
    add("field-number-0", "a tag with field number 0", first(b"\x00\x01"))
    add("wire-type-6", "a tag with wire type 6", first(b"\x0e\x01"))
    add("wire-type-7", "a tag with wire type 7", first(b"\x0f\x01"))
    add(
        "binding-not-utf8",
        "a binding hash that is not UTF-8",
        first(craft.pb_frame(1, b"\xff" * 64, 3, first_text)),
    )
    last = len(texts) + 1
    body = encoded[:-1]
    add(
        "done-empty",
        "a done with no digest fields",
        [*body, craft.lp(craft.pb_frame(last, binding, 4, b""))],
        "#digests",
    )
    add(
        "done-frames-off-by-one",
        "a done whose content_frames is one more, its SHA-256 right",
        [
            *body,
            craft.lp(
                craft.pb_frame(
                    last, binding, 4, craft.pb_done(content_sha256(content), len(texts) + 1)
                )
            ),
        ],
        "#digests",
    )
    add(
        "done-sha256-uppercase",
        "a done whose SHA-256 is in uppercase hex",
        [
            *body,
            craft.lp(
                craft.pb_frame(
                    last, binding, 4, craft.pb_done(content_sha256(content).upper(), len(texts))
                )
            ),
        ],
        "#digests",
    )
    add(
        "done-unknown-field",
        "a done with an unknown field 3",
        [
            *body,
            craft.lp(
                craft.pb_frame(
                    last,
                    binding,
                    4,
                    craft.pb_done(content_sha256(content), len(texts)) + craft.field_varint(3, 1),
                )
            ),
        ],
    )
    add(
        "done-frames-10-byte-varint",
        "a done whose content_frames is a 10-byte varint",
        [
            *body,
            craft.lp(
                craft.pb_frame(
                    last,
                    binding,
                    4,
                    craft.field_bytes(1, content_sha256(content).encode())
                    + b"\x10"
                    + craft.padded_varint(len(texts), 10),
                )
            ),
        ],
    )
    add(
        "done-then-partial-header",
        "done, then 3 bytes of another header",
        [*encoded, b"\x00\x00\x00"],
        "#frame-rules",
    )
    add(
        "done-then-bad-flag",
        "done, then a whole frame with flag 1",
        [*encoded, craft.lp(craft.pb_frame(last + 1, binding, 3, first_text), flag=1)],
        "#precedence",
    )
    add(
        "done-then-garbage-frame",
        "done, then a whole frame that is not a Frame",
        [*encoded, craft.lp(b"\x0f\x01")],
        "#precedence",
    )
    add(
        "end-in-header",
        "the stream ends 2 bytes into a header",
        [*body, encoded[-1][:2]],
        "#frame-rules",
    )
    add(
        "end-in-body",
        "the stream ends inside the done frame's body",
        [*body, encoded[-1][:-1]],
        "#frame-rules",
    )
    flag_timing(group, case, encoded)
    nested_varints(group, case, encoded)
    return group


def flag_timing(group: Group, case: BoundCase, encoded: list[bytes]) -> None:
    """A header's flag is judged when the header's fifth byte is in: not sooner (a bad flag
    byte alone, or with 3 more, is an unfinished frame), not later (a bad header whose body
    never comes, or comes in the next chunk, is refused with the header)."""
    bad_first = craft.lp(craft.pb_frame(1, case.binding_sha256, 3, craft.pb_text("x")), flag=1)
    rest = encoded[1:]

    def add(name: str, description: str, chunks: list[bytes], end: End = End.EOF) -> None:
        group.add(name, description, "#wire-lp", LP, chunks, case=case, end=end)

    add("flag-byte-alone-then-end", "a flag byte 1 alone, then a clean end", [b"\x01"])
    add(
        "flag-byte-alone-then-error",
        "a flag byte 1 alone, then a broken transport",
        [b"\x01"],
        End.TRANSPORT_ERROR,
    )
    add(
        "flag-byte-alone-then-header",
        "a flag byte 1 alone in a chunk, the rest of its frame in the next",
        [bad_first[:1], bad_first[1:], *rest],
    )
    add(
        "bad-flag-4-header-bytes-then-end",
        "content frames, then flag 0x80 and 3 length bytes, then a clean end",
        [*encoded[:-1], b"\x80\x00\x00\x00"],
    )
    add(
        "done-then-flag-byte-alone",
        "done, then a flag byte 1 alone, then a clean end",
        [*encoded, b"\x01"],
    )
    add(
        "done-then-white-space",
        "done, then a space, a CR and a line feed (a header begun with flag 0x20)",
        [*encoded, b" \r\n"],
    )
    add(
        "bad-flag-header-no-body-then-end",
        "a whole header with flag 1 declaring a body that never comes, then a clean end",
        [bad_first[:5]],
    )
    add(
        "bad-flag-header-no-body-then-error",
        "a whole header with flag 1 declaring a body that never comes, then a broken transport",
        [bad_first[:5]],
        End.TRANSPORT_ERROR,
    )
    add(
        "bad-flag-header-body-in-next-chunk",
        "a whole header with flag 1 in a chunk, its body in the next",
        [bad_first[:5], bad_first[5:], *rest],
    )


def nested_varints(group: Group, case: BoundCase, encoded: list[bytes]) -> None:
    """Varints inside a message field: one past 10 bytes (or 64 bits) is refused where the
    walk reaches it, before a later unknown field; a tag or a length over 5 bytes only once
    the walk is clean, after it; 5 bytes are accepted."""
    binding = case.binding_sha256
    texts = craft.deltas(case.content)
    sha = content_sha256(case.content).encode()
    count = len(texts)
    last = count + 1
    body = encoded[:-1]
    unknown = craft.field_varint(7, 1)

    def done(name: str, description: str, done_body: bytes, after: bytes = b"") -> None:
        frame = craft.lp(craft.pb_frame(last, binding, 4, done_body) + after)
        group.add(name, description, "#wire-lp", LP, [*body, frame], case=case)

    sha_field = craft.field_bytes(1, sha)
    frames_field = craft.field_varint(2, count)
    frames_11 = b"\x10" + craft.padded_varint(count, 11)
    done(
        "done-frames-11-byte-varint",
        "done's content_frames as an 11-byte varint",
        sha_field + frames_11,
    )
    done(
        "done-frames-11-byte-varint-then-unknown",
        "done's content_frames as an 11-byte varint, then an unknown field 7 in the frame",
        sha_field + frames_11,
        unknown,
    )
    done(
        "done-frames-11-byte-varint-then-unknown-in-done",
        "done's content_frames as an 11-byte varint, then an unknown field 3 in done",
        sha_field + frames_11 + craft.field_varint(3, 1),
    )
    done(
        "done-frames-over-64-bits",
        "done's content_frames as a 10-byte varint with bits past 64 (its low 64 bits right)",
        sha_field + b"\x10" + craft.padded_varint(count | 1 << 64, 10),
    )
    done(
        "done-frames-tag-11-bytes-then-unknown",
        "done's content_frames tag as an 11-byte varint, then an unknown field 7 in the frame",
        sha_field + craft.padded_varint(0x10, 11) + craft.varint(count),
        unknown,
    )
    for size in (5, 6):
        done(
            f"done-sha256-tag-{size}-bytes",
            f"done's content_sha256 tag as a {size}-byte varint",
            craft.padded_varint(0x0A, size) + craft.varint(len(sha)) + sha + frames_field,
        )
        done(
            f"done-sha256-length-{size}-bytes",
            f"done's content_sha256 length as a {size}-byte varint",
            b"\x0a" + craft.padded_varint(len(sha), size) + sha + frames_field,
        )
    done(
        "done-sha256-tag-6-bytes-then-unknown",
        "done's content_sha256 tag as a 6-byte varint, then an unknown field 7 in the frame",
        craft.padded_varint(0x0A, 6) + craft.varint(len(sha)) + sha + frames_field,
        unknown,
    )
    done(
        "done-sha256-length-6-bytes-then-unknown",
        "done's content_sha256 length as a 6-byte varint, then an unknown field 7 in the frame",
        b"\x0a" + craft.padded_varint(len(sha), 6) + sha + frames_field,
        unknown,
    )
    text = texts[0].encode()
    group.add(
        "delta-text-length-11-bytes-then-unknown",
        "content_delta's text length as an 11-byte varint, then an unknown field 7 in the frame",
        "#wire-lp",
        LP,
        [
            craft.lp(
                craft.pb_frame(1, binding, 3, b"\x0a" + craft.padded_varint(len(text), 11) + text)
                + unknown
            ),
            *encoded[1:],
        ],
        case=case,
    )
    reason = b"controlled_local_error"
    group.add(
        "error-reason-tag-11-bytes-then-unknown",
        "an error terminal's reason tag as an 11-byte varint, then an unknown field 7",
        "#wire-lp",
        LP,
        [
            *body,
            craft.lp(
                craft.pb_frame(
                    last,
                    binding,
                    5,
                    craft.padded_varint(0x0A, 11) + craft.varint(len(reason)) + reason,
                )
                + unknown
            ),
        ],
        case=case,
    )
