/**
 * The kinds of reply (docs/protocol.md#kinds; shared/kinds.py): each with its binding and
 * its reply. A binding names its kind in a `kind` key; one without it is `grounded` (the
 * lab's six-key binding, byte for byte). The request names the kind too (`OpenRequest.kind`).
 */

import { digest } from "./digest";
import { dumpJson, type JsonObject, type JsonValue } from "./json";
import { BindingError } from "./reply";

/** `grounded`: a JSON answer citing the bound passages; `text`: free text, the empty text
 * included; `chat`: a model turn (text, tool calls, thoughts, signatures, usage, finish). */
export type ReplyKind = "grounded" | "text" | "chat";

/** The binding's key that names a kind other than `grounded`. */
export const KIND_KEY = "kind";

/**
 * The kind a binding names (`grounded` when it names none, as a `null` does); a
 * `BindingError` (a binding the core cannot use) for a `kind` that is no kind, or that
 * names `grounded` (whose binding has no key).
 */
export function kindOf(binding: JsonObject): ReplyKind {
  const named = binding.get(KIND_KEY) ?? null;
  if (named === null) return "grounded";
  if (named === "text" || named === "chat") return named;
  throw new BindingError(`the binding's kind is no reply kind: ${dumpJson(named)}`);
}

/** The development text source's case ids: `text-` and 16 hex digits of `request_sha256`. */
export const TEXT_PREFIX = "text-";
/** The longest text the development source echoes, in code points (shared/texts.py). */
export const MAX_ECHO_CHARS = 16_384;

/**
 * The text binding that asks for `text` (docs/protocol.md#text-binding; shared/texts.py's
 * `build_text_binding`): the development text source streams it back, a model answers it.
 */
export function buildTextBinding(text: string): JsonObject {
  const messages: JsonValue[] = [["human", text]];
  const requestSha256 = digest(messages);
  return new Map<string, JsonValue>([
    [KIND_KEY, "text"],
    ["case_id", TEXT_PREFIX + requestSha256.slice(0, 16)],
    ["request_sha256", requestSha256],
    ["messages", messages],
  ]);
}
