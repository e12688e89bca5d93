/**
 * A chat reply (docs/protocol.md#chat-frames, #chat-rules, #chat-digest, #chat-reply,
 * #result-document) on both wires, from the document: every chat rule and reason, the
 * turn's assembly (interleaved calls, usage replaced, signatures kept with their part),
 * the reply's validation (ajv, JSON Schema 2020-12), the result's chat keys, and the
 * chat content digest.
 *
 * One file past 500 lines: the chat sections are checked together, on both wires, from
 * the same frame builders.
 */

import assert from "node:assert/strict";
import { test } from "node:test";
import { record } from "../src/chat";
import { ReplyConsumer } from "../src/core";
import { canonicalJson, digest, sha256Hex } from "../src/digest";
import type { Frame } from "../src/frames";
import { dumpJson, type JsonObject, type JsonValue } from "../src/json";
import { buildTextBinding } from "../src/kinds";
import { BindingError } from "../src/reply";
import { answer } from "../src/testee";
import { withHeader } from "../src/wire/lp";
import {
  call,
  chatBinding,
  chunks,
  encode,
  exact,
  pbField as field,
  finish,
  json,
  judge,
  reply,
  signature,
  text,
  thought,
  usage,
  verdict,
  WIRES,
  type Item,
} from "./chat-helpers";
import { plain } from "./helpers";

const TWO_64 = 1n << 64n;

/** 002's turn: "Reading ", two calls whose fragments interleave (1's last before 0's),
 * "the files.", usage 18 / 9 / 27 (4 cached), finish. */
const TURN_002: readonly Item[] = [
  text("Reading "),
  call(0n, "call-read", "read_file", '{"path":"'),
  call(1n, "call-shell", "shell", '{"command":"'),
  call(0n, "", "", "notes"),
  call(1n, "call-shell", "shell", 'pwd"}'),
  call(0n, "call-read", "", '.py"}'),
  text("the files."),
  usage(18n, 4n, 9n, 0n, 0n, 27n),
  finish("tool_calls"),
];

test("the digest record of the document's example: 2 frames, the stated SHA-256", () => {
  const frames: Frame[] = [
    { sequence: 1n, kind: "content_delta", bindingSha256: "", text: "Hel" },
    {
      sequence: 2n,
      kind: "tool_call",
      bindingSha256: "",
      part: new Map<string, JsonValue>([
        ["index", 0n],
        ["id", ""],
        ["name", "get_weather"],
        ["arguments", '{"city":'],
      ]),
    },
  ];
  const records = frames.map((frame) => Buffer.concat([canonicalJson(record(frame)), Buffer.from("\n")]));
  assert.equal(
    Buffer.concat(records).toString("utf8"),
    '{"kind":"content_delta","text":"Hel"}\n' +
      '{"arguments":"{\\"city\\":","id":"","index":0,"kind":"tool_call","name":"get_weather"}\n',
  );
  const expected = "2fb4c3ff6b12f499ce700020a1736d9904187085180c1f0fa5ddb6c44dfaf805";
  assert.equal(sha256Hex(Buffer.concat(records)), expected);
  // The same two frames off each wire: done's claim of them matches (the turn then has no
  // finish); one frame less, or another digest, does not.
  const items = [text("Hel"), call(0n, "", "get_weather", '{"city":')];
  for (const wire of WIRES) {
    const binding = chatBinding();
    const sha = digest(binding);
    const sent = items.map(([kind, fields], position) => encode(wire, position + 1, sha, kind, fields));
    const done = (claim: string, count: bigint): Buffer =>
      encode(wire, 3, sha, "done", [
        ["content_sha256", claim],
        ["content_frames", count],
      ]);
    assert.deepEqual(verdict(judge(wire, [...sent, done(expected, 2n)])), ["invalid", "chat_finish_missing"]);
    assert.deepEqual(verdict(judge(wire, [...sent, done(expected, 1n)])), ["invalid", "content_digest_mismatch"]);
    const other = sha256Hex(records[0] as Buffer);
    assert.deepEqual(verdict(judge(wire, [...sent, done(other, 2n)])), ["invalid", "content_digest_mismatch"]);
  }
});

