/** Every prefix of a multi-byte reply, and every way of cutting it (UTF-8 split at every byte). */

import assert from "node:assert/strict";
import { test } from "node:test";
import { ReplyConsumer } from "../src/core";
import { isObject, LENIENT, parseJson } from "../src/json";
import { ProtocolFailure } from "../src/reasons";
import type { WireFormat } from "../src/wire/base";
import { fixture } from "./helpers";

interface Prefixes {
  readonly [wire: string]: {
    readonly data: string;
    readonly content: string;
    readonly verdicts: ReadonlyArray<readonly [string, string | null, number]>;
  };
}

const PREFIXES = fixture<Prefixes>("prefixes.json");
const BINDING = parseJson(JSON.stringify(fixture<unknown>("bindings/replace-file.json")), LENIENT);
if (!isObject(BINDING)) throw new Error("the binding fixture is not an object");

function consume(wire: WireFormat, chunks: readonly Buffer[]): ReplyConsumer {
  const consumer = new ReplyConsumer(BINDING as Map<string, never>, { wire });
  for (const chunk of chunks) {
    try {
      consumer.receiveData(chunk);
    } catch (error) {
      if (!(error instanceof ProtocolFailure)) throw error;
      break;
    }
  }
  return consumer;
}

for (const [wire, entry] of Object.entries(PREFIXES)) {
  const data = Buffer.from(entry.data, "base64");

  test(`${wire}: every prefix ends as the Python core ends it`, () => {
    for (let size = 0; size <= data.length; size++) {
      const result = consume(wire as WireFormat, [data.subarray(0, size)]).endOfStream();
      const [status, reason, frames] = entry.verdicts[size] ?? [];
      assert.deepStrictEqual(
        [result.status, result.reason, result.stats.applicationFrames],
        [status, reason, frames],
        `prefix of ${size} bytes`,
      );
    }
  });

  test(`${wire}: cut at every byte, and byte by byte, it completes with the same reply`, () => {
    const cuts: Buffer[][] = [];
    for (let at = 0; at <= data.length; at++) cuts.push([data.subarray(0, at), data.subarray(at)]);
    cuts.push([...data].map((byte) => Buffer.from([byte])));
    for (const chunks of cuts) {
      const result = consume(wire as WireFormat, chunks).endOfStream();
      assert.equal(result.status, "complete");
      assert.equal(result.provisionalContent, entry.content);
      assert.equal(result.stats.bytesReceived, data.length);
    }
  });
}
