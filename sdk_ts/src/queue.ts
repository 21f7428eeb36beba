// A small async queue: producers push (waiting while it is full), one consumer iterates.

export class AsyncQueue<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private readonly readers: ((r: IteratorResult<T>) => void)[] = [];
  private readonly writers: (() => void)[] = [];
  private closed = false;
  private error: unknown;

  constructor(private readonly limit = Infinity) {}

  /** Adds an item; resolves once there is room (immediately below the limit). */
  async push(item: T): Promise<void> {
    if (this.closed) return;
    const reader = this.readers.shift();
    if (reader) return reader({ value: item, done: false });
    this.items.push(item);
    if (this.items.length >= this.limit) await new Promise<void>((resolve) => this.writers.push(resolve));
  }

  /** No more items; a reader gets `error` (when given) after the queued items. */
  close(error?: unknown): void {
    if (this.closed) return;
    this.closed = true;
    this.error = error;
    for (const reader of this.readers.splice(0)) reader({ value: undefined, done: true });
    for (const writer of this.writers.splice(0)) writer();
  }

  get failure(): unknown {
    return this.error;
  }

  next(): Promise<IteratorResult<T>> {
    if (this.items.length > 0) {
      const item = this.items.shift() as T;
      this.writers.shift()?.();
      return Promise.resolve({ value: item, done: false });
    }
    if (this.closed) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve) => this.readers.push(resolve));
  }

  // An async generator: consumers such as connect's request streams need `return` and `throw` too.
  async *[Symbol.asyncIterator](): AsyncGenerator<T> {
    for (;;) {
      const item = await this.next();
      if (item.done) return;
      yield item.value;
    }
  }
}
