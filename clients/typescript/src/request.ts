/**
 * The `OpenRequest` as the Python consumer builds it (shared/requests.py `open_request`), the
 * chunk plan (shared/wire/chunking.py `ChunkPlan.parse`) and the fault (shared/faults.py), and
 * the binding read from a file as `consumer stream --binding` reads it (strict JSON, at most
 * 64 KiB and 16 levels deep).
 */

import { readFileSync } from "node:fs";
import { canonicalJson } from "./digest";
import { isObject, type JsonObject, type JsonValue, JsonError, parseJson, STRICT } from "./json";
import { kindOf, type ReplyKind } from "./kinds";
import { ConfigurationError } from "./security";
import { decodeUtf8 } from "./utf8";
import type { WireFormat } from "./wire/base";

export const MAX_BINDING_BYTES = 64 * 1024;
export const MAX_BINDING_DEPTH = 16;
const MAX_CHUNK_BYTES = 1 << 20;
const MAX_PATTERN_LENGTH = 64;
const MAX_TRUNCATE_BYTES = 1 << 20;
const MAX_STALL_MS = 600_000;

export type ChunkPlan =
  | { readonly mode: "frame" }
  | { readonly mode: "whole" }
  | { readonly mode: "sizes"; readonly sizes: readonly number[] };

/** `frame` | `whole` | `N` | `a,b,c` (cycled): ChunkPlan.parse, its refusals a usage error. */
export function parseChunkPlan(text: string): ChunkPlan {
  const stripped = text.trim();
  if (stripped === "frame" || stripped === "whole") return { mode: stripped };
  const parts = stripped.split(",");
  if (!parts.every((part) => /^[0-9]+$/.test(part))) {
    throw new ConfigurationError(`--chunks takes frame, whole, N or a,b,c: chunks: '${text}'`);
  }
  const sizes = parts.map((part) => Number(part));
  if (sizes.length > MAX_PATTERN_LENGTH) {
    throw new ConfigurationError("--chunks takes frame, whole, N or a,b,c: chunk sizes: 1 to 64 values");
  }
  if (sizes.some((size) => size < 1 || size > MAX_CHUNK_BYTES)) {
    throw new ConfigurationError(
      `--chunks takes frame, whole, N or a,b,c: chunk sizes must be 1..${MAX_CHUNK_BYTES}`,
    );
  }
  return { mode: "sizes", sizes };
}