test("002's turn: interleaved fragments assembled by index, on both wires and any cut", () => {
  for (const wire of WIRES) {
    for (const cut of ["frame", "byte", "whole"] as const) {
      const document = reply(wire, TURN_002, { cut });
      assert.deepEqual(verdict(document), ["complete", null], `${wire} ${cut}`);
      assert.deepEqual(plain(document.get("accepted_answer") ?? null), {
        text: "Reading the files.",
        thoughts: "",
        tool_calls: [
          { index: 0, id: "call-read", name: "read_file", arguments: { path: "notes.py" } },
          { index: 1, id: "call-shell", name: "shell", arguments: { command: "pwd" } },
        ],
        signatures: [],
        usage: {
          prompt_tokens: 18,
          cached_tokens: 4,
          completion_tokens: 9,
          thoughts_tokens: 0,
          tool_use_prompt_tokens: 0,
          total_tokens: 27,
        },
        finish_reason: "tool_calls",
      });
      const turn = plain(document.get("turn") ?? null) as Record<string, unknown>;
      assert.deepEqual(turn.tool_calls, [
        { index: 0, id: "call-read", name: "read_file", arguments: '{"path":"notes.py"}' },
        { index: 1, id: "call-shell", name: "shell", arguments: '{"command":"pwd"}' },
      ]);
      assert.equal(document.get("provisional_content"), "Reading the files.");
      assert.deepEqual(plain(document.get("notes") ?? null), []);
      assert.equal(document.has("call"), false);
    }
  }
  const document = reply("lp", TURN_002);
  assert.deepEqual([...document.keys()].slice(-6), ["wire_format", "integrity", "kind", "first_output", "turn", "notes"]);
  assert.deepEqual([document.get("kind"), document.get("first_output")], ["chat", true]);
  assert.deepEqual(plain(document.get("events") ?? null), [
    { kind: "provisional_content", sequence: 1, characters_received: 8 },
    ...[2, 3, 4, 5, 6].map((sequence) => ({ kind: "part_received", sequence, part: "tool_call" })),
    { kind: "provisional_content", sequence: 7, characters_received: 18 },
    { kind: "part_received", sequence: 8, part: "usage" },
    { kind: "part_received", sequence: 9, part: "finish" },
    { kind: "local_terminal", status: "done", sequence: 10 },
    { kind: "validated_turn", characters: 18, tool_calls: 2, finish_reason: "tool_calls" },
  ]);
  assert.equal(plain((document.get("stats") as JsonObject).get("application_frames") ?? null), 10);
});

test("usage is replaced, not summed; counts up to 2^64 - 1 exact; the total's note", () => {
  const max = TWO_64 - 1n;
  for (const wire of WIRES) {
    const replaced = reply(wire, [usage(1n, 0n, 1n, 0n, 0n, 2n), text("Hi"), usage(5n, 1n, 3n, 1n, 0n, 9n), finish("STOP")]);
    assert.equal(exact((replaced.get("accepted_answer") as JsonObject).get("usage")), exact(json({
      prompt_tokens: 5, cached_tokens: 1, completion_tokens: 3, thoughts_tokens: 1, tool_use_prompt_tokens: 0, total_tokens: 9,
    })));
    assert.deepEqual(plain(replaced.get("notes") ?? null), []);
    // After finish, usage still comes (and replaces): the last one counts.
    const late = reply(wire, [text("Hi"), finish("STOP"), usage(max, 0n, 0n, 0n, 0n, max)]);
    assert.deepEqual(verdict(late), ["complete", null]);
    const exactUsage = exact((late.get("accepted_answer") as JsonObject).get("usage"));
    assert.match(exactUsage, /"prompt_tokens":18446744073709551615,.*"total_tokens":18446744073709551615\}$/);
    assert.equal(exact((late.get("turn") as JsonObject).get("usage")), exactUsage);
    assert.deepEqual(plain(late.get("notes") ?? null), []);
    // A sum past 2^64 is not the total: exact arithmetic, a note, still accepted.
    const off = reply(wire, [finish("STOP"), usage(max, 0n, 1n, 0n, 0n, max)]);
    assert.deepEqual(verdict(off), ["complete", null]);
    assert.deepEqual(plain(off.get("notes") ?? null), ["usage_total_mismatch"]);
    // The note is the turn's, whatever the status.
    const unfinished = reply(wire, [usage(1n, 0n, 1n, 0n, 0n, 3n)]);
    assert.deepEqual(verdict(unfinished), ["invalid", "chat_finish_missing"]);
    assert.deepEqual(plain(unfinished.get("notes") ?? null), ["usage_total_mismatch"]);
    assert.equal(unfinished.get("first_output"), true);
  }
});

