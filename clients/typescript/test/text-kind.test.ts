/**
 * A text reply (docs/protocol.md#text-reply), as tests/unit/test_text_kind.py has it: the
 * text itself, the empty text included, with every frame rule of a grounded reply and
 * nothing to validate after them; the kind from the binding (src/kinds.ts), and the
 * OpenRequest's `kind`. The expected documents are the Python core's (test/fixtures/
 * text_kind.json), compared key for key and in order.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { resolve } from "node:path";
import { test } from "node:test";
import * as protoLoader from "@grpc/proto-loader";
import { ReplyConsumer } from "../src/core";
import { digest, sha256Hex } from "../src/digest";
import { isObject, type JsonObject, type JsonValue, LENIENT, parseJson } from "../src/json";
import { parseCommand } from "../src/cli";
import { buildTextBinding, kindOf } from "../src/kinds";
import { ConfigurationError } from "../src/security";
import { ProtocolFailure } from "../src/reasons";
import { BindingError } from "../src/reply";
import { openRequest } from "../src/request";
import { resultDocument, type StreamResult } from "../src/result";
import { defaultProtoPath } from "../src/service";
import { answer } from "../src/testee";
import type { WireFormat } from "../src/wire/base";
import { LengthPrefixedDecoder, parseFrame } from "../src/wire/lp";
import { fixture, plain } from "./helpers";

interface TextCase {
  readonly id: string;
  readonly wire: WireFormat;
  readonly chunks: readonly string[];
  readonly end: "eof" | "transport_error";
  readonly document: Record<string, unknown>;
}
interface TextFixture {
  readonly binding: Record<string, unknown>;
  readonly texts: readonly string[];
  readonly cases: readonly TextCase[];
  readonly grounded: Record<string, unknown>;
}

const TEXT = fixture<TextFixture>("text_kind.json");
const BINDING = json(TEXT.binding) as JsonObject;
const CASES = new Map(TEXT.cases.map((entry) => [entry.id, entry]));

function json(value: unknown): JsonValue {
  return parseJson(JSON.stringify(value), LENIENT);
}

function chunksOf(entry: TextCase): Buffer[] {
  return entry.chunks.map((chunk) => Buffer.from(chunk, "base64"));
}

/** The chunks through a core, as the testee feeds them: the result. */
function consumed(entry: TextCase, binding: JsonObject = BINDING): StreamResult {
  const core = new ReplyConsumer(binding, { wire: entry.wire });
  for (const chunk of chunksOf(entry)) {
    try {
      core.receiveData(chunk);
    } catch (error) {
      if (error instanceof ProtocolFailure) return core.result();
      throw error;
    }
  }
  return entry.end === "eof" ? core.endOfStream() : core.transportError();
}

/** The document as plain JavaScript, and as JSON text (which keeps the keys' order). */
function documentOf(result: StreamResult): Record<string, unknown> {
  return plain(resultDocument(result)) as Record<string, unknown>;
}

function caseOf(id: string): TextCase {
  const entry = CASES.get(id);
  assert.ok(entry, id);
  return entry;
}

test("every text case gets the Python core's document, key for key and in order", () => {
  assert.ok(TEXT.cases.length >= 36);
  for (const entry of TEXT.cases) {
    const document = documentOf(consumed(entry));
    assert.equal(JSON.stringify(document), JSON.stringify(entry.document), entry.id);
  }
});

test("a text reply is accepted as it came, the empty text and astral characters included", () => {
  for (const wire of ["lp", "ndjson"] as const) {
    for (const [index, text] of TEXT.texts.entries()) {
      for (const plan of ["frame", "1,2,7,3,11"]) {
        const result = documentOf(consumed(caseOf(`text/${index}/${wire}/${plan}`)));
        assert.deepStrictEqual([result.status, result.reason], ["complete", null]);
        assert.deepStrictEqual(result.accepted_answer, { text });
        assert.deepStrictEqual(result.citations, []);
        assert.deepStrictEqual([result.kind, result.first_output], ["text", text !== ""]);
        const events = result.events as Array<Record<string, unknown>>;
        assert.deepStrictEqual(events[events.length - 1], { kind: "validated_text", characters: [...text].length });
        assert.equal(result.provisional_content, text);
      }
    }
  }
  // Code points, not UTF-16 units: the astral character counts once.
  const astral = TEXT.texts[3] ?? "";
  assert.ok(astral.length > [...astral].length);
});

