/** JSON as the reference reads and writes it: floats, canonical digests, strictness, types. */

import assert from "node:assert/strict";
import { test } from "node:test";
import { canonicalJson, digest } from "../src/digest";
import { compareCodePoints, dumpJson, isInt, LENIENT, parseJson, pythonFloatRepr, STRICT } from "../src/json";
import { fixture } from "./helpers";

interface JsonFixture {
  readonly floats: ReadonlyArray<readonly [string, string]>;
  readonly canonical: ReadonlyArray<{ readonly value: string; readonly canonical: string; readonly digest: string }>;
  readonly strict: ReadonlyArray<{ readonly text: string; readonly ok: boolean }>;
}

const JSON_FIXTURE = fixture<JsonFixture>("json.json");

test("floats are written as Python's repr writes them", () => {
  for (const [bytes, repr] of JSON_FIXTURE.floats) {
    const value = Buffer.from(bytes, "hex").readDoubleLE(0);
    assert.equal(pythonFloatRepr(value), repr, bytes);
  }
});

test("canonical JSON and its digest are Python's, byte for byte", () => {
  for (const entry of JSON_FIXTURE.canonical) {
    const value = parseJson(entry.value, LENIENT);
    assert.equal(canonicalJson(value).toString("utf8"), entry.canonical);
    assert.equal(digest(value), entry.digest);
  }
});

test("strict JSON accepts and refuses what the reference's strict_json does", () => {
  for (const entry of JSON_FIXTURE.strict) {
    let ok = true;
    try {
      parseJson(entry.text, { ...STRICT, maxDepth: 991 });
    } catch {
      ok = false;
    }
    assert.equal(ok, entry.ok, JSON.stringify(entry.text).slice(0, 80));
  }
});

test("an int stays an int and a float a float; objects keep their keys in order", () => {
  assert.ok(isInt(parseJson("1")));
  assert.ok(!isInt(parseJson("1.0")));
  assert.ok(!isInt(parseJson("1e0")));
  assert.ok(!isInt(parseJson("true")));
  assert.equal(parseJson("18446744073709551617"), 18446744073709551617n);
  assert.equal(dumpJson(parseJson('{"b":1,"2":2,"a":[1.0,-0.0,1e16]}')), '{"b":1,"2":2,"a":[1.0,-0.0,1e+16]}');
  assert.equal(dumpJson(parseJson('{"a":1,"a":2,"b":3}', LENIENT)), '{"a":2,"b":3}');
  assert.throws(() => parseJson('{"a":1,"a":2}', STRICT));
  assert.equal(dumpJson(parseJson('{"__proto__":{"x":1}}')), '{"__proto__":{"x":1}}');
});

test("nesting is bounded where CPython's recursion limit bounds it: an object costs one more", () => {
  const options = { ...STRICT, maxDepth: 10 };
  assert.doesNotThrow(() => parseJson("[".repeat(10) + "]".repeat(10), options));
  assert.throws(() => parseJson("[".repeat(11) + "]".repeat(11), options));
  assert.doesNotThrow(() => parseJson('{"a":'.repeat(9) + "1" + "}".repeat(9), options));
  assert.throws(() => parseJson('{"a":'.repeat(10) + "1" + "}".repeat(10), options));
});

test("keys sort by code point, not by UTF-16 unit", () => {
  const keys = ["\u{1F600}", "\uE000", "\uFFFF", "a"].sort(compareCodePoints);
  assert.deepStrictEqual(keys, ["a", "\uE000", "\uFFFF", "\u{1F600}"]);
});