test("a signature is kept with its part: a call's index, the text's or thoughts' length", () => {
  for (const wire of WIRES) {
    const document = reply(wire, [
      thought("Let me think"),
      signature("thought", 0n, "c2lnLTA="),
      call(0n, "c1", "shell", '{"command":"ls"}'),
      signature("tool_call", 0n, "c2lnLTE="),
      text("Hi \u{1F600}"),
      signature("text", 0n, "c2lnLTI="),
      finish("STOP"),
    ]);
    assert.deepEqual(verdict(document), ["complete", null]);
    const accepted = document.get("accepted_answer") as JsonObject;
    assert.equal(
      exact(accepted.get("signatures")),
      '[{"part":"thought","at":12,"value":"c2lnLTA="},{"part":"tool_call","index":0,"value":"c2lnLTE="},' +
        '{"part":"text","at":4,"value":"c2lnLTI="}]',
    );
    assert.equal(accepted.get("thoughts"), "Let me think");
  }
});

test("the calls' validation, in index order: malformed kept raw, undeclared, schema-invalid", () => {
  const refused = (items: readonly Item[], wire: "lp" | "ndjson"): [unknown, unknown, unknown] => {
    const document = reply(wire, [...items, finish("STOP")]);
    return [document.get("reason"), plain(document.get("call") ?? null), document.get("status")];
  };
  for (const wire of WIRES) {
    for (const args of ['{"path":', "[1]", '{"path":"a","path":"b"}', '{"path":NaN}', "1"]) {
      const document = reply(wire, [call(0n, "c1", "read_file", args), finish("STOP")]);
      assert.deepEqual(verdict(document), ["invalid", "tool_call_malformed"], args);
      assert.deepEqual(plain(document.get("call") ?? null), { index: 0, id: "c1", name: "read_file" });
      const calls = (document.get("turn") as JsonObject).get("tool_calls") as JsonObject[];
      assert.equal(calls[0]?.get("arguments"), args, "kept raw");
      assert.equal(document.get("accepted_answer"), null);
    }
    assert.deepEqual(refused([call(0n, "c1", "shell", ' {"command":"ls"} '), call(1n, "c2", "rm", "{}")], wire), [
      "tool_call_undeclared",
      { index: 1, id: "c2", name: "rm" },
      "invalid",
    ]);
    // All three checks of a call before the next call's.
    assert.deepEqual(refused([call(0n, "c1", "rm", "{}"), call(1n, "c2", "shell", "{")], wire)[0], "tool_call_undeclared");
    assert.deepEqual(refused([call(0n, "c1", "shell", "{}"), call(1n, "c2", "rm", "{")], wire), [
      "tool_call_arguments_invalid",
      { index: 0, id: "c1", name: "shell" },
      "invalid",
    ]);
    for (const args of ['{"path":""}', '{"path":"a","mode":"r"}', "{}", '{"path":1}']) {
      assert.deepEqual(refused([call(0n, "", "read_file", args)], wire)[0], "tool_call_arguments_invalid", args);
    }
    // 1.0 is an integer; lengths count code points.
    for (const args of ['{"n":1.0}', '{"n":10}', '{"label":"\u{1F600}\u{1F600}"}', '{"n":0,"label":""}']) {
      assert.deepEqual(verdict(reply(wire, [call(0n, "", "count", args), finish("STOP")])), ["complete", null], args);
    }
    for (const args of ['{"n":1.5}', '{"n":11}', '{"n":-1}', '{"label":"abc"}', '{"n":true}']) {
      assert.deepEqual(refused([call(0n, "", "count", args)], wire)[0], "tool_call_arguments_invalid", args);
    }
  }
});

