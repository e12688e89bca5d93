/**
 * UTF-8 and code points as the Python reference sees them.
 *
 * - `Utf8Stream` is CPython's incremental UTF-8 decoder (`codecs.getincrementaldecoder
 *   ("utf-8")`, strict, `final=False`) reduced to its verdicts: a byte that cannot continue a
 *   well-formed sequence fails at once, an unfinished sequence at the end is pending. One
 *   quirk is CPython's, kept: after `ED`, a second byte `A0`-`BF` (a surrogate, never valid)
 *   is not refused until the third byte arrives, so `ED A0` at the end of the input is a
 *   truncated character (`truncated_utf8`), not an invalid one (`E0 80` and `F4 90`, also
 *   never valid, fail at once).
 * - Python's `len(str)` counts code points; a JavaScript string's length counts UTF-16 code
 *   units: `codePoints()` counts as Python does.
 * - A lone surrogate (`"\ud800"` in JSON) is a Python str that `.encode("utf-8")` refuses:
 *   `isWellFormed()` says whether a string has none.
 */

export class Utf8Stream {
  /** Continuation bytes still needed by the character begun. */
  private need = 0;
  private low = 0x80;
  private high = 0xbf;
  /** The bytes of the unfinished character at the end (CPython's `getstate()[0]`). */
  pending = 0;
  /** `ED A0`-`ED BF`: pending, but its next byte fails whatever it is (CPython). */
  private doomed = false;

  /** Take `data`; false as soon as a byte is not valid UTF-8 here (the stream is then dead). */
  feed(data: Uint8Array): boolean {
    for (let i = 0; i < data.length; i++) {
      const byte = data[i] ?? 0;
      if (this.need === 0) {
        if (byte < 0x80) continue;
        if (!this.start(byte)) return false;
        this.pending = 1;
        continue;
      }
      if (this.doomed) return false;
      if (byte < this.low || byte > this.high) return false;
      if (this.edSecond) {
        this.doomed = byte >= 0xa0;
        this.edSecond = false;
      }
      this.low = 0x80;
      this.high = 0xbf;
      this.need--;
      this.pending = this.need === 0 ? 0 : this.pending + 1;
    }
    return true;
  }

  /** Whether the character begun is `ED` awaiting its second byte. */
  private edSecond = false;

  private start(byte: number): boolean {
    this.low = 0x80;
    this.high = 0xbf;
    this.edSecond = false;
    if (byte >= 0xc2 && byte <= 0xdf) this.need = 1;
    else if (byte === 0xe0) {
      this.need = 2;
      this.low = 0xa0;
    } else if (byte === 0xed) {
      this.need = 2;
      this.edSecond = true; // 80-BF accepted here, A0-BF doomed (CPython)
    } else if (byte >= 0xe1 && byte <= 0xef) this.need = 2;
    else if (byte === 0xf0) {
      this.need = 3;
      this.low = 0x90;
    } else if (byte >= 0xf1 && byte <= 0xf3) this.need = 3;
    else if (byte === 0xf4) {
      this.need = 3;
      this.high = 0x8f;
    } else return false;
    return true;
  }

  /** Whether the input may end here (no character begun and unfinished). */
  get clean(): boolean {
    return this.need === 0;
  }
}

const STRICT_DECODER = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** `bytes.decode("utf-8")`: the text, or null when the bytes are not UTF-8 (a BOM is kept). */
export function decodeUtf8(bytes: Uint8Array): string | null {
  try {
    return STRICT_DECODER.decode(bytes);
  } catch {
    return null;
  }
}

/** `str.encode("utf-8")` of a string without lone surrogates (check `isWellFormed` first). */
export function encodeUtf8(text: string): Buffer {
  return Buffer.from(text, "utf8");
}

/** Python's `len(text)`: code points, a lone surrogate counting as one. */
export function codePoints(text: string): number {
  let count = text.length;
  for (let i = 0; i < text.length - 1; i++) {
    const unit = text.charCodeAt(i);
    if (unit >= 0xd800 && unit <= 0xdbff) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        count--;
        i++;
      }
    }
  }
  return count;
}

/** Whether `text.encode("utf-8")` would succeed in Python: no lone surrogate. */
export function isWellFormed(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit < 0xd800 || unit > 0xdfff) continue;
    if (unit >= 0xdc00) return false;
    const next = text.charCodeAt(i + 1);
    if (!(next >= 0xdc00 && next <= 0xdfff)) return false;
    i++;
  }
  return true;
}

/** The code points of `text`, in order (a lone surrogate is one). */
export function* codePointsOf(text: string): Generator<number> {
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit >= 0xd800 && unit <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        yield (unit - 0xd800) * 0x400 + (next - 0xdc00) + 0x10000;
        i++;
        continue;
      }
    }
    yield unit;
  }
}
