/**
 * Is the connection alive? A browser cannot send WebSocket pings, and a socket whose
 * network vanished (a laptop changing Wi-Fi, a phone leaving it) can look open for
 * minutes; a data channel likewise. So while a connection is ready the client sends the
 * protocol's own `{"type": "ping", "id": n}` every `intervalMs`, and the server answers
 * each with a `pong` of the same `id` at once (docs/protocol.md, "Is the connection
 * alive?"). When the oldest ping still unanswered is `timeoutMs` old, the connection is
 * taken for dropped (`silent`), and the client resumes the session on a new one.
 *
 * One `Heartbeat` per ready connection; no I/O but the timers and `send` it is given.
 */

import type { Timers } from "./platform.js";

/** How often to ping while connected (ms). */
export const DEFAULT_PING_INTERVAL_MS = 5000;
/** How long the oldest unanswered ping may wait for its pong (ms). */
export const DEFAULT_PING_TIMEOUT_MS = 10000;

export interface HeartbeatOptions {
  readonly timers: Timers;
  readonly intervalMs: number;
  readonly timeoutMs: number;
  /** The id of the next ping: unique over the client's connections, so that no pong can
   * answer a ping of another one. */
  readonly nextId: () => number;
  /** Sends a ping. One the connection could not carry still counts as sent: a connection
   * that cannot carry a ping will not bring its pong either. */
  readonly send: (id: number) => void;
  /** No pong came in time: the connection is to be taken for dropped. Called once. */
  readonly silent: (waitedMs: number) => void;
}

interface Sent {
  readonly id: number;
  readonly at: number;
}

export class Heartbeat {
  readonly #options: HeartbeatOptions;
  /** Pings not answered yet, oldest first (pongs come back in order on one connection). */
  #unanswered: Sent[] = [];
  #pingTimer: unknown = null;
  #deadline: unknown = null;
  #stopped = false;

  /** Starts pinging (the first ping goes out after one interval). */
  constructor(options: HeartbeatOptions) {
    this.#options = options;
    this.#schedule();
  }

  /** Pings sent and not answered yet. */
  get unanswered(): number {
    return this.#unanswered.length;
  }

  /** A `pong` arrived. It answers its ping and every one sent before it; a pong whose id
   * is not one of the pings waiting (a duplicate, a late one for a ping already answered,
   * or none) proves nothing and is ignored. Returns whether it answered a ping. */
  pong(id: number | null | undefined): boolean {
    if (this.#stopped || typeof id !== "number") return false;
    const index = this.#unanswered.findIndex((sent) => sent.id === id);
    if (index < 0) return false;
    this.#unanswered.splice(0, index + 1);
    this.#arm();
    return true;
  }

  /** Stops every timer (the connection closed, or the client is done). */
  stop(): void {
    this.#stopped = true;
    const timers = this.#options.timers;
    if (this.#pingTimer !== null) timers.clearTimeout(this.#pingTimer);
    if (this.#deadline !== null) timers.clearTimeout(this.#deadline);
    this.#pingTimer = this.#deadline = null;
    this.#unanswered = [];
  }

  #schedule(): void {
    this.#pingTimer = this.#options.timers.setTimeout(() => this.#ping(), this.#options.intervalMs);
  }

  #ping(): void {
    this.#pingTimer = null;
    if (this.#stopped) return;
    const id = this.#options.nextId();
    this.#unanswered.push({ id, at: this.#options.timers.now() });
    if (this.#unanswered.length === 1) this.#arm();
    this.#options.send(id);
    if (!this.#stopped) this.#schedule();
  }

  /** The deadline follows the oldest unanswered ping (none when all are answered). */
  #arm(): void {
    const timers = this.#options.timers;
    if (this.#deadline !== null) timers.clearTimeout(this.#deadline);
    this.#deadline = null;
    const oldest = this.#unanswered[0];
    if (oldest === undefined) return;
    const left = oldest.at + this.#options.timeoutMs - timers.now();
    this.#deadline = timers.setTimeout(() => {
      this.#deadline = null;
      if (this.#stopped) return;
      const waited = timers.now() - oldest.at;
      this.stop();
      this.#options.silent(waited);
    }, Math.max(0, left));
  }
}