test("finish: missing is chat_finish_missing; after it only usage (frame_after_finish)", () => {
  for (const wire of WIRES) {
    const missing = reply(wire, [text("Hi"), call(0n, "c", "shell", '{"command":"ls"}')]);
    assert.deepEqual(verdict(missing), ["invalid", "chat_finish_missing"]);
    assert.equal(((missing.get("turn") as JsonObject).get("tool_calls") as unknown[]).length, 1);
    assert.equal((missing.get("turn") as JsonObject).get("finish_reason"), null);
    const empty = reply(wire, []);
    assert.deepEqual(verdict(empty), ["invalid", "chat_finish_missing"]);
    assert.equal(empty.get("first_output"), false);
    const afterFinish = [
      text("more"),
      text(""),
      finish("STOP"),
      thought("x"),
      call(0n, "c", "shell", "{}"),
      signature("text", 0n, "s"),
    ];
    for (const after of afterFinish) {
      const document = reply(wire, [text("Hi"), finish("STOP"), usage(), after]);
      assert.deepEqual(verdict(document), ["invalid", "frame_after_finish"], exact(after[0]));
      assert.equal((document.get("stats") as JsonObject).get("application_frames"), 4n);
    }
  }
});

test("the chat content digest: a dropped, reordered, altered or retyped part is a mismatch", () => {
  const items = [text("Reading "), call(0n, "c", "read_file", '{"path":"notes.py"}'), finish("STOP")];
  const sent: Record<string, readonly Item[]> = {
    dropped: [items[0], items[2]] as Item[],
    reordered: [items[1], items[0], items[2]] as Item[],
    altered: [text("Reading!"), items[1], items[2]] as Item[],
    retyped: [items[0], text('{"path":"notes.py"}'), items[2]] as Item[],
    "thought as text": [text("Reading "), items[1], items[2]].map((item, position) =>
      position === 0 ? thought("Reading ") : item,
    ) as Item[],
  };
  for (const wire of WIRES) {
    assert.deepEqual(verdict(reply(wire, items)), ["complete", null]);
    for (const [how, parts] of Object.entries(sent)) {
      assert.deepEqual(verdict(reply(wire, parts, { claimed: items })), ["invalid", "content_digest_mismatch"], how);
    }
  }
});

test("tool_call's rules: invalid_tool_call and tool_call_limit", () => {
  const begun = call(0n, "c1", "shell", '{"command":');
  for (const wire of WIRES) {
    for (const [how, fragment] of [
      ["index past the calls begun", call(2n, "c2", "shell", "{}")],
      ["a new call without a name", call(1n, "c2", "", "{}")],
      ["another id", call(0n, "c9", "", '"ls"}')],
      ["another name", call(0n, "", "read_file", '"ls"}')],
      ["empty arguments continuing", call(0n, "c1", "shell", "")],
    ] as const) {
      assert.deepEqual(verdict(reply(wire, [begun, fragment])), ["invalid", "invalid_tool_call"], how);
    }
    // A new call's first fragment may have no arguments yet, and no id.
    const unnamed = [call(0n, "", "count", ""), call(0n, "", "", "{}"), finish("STOP")];
    assert.deepEqual(verdict(reply(wire, unnamed)), ["complete", null]);
    const limited = { limits: { max_tool_calls: 2 } };
    const two = [call(0n, "a", "shell", '{"command":"a"}'), call(1n, "b", "shell", '{"command":"b"}')];
    assert.deepEqual(verdict(reply(wire, [...two, finish("STOP")], limited)), ["complete", null]);
    const third = reply(wire, [...two, call(2n, "c", "shell", "{}")], limited);
    assert.deepEqual(verdict(third), ["invalid", "tool_call_limit"]);
    assert.equal(((third.get("turn") as JsonObject).get("tool_calls") as unknown[]).length, 2);
    // A call begun goes on at the limit; the default is 128.
    assert.deepEqual(verdict(reply(wire, [...two, call(1n, "", "", " "), finish("STOP")], limited)), ["complete", null]);
    const calls = (count: number): Item[] =>
      Array.from({ length: count }, (_, index) => call(BigInt(index), "", "shell", '{"command":"x"}'));
    assert.deepEqual(verdict(reply(wire, [...calls(128), finish("STOP")])), ["complete", null]);
    assert.deepEqual(verdict(reply(wire, calls(129))), ["invalid", "tool_call_limit"]);
  }
  // NDJSON's values of another type, or a lone surrogate.
  for (const fragment of [
    call("0", "c", "shell", "{}"),
    call(-1n, "c", "shell", "{}"),
    call(0.0, "c", "shell", "{}"),
    call(0n, 1n, "shell", "{}"),
    call(0n, "c", "shell", null),
    call(0n, "c", "sh\uD800", "{}"),
    call(0n, "c", "shell", "{\uDC00"),
  ]) {
    assert.deepEqual(verdict(reply("ndjson", [fragment])), ["invalid", "invalid_tool_call"], exact(fragment[1] as never));
  }
  // -0 is 0.
  const negativeZero = ndjsonLine(1, '"index":-0,"id":"c","name":"count","arguments":"{}"', "tool_call");
  assert.deepEqual(verdict(judge("ndjson", [negativeZero])), ["incomplete", "missing_terminal"]);
});

