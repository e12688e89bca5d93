/**
 * What test/chat.test.ts builds chat replies with, from the document alone
 * (docs/protocol.md#chat-binding, #wire-lp, #wire-ndjson, #chat-digest): a chat binding,
 * frames on both wires, the done claim over the frames' records, and a run through the core.
 */

import { createHash } from "node:crypto";
import { ReplyConsumer, type Limits } from "../src/core";
import { digest } from "../src/digest";
import { dumpJson, LENIENT, parseJson, type JsonObject, type JsonValue } from "../src/json";
import { resultDocument } from "../src/result";
import { withHeader } from "../src/wire/lp";

export type Wire = "lp" | "ndjson";
export const WIRES: readonly Wire[] = ["lp", "ndjson"];

/** A content frame: its kind and its own fields, in the protocol's order. */
export type Item = readonly [kind: string, fields: ReadonlyArray<readonly [string, JsonValue]>];

/** A JavaScript value as a JSON value of ours (a bigint stays an exact integer). */
export function json(value: unknown): JsonValue {
  const text = JSON.stringify(value, (_key, item: unknown) =>
    typeof item === "bigint" ? `\u0000${item.toString()}` : item,
  );
  return parseJson(text.replace(/"\\u0000(-?[0-9]+)"/g, "$1"), LENIENT);
}

export const TOOLS = [
  {
    name: "read_file",
    description: "Read a file of the project.",
    parameters: {
      type: "object",
      properties: { path: { type: "string", minLength: 1 } },
      required: ["path"],
      additionalProperties: false,
    },
  },
  {
    name: "shell",
    description: "Run a shell command.",
    parameters: {
      type: "object",
      properties: { command: { type: "string" } },
      required: ["command"],
      additionalProperties: false,
    },
  },
  {
    name: "count",
    description: "",
    parameters: {
      type: "object",
      properties: {
        n: { type: "integer", minimum: 0, maximum: 10 },
        label: { type: "string", maxLength: 2 },
      },
    },
  },
];

/** A chat binding (docs/protocol.md#chat-binding) declaring `tools`. */
export function chatBinding(tools: readonly unknown[] = TOOLS): JsonObject {
  const request = json({
    model: "gemini-test",
    system: "",
    turns: [{ role: "user", parts: [{ text: "What is in notes.py, and where am I?" }] }],
    tools,
    settings: {},
  });
  const requestSha256 = digest(request);
  return new Map<string, JsonValue>([
    ["kind", "chat"],
    ["case_id", `chat-${requestSha256.slice(0, 16)}`],
    ["request_sha256", requestSha256],
    ["request", request],
  ]);
}

// --- items ---------------------------------------------------------------------------------

export const text = (value: JsonValue): Item => ["content_delta", [["text", value]]];
export const call = (index: JsonValue, id: JsonValue, name: JsonValue, args: JsonValue): Item => [
  "tool_call",
  [
    ["index", index],
    ["id", id],
    ["name", name],
    ["arguments", args],
  ],
];
export const thought = (value: JsonValue): Item => ["thought", [["text", value]]];
export const signature = (part: JsonValue, index: JsonValue, value: JsonValue): Item => [
  "signature",
  [
    ["part", part],
    ["index", index],
    ["value", value],
  ],
];
export const USAGE_FIELDS = [
  "prompt_tokens",
  "cached_tokens",
  "completion_tokens",
  "thoughts_tokens",
  "tool_use_prompt_tokens",
  "total_tokens",
];
/** usage(prompt, cached, completion, thoughts, tool_use_prompt, total). */
export const usage = (...counts: JsonValue[]): Item => [
  "usage",
  USAGE_FIELDS.map((name, position): [string, JsonValue] => [
    name,
    position < counts.length ? (counts[position] as JsonValue) : 0n,
  ]),
];
export const finish = (reason: JsonValue): Item => ["finish", [["reason", reason]]];

// --- the wires -----------------------------------------------------------------------------

const TOP: Readonly<Record<string, number>> = {
  content_delta: 3,
  done: 4,
  error: 5,
  cancel: 6,
  tool_call: 7,
  thought: 8,
  signature: 9,
  usage: 10,
  finish: 11,
};

function varint(value: bigint): number[] {
  const bytes: number[] = [];
  let rest = value;
  do {
    const low = Number(rest & 0x7fn);
    rest >>= 7n;
    bytes.push(rest > 0n ? low | 0x80 : low);
  } while (rest > 0n);
  return bytes;
}

