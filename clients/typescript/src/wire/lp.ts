/**
 * The length-prefixed wire: `flag (1 byte, 0) | length (4 bytes, big-endian) | Frame`
 * (shared/wire/lp.py).
 *
 * The decoder checks the header the moment its five bytes are in: a flag other than 0 is
 * `invalid_frame_header`, a declared length over the frame limit `frame_byte_limit`, before
 * a body byte is awaited.
 *
 * A payload is judged as the reference judges it. The reference parses with the protobuf
 * runtime (upb) and falls back to its schema-aware scanner whenever that parse is not
 * exactly the payload; the scanner's verdict is then the reason. A payload that upb parses
 * exactly is one the scanner accepts too, so here the scanner alone decides, walking the
 * payload once and keeping the values, plus the one thing upb refuses that the scanner
 * lets through: a tag or a length written in more than five bytes (a non-canonical varint
 * upb reads only up to five bytes for those) is `invalid_frame_payload` once the scan is
 * clean. The scanner's order of checks is the reference's:
 *
 * - per field: the tag varint (truncated, over 64 bits or over 10 bytes:
 *   `invalid_frame_payload`); field number 0 or wire type 6/7: `invalid_frame_payload`;
 *   a number the schema lacks: `unknown_frame_field`; a field seen before in this message,
 *   or a second kind at the top: `invalid_frame_schema`; then the wire type
 *   (`invalid_frame_payload`), the value, a length past the end (`invalid_frame_payload`),
 *   a string that is not UTF-8 (`invalid_utf8`), a nested message (scanned first, depth
 *   first);
 * - after a clean scan: no kind is `missing_frame_kind`.
 *
 * The chat frames (fields 7-11: ToolCall, Thought, Signature, Usage, Finish) are fields of
 * a chat reply's `Frame` only; in a grounded or text reply they are fields the message does
 * not have (`unknown_frame_field`), as `replywire/1` always judged them.
 */

import {
  CHAT_FIELDS,
  CHAT_INTEGER_FIELDS,
  checkedDoneDigest,
  isChatKind,
  type ChatKind,
  type Frame,
  type FrameKind,
} from "../frames";
import type { JsonValue } from "../json";
import { ProtocolFailure } from "../reasons";
import { decodeUtf8 } from "../utf8";
import type { FrameDecoder, WireCodec } from "./base";
import { ReceiveBuffer } from "./buffer";

export const HEADER_BYTES = 5;

const enum Field {
  Varint,
  String,
  Message,
}

interface FieldSpec {
  readonly type: Field;
  readonly nested?: Schema;
}
type Schema = ReadonlyMap<number, FieldSpec>;

const STOP: Schema = new Map([[1, { type: Field.String }]]);
const CONTENT_DELTA: Schema = new Map([[1, { type: Field.String }]]);
const DONE: Schema = new Map([
  [1, { type: Field.String }],
  [2, { type: Field.Varint }],
]);
/** A chat frame's message (docs/protocol.md#wire-lp): its fields numbered 1..n in
 * CHAT_FIELDS' order, the integers `uint64`, the rest `string`. */
function chatSchema(kind: ChatKind): Schema {
  return new Map(
    CHAT_FIELDS[kind].map((name, index): [number, FieldSpec] => [
      index + 1,
      { type: CHAT_INTEGER_FIELDS.has(name) ? Field.Varint : Field.String },
    ]),
  );
}
/** `Frame` as a reply of kind grounded or text has it: fields 1-6, `replywire/1`'s walk
 * unchanged (docs/protocol.md#lp-payload: 7-11 are fields it does not have). */
const FRAME: Schema = new Map<number, FieldSpec>([
  [1, { type: Field.Varint }],
  [2, { type: Field.String }],
  [3, { type: Field.Message, nested: CONTENT_DELTA }],
  [4, { type: Field.Message, nested: DONE }],
  [5, { type: Field.Message, nested: STOP }],
  [6, { type: Field.Message, nested: STOP }],
]);
/** `Frame` as a chat reply has it: the five chat frames too, fields 7-11. */
const CHAT_FRAME: Schema = new Map<number, FieldSpec>([
  ...FRAME,
  [7, { type: Field.Message, nested: chatSchema("tool_call") }],
  [8, { type: Field.Message, nested: chatSchema("thought") }],
  [9, { type: Field.Message, nested: chatSchema("signature") }],
  [10, { type: Field.Message, nested: chatSchema("usage") }],
  [11, { type: Field.Message, nested: chatSchema("finish") }],
]);
const KIND_OF: ReadonlyMap<number, FrameKind> = new Map([
  [3, "content_delta"],
  [4, "done"],
  [5, "error"],
  [6, "cancel"],
  [7, "tool_call"],
  [8, "thought"],
  [9, "signature"],
  [10, "usage"],
  [11, "finish"],
]);
/** The highest field number of any message here: a larger one is unknown wherever it is. */
const MAX_FIELD_NUMBER = 11n;