/** A hand-written NDJSON line of the default chat binding. */
function ndjsonLine(sequence: number, fields: string, kind: string): Buffer {
  const sha = digest(chatBinding());
  return Buffer.from(`{"sequence":${sequence},"kind":"${kind}","binding_sha256":"${sha}",${fields}}\n`);
}

test("content_delta, thought, signature, usage and finish: their own reasons", () => {
  for (const wire of WIRES) {
    assert.deepEqual(verdict(reply(wire, [text("a"), text("")])), ["invalid", "invalid_content_delta"]);
    assert.deepEqual(verdict(reply(wire, [thought("")])), ["invalid", "invalid_thought"]);
    for (const [how, items] of [
      ["an unknown part", [text("a"), signature("image", 0n, "s")]],
      ["an empty value", [text("a"), signature("text", 0n, "")]],
      ["a call not begun", [signature("tool_call", 0n, "s")]],
      ["a call signed twice", [call(0n, "c", "shell", "{}"), signature("tool_call", 0n, "s"), signature("tool_call", 0n, "t")]],
      ["text's index not 0", [text("a"), signature("text", 1n, "s")]],
    ] as const) {
      assert.deepEqual(verdict(reply(wire, items)), ["invalid", "invalid_signature"], how);
    }
    assert.deepEqual(verdict(reply(wire, [finish("")])), ["invalid", "invalid_finish"]);
    assert.deepEqual(verdict(reply(wire, [finish("x".repeat(65))])), ["invalid", "invalid_finish"]);
    assert.deepEqual(verdict(reply(wire, [finish("\u{1F600}".repeat(64))])), ["complete", null]);
  }
  for (const item of [thought(1n), thought("\uD800"), thought(null)]) {
    assert.deepEqual(verdict(reply("ndjson", [item])), ["invalid", "invalid_thought"]);
  }
  const signatures = [
    signature("text", "0", "s"),
    signature("text", 0n, 5n),
    signature("text", 0.0, "s"),
    signature("text", 0n, "\uDFFF"),
  ];
  for (const item of signatures) {
    assert.deepEqual(verdict(reply("ndjson", [item])), ["invalid", "invalid_signature"]);
  }
  // On lp every count is a uint64, in range: invalid_usage is NDJSON's.
  for (const count of [-1n, TWO_64, 1.0, "1", null, true]) {
    assert.deepEqual(verdict(reply("ndjson", [usage(0n, 0n, 0n, 0n, 0n, count)])), ["invalid", "invalid_usage"], String(count));
  }
  for (const reason of [1n, null, "\uD800"]) {
    assert.deepEqual(verdict(reply("ndjson", [finish(reason)])), ["invalid", "invalid_finish"]);
  }
});

