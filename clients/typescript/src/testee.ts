/**
 * The conformance testee: one JSON object per line on stdin, one per line on stdout, in
 * order, each line flushed as it is answered.
 *
 * In:  {"id", "wire": "lp" | "ndjson" | "ndjson-lab", "binding": {...}, "chunks": [base64...],
 *       "end": "eof" | "transport_error", "limits"?: {...}, "ignore_duplicates"?: bool}
 * Out: {"id", "status", "reason", "detail", "frames", "bytes", "provisional_content",
 *       "accepted_answer", "citations"}, and a chat reply's "turn", "notes" and "call" where
 *       its result has them
 * or, for a line that is not valid input: {"id": <its id, or null>, "error": "<why>"}.
 *
 * The chunks are fed in order until the core refuses one (nothing after a refusal is
 * interpreted), then the input ends as `end` says, as shared/replay.py's `consume` does.
 * Keys other than these are ignored.
 */

import { createInterface } from "node:readline";
import { ReplyConsumer, LIMIT_NAMES, type Limits } from "./core";
import { dumpJson, isObject, type JsonObject, type JsonValue, LENIENT, parseJson } from "./json";
import { ProtocolFailure } from "./reasons";
import { isWireFormat, type WireFormat } from "./wire/base";

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

export class InputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "InputError";
  }
}

export interface Case {
  readonly id: string;
  readonly wire: WireFormat;
  readonly binding: JsonObject;
  readonly chunks: readonly Buffer[];
  readonly end: "eof" | "transport_error";
  readonly limits: Partial<Limits>;
  readonly ignoreDuplicates: boolean;
}

function readLimits(value: JsonValue | undefined): Partial<Limits> {
  if (value === undefined || value === null) return {};
  if (!isObject(value)) throw new InputError("limits must be an object");
  const limits: Record<string, number> = {};
  for (const [name, limit] of value) {
    if (!(LIMIT_NAMES as readonly string[]).includes(name)) {
      throw new InputError(`unknown limit ${name}`);
    }
    if (typeof limit !== "bigint" || limit < 1n) {
      throw new InputError(`${name} must be a positive integer`);
    }
    // Past 2**53 no count can reach it: as good as Python's unbounded int.
    limits[name] = limit > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(limit);
  }
  return limits;
}

function readChunks(value: JsonValue | undefined): Buffer[] {
  if (!Array.isArray(value)) throw new InputError("chunks must be a list of base64 strings");
  return value.map((chunk, index) => {
    if (typeof chunk !== "string" || !BASE64.test(chunk)) {
      throw new InputError(`chunk ${index} is not base64`);
    }
    return Buffer.from(chunk, "base64");
  });
}

/** One input line as a case, or an `InputError` that says why not. */
export function readCase(object: JsonValue): Case {
  if (!isObject(object)) throw new InputError("a line must be a JSON object");
  const id = object.get("id");
  if (typeof id !== "string") throw new InputError("id must be a string");
  const wire = object.get("wire");
  if (!isWireFormat(wire)) throw new InputError("wire must be lp, ndjson or ndjson-lab");
  const binding = object.get("binding");
  if (!isObject(binding)) throw new InputError("binding must be an object");
  const end = object.get("end");
  if (end !== "eof" && end !== "transport_error") {
    throw new InputError("end must be eof or transport_error");
  }
  const ignore = object.get("ignore_duplicates") ?? false;
  if (typeof ignore !== "boolean") throw new InputError("ignore_duplicates must be a boolean");
  return {
    id,
    wire,
    binding,
    chunks: readChunks(object.get("chunks")),
    end,
    limits: readLimits(object.get("limits")),
    ignoreDuplicates: ignore,
  };
}

/** Run one case through the core: the answer line's object. */
export function runCase(input: Case): JsonObject {
  const consumer = new ReplyConsumer(input.binding, {
    wire: input.wire,
    limits: input.limits,
    ignoreDuplicates: input.ignoreDuplicates,
  });
  for (const chunk of input.chunks) {
    try {
      consumer.receiveData(chunk);
    } catch (error) {
      if (error instanceof ProtocolFailure) break;
      throw error;
    }
  }
  const result = input.end === "eof" ? consumer.endOfStream() : consumer.transportError();
  const answer = new Map<string, JsonValue>([
    ["id", input.id],
    ["status", result.status],
    ["reason", result.reason],
    ["detail", result.detail],
    ["frames", BigInt(result.stats.applicationFrames)],
    ["bytes", BigInt(result.stats.bytesReceived)],
    ["provisional_content", result.provisionalContent],
    ["accepted_answer", result.acceptedAnswer],
    ["citations", [...result.citations]],
  ]);
  // A chat reply's keys, where the result has them (docs/conformance.md).
  if (result.turn !== undefined && result.turn !== null) answer.set("turn", result.turn);
  if (result.call !== undefined && result.call !== null) answer.set("call", result.call);
  if (result.notes !== undefined && result.notes !== null) answer.set("notes", [...result.notes]);
  return answer;
}

function errorLine(id: JsonValue, why: string): JsonObject {
  return new Map<string, JsonValue>([
    ["id", typeof id === "string" ? id : null],
    ["error", why],
  ]);
}

/** The answer to one input line (never throws). */
export function answer(line: string): JsonObject {
  let object: JsonValue;
  try {
    object = parseJson(line, LENIENT);
  } catch (error) {
    return errorLine(null, `not JSON: ${(error as Error).message}`);
  }
  const id = isObject(object) ? (object.get("id") ?? null) : null;
  try {
    return runCase(readCase(object));
  } catch (error) {
    return errorLine(id, error instanceof Error ? error.message : String(error));
  }
}

async function main(): Promise<void> {
  const lines = createInterface({ input: process.stdin, crlfDelay: Number.POSITIVE_INFINITY });
  for await (const line of lines) {
    const text = `${dumpJson(answer(line))}\n`;
    if (!process.stdout.write(text)) {
      await new Promise<void>((resolve) => process.stdout.once("drain", () => resolve()));
    }
  }
}

if (require.main === module) {
  main().catch((error: unknown) => {
    process.stderr.write(`testee: ${String(error)}\n`);
    process.exitCode = 1;
  });
}
