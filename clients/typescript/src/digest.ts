/** Canonical JSON and its SHA-256 (shared/digest.py): the binding hash. */

import { createHash } from "node:crypto";
import { dumpJson, type JsonValue } from "./json";
import { isWellFormed } from "./utf8";

/** Whether every string (and key) in `value` is encodable as UTF-8 (no lone surrogate). */
export function encodable(value: JsonValue): boolean {
  if (typeof value === "string") return isWellFormed(value);
  if (Array.isArray(value)) return value.every(encodable);
  if (value instanceof Map) {
    for (const [key, item] of value) if (!isWellFormed(key) || !encodable(item)) return false;
  }
  return true;
}

/** The lab's canonical form: sorted keys (code point order), compact, UTF-8, no ASCII
 * escaping; Python's `json.dumps(value, sort_keys=True, separators=(",", ":"),
 * ensure_ascii=False).encode("utf-8")`. Throws where Python's would (a lone surrogate). */
export function canonicalJson(value: JsonValue): Buffer {
  if (!encodable(value)) throw new Error("the value holds a lone surrogate: not UTF-8");
  return Buffer.from(dumpJson(value, { sortKeys: true }), "utf8");
}

export function sha256Hex(data: Uint8Array): string {
  return createHash("sha256").update(data).digest("hex");
}

/** SHA-256 hex of the canonical JSON of `value` (the lab's `digest`). */
export function digest(value: JsonValue): string {
  return sha256Hex(canonicalJson(value));
}