test("a chat frame outside a chat reply: part_outside_chat (NDJSON), an unknown field (lp)", () => {
  const binding = buildTextBinding("hello");
  const sha = digest(binding);
  for (const [kind, fields] of [thought("x"), call(0n, "c", "shell", "{}"), usage(), finish("STOP"), signature("text", 0n, "s")]) {
    const ndjson = judge("ndjson", [encode("ndjson", 1, sha, kind, fields)], { binding });
    assert.deepEqual(verdict(ndjson), ["invalid", "part_outside_chat"], kind);
    const lp = judge("lp", [encode("lp", 1, sha, kind, fields)], { binding });
    assert.deepEqual(verdict(lp), ["invalid", "unknown_frame_field"], kind);
    // ndjson-lab knows the lab's four kinds only, whatever the reply's kind.
    for (const lab of [binding, chatBinding()]) {
      const line = encode("ndjson", 1, digest(lab), kind, fields);
      assert.deepEqual(verdict(judge("ndjson-lab" as never, [line], { binding: lab })), ["invalid", "invalid_frame_schema"]);
    }
  }
});

test("lp: a chat message walked by the same rules; absent fields are their defaults", () => {
  const sha = digest(chatBinding());
  const lp = (...fields: Buffer[]): Buffer => withHeader(Buffer.concat(fields));
  const top = (nested: Buffer, number = 7): Buffer[] => [field(1, 1n), field(2, sha), field(number, nested)];
  const cases: Array<[string, Buffer[], string]> = [
    ["a tool call with no fields: no name", top(Buffer.alloc(0)), "invalid_tool_call"],
    ["a finish with no reason", top(Buffer.alloc(0), 11), "invalid_finish"],
    ["an unknown field inside", top(field(5, "x")), "unknown_frame_field"],
    ["index as a string", top(field(1, "0")), "invalid_frame_payload"],
    ["a repeated field inside", top(Buffer.concat([field(3, "a"), field(3, "b")])), "invalid_frame_schema"],
    ["two kinds", [...top(field(3, "shell")), field(8, field(1, "t"))], "invalid_frame_schema"],
    ["a name not UTF-8", top(field(3, Buffer.from([0xff]))), "invalid_utf8"],
    ["usage with 7 fields", top(field(7, 1n), 10), "unknown_frame_field"],
  ];
  for (const [how, fields, reason] of cases) {
    assert.deepEqual(verdict(judge("lp", [lp(...fields)])), ["invalid", reason], how);
  }
  // Usage's absent counts are 0: a valid report.
  const zero = judge("lp", [lp(...top(Buffer.alloc(0), 10))]);
  assert.deepEqual(verdict(zero), ["incomplete", "missing_terminal"]);
  assert.equal(exact((zero.get("turn") as JsonObject).get("usage")), exact(json({
    prompt_tokens: 0, cached_tokens: 0, completion_tokens: 0, thoughts_tokens: 0, tool_use_prompt_tokens: 0, total_tokens: 0,
  })));
});

test("the content limit counts text, thoughts, arguments and signatures together", () => {
  for (const wire of WIRES) {
    const items = [text("abcd"), thought("efg"), call(0n, "", "count", "{ }")];
    const limits = { limits: { max_content_chars: 11 } };
    assert.deepEqual(verdict(reply(wire, [...items, signature("text", 0n, "s"), finish("STOP")], limits)), ["complete", null]);
    const over = reply(wire, [...items, signature("text", 0n, "st"), finish("STOP")], limits);
    assert.deepEqual(verdict(over), ["invalid", "content_limit"]);
    // The part that passes the limit is applied (in turn), without an event of its own.
    assert.equal(((over.get("turn") as JsonObject).get("signatures") as unknown[]).length, 1);
    const events = plain(over.get("events") ?? null) as Array<{ kind: string }>;
    assert.deepEqual(events.map((event) => event.kind), ["provisional_content", "part_received", "part_received"]);
  }
});

