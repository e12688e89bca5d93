/**
 * A chat reply's validation and its documents (docs/protocol.md#chat-reply,
 * #result-document): after a done and a clean end, the turn is judged in the document's
 * order — a finish arrived, then each call in `index` order: its arguments strict JSON and
 * an object, its name declared by the binding's `request.tools`, its arguments valid
 * against that tool's `parameters` by JSON Schema 2020-12 (ajv) — and the result's chat
 * keys are written from the turn: `turn` (raw arguments), `accepted_answer` (parsed
 * arguments), `call`, `notes`.
 */

import { encodable } from "./digest";
import Ajv2020, { type ValidateFunction } from "ajv/dist/2020";
import type { ChatTurn, Signature, ToolCall } from "./chat";
import { dumpJson, isObject, JsonError, parseJson, type JsonObject, type JsonValue } from "./json";
import { ProtocolFailure } from "./reasons";
import { BindingError } from "./reply";
import { exactlyValid, inexact } from "./schema-numbers";

/** The note on a usage whose reported total is not the sum of its parts. */
export const USAGE_TOTAL_MISMATCH = "usage_total_mismatch";

/** A refusal that names the call refused (`call` in the result). */
export class CallFailure extends ProtocolFailure {
  constructor(
    reason: string,
    readonly call: JsonObject,
    detail = "",
  ) {
    super(reason, detail);
    this.name = "CallFailure";
  }
}

/** JSON Schema 2020-12, as the document asks: no strict mode (a schema the binding's own
 * schema allows is not this library's to refuse), lengths in code points (ajv's default),
 * every error found (src/schema-numbers.ts sets the numeric ones aside where ajv's numbers
 * are not the exact ones). */
function newAjv(): Ajv2020 {
  return new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
}

/** A declared tool: its parameters and their compiled validator. */
export interface Tool {
  readonly parameters: JsonValue;
  readonly validate: ValidateFunction;
}

let ajv = newAjv();
/** Compiled parameters by their canonical JSON, so a schema is compiled once per process. */
const compiled = new Map<string, ValidateFunction>();
const MAX_COMPILED = 512;

/** A plain JavaScript value for ajv: objects with own properties (`__proto__` a key like
 * any other), integers as numbers (exact up to 2^53). */
