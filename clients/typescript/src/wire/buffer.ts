/**
 * One receive buffer for the decoders: append bytes, find the next line ending without
 * scanning a byte twice, take from the front (shared/wire/buffer.py, `LF` lines only).
 * Amortised linear however the bytes are cut: the storage grows by doubling and the front
 * is dropped by moving an offset, compacted only when the dead front is the larger part.
 */

const NEWLINE = 0x0a;

export class ReceiveBuffer {
  private data: Buffer = Buffer.alloc(256);
  private start = 0;
  private end = 0;
  /** Bytes at the front already known to hold no newline. */
  private searched = 0;

  get length(): number {
    return this.end - this.start;
  }

  append(chunk: Uint8Array): void {
    if (chunk.length === 0) return;
    if (this.end + chunk.length > this.data.length) {
      const live = this.end - this.start;
      const needed = live + chunk.length;
      if (needed <= this.data.length / 2) {
        this.data.copy(this.data, 0, this.start, this.end);
      } else {
        let size = this.data.length;
        while (size < needed * 2) size *= 2;
        const grown = Buffer.alloc(size);
        this.data.copy(grown, 0, this.start, this.end);
        this.data = grown;
      }
      this.start = 0;
      this.end = live;
    }
    this.data.set(chunk, this.end);
    this.end += chunk.length;
  }

  /** The byte at `index` from the front. */
  at(index: number): number {
    return this.data[this.start + index] ?? 0;
  }

  /** A copy of the first `size` bytes (fewer if fewer are buffered), left in place. */
  peek(size: number): Buffer {
    const stop = Math.min(this.start + size, this.end);
    return Buffer.from(this.data.subarray(this.start, stop));
  }

  /** Drop the first `size` bytes. */
  consume(size: number): void {
    this.start = Math.min(this.start + size, this.end);
    this.searched = Math.max(0, this.searched - size);
    if (this.start === this.end) {
      this.start = 0;
      this.end = 0;
    }
  }

  /** The first complete line without its `\n` (taken from the buffer), or null. */
  popLine(): Buffer | null {
    const from = this.start + this.searched;
    const found = this.data.subarray(0, this.end).indexOf(NEWLINE, from);
    if (found < 0) {
      this.searched = this.end - this.start;
      return null;
    }
    const line = Buffer.from(this.data.subarray(this.start, found));
    this.searched = 0;
    this.consume(found + 1 - this.start);
    return line;
  }
}