const WIRE_VARINT = 0;
const WIRE_LEN = 2;
const TWO_64 = 1n << 64n;
/** upb reads a tag or a length in at most this many bytes. */
const UPB_MAX_PREFIX_BYTES = 5;

function payloadFailure(detail: string): ProtocolFailure {
  return new ProtocolFailure("invalid_frame_payload", detail);
}

interface Varint {
  readonly value: bigint;
  readonly next: number;
  readonly bytes: number;
}

function readVarint(data: Uint8Array, offset: number, end: number): Varint {
  let value = 0n;
  for (let index = 0; index < 10; index++) {
    if (offset >= end) throw payloadFailure("truncated varint");
    const byte = data[offset] ?? 0;
    offset++;
    value |= BigInt(byte & 0x7f) << BigInt(7 * index);
    if (!(byte & 0x80)) {
      if (value >= TWO_64) throw payloadFailure("varint over 64 bits");
      return { value, next: offset, bytes: index + 1 };
    }
  }
  throw payloadFailure("varint longer than 10 bytes");
}

/** The values a clean scan found (a message's fields by number; a nested one scanned). */
type Values = Map<number, bigint | string | Values>;

class Scan {
  /** A tag or a length longer than upb reads: refused after a clean scan. */
  longPrefix = false;

  constructor(private readonly data: Uint8Array) {}

  message(offset: number, end: number, schema: Schema, top: boolean): Values {
    const seen: Values = new Map();
    let kinds = 0;
    while (offset < end) {
      const tag = readVarint(this.data, offset, end);
      offset = tag.next;
      if (tag.bytes > UPB_MAX_PREFIX_BYTES) this.longPrefix = true;
      const numberBig = tag.value >> 3n;
      const wireType = Number(tag.value & 7n);
      if (numberBig === 0n || wireType === 6 || wireType === 7) {
        throw payloadFailure(`invalid tag ${tag.value}`);
      }
      const number = numberBig <= MAX_FIELD_NUMBER ? Number(numberBig) : -1;
      const spec = schema.get(number);
      if (spec === undefined) throw new ProtocolFailure("unknown_frame_field", `field ${numberBig}`);
      if (seen.has(number)) {
        throw new ProtocolFailure("invalid_frame_schema", `field ${number} repeated`);
      }
      const isKind = top && KIND_OF.has(number);
      if (isKind && kinds > 0) throw new ProtocolFailure("invalid_frame_schema", "more than one kind");
      if (isKind) kinds++;
      if (spec.type === Field.Varint) {
        if (wireType !== WIRE_VARINT) throw payloadFailure(`field ${number} wire type`);
        const value = readVarint(this.data, offset, end);
        offset = value.next;
        seen.set(number, value.value);
        continue;
      }
      if (wireType !== WIRE_LEN) throw payloadFailure(`field ${number} wire type`);
      const length = readVarint(this.data, offset, end);
      offset = length.next;
      if (length.bytes > UPB_MAX_PREFIX_BYTES) this.longPrefix = true;
      if (length.value > BigInt(end - offset)) throw payloadFailure(`field ${number} overruns`);
      const stop = offset + Number(length.value);
      if (spec.type === Field.String) {
        const text = decodeUtf8(this.data.subarray(offset, stop));
        if (text === null) throw new ProtocolFailure("invalid_utf8", `field ${number}`);
        seen.set(number, text);
      } else {
        seen.set(number, this.message(offset, stop, spec.nested ?? new Map(), false));
      }
      offset = stop;
    }
    return seen;
  }
}

function stringField(values: Values, number: number): string {
  const value = values.get(number);
  return typeof value === "string" ? value : "";
}