test("the empty text is one done and nothing is fabricated", () => {
  const lp = caseOf("text/0/lp/frame");
  const decoder = new LengthPrefixedDecoder(1 << 20);
  decoder.receiveData(Buffer.concat(chunksOf(lp)));
  const done = parseFrame(decoder.nextEvent() ?? Buffer.alloc(0));
  assert.equal(decoder.nextEvent(), null);
  assert.equal(done.kind, "done");
  assert.deepStrictEqual(
    [done.doneDigest?.contentSha256, done.doneDigest?.contentFrames],
    [sha256Hex(Buffer.alloc(0)), 0n],
  );
  for (const wire of ["lp", "ndjson"] as const) {
    const result = documentOf(consumed(caseOf(`text/0/${wire}/frame`)));
    assert.equal((result.stats as Record<string, unknown>).application_frames, 1);
    const kinds = (result.events as Array<Record<string, unknown>>).map((event) => event.kind);
    assert.deepStrictEqual(kinds, ["local_terminal", "validated_text"]);
  }
});

test("a text reply keeps every frame rule", () => {
  for (const wire of ["lp", "ndjson"] as const) {
    const missing = documentOf(consumed(caseOf(`missing-frame/${wire}`)));
    assert.deepStrictEqual([missing.status, missing.reason], ["invalid", "invalid_sequence"]);
    const unterminated = documentOf(consumed(caseOf(`unterminated/${wire}`)));
    assert.deepStrictEqual([unterminated.status, unterminated.reason], ["incomplete", "missing_terminal"]);
    assert.equal(unterminated.provisional_content, "abcdefghijklmnop");
    assert.equal(unterminated.accepted_answer, null);
    assert.equal(unterminated.first_output, true);
    const broken = documentOf(consumed(caseOf(`then-error/${wire}`)));
    assert.deepStrictEqual([broken.status, broken.reason, broken.accepted_answer], ["error", "transport_io_error", null]);
    const cancelled = documentOf(consumed(caseOf(`cancel/${wire}`)));
    assert.deepStrictEqual([cancelled.status, cancelled.reason], ["cancelled", "controlled_local_cancel"]);
    assert.deepStrictEqual([cancelled.kind, cancelled.first_output], ["text", true]);
  }
});

test("the kind is the binding's; a kind that is no kind is a binding the core cannot use", () => {
  assert.equal(kindOf(BINDING), "text");
  assert.equal(kindOf(new Map([["case_id", "x"]])), "grounded");
  assert.equal(kindOf(new Map<string, JsonValue>([["case_id", "x"], ["kind", null]])), "grounded");
  for (const named of ["grounded", "image", "CHAT", "TEXT", 1n] as const) {
    assert.throws(() => kindOf(new Map<string, JsonValue>([["kind", named]])), BindingError, String(named));
  }
  assert.throws(() => new ReplyConsumer(new Map([["kind", "image"]])), BindingError);
});

test("a grounded result names no kind", () => {
  const result = documentOf(new ReplyConsumer(new Map([["case_id", "x"]])).endOfStream());
  assert.ok(!("kind" in result) && !("first_output" in result));
  assert.equal(result.status, "incomplete");
  assert.equal(JSON.stringify(result), JSON.stringify(TEXT.grounded));
});

