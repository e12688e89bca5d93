/**
 * Final reply validation (shared/reply.py, the lab's `validate_reply`), check for check.
 * Runs only after a done terminal and a clean end of input. Citations come from the bound
 * context alone, never from anything the model wrote.
 */

import { isObject, type JsonObject, type JsonValue, JsonError, parseJson } from "./json";
import { ProtocolFailure } from "./reasons";
import { hasNonSpace } from "./pytext";
import { isWellFormed } from "./utf8";

const REPLY_KEYS = ["status", "answer", "source_ids"];
const REPLY_STATUSES = ["answered", "not_in_docs"];

/** A binding the core cannot use: one whose `selected_context` is not rows of objects (the
 * reference raises an unexpected error there, KeyError / TypeError, not a verdict), or whose
 * `kind` is no reply kind (src/kinds.ts). */
export class BindingError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "BindingError";
  }
}

export interface ValidatedReply {
  readonly answer: JsonObject;
  readonly citations: JsonObject[];
}

/** The bound context's rows by source id (the last of equal ids wins, as a dict does). */
function contextRows(binding: JsonObject): Map<string, JsonObject> {
  const rows = binding.get("selected_context");
  if (rows === undefined) throw new BindingError("the binding has no selected_context");
  if (!Array.isArray(rows)) throw new BindingError("selected_context is not a list");
  const known = new Map<string, JsonObject>();
  for (const row of rows) {
    if (!isObject(row) || !row.has("source_id")) {
      throw new BindingError("a selected_context row has no source_id");
    }
    const key = row.get("source_id");
    // Only a string id can match a reply's (which are strings); others are kept out.
    if (typeof key === "string") known.set(key, row);
  }
  return known;
}

function field(row: JsonObject, key: string): JsonValue {
  const value = row.get(key);
  if (value === undefined) throw new BindingError(`a cited context row has no ${key}`);
  return value;
}

export function validateReply(content: string, binding: JsonObject, maxDepth: number): ValidatedReply {
  let reply: JsonValue;
  try {
    reply = parseJson(content, { duplicateKeys: "refuse", constants: false, maxDepth });
  } catch (error) {
    if (error instanceof JsonError) throw new ProtocolFailure("invalid_answer_json", error.message);
    throw error;
  }
  if (!isObject(reply) || reply.size !== REPLY_KEYS.length || !REPLY_KEYS.every((k) => reply.has(k))) {
    throw new ProtocolFailure("invalid_answer_schema", "reply keys");
  }
  const status = reply.get("status");
  const answer = reply.get("answer");
  if (
    typeof status !== "string" ||
    !REPLY_STATUSES.includes(status) ||
    typeof answer !== "string" ||
    !hasNonSpace(answer)
  ) {
    throw new ProtocolFailure("invalid_answer_schema", "status or answer");
  }
  if (!isWellFormed(answer)) throw new ProtocolFailure("invalid_answer_schema", "answer is not UTF-8");
  const ids = reply.get("source_ids");
  if (
    !Array.isArray(ids) ||
    ids.some((key) => typeof key !== "string" || key === "") ||
    new Set(ids).size !== ids.length
  ) {
    throw new ProtocolFailure("invalid_answer_schema", "source_ids");
  }
  const keys = ids as string[];
  const known = contextRows(binding);
  if (keys.some((key) => !known.has(key))) {
    throw new ProtocolFailure("unknown_context_citation", "source id outside the context");
  }
  if ((status === "answered" && keys.length === 0) || (status === "not_in_docs" && keys.length > 0)) {
    throw new ProtocolFailure("status_citation_mismatch", status);
  }
  const citations = keys.map((key) => {
    const row = known.get(key) as JsonObject;
    return new Map<string, JsonValue>([
      ["source_id", key],
      ["chunk_id", field(row, "chunk_id")],
      ["url", field(row, "url")],
    ]);
  });
  return { answer: reply, citations };
}
