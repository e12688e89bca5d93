/** The core against the Python core's answers (test/fixtures/core.json). */

import assert from "node:assert/strict";
import { test } from "node:test";
import { LENIENT, parseJson } from "../src/json";
import { readCase, runCase } from "../src/testee";
import { fixture, plain } from "./helpers";

interface CoreCase {
  readonly id: string;
  readonly binding: string;
  readonly expected: { readonly status: string; readonly reason: string | null };
  readonly [key: string]: unknown;
}
interface CoreFixture {
  readonly bindings: Record<string, unknown>;
  readonly cases: readonly CoreCase[];
}

const CORE = fixture<CoreFixture>("core.json");

test("every core case gets the Python core's answer", () => {
  const differences: string[] = [];
  for (const entry of CORE.cases) {
    const { expected: _fixture, binding, ...input } = entry;
    const line = JSON.stringify({ ...input, binding: CORE.bindings[binding] });
    const answer = plain(runCase(readCase(parseJson(line, LENIENT)))) as Record<string, unknown>;
    try {
      assert.deepStrictEqual(answer, entry.expected);
    } catch {
      differences.push(`${entry.id}: ${JSON.stringify(answer).slice(0, 300)}`);
    }
  }
  assert.deepStrictEqual(differences, [], `${differences.length} of ${CORE.cases.length} differ`);
  assert.ok(CORE.cases.length > 500);
});

test("the cases reach every reason the wire can cause", () => {
  const reached = new Set(CORE.cases.map((entry) => `${entry.expected.status}/${entry.expected.reason}`));
  const invalid = [
    "stream_byte_limit", "invalid_utf8", "frame_byte_limit", "frame_after_terminal",
    "invalid_frame_json", "invalid_frame_schema", "invalid_sequence", "frame_request_mismatch",
    "frame_count_limit", "invalid_content_delta", "content_limit", "invalid_terminal_reason",
    "truncated_utf8", "truncated_frame", "invalid_frame_header", "invalid_frame_payload",
    "unknown_frame_field", "missing_frame_kind", "content_digest_mismatch",
    "conflicting_duplicate", "invalid_answer_json", "invalid_answer_schema",
    "unknown_context_citation", "status_citation_mismatch",
  ];
  const others = [
    "complete/null", "incomplete/missing_terminal", "error/transport_io_error",
    "cancelled/controlled_local_cancel", "error/controlled_local_error",
    "cancelled/unregistered_cancel_terminal", "error/unregistered_error_terminal",
  ];
  const missing = [...invalid.map((reason) => `invalid/${reason}`), ...others].filter((key) => !reached.has(key));
  assert.deepStrictEqual(missing, []);
});