/** One protobuf field: a bigint as a varint (wire type 0), a string or bytes length-delimited. */
export function pbField(number: number, value: bigint | string | Uint8Array): Buffer {
  if (typeof value === "bigint") return Buffer.from([...varint(BigInt(number << 3)), ...varint(value)]);
  const bytes = typeof value === "string" ? Buffer.from(value, "utf8") : Buffer.from(value);
  return Buffer.concat([
    Buffer.from([...varint(BigInt((number << 3) | 2)), ...varint(BigInt(bytes.length))]),
    bytes,
  ]);
}

/** A frame's lp payload; its own fields numbered 1..n in order (a field of another type than
 * a bigint or a string cannot go on lp). */
export function lpPayload(sequence: bigint, sha: string, kind: string, fields: Item[1]): Buffer {
  const nested = fields.map(([, value], position) => {
    if (typeof value !== "bigint" && typeof value !== "string") throw new Error(`not for lp: ${String(value)}`);
    return pbField(position + 1, value);
  });
  return Buffer.concat([
    pbField(1, sequence),
    pbField(2, sha),
    pbField(TOP[kind] ?? 0, Buffer.concat(nested)),
  ]);
}

/** A frame on `wire`, as one chunk. */
export function encode(wire: Wire, sequence: number, sha: string, kind: string, fields: Item[1]): Buffer {
  if (wire === "lp") return withHeader(lpPayload(BigInt(sequence), sha, kind, fields));
  const object = new Map<string, JsonValue>([
    ["sequence", BigInt(sequence)],
    ["kind", kind],
    ["binding_sha256", sha],
    ...fields,
  ]);
  return Buffer.from(`${dumpJson(object)}\n`, "utf8");
}

/** The chat content digest of `items` (docs/protocol.md#chat-digest), written here from the
 * document: each record the canonical JSON of the kind and its fields, and a line feed. */
export function chatDigest(items: readonly Item[]): string {
  const hash = createHash("sha256");
  for (const [kind, fields] of items) {
    hash.update(dumpJson(new Map<string, JsonValue>([["kind", kind], ...fields]), { sortKeys: true }));
    hash.update("\n");
  }
  return hash.digest("hex");
}

export interface Send {
  /** The items done's claim is computed from (default: those sent). */
  readonly claimed?: readonly Item[];
  /** No done at the end. */
  readonly noDone?: boolean;
  /** Frames sent again (by position in the frames, 1-based sequence kept). */
  readonly repeat?: number;
}

/** The chunks of a chat reply: `items` numbered from 1, then done with its claim. */
export function chunks(wire: Wire, binding: JsonObject, items: readonly Item[], send: Send = {}): Buffer[] {
  const sha = digest(binding);
  const out = items.map(([kind, fields], position) => encode(wire, position + 1, sha, kind, fields));
  if (send.repeat !== undefined) out.splice(send.repeat, 0, out[send.repeat - 1] as Buffer);
  if (send.noDone) return out;
  const claimed = send.claimed ?? items;
  const done: Item[1] = [
    ["content_sha256", chatDigest(claimed)],
    ["content_frames", BigInt(claimed.length)],
  ];
  out.push(encode(wire, items.length + 1, sha, "done", done));
  return out;
}

export interface Run {
  readonly limits?: Partial<Limits>;
  readonly ignoreDuplicates?: boolean;
  readonly binding?: JsonObject;
  /** How the chunks are cut: one a frame (default), one byte each, or all as one. */
  readonly cut?: "frame" | "byte" | "whole";
}

/** The result document of a chat reply through the core, as a JSON object of ours. */
export function judge(wire: Wire, input: readonly Buffer[], run: Run = {}): JsonObject {
  const core = new ReplyConsumer(run.binding ?? chatBinding(), {
    wire,
    limits: run.limits ?? {},
    ignoreDuplicates: run.ignoreDuplicates ?? false,
  });
  let cut: readonly Buffer[] = input;
  if (run.cut === "whole") cut = [Buffer.concat(input)];
  if (run.cut === "byte") cut = [...Buffer.concat(input)].map((byte) => Buffer.from([byte]));
  for (const chunk of cut) {
    try {
      core.receiveData(chunk);
    } catch {
      break;
    }
  }
  return resultDocument(core.endOfStream());
}

/** `items` sent as a complete chat reply on `wire` and judged. */
export function reply(wire: Wire, items: readonly Item[], run: Run & Send = {}): JsonObject {
  return judge(wire, chunks(wire, run.binding ?? chatBinding(), items, run), run);
}

/** A value of a document as exact JSON text (bigints exact). */
export function exact(value: JsonValue | undefined): string {
  return dumpJson(value ?? null);
}

/** `[status, reason]` of a document. */
export function verdict(document: JsonObject): [JsonValue | undefined, JsonValue | undefined] {
  return [document.get("status"), document.get("reason")];
}
