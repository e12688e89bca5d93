/** Text as Python judges it: scrubbed details, strip(), isprintable(); the reason table. */

import assert from "node:assert/strict";
import { test } from "node:test";
import { REASONS } from "../src/generated";
import { isPrintable, pyStrip, scrubbedDetail } from "../src/pytext";
import { codePoints, isWellFormed, Utf8Stream } from "../src/utf8";
import { fixture } from "./helpers";

interface TextFixture {
  readonly scrubbed: ReadonlyArray<readonly [string, string]>;
  readonly strip: ReadonlyArray<readonly [string, string]>;
  readonly printable: ReadonlyArray<readonly [number, boolean]>;
}

const TEXT = fixture<TextFixture>("text.json");

test("a detail is scrubbed and bounded as shared.errors.scrubbed_detail does it", () => {
  for (const [text, scrubbed] of TEXT.scrubbed) {
    assert.equal(scrubbedDetail(text), scrubbed);
    assert.equal(scrubbedDetail(scrubbed), scrubbed, "idempotent");
  }
});

test("strip() and isprintable() are Python's", () => {
  for (const [text, stripped] of TEXT.strip) assert.equal(pyStrip(text), stripped);
  for (const [point, printable] of TEXT.printable) assert.equal(isPrintable(point), printable, `U+${point.toString(16)}`);
});

test("src/generated.ts holds the reference's reason registry (else: scripts/make_tables.py)", () => {
  const expected = fixture<{ reasons: ReadonlyArray<readonly [string, string]> }>("tables.json").reasons;
  assert.deepStrictEqual(REASONS, expected);
});

test("lengths are code points; a lone surrogate is not encodable", () => {
  assert.equal(codePoints("a\u{1F600}é"), 3);
  assert.equal(codePoints("\uD800x"), 2);
  assert.ok(isWellFormed("\u{1F600}"));
  assert.ok(!isWellFormed("\uD800"));
  assert.ok(!isWellFormed("\uDC00\uD800"));
});

test("UTF-8 verdicts are CPython's incremental decoder's, ED A0 pending included", () => {
  const verdict = (...chunks: number[][]): string => {
    const stream = new Utf8Stream();
    for (const chunk of chunks) if (!stream.feed(Uint8Array.from(chunk))) return "invalid";
    return stream.clean ? "clean" : `pending ${stream.pending}`;
  };
  assert.equal(verdict([0xe0, 0x80]), "invalid");
  assert.equal(verdict([0xf4, 0x90]), "invalid");
  assert.equal(verdict([0xc0]), "invalid");
  assert.equal(verdict([0xed, 0xa0]), "pending 2");
  assert.equal(verdict([0xed, 0xa0], [0x80]), "invalid");
  assert.equal(verdict([0xed, 0x9f], [0xbf]), "clean");
  assert.equal(verdict([0xf0, 0x9f, 0x98]), "pending 3");
  assert.equal(verdict([0xf0], [0x9f], [0x98], [0x80]), "clean");
  assert.equal(verdict([0xe1, 0x80], [0x41]), "invalid");
});
