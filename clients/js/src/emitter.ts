/**
 * A small typed event emitter: `on("agentState", (e) => ...)` knows `e`'s type.
 *
 * A listener that throws does not stop the others, nor the protocol handling that emitted
 * the event: its error goes to `reportError` (in a browser: the console and
 * `window.onerror`, as an uncaught error would), or to `console.error` where there is none,
 * instead of being swallowed.
 */

function report(error: unknown): void {
  const global = globalThis as { reportError?: (error: unknown) => void };
  if (typeof global.reportError === "function") global.reportError(error);
  else console.error(error);
}

export type Listener<T> = (payload: T) => void;

export class TypedEmitter<Events extends object> {
  readonly #listeners = new Map<keyof Events, Set<Listener<never>>>();

  /** Call `listener` on each `event`; returns a function that removes it. */
  on<K extends keyof Events>(event: K, listener: Listener<Events[K]>): () => void {
    let set = this.#listeners.get(event);
    if (set === undefined) {
      set = new Set();
      this.#listeners.set(event, set);
    }
    set.add(listener as Listener<never>);
    return () => this.off(event, listener);
  }

  /** Call `listener` on the next `event` only. */
  once<K extends keyof Events>(event: K, listener: Listener<Events[K]>): () => void {
    const off = this.on(event, (payload) => {
      off();
      listener(payload);
    });
    return off;
  }

  off<K extends keyof Events>(event: K, listener: Listener<Events[K]>): void {
    this.#listeners.get(event)?.delete(listener as Listener<never>);
  }

  protected emit<K extends keyof Events>(event: K, payload: Events[K]): void {
    const set = this.#listeners.get(event);
    if (set === undefined) return;
    for (const listener of [...set]) {
      try {
        (listener as Listener<Events[K]>)(payload);
      } catch (error) {
        report(error);
      }
    }
  }
}
