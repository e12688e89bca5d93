/**
 * Exact numbers where ajv sees approximate ones (docs/protocol.md#chat-reply: a call's
 * arguments valid against its tool's parameters by JSON Schema 2020-12, whose numbers are
 * mathematical values). ajv reads JavaScript numbers: an integer past 2^53 reaches it
 * rounded, and a token that reads as infinity (`1e400`) is an integer to it. When the
 * arguments or the parameters hold such a number, the numeric keywords (`minimum`,
 * `maximum`, `enum`, and `type` for infinity) are judged here on the exact values instead,
 * and ajv's other findings stand.
 *
 * The parameters use only the keywords docs/protocol.md#chat-binding allows (no
 * combinators, no `$ref`, `items` one schema, `additionalProperties` a boolean), so each
 * value of the arguments is judged by at most one schema, which this walk finds.
 */

import type { ErrorObject } from "ajv/dist/2020";
import { isObject, type JsonValue } from "./json";

const SAFE = BigInt(Number.MAX_SAFE_INTEGER);
/** The keywords judged here in the exact case. */
const NUMERIC_KEYWORDS: ReadonlySet<string> = new Set(["minimum", "maximum", "enum"]);

/** Whether `value` holds a number ajv cannot see exactly: an integer past 2^53, or infinity. */
export function inexact(value: JsonValue | undefined): boolean {
  if (typeof value === "bigint") return value > SAFE || value < -SAFE;
  if (typeof value === "number") return !Number.isFinite(value);
  if (Array.isArray(value)) return value.some(inexact);
  if (isObject(value)) return [...value.values()].some(inexact);
  return false;
}

const isNumber = (value: JsonValue | undefined): value is number | bigint =>
  typeof value === "number" || typeof value === "bigint";

/** JSON Schema's equality (Python jsonschema's `equal`): numbers by value (`1` is `1.0`,
 * exactly, whatever their size), booleans never numbers, arrays in order, objects by keys. */
export function jsonEqual(a: JsonValue | undefined, b: JsonValue | undefined): boolean {
  if (isNumber(a) && isNumber(b)) return a == b; // mixed bigint / number: exact in JavaScript
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((item, index) => jsonEqual(item, b[index]));
  }
  if (isObject(a) && isObject(b)) {
    if (a.size !== b.size) return false;
    for (const [key, item] of a) if (!b.has(key) || !jsonEqual(item, b.get(key))) return false;
    return true;
  }
  return a === b;
}

/** The numeric keywords of one schema on one value, exactly; then the values it holds. */
function walk(schema: JsonValue | undefined, value: JsonValue): boolean {
  if (!isObject(schema)) return true;
  const enumerated = schema.get("enum");
  if (Array.isArray(enumerated) && !enumerated.some((item) => jsonEqual(item, value))) return false;
  if (isNumber(value)) {
    const minimum = schema.get("minimum");
    const maximum = schema.get("maximum");
    if (isNumber(minimum) && value < minimum) return false;
    if (isNumber(maximum) && value > maximum) return false;
    if (typeof value === "number" && !Number.isFinite(value)) {
      // Infinity is a number, never an integer.
      const type = schema.get("type");
      const types = Array.isArray(type) ? type : type === undefined ? ["number"] : [type];
      if (!types.includes("number")) return false;
    }
  }
  if (isObject(value)) {
    const properties = schema.get("properties");
    if (isObject(properties)) {
      for (const [key, item] of value) {
        if (properties.has(key) && !walk(properties.get(key), item)) return false;
      }
    }
  }
  if (Array.isArray(value)) {
    const items = schema.get("items");
    if (!value.every((item) => walk(items, item))) return false;
  }
  return true;
}

/**
 * The exact verdict, given ajv's errors over the approximate values (found with
 * `allErrors`): any error of another keyword stands; the numeric keywords are the walk's.
 */
export function exactlyValid(
  parameters: JsonValue,
  value: JsonValue,
  errors: readonly ErrorObject[] | null | undefined,
): boolean {
  const others = (errors ?? []).filter((error) => !NUMERIC_KEYWORDS.has(error.keyword));
  return others.length === 0 && walk(parameters, value);
}
