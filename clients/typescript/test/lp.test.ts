/** The length-prefixed wire: payloads at the varint and length edges, and the header. */

import assert from "node:assert/strict";
import { test } from "node:test";
import { ProtocolFailure } from "../src/reasons";
import { LengthPrefixedDecoder, parseFrame, withHeader } from "../src/wire/lp";
import { fixture } from "./helpers";

interface PayloadCase {
  readonly name: string;
  readonly payload: string;
  readonly reason?: string;
  readonly frame?: {
    readonly sequence: string;
    readonly kind: string;
    readonly binding_sha256: string;
    readonly text: string | null;
    readonly reason: string | null;
    readonly done: readonly [string, string] | null;
  };
}

function failureOf(action: () => unknown): string | null {
  try {
    action();
    return null;
  } catch (error) {
    if (error instanceof ProtocolFailure) return error.reason;
    throw error;
  }
}

test("payloads at the varint and length edges are judged as the reference judges them", () => {
  for (const entry of fixture<readonly PayloadCase[]>("lp_payloads.json")) {
    const payload = Buffer.from(entry.payload, "base64");
    if (entry.reason !== undefined) {
      assert.equal(failureOf(() => parseFrame(payload)), entry.reason, entry.name);
      continue;
    }
    const frame = parseFrame(payload);
    const expected = entry.frame;
    assert.ok(expected, entry.name);
    assert.equal(String(frame.sequence), expected.sequence, entry.name);
    assert.equal(frame.kind, expected.kind, entry.name);
    assert.equal(frame.bindingSha256, expected.binding_sha256, entry.name);
    assert.equal(frame.text ?? null, expected.text, entry.name);
    assert.equal(frame.reason ?? null, expected.reason, entry.name);
    const done = frame.doneDigest ? [frame.doneDigest.contentSha256, String(frame.doneDigest.contentFrames)] : null;
    assert.deepStrictEqual(done, expected.done, entry.name);
  }
});

function drain(decoder: LengthPrefixedDecoder): Buffer[] {
  const frames: Buffer[] = [];
  for (let frame = decoder.nextEvent(); frame !== null; frame = decoder.nextEvent()) frames.push(frame);
  return frames;
}

test("a flag byte other than 0 is invalid_frame_header as soon as the header is in", () => {
  for (let flag = 1; flag < 256; flag++) {
    const decoder = new LengthPrefixedDecoder(8192);
    decoder.receiveData(Buffer.from([flag, 0, 0, 0]));
    assert.deepStrictEqual(drain(decoder), []);
    decoder.receiveData(Buffer.from([1]));
    assert.equal(failureOf(() => drain(decoder)), "invalid_frame_header");
  }
});

test("a declared length over the limit fails before a body byte; at the limit it is awaited", () => {
  for (const limit of [1, 8192, 65535]) {
    const at = Buffer.alloc(5);
    at.writeUInt32BE(limit, 1);
    const decoder = new LengthPrefixedDecoder(limit);
    decoder.receiveData(at);
    assert.deepStrictEqual(drain(decoder), []);
    assert.equal(decoder.pending, 5);
    const over = Buffer.alloc(5);
    over.writeUInt32BE(limit + 1, 1);
    const refusing = new LengthPrefixedDecoder(limit);
    refusing.receiveData(over);
    assert.equal(failureOf(() => drain(refusing)), "frame_byte_limit");
  }
  const largest = new LengthPrefixedDecoder(8192);
  largest.receiveData(Buffer.from([0, 0xff, 0xff, 0xff, 0xff]));
  assert.equal(failureOf(() => drain(largest)), "frame_byte_limit");
});

test("frames come out whole however the bytes are cut; an unfinished one is truncated_frame", () => {
  const payloads = [Buffer.alloc(0), Buffer.from("a"), Buffer.alloc(300, 7), Buffer.alloc(70000, 1)];
  const wire = Buffer.concat(payloads.map(withHeader));
  for (const size of [1, 2, 5, 6, 4096, wire.length]) {
    const decoder = new LengthPrefixedDecoder(1 << 20);
    const frames: Buffer[] = [];
    for (let at = 0; at < wire.length; at += size) {
      decoder.receiveData(wire.subarray(at, at + size));
      frames.push(...drain(decoder));
    }
    assert.deepStrictEqual(frames, payloads);
    decoder.endOfInput();
  }
  const partial = new LengthPrefixedDecoder(8192);
  partial.receiveData(withHeader(Buffer.from("abc")).subarray(0, 6));
  drain(partial);
  assert.equal(failureOf(() => partial.endOfInput()), "truncated_frame");
});
