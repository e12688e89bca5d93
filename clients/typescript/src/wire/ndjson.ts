/**
 * The NDJSON wires: one compact JSON object per `\n`-terminated line (shared/wire/ndjson.py).
 *
 * `ndjson-lab` is the lab's wire: done is `{"sequence","kind","binding_sha256"}` and nothing
 * else. `ndjson` adds done's claim, `content_sha256` (a string) and `content_frames` (an
 * int), both required.
 *
 * Decoding, check for check:
 * - every fragment goes through the incremental UTF-8 check first, so an invalid byte fails
 *   the whole fragment (`invalid_utf8`) before any line of it is interpreted;
 * - a complete line longer than the frame limit (its `\n` not counted) is
 *   `frame_byte_limit`, found when it is taken; the unfinished remainder fails as soon as it
 *   is over the limit by more than the bytes of a character still pending (the lab counts
 *   decoded characters' bytes), checked only when no complete line is left;
 * - at the end: a character begun and unfinished is `truncated_utf8`, then bytes after the
 *   last newline are `truncated_frame`.
 *
 * A line is strict JSON (duplicate keys and NaN / Infinity refused, nesting bounded):
 * `invalid_frame_json`; not an object, a kind that is not one of the wire's (the nine on
 * `ndjson`, with the five chat frames; the lab's four on `ndjson-lab`), or keys other than
 * the kind's exactly: `invalid_frame_schema`. A chat frame's values are left to the core.
 */

import {
  CHAT_FIELDS,
  checkedDoneDigest,
  FRAME_KINDS,
  isChatKind,
  LAB_FRAME_KINDS,
  type DoneDigest,
  type Frame,
  type FrameKind,
} from "../frames";
import { type JsonObject, type JsonValue, isObject, JsonError, parseJson } from "../json";
import { ProtocolFailure } from "../reasons";
import { decodeUtf8, Utf8Stream } from "../utf8";
import type { FrameDecoder, WireCodec, WireFormat } from "./base";
import { ReceiveBuffer } from "./buffer";

const CONTENT_KEYS = ["sequence", "kind", "binding_sha256", "text"];
const LAB_DONE_KEYS = ["sequence", "kind", "binding_sha256"];
const DONE_KEYS = [...LAB_DONE_KEYS, "content_sha256", "content_frames"];
const STOP_KEYS = ["sequence", "kind", "binding_sha256", "reason"];

function expectedKeys(kind: FrameKind, digest: boolean): readonly string[] {
  if (kind === "content_delta") return CONTENT_KEYS;
  if (kind === "done") return digest ? DONE_KEYS : LAB_DONE_KEYS;
  if (isChatKind(kind)) return [...LAB_DONE_KEYS, ...CHAT_FIELDS[kind]];
  return STOP_KEYS;
}

/** The frame's kind when it is one of the wire's: the nine on `ndjson`, the lab's four on
 * `ndjson-lab` (docs/protocol.md#wire-ndjson). */
function frameKind(value: JsonValue | undefined, lab: boolean): FrameKind | null {
  const kinds = lab ? LAB_FRAME_KINDS : FRAME_KINDS;
  return typeof value === "string" && (kinds as readonly string[]).includes(value)
    ? (value as FrameKind)
    : null;
}

function hasExactly(object: JsonObject, keys: readonly string[]): boolean {
  return object.size === keys.length && keys.every((key) => object.has(key));
}

export class NdjsonParser {
  constructor(
    private readonly digest: boolean,
    private readonly maxDepth: number,
  ) {}

  parseFrame(payload: Buffer): Frame {
    const text = decodeUtf8(payload);
    if (text === null) throw new ProtocolFailure("invalid_frame_json", "not UTF-8");
    let object: JsonValue;
    try {
      object = parseJson(text, {
        duplicateKeys: "refuse",
        constants: false,
        maxDepth: this.maxDepth,
      });
    } catch (error) {
      if (error instanceof JsonError) throw new ProtocolFailure("invalid_frame_json", error.message);
      throw error;
    }
    if (!isObject(object)) throw new ProtocolFailure("invalid_frame_schema", "frame is not an object");
    const kind = frameKind(object.get("kind"), !this.digest);
    if (kind === null || !hasExactly(object, expectedKeys(kind, this.digest))) {
      throw new ProtocolFailure("invalid_frame_schema", "unexpected kind or keys");
    }
    const sequence = object.get("sequence") ?? null;
    const bindingSha256 = object.get("binding_sha256") ?? null;
    if (kind === "content_delta") {
      return { sequence, kind, bindingSha256, text: object.get("text") ?? null };
    }
    if (isChatKind(kind)) {
      const part = new Map(CHAT_FIELDS[kind].map((name) => [name, object.get(name) ?? null]));
      return { sequence, kind, bindingSha256, part };
    }
    if (kind !== "done") return { sequence, kind, bindingSha256, reason: object.get("reason") ?? null };
    let doneDigest: DoneDigest | null = null;
    if (this.digest) {
      doneDigest = checkedDoneDigest(object.get("content_sha256") ?? null, object.get("content_frames") ?? null);
    }
    return { sequence, kind, bindingSha256, doneDigest };
  }
}

export class NdjsonDecoder implements FrameDecoder {
  private readonly utf8 = new Utf8Stream();
  private readonly buffer = new ReceiveBuffer();

  constructor(private readonly maxFrameBytes: number) {}

  get pending(): number {
    return this.buffer.length;
  }

  receiveData(data: Uint8Array): void {
    if (!this.utf8.feed(data)) throw new ProtocolFailure("invalid_utf8", "not UTF-8");
    this.buffer.append(data);
  }

  nextEvent(): Buffer | null {
    const line = this.buffer.popLine();
    if (line === null) {
      const unfinished = this.buffer.length;
      if (unfinished > this.maxFrameBytes && unfinished - this.utf8.pending > this.maxFrameBytes) {
        throw new ProtocolFailure("frame_byte_limit", "unterminated line over the limit");
      }
      return null;
    }
    if (line.length > this.maxFrameBytes) {
      throw new ProtocolFailure("frame_byte_limit", `line of ${line.length} bytes`);
    }
    return line;
  }

  endOfInput(): void {
    if (!this.utf8.clean) throw new ProtocolFailure("truncated_utf8", "unfinished character");
    if (this.buffer.length) {
      throw new ProtocolFailure(
        "truncated_frame",
        `${this.buffer.length} bytes after the last newline`,
      );
    }
  }
}

export function ndjsonCodec(wire: WireFormat, maxDepth: number): WireCodec {
  if (wire === "lp") throw new Error("not an NDJSON wire: lp");
  const parser = new NdjsonParser(wire === "ndjson", maxDepth);
  return {
    wire,
    decoder: (maxFrameBytes: number) => new NdjsonDecoder(maxFrameBytes),
    parseFrame: (payload: Buffer) => parser.parseFrame(payload),
  };
}