test("the testee answers a text reply, and a binding of no kind as one it cannot use", () => {
  const entry = caseOf("text/3/ndjson/1,2,7,3,11");
  const line = { id: "t", wire: entry.wire, binding: TEXT.binding, chunks: entry.chunks, end: "eof" };
  const accepted = plain(answer(JSON.stringify(line))) as Record<string, unknown>;
  assert.deepStrictEqual([accepted.status, accepted.accepted_answer], ["complete", { text: TEXT.texts[3] }]);
  // The two bindings the core cannot use (tests/unit/test_conformance.py's, no
  // selected_context to cite from, and a kind that is no kind) get the same error line.
  const reply = '{"status": "answered", "answer": "Yes.", "source_ids": ["a"]}';
  const grounded = { case_id: "replace-file" };
  const unusable: Array<[Record<string, unknown>, readonly string[], RegExp]> = [
    [grounded, groundedChunks(grounded, reply), /selected_context/],
    [{ ...TEXT.binding, kind: "image" }, entry.chunks, /^the binding's kind is no reply kind: "image"$/],
  ];
  for (const [binding, chunks, why] of unusable) {
    const got = plain(answer(JSON.stringify({ ...line, id: "x", binding, chunks }))) as Record<string, unknown>;
    assert.deepStrictEqual(Object.keys(got), ["id", "error"]);
    assert.equal(got.id, "x");
    assert.match(String(got.error), why);
  }
});

/** One content delta and done on ndjson, for `binding` (whose JSON text here is canonical). */
function groundedChunks(binding: Record<string, unknown>, reply: string): string[] {
  const sha = sha256Hex(Buffer.from(JSON.stringify(binding)));
  const delta = { sequence: 1, kind: "content_delta", binding_sha256: sha, text: reply };
  const done = {
    sequence: 2, kind: "done", binding_sha256: sha,
    content_sha256: sha256Hex(Buffer.from(reply, "utf8")), content_frames: 1,
  };
  return [delta, done].map((frame) => Buffer.from(`${JSON.stringify(frame)}\n`).toString("base64"));
}

test("the OpenRequest names the binding's kind: 1 for text, nothing (0) for grounded", () => {
  // Loaded without defaults and with enums as numbers: what the bytes carry, by the .proto.
  const definition = protoLoader.loadSync(defaultProtoPath(), { keepCase: true, longs: String });
  const open = (definition["replywire.v1.ReplyStream"] as protoLoader.ServiceDefinition).Open;
  assert.ok(open);
  const sent = (binding: JsonObject): Record<string, unknown> => {
    const message = openRequest({
      caseId: "c", binding, wire: "lp", plan: { mode: "frame" }, fault: null, streamId: "s", chunkIntervalMs: 0,
    });
    return open.requestDeserialize(open.requestSerialize(message)) as Record<string, unknown>;
  };
  assert.equal(sent(BINDING).kind, 1);
  const grounded = json(fixture<unknown>("bindings/replace-file.json"));
  assert.ok(isObject(grounded));
  assert.equal(sent(grounded).kind, undefined);
  assert.throws(() => sent(new Map([["kind", "image"]])), BindingError);
});

test("the CLI refuses a binding of no kind as a usage error (exit 2), before any connection", () => {
  const folder = mkdtempSync(resolve(tmpdir(), "text-kind-"));
  const path = resolve(folder, "chat.json");
  let run;
  try {
    writeFileSync(path, JSON.stringify({ ...TEXT.binding, kind: "image" }));
    run = spawnSync(
      process.execPath,
      [resolve(__dirname, "../src/cli.js"), "stream", "--binding", path, "--case", "x", "--target", "127.0.0.1:1"],
      { encoding: "utf8", timeout: 30_000 },
    );
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
  assert.equal(run.status, 2, run.stderr);
  assert.equal(run.stderr, "consumer: the binding's kind is no reply kind: \"image\"\n");
});

test("--text builds the text binding the Python consumer builds, bound to the same digest", () => {
  const binding = buildTextBinding("héllo 😀");
  assert.equal(binding.get("case_id"), "text-b92e527109e62a15");
  // shared.digest.digest(shared.texts.build_text_binding("héllo 😀")) in Python:
  assert.equal(digest(binding), "3633950bc338ed18cd77903fe1c973620ee120736f3325959fe43e432b3b98df");
  assert.equal(kindOf(binding), "text");
  const command = parseCommand(["stream", "--text", "", "--target", "127.0.0.1:1"]);
  assert.ok(command !== "help");
  assert.equal(command.request.caseId, buildTextBinding("").get("case_id"));
});

test("--text is a usage error beside --binding or --case, or past its bound", () => {
  for (const extra of [["--case", "x"], ["--binding", "b.json"]]) {
    assert.throws(() => parseCommand(["stream", "--text", "hi", ...extra]), ConfigurationError);
  }
  assert.throws(() => parseCommand(["stream", "--text", "x".repeat(16_385)]), ConfigurationError);
});
