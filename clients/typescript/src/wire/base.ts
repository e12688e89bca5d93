/** What the wire formats share (shared/wire/base.py). */

import type { Frame } from "../frames";

export type WireFormat = "lp" | "ndjson" | "ndjson-lab";
export const WIRE_FORMATS: readonly WireFormat[] = ["lp", "ndjson", "ndjson-lab"];

/** What a wire's done proves about the content: `sha256` (required, checked) or `none`. */
export type Integrity = "sha256" | "none";

export function integrityOf(wire: WireFormat): Integrity {
  return wire === "ndjson-lab" ? "none" : "sha256";
}

/** A sans-IO splitter of a byte stream into raw frame payloads; each method throws
 * `ProtocolFailure` with a reason code. */
export interface FrameDecoder {
  receiveData(data: Uint8Array): void;
  /** One complete frame payload, or null (need more data). */
  nextEvent(): Buffer | null;
  /** Whether the input may end here; throws when it may not. */
  endOfInput(): void;
  /** The bytes of the frame begun but not complete (its header included). */
  readonly pending: number;
}

export interface WireCodec {
  readonly wire: WireFormat;
  decoder(maxFrameBytes: number): FrameDecoder;
  parseFrame(payload: Buffer): Frame;
}

export function isWireFormat(value: unknown): value is WireFormat {
  return typeof value === "string" && (WIRE_FORMATS as readonly string[]).includes(value);
}