test("the duplicate policy: an exact replay of a chat frame is dropped, another refused", () => {
  for (const wire of WIRES) {
    const items = [text("Hi"), call(0n, "c", "shell", '{"command":"ls"}'), finish("STOP")];
    for (const repeat of [2, 3]) {
      const document = reply(wire, items, { repeat, ignoreDuplicates: true });
      assert.deepEqual(verdict(document), ["complete", null], `repeat ${repeat}`);
      assert.equal(exact((document.get("turn") as JsonObject).get("tool_calls")), exact(json([
        { index: 0, id: "c", name: "shell", arguments: '{"command":"ls"}' },
      ])));
      assert.deepEqual(verdict(reply(wire, items, { repeat })), ["invalid", "invalid_sequence"]);
    }
    const binding = chatBinding();
    const sha = digest(binding);
    const sent = chunks(wire, binding, items, { noDone: true });
    const other = encode(wire, 3, sha, "finish", [["reason", "MAX"]]);
    const conflicting = judge(wire, [...sent, other], { ignoreDuplicates: true });
    assert.deepEqual(verdict(conflicting), ["invalid", "conflicting_duplicate"]);
  }
});

test("max_tool_calls is a limit like the others: the testee's line, a positive integer", () => {
  const binding = chatBinding();
  const items = [call(0n, "a", "shell", "{}"), call(1n, "b", "shell", "{}"), finish("STOP")];
  const line = (limits: Record<string, unknown>): Record<string, unknown> => {
    const sent = chunks("lp", binding, items).map((chunk) => chunk.toString("base64"));
    const input = JSON.stringify({ id: "x", wire: "lp", binding: plain(binding), chunks: sent, end: "eof", limits });
    return plain(answer(input)) as Record<string, unknown>;
  };
  assert.deepEqual([line({}).status, line({}).reason], ["invalid", "tool_call_arguments_invalid"]);
  assert.deepEqual([line({ max_tool_calls: 1 }).status, line({ max_tool_calls: 1 }).reason], ["invalid", "tool_call_limit"]);
  for (const bad of [0, -1, 1.5]) assert.ok("error" in line({ max_tool_calls: bad }), String(bad));
  assert.throws(() => new ReplyConsumer(binding, { limits: { max_tool_calls: 0 } }), RangeError);
});

test("a chat binding the core cannot use: no request.tools, parameters that are no schema", () => {
  assert.throws(() => new ReplyConsumer(new Map([["kind", "chat"]])), BindingError);
  const broken = chatBinding([{ name: "x", description: "", parameters: { type: "no-such-type" } }]);
  assert.throws(() => new ReplyConsumer(broken), BindingError);
  const got = plain(answer(JSON.stringify({ id: "b", wire: "lp", binding: plain(broken), chunks: [], end: "eof" })));
  assert.deepEqual(Object.keys(got as object), ["id", "error"]);
  // A binding declaring no tools: every call is undeclared.
  const none = chatBinding([]);
  const document = reply("ndjson", [call(0n, "c", "read_file", '{"path":"a"}'), finish("STOP")], { binding: none });
  assert.deepEqual(verdict(document), ["invalid", "tool_call_undeclared"]);
});

