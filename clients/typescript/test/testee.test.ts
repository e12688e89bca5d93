/** The testee's line protocol: one answer per line, in order, errors for bad input. */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { resolve } from "node:path";
import { test } from "node:test";
import { fixture } from "./helpers";

const TESTEE = resolve(__dirname, "../src/testee.js");

function run(lines: readonly string[]): Array<Record<string, unknown>> {
  const child = spawnSync(process.execPath, [TESTEE], { input: lines.map((line) => `${line}\n`).join(""), encoding: "utf8" });
  assert.equal(child.status, 0, child.stderr);
  return child.stdout.trimEnd().split("\n").map((line) => JSON.parse(line) as Record<string, unknown>);
}

test("one answer a line, in order; a line that is not valid input is an error line", () => {
  const binding = fixture<unknown>("bindings/replace-file.json");
  const transmissions = fixture<Record<string, { chunks: string[] }>>("transmissions.json");
  const good = { id: "good", wire: "lp", binding, chunks: transmissions.lp?.chunks, end: "eof" };
  const answers = run([
    JSON.stringify(good),
    "not json",
    JSON.stringify({ ...good, id: 7 }),
    JSON.stringify({ ...good, id: "wire", wire: "xml" }),
    JSON.stringify({ ...good, id: "b64", chunks: ["***"] }),
    JSON.stringify({ ...good, id: "limit", limits: { max_frames: 0 } }),
    JSON.stringify({ ...good, id: "unknown-limit", limits: { max_things: 1 } }),
    JSON.stringify({ ...good, id: "end", end: "later" }),
    JSON.stringify({ ...good, id: "binding", binding: [] }),
    "",
    JSON.stringify({ ...good, id: "te", end: "transport_error" }),
    JSON.stringify({ ...good, id: "small", limits: { max_frames: 2 } }),
  ]);
  assert.equal(answers.length, 12);
  assert.deepStrictEqual(
    answers.map((answer) => [answer.id, answer.status ?? "error" in answer]),
    [
      ["good", "complete"],
      [null, true],
      [null, true],
      ["wire", true],
      ["b64", true],
      ["limit", true],
      ["unknown-limit", true],
      ["end", true],
      ["binding", true],
      [null, true],
      ["te", "error"],
      ["small", "invalid"],
    ],
  );
  const first = answers[0] ?? {};
  assert.deepStrictEqual(Object.keys(first), [
    "id", "status", "reason", "detail", "frames", "bytes", "provisional_content", "accepted_answer", "citations",
  ]);
  assert.equal(first.frames, 10);
  assert.equal(answers[11]?.reason, "frame_count_limit");
});
