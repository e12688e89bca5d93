/**
 * done's content digest on the digest wires (lp, ndjson): a claim is exactly 64 lowercase
 * hex characters and a non-negative frame count; anything else (empty, absent, upper case,
 * too short or long, not hex) is `invalid_frame_schema`, not a claim that fails to match.
 * The form is part of done's shape: checked when the frame is parsed, so before its
 * sequence and binding, and the refused done is not counted. A well-formed claim that does
 * not match is still `content_digest_mismatch`; ndjson-lab's done carries no digest.
 *
 * Written by hand, not taken from test/fixtures/: the rule is stated before the Python
 * core's fixtures are regenerated under it (core.test.ts lists the cases that wait).
 */

import assert from "node:assert/strict";
import { test } from "node:test";
import { ReplyConsumer } from "../src/core";
import type { JsonObject } from "../src/json";
import { LENIENT, parseJson } from "../src/json";
import { ProtocolFailure } from "../src/reasons";
import type { StreamResult } from "../src/result";
import { LengthPrefixedDecoder, parseFrame, withHeader } from "../src/wire/lp";
import type { WireFormat } from "../src/wire/base";
import { fixture } from "./helpers";

const BINDING = parseJson(JSON.stringify(fixture<unknown>("bindings/replace-file.json")), LENIENT) as JsonObject;
const TRANSMISSIONS = fixture<Record<string, { chunks: string[] }>>("transmissions.json");

function bytesOf(wire: string): Buffer {
  const chunks = TRANSMISSIONS[wire]?.chunks;
  assert.ok(chunks, wire);
  return Buffer.concat(chunks.map((chunk) => Buffer.from(chunk, "base64")));
}

/** The recorded lp transmission: its payloads but the last (done), and done's fields. */
function lpParts(): { before: Buffer; sequence: bigint; binding: string; sha256: string; frames: bigint } {
  const decoder = new LengthPrefixedDecoder(1 << 20);
  decoder.receiveData(bytesOf("lp"));
  const payloads: Buffer[] = [];
  for (let payload = decoder.nextEvent(); payload !== null; payload = decoder.nextEvent()) {
    payloads.push(Buffer.from(payload));
  }
  const done = parseFrame(payloads[payloads.length - 1] ?? Buffer.alloc(0));
  assert.equal(done.kind, "done");
  assert.ok(done.doneDigest);
  return {
    before: Buffer.concat(payloads.slice(0, -1).map(withHeader)),
    sequence: BigInt(done.sequence as bigint),
    binding: String(done.bindingSha256),
    sha256: done.doneDigest.contentSha256,
    frames: BigInt(done.doneDigest.contentFrames as bigint),
  };
}

function varint(value: bigint): Buffer {
  const bytes: number[] = [];
  let rest = value;
  do {
    const low = Number(rest & 0x7fn);
    rest >>= 7n;
    bytes.push(rest > 0n ? low | 0x80 : low);
  } while (rest > 0n);
  return Buffer.from(bytes);
}

function lengthDelimited(tag: number, body: Buffer): Buffer {
  return Buffer.concat([Buffer.from([tag]), varint(BigInt(body.length)), body]);
}

/** An lp done frame; `sha256` null leaves field 1 out, `frames` null field 2. */
function lpDone(sequence: bigint, binding: string, sha256: string | null, frames: bigint | null): Buffer {
  const inner = Buffer.concat([
    sha256 === null ? Buffer.alloc(0) : lengthDelimited(0x0a, Buffer.from(sha256, "utf8")),
    frames === null ? Buffer.alloc(0) : Buffer.concat([Buffer.from([0x10]), varint(frames)]),
  ]);
  const payload = Buffer.concat([
    Buffer.from([0x08]),
    varint(sequence),
    lengthDelimited(0x12, Buffer.from(binding, "utf8")),
    lengthDelimited(0x22, inner),
  ]);
  return withHeader(payload);
}

/** The recorded ndjson transmission: its lines but the last (done), and done's object. */
function ndjsonParts(wire: "ndjson" | "ndjson-lab"): { before: string; done: Record<string, unknown> } {
  const lines = bytesOf(wire).toString("utf8").split("\n");
  assert.equal(lines.pop(), "");
  const done = JSON.parse(lines.pop() ?? "") as Record<string, unknown>;
  assert.equal(done.kind, "done");
  return { before: `${lines.join("\n")}\n`, done };
}

function ended(wire: WireFormat, data: Buffer): StreamResult {
  const consumer = new ReplyConsumer(BINDING, { wire });
  try {
    consumer.receiveData(data);
  } catch (error) {
    if (!(error instanceof ProtocolFailure)) throw error;
  }
  return consumer.endOfStream();
}

function verdict(wire: WireFormat, data: Buffer): [string, string | null] {
  const result = ended(wire, data);
  return [result.status, result.reason];
}