test("numbers in the arguments and the parameters are exact: past 2^53, and infinity", () => {
  const big = {
    name: "big",
    description: "",
    parameters: {
      type: "object",
      properties: {
        id: { type: "integer", minimum: 0, maximum: 18446744073709551614n },
        e: { enum: [9007199254740993n, "x"] },
        f: { type: "number" },
        i: { type: ["integer", "null"] },
        list: { type: "array", items: { type: "integer", maximum: 9007199254740992n } },
      },
      additionalProperties: false,
    },
  };
  const binding = chatBinding([big]);
  assert.match(dumpJson(binding), /"maximum":18446744073709551614\}/);
  const judged = (args: string): unknown =>
    reply("lp", [call(0n, "c", "big", args), finish("STOP")], { binding }).get("reason");
  for (const args of [
    '{"id":18446744073709551614}',
    '{"id":0}',
    '{"e":9007199254740993}',
    '{"e":"x"}',
    '{"i":1e300}',
    '{"i":null}',
    '{"list":[9007199254740992,-18446744073709551616]}',
  ]) {
    assert.equal(judged(args), null, args);
  }
  for (const args of [
    '{"id":18446744073709551615}',
    '{"id":-1}',
    '{"e":9007199254740992}',
    '{"e":9007199254740993.0}',
    '{"e":"y"}',
    '{"list":[9007199254740993]}',
    '{"id":1,"other":18446744073709551615}',
  ]) {
    assert.equal(judged(args), "tool_call_arguments_invalid", args);
  }
  // A number that reads as infinity has no canonical form: the arguments are malformed
  // before any schema looks at them (docs/protocol.md#chat-reply).
  for (const args of ['{"f":1e400}', '{"i":1e400}', '{"i":-1e400}', '{"list":[1,-1e400]}']) {
    assert.equal(judged(args), "tool_call_malformed", args);
  }
});

test("any turn, its calls' fragments interleaved, cut anywhere, is accepted as exactly that turn", () => {
  let state = 20261206;
  const random = (below: number): number => {
    state = (state * 1103515245 + 12345) % 2147483648;
    return state % below;
  };
  const pieces = ["a", "é", " ", "\u{1F600}", "\\", '"', "\n", "z"];
  const word = (length: number): string => Array.from({ length }, () => pieces[random(pieces.length)]).join("");
  for (let round = 0; round < 40; round++) {
    const commands = Array.from({ length: random(4) }, () => word(random(6)));
    // Each call's arguments in 1-3 fragments; calls begin in index order, fragments interleave.
    const fragments = commands.map((command) => {
      const args = dumpJson(new Map([["command", command]]));
      const cut = random(args.length);
      return cut === 0 ? [args] : [args.slice(0, cut), args.slice(cut)].filter((piece) => piece !== "");
    });
    const items: Item[] = [];
    const texts: string[] = [];
    const thoughts: string[] = [];
    const next = fragments.map(() => 0);
    let begun = 0;
    for (;;) {
      const open = next.flatMap((at, index) =>
        at < (fragments[index]?.length ?? 0) && index <= begun ? [index] : [],
      );
      if (open.length === 0) break;
      const index = open[random(open.length)] as number;
      if (index === begun) begun += 1;
      const first = next[index] === 0;
      const piece = fragments[index]?.[next[index] as number] ?? "";
      items.push(call(BigInt(index), first ? `c${index}` : "", first ? "shell" : "", piece));
      next[index] = (next[index] as number) + 1;
      const extra = random(4);
      if (extra === 0) {
        texts.push(word(1 + random(5)));
        items.push(text(texts[texts.length - 1] as string));
      } else if (extra === 1) {
        thoughts.push(word(1 + random(5)));
        items.push(thought(thoughts[thoughts.length - 1] as string));
      }
    }
    items.push(usage(7n, 0n, 3n, 0n, 0n, 10n), finish("STOP"));
    const expected = {
      text: texts.join(""),
      thoughts: thoughts.join(""),
      tool_calls: commands.map((command, index) => ({
        index,
        id: `c${index}`,
        name: "shell",
        arguments: { command },
      })),
      signatures: [],
      usage: {
        prompt_tokens: 7,
        cached_tokens: 0,
        completion_tokens: 3,
        thoughts_tokens: 0,
        tool_use_prompt_tokens: 0,
        total_tokens: 10,
      },
      finish_reason: "STOP",
    };
    for (const wire of WIRES) {
      const whole = Buffer.concat(chunks(wire, chatBinding(), items));
      const cuts: Buffer[] = [];
      for (let at = 0; at < whole.length; ) {
        const size = 1 + random(40);
        cuts.push(whole.subarray(at, at + size));
        at += size;
      }
      const document = judge(wire, cuts);
      assert.deepEqual(verdict(document), ["complete", null], `round ${round} ${wire}`);
      assert.deepEqual(plain(document.get("accepted_answer") ?? null), expected, `round ${round} ${wire}`);
    }
  }
});