function varintField(values: Values, number: number): bigint {
  const value = values.get(number);
  return typeof value === "bigint" ? value : 0n;
}

function nestedField(values: Values, number: number): Values | null {
  const value = values.get(number);
  return value instanceof Map ? value : null;
}

/** A chat frame's fields by name, an absent one its proto3 default (`""` or 0). */
function chatPart(kind: ChatKind, values: Values): Map<string, JsonValue> {
  return new Map(
    CHAT_FIELDS[kind].map((name, index): [string, JsonValue] => [
      name,
      CHAT_INTEGER_FIELDS.has(name) ? varintField(values, index + 1) : stringField(values, index + 1),
    ]),
  );
}

/** One payload, judged as the reference judges it (see the module's comment), with the
 * chat frames' fields in a chat reply (`chat`) only. */
export function parseFrame(payload: Uint8Array, chat = false): Frame {
  const scan = new Scan(payload);
  const values = scan.message(0, payload.length, chat ? CHAT_FRAME : FRAME, true);
  if (scan.longPrefix) {
    throw payloadFailure("Error parsing message with type 'replywire.v1.Frame'");
  }
  const sequence = varintField(values, 1);
  const bindingSha256 = stringField(values, 2);
  for (const [number, kind] of KIND_OF) {
    const nested = nestedField(values, number);
    if (nested === null) continue;
    if (kind === "content_delta") {
      return { sequence, kind, bindingSha256, text: stringField(nested, 1) };
    }
    if (isChatKind(kind)) return { sequence, kind, bindingSha256, part: chatPart(kind, nested) };
    if (kind === "done") {
      // proto3 cannot tell an absent digest from an empty one: both are refused.
      const doneDigest = checkedDoneDigest(stringField(nested, 1), varintField(nested, 2));
      return { sequence, kind, bindingSha256, doneDigest };
    }
    return { sequence, kind, bindingSha256, reason: stringField(nested, 1) };
  }
  throw new ProtocolFailure("missing_frame_kind", `sequence ${sequence}`);
}

export class LengthPrefixedDecoder implements FrameDecoder {
  private readonly buffer = new ReceiveBuffer();
  /** Where the frame whose header was checked ends (0: no header yet). */
  private end = 0;

  constructor(private readonly maxFrameBytes: number) {}

  get pending(): number {
    return this.buffer.length;
  }

  receiveData(data: Uint8Array): void {
    this.buffer.append(data);
  }

  nextEvent(): Buffer | null {
    const buffer = this.buffer;
    if (this.end === 0) {
      if (buffer.length < HEADER_BYTES) return null;
      const flag = buffer.at(0);
      const length =
        ((buffer.at(1) << 24) >>> 0) + (buffer.at(2) << 16) + (buffer.at(3) << 8) + buffer.at(4);
      if (flag !== 0) throw new ProtocolFailure("invalid_frame_header", `flag byte ${flag}`);
      if (length > this.maxFrameBytes) {
        throw new ProtocolFailure("frame_byte_limit", `declared length ${length}`);
      }
      this.end = HEADER_BYTES + length;
    }
    if (buffer.length < this.end) return null;
    const frame = buffer.peek(this.end);
    buffer.consume(this.end);
    this.end = 0;
    return frame.subarray(HEADER_BYTES);
  }

  endOfInput(): void {
    const pending = this.pending;
    if (pending) {
      throw new ProtocolFailure("truncated_frame", `${pending} bytes of an unfinished frame`);
    }
  }
}

export const LENGTH_PREFIXED: WireCodec = {
  wire: "lp",
  decoder: (maxFrameBytes: number) => new LengthPrefixedDecoder(maxFrameBytes),
  parseFrame: (payload: Buffer) => parseFrame(payload),
};

/** The length-prefixed wire of a chat reply: fields 7-11 are its five chat frames. */
export const LENGTH_PREFIXED_CHAT: WireCodec = {
  ...LENGTH_PREFIXED,
  parseFrame: (payload: Buffer) => parseFrame(payload, true),
};

/** `frame_with_header`: a payload behind its five-byte header. */
export function withHeader(payload: Uint8Array): Buffer {
  const header = Buffer.alloc(HEADER_BYTES);
  header.writeUInt32BE(payload.length, 1);
  return Buffer.concat([header, payload]);
}