const NOT_A_CLAIM: ReadonlyArray<[string, (sha256: string) => string]> = [
  ["empty", () => ""],
  ["upper case", (sha256) => sha256.toUpperCase()],
  ["63 characters", (sha256) => sha256.slice(1)],
  ["65 characters", (sha256) => `${sha256}0`],
  ["not hex", (sha256) => `g${sha256.slice(1)}`],
  ["a space inside", (sha256) => ` ${sha256.slice(1)}`],
  ["a trailing newline", (sha256) => `${sha256.slice(1)}\n`],
  ["non-ASCII digits", (sha256) => `\u0663${sha256.slice(2)}`],
];
const SCHEMA: [string, string | null] = ["invalid", "invalid_frame_schema"];
const MISMATCH: [string, string | null] = ["invalid", "content_digest_mismatch"];

test("lp: the recorded done completes, a well-formed wrong claim is content_digest_mismatch", () => {
  const { before, sequence, binding, sha256, frames } = lpParts();
  assert.deepStrictEqual(verdict("lp", Buffer.concat([before, lpDone(sequence, binding, sha256, frames)])), [
    "complete",
    null,
  ]);
  const zeros = "0".repeat(64);
  assert.deepStrictEqual(verdict("lp", Buffer.concat([before, lpDone(sequence, binding, zeros, frames)])), MISMATCH);
  assert.deepStrictEqual(
    verdict("lp", Buffer.concat([before, lpDone(sequence, binding, sha256, frames + 1n)])),
    MISMATCH,
  );
});

test("lp: a done digest that is not 64 lowercase hex characters is invalid_frame_schema", () => {
  const { before, sequence, binding, sha256, frames } = lpParts();
  for (const [name, claim] of NOT_A_CLAIM) {
    const data = Buffer.concat([before, lpDone(sequence, binding, claim(sha256), frames)]);
    assert.deepStrictEqual(verdict("lp", data), SCHEMA, name);
  }
  // Absent: field 1 left out, reads as "" (protobuf's default), with or without field 2.
  for (const [name, count] of [["no content_sha256", frames], ["a done without fields", null]] as const) {
    const data = Buffer.concat([before, lpDone(sequence, binding, null, count)]);
    assert.deepStrictEqual(verdict("lp", data), SCHEMA, name);
  }
});

test("lp: the form is checked as the frame is parsed: before its sequence and binding, and not counted", () => {
  const { before, sequence, binding, sha256, frames } = lpParts();
  assert.throws(() => parseFrame(lpDone(sequence, binding, "", frames).subarray(5)), (error: unknown) => {
    return error instanceof ProtocolFailure && error.reason === "invalid_frame_schema";
  });
  const wrong = [
    ["a later sequence", lpDone(sequence + 3n, binding, sha256.toUpperCase(), frames)],
    ["a foreign binding", lpDone(sequence, "0".repeat(64), "", frames)],
  ] as const;
  for (const [name, done] of wrong) {
    assert.deepStrictEqual(verdict("lp", Buffer.concat([before, done])), SCHEMA, name);
  }
  const result = ended("lp", Buffer.concat([before, lpDone(sequence, binding, "", frames)]));
  assert.equal(BigInt(result.stats.applicationFrames), frames);
});

test("ndjson: the same rule; a well-formed wrong claim is still content_digest_mismatch", () => {
  const { before, done } = ndjsonParts("ndjson");
  const sha256 = String(done.content_sha256);
  const line = (changes: Record<string, unknown>): Buffer =>
    Buffer.from(`${before}${JSON.stringify({ ...done, ...changes })}\n`, "utf8");
  assert.deepStrictEqual(verdict("ndjson", line({})), ["complete", null]);
  assert.deepStrictEqual(verdict("ndjson", line({ content_sha256: "f".repeat(64) })), MISMATCH);
  for (const [name, claim] of NOT_A_CLAIM) {
    assert.deepStrictEqual(verdict("ndjson", line({ content_sha256: claim(sha256) })), SCHEMA, name);
  }
  assert.deepStrictEqual(verdict("ndjson", line({ content_sha256: null })), SCHEMA, "null");
  for (const count of [-1, 1.5, "10", null]) {
    assert.deepStrictEqual(verdict("ndjson", line({ content_frames: count })), SCHEMA, String(count));
  }
  const later = Number(done.sequence) + 3;
  assert.deepStrictEqual(verdict("ndjson", line({ sequence: later, content_sha256: "" })), SCHEMA, "later");
  assert.deepStrictEqual(
    verdict("ndjson", line({ binding_sha256: "0".repeat(64), content_sha256: "" })),
    SCHEMA,
    "foreign binding",
  );
  const { content_sha256: _dropped, ...absent } = done;
  assert.deepStrictEqual(
    verdict("ndjson", Buffer.from(`${before}${JSON.stringify(absent)}\n`, "utf8")),
    SCHEMA,
    "absent",
  );
});

test("ndjson-lab: done carries no digest, and one that does is refused for its keys", () => {
  const { before, done } = ndjsonParts("ndjson-lab");
  const line = (object: Record<string, unknown>): Buffer =>
    Buffer.from(`${before}${JSON.stringify(object)}\n`, "utf8");
  assert.deepStrictEqual(verdict("ndjson-lab", line(done)), ["complete", null]);
  assert.deepStrictEqual(verdict("ndjson-lab", line({ ...done, content_sha256: "" })), SCHEMA);
});