export const FAULT_KINDS = [
  "cancel",
  "error",
  "eof-before-terminal",
  "transport-abort",
  "truncate-tail",
  "omit",
  "repeat",
  "corrupt",
  "foreign-binding",
  "stall",
  "abort-after-done",
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** The .proto's FaultKind names, by the CLI's fault names. */
const FAULT_CODES: Readonly<Record<FaultKind, string>> = {
  cancel: "CANCEL",
  error: "ERROR",
  "eof-before-terminal": "EOF_BEFORE_TERMINAL",
  "transport-abort": "TRANSPORT_ABORT",
  "truncate-tail": "TRUNCATE_TAIL",
  omit: "OMIT",
  repeat: "REPEAT",
  corrupt: "CORRUPT",
  "foreign-binding": "FOREIGN_BINDING",
  stall: "STALL",
  "abort-after-done": "ABORT_AFTER_DONE",
};

export interface Fault {
  readonly kind: FaultKind;
  readonly targetFrame: number | null;
  readonly byteCount: number | null;
  readonly stallMs: number | null;
}

export function checkFault(fault: Fault): Fault {
  if (fault.targetFrame !== null && fault.targetFrame < 1) {
    throw new ConfigurationError("invalid_request: fault target frame must be >= 1");
  }
  if (fault.byteCount !== null && !(fault.byteCount >= 1 && fault.byteCount <= MAX_TRUNCATE_BYTES)) {
    throw new ConfigurationError("invalid_request: fault byte count out of range");
  }
  if (fault.stallMs !== null && !(fault.stallMs >= 1 && fault.stallMs <= MAX_STALL_MS)) {
    throw new ConfigurationError("invalid_request: fault stall out of range");
  }
  return fault;
}

const WIRE_CODES: Readonly<Record<WireFormat, string>> = {
  lp: "LENGTH_PREFIXED",
  ndjson: "NDJSON",
  "ndjson-lab": "NDJSON_LAB",
};

/** The .proto's ReplyKind names, by kind. */
const KIND_CODES: Readonly<Record<ReplyKind, string>> = {
  grounded: "REPLY_KIND_GROUNDED",
  text: "REPLY_KIND_TEXT",
  chat: "REPLY_KIND_CHAT",
};

/** The message as @grpc/proto-loader takes it (keepCase: the .proto's field names). */
export interface OpenRequestMessage {
  case_id: string;
  binding_json: Buffer;
  wire_format: string;
  stream_id: string;
  chunk_interval_ms: number;
  whole_body: boolean;
  chunk_sizes: number[];
  fault?: { kind: string; target_frame: number; byte_count: number; stall_ms: number };
  /** uint64, as a decimal string. */
  resume_after: string;
  /** The binding's kind; left out for grounded (0, the default: the request as before kinds). */
  kind?: string;
}

export interface ReplyRequest {
  readonly caseId: string;
  readonly binding: JsonObject;
  readonly wire: WireFormat;
  readonly plan: ChunkPlan;
  readonly fault: Fault | null;
  readonly streamId: string;
  readonly chunkIntervalMs: number;
}

/** The gRPC request that asks a producer for this reply (`ReplyRequest.open_request()`); a
 * `BindingError` for a binding whose kind is no reply kind. */
export function openRequest(request: ReplyRequest): OpenRequestMessage {
  const kind = kindOf(request.binding);
  const message: OpenRequestMessage = {
    case_id: request.caseId,
    binding_json: canonicalJson(request.binding),
    wire_format: WIRE_CODES[request.wire],
    stream_id: request.streamId,
    chunk_interval_ms: request.chunkIntervalMs,
    whole_body: request.plan.mode === "whole",
    chunk_sizes: request.plan.mode === "sizes" ? [...request.plan.sizes] : [],
    resume_after: "0",
  };
  if (kind !== "grounded") message.kind = KIND_CODES[kind];
  if (request.fault !== null) {
    message.fault = {
      kind: FAULT_CODES[request.fault.kind],
      target_frame: request.fault.targetFrame ?? 0,
      byte_count: request.fault.byteCount ?? 0,
      stall_ms: request.fault.stallMs ?? 0,
    };
  }
  return message;
}

/** Arrays and objects nested in `value`, counting `value` itself (shared.digest.within_depth). */
function depthOf(value: JsonValue): number {
  let deepest = 0;
  const pending: Array<[JsonValue, number]> = [[value, 1]];
  while (pending.length > 0) {
    const [item, depth] = pending.pop() as [JsonValue, number];
    if (Array.isArray(item)) {
      deepest = Math.max(deepest, depth);
      for (const child of item) pending.push([child, depth + 1]);
    } else if (isObject(item)) {
      deepest = Math.max(deepest, depth);
      for (const child of item.values()) pending.push([child, depth + 1]);
    }
  }
  return deepest;
}

/** The binding in `path`: UTF-8, bounded strict JSON (64 KiB, 16 levels), an object. */
export function loadBinding(path: string): JsonObject {
  let raw: Buffer;
  try {
    raw = readFileSync(path);
  } catch (error) {
    throw new ConfigurationError(`cannot read the binding ${path}: ${(error as Error).message}`);
  }
  const text = decodeUtf8(raw);
  if (text === null) throw new ConfigurationError(`cannot read the binding ${path}: not UTF-8`);
  if (Buffer.byteLength(text, "utf8") > MAX_BINDING_BYTES) {
    throw new ConfigurationError(`cannot read the binding ${path}: over ${MAX_BINDING_BYTES} bytes`);
  }
  let value: JsonValue;
  try {
    value = parseJson(text, STRICT);
  } catch (error) {
    const why = error instanceof JsonError ? error.message : String(error);
    throw new ConfigurationError(`cannot read the binding ${path}: ${why}`);
  }
  if (depthOf(value) > MAX_BINDING_DEPTH) {
    throw new ConfigurationError(`cannot read the binding ${path}: nested deeper than ${MAX_BINDING_DEPTH}`);
  }
  if (!isObject(value)) throw new ConfigurationError(`the binding ${path} is not a JSON object`);
  return value;
}