function plain(value: JsonValue): unknown {
  if (typeof value === "bigint") return Number(value);
  if (Array.isArray(value)) return value.map(plain);
  if (value instanceof Map) {
    const object: Record<string, unknown> = {};
    for (const [key, item] of value) {
      Object.defineProperty(object, key, {
        value: plain(item),
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    return object;
  }
  return value;
}

function validatorOf(parameters: JsonValue): ValidateFunction {
  const key = dumpJson(parameters, { sortKeys: true });
  const known = compiled.get(key);
  if (known !== undefined) return known;
  if (compiled.size >= MAX_COMPILED) {
    compiled.clear();
    ajv = newAjv();
  }
  let validate: ValidateFunction;
  try {
    validate = ajv.compile(plain(parameters) as object);
  } catch (error) {
    throw new BindingError(`a tool's parameters are not a JSON Schema: ${(error as Error).message}`);
  }
  compiled.set(key, validate);
  return validate;
}

/**
 * The binding's declared tools, name -> its parameters' validator, compiled when the
 * consumer is made; a `BindingError` for a binding the core cannot use (no `request.tools`,
 * a tool without a name, parameters no validator compiles).
 */
export function declaredTools(binding: JsonObject): Map<string, Tool> {
  const request = binding.get("request");
  const tools = isObject(request) ? request.get("tools") : undefined;
  if (!Array.isArray(tools)) throw new BindingError("the chat binding has no request.tools list");
  const declared = new Map<string, Tool>();
  for (const tool of tools) {
    const name = isObject(tool) ? tool.get("name") : undefined;
    const parameters = isObject(tool) ? tool.get("parameters") : undefined;
    if (typeof name !== "string" || parameters === undefined) {
      throw new BindingError("a declared tool without a name or parameters");
    }
    declared.set(name, { parameters, validate: validatorOf(parameters) });
  }
  return declared;
}

function callObject(call: ToolCall): JsonObject {
  return new Map<string, JsonValue>([
    ["index", BigInt(call.index)],
    ["id", call.id],
    ["name", call.name],
  ]);
}

/**
 * Validate the assembled turn (docs/protocol.md#chat-reply), in order; the accepted
 * answer, or `ProtocolFailure` (`chat_finish_missing`) / `CallFailure` (the three call
 * reasons, naming the call).
 */
export function validateTurn(
  turn: ChatTurn,
  tools: ReadonlyMap<string, Tool>,
  maxDepth: number,
): JsonObject {
  if (turn.finishReason === null) throw new ProtocolFailure("chat_finish_missing");
  const parsed: JsonValue[] = [];
  for (const call of turn.calls) {
    let value: JsonValue;
    try {
      value = parseJson(call.arguments, { duplicateKeys: "refuse", constants: false, maxDepth });
    } catch (error) {
      if (!(error instanceof JsonError)) throw error;
      throw new CallFailure("tool_call_malformed", callObject(call), error.message);
    }
    if (!isObject(value)) throw new CallFailure("tool_call_malformed", callObject(call), "not an object");
    // An object with no canonical form (an escaped lone surrogate, a number that reads as
    // infinity) cannot be written as the accepted turn's UTF-8 JSON: malformed too.
    if (!canonical(value)) throw new CallFailure("tool_call_malformed", callObject(call), "no canonical form");
    const tool = tools.get(call.name);
    if (tool === undefined) throw new CallFailure("tool_call_undeclared", callObject(call));
    const { parameters, validate } = tool;
    const valid = validate(plain(value));
    if (inexact(value) || inexact(parameters) ? !exactlyValid(parameters, value, validate.errors) : !valid) {
      throw new CallFailure("tool_call_arguments_invalid", callObject(call), ajv.errorsText(validate.errors));
    }
    parsed.push(value);
  }
  return turnDocument(turn, parsed);
}

function signatureObject(signature: Signature): JsonObject {
  const where: [string, JsonValue] =
    signature.part === "tool_call"
      ? ["index", BigInt(signature.index ?? 0)]
      : ["at", BigInt(signature.at ?? 0)];
  return new Map<string, JsonValue>([["part", signature.part], where, ["value", signature.value]]);
}

/**
 * The turn as a document: the result's `turn` (each call's arguments the raw text, as it
 * came) or, with `parsed` (each call's arguments as it parses), the `accepted_answer`.
 */
export function turnDocument(turn: ChatTurn, parsed: readonly JsonValue[] | null = null): JsonObject {
  const calls = turn.calls.map((call, position) => {
    const document = callObject(call);
    document.set("arguments", parsed === null ? call.arguments : (parsed[position] ?? null));
    return document;
  });
  return new Map<string, JsonValue>([
    ["text", turn.text],
    ["thoughts", turn.thoughts],
    ["tool_calls", calls],
    ["signatures", turn.signatures.map(signatureObject)],
    ["usage", turn.usage === null ? null : new Map(turn.usage)],
    ["finish_reason", turn.finishReason],
  ]);
}

/** The notes on the turn, in the document's order, each at most once. */
export function notesOf(turn: ChatTurn): string[] {
  const usage = turn.usage;
  if (usage === null) return [];
  const count = (name: string): bigint => usage.get(name) as bigint;
  const parts =
    count("prompt_tokens") +
    count("completion_tokens") +
    count("thoughts_tokens") +
    count("tool_use_prompt_tokens");
  return parts === count("total_tokens") ? [] : [USAGE_TOTAL_MISMATCH];
}

/** Whether `value` has a canonical JSON form (docs/protocol.md#canonical-json): no lone
 * surrogate in a string or a name, no number that reads as infinity. */
function canonical(value: JsonValue): boolean {
  if (typeof value === "number") return Number.isFinite(value);
  if (Array.isArray(value)) return value.every(canonical);
  if (value instanceof Map) {
    for (const item of value.values()) if (!canonical(item)) return false;
  }
  return encodable(value);
}
