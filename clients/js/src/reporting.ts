/**
 * The rules for `played` reports (docs/protocol.md, "Playback truth"), between whatever
 * measures playback (the player worklet, the receiver's stats) and the connection.
 *
 * - The count never decreases on a connection.
 * - After a `clear`, the next report sent is the one marked `cleared` that answers it: a
 *   plain report measured before the player saw the `clear` can still be on its way to
 *   the main thread (the audio thread posts on its own), and sending it would break rule 4.
 *   Several clears are answered each, in order.
 * - An answer that never comes (a player that went away) holds reports back for
 *   `clearTimeoutMs` at most: the server itself stops waiting after 0.5 s.
 */

import type { Played } from "./protocol.js";

export class PlayedReporter {
  #last = 0;
  #pendingClears = 0;
  #clearSince = 0;

  constructor(
    private readonly now: () => number,
    private readonly clearTimeoutMs = 1000,
  ) {}

  /** The count last sent. */
  get samples(): number {
    return this.#last;
  }

  /** Clears not answered yet. */
  get pendingClears(): number {
    return this.#pendingClears;
  }

  /** The server sent `clear`: hold plain reports until the player answers it. */
  clearReceived(): void {
    if (this.#pendingClears === 0) this.#clearSince = this.now();
    this.#pendingClears += 1;
  }

  /** A measured count: the message to send, or `null` to send nothing. */
  report(samples: number, cleared: boolean): Played | null {
    if (!Number.isFinite(samples) || samples < 0) return null;
    if (cleared) {
      if (this.#pendingClears > 0) {
        this.#pendingClears -= 1;
        this.#clearSince = this.now();
      }
    } else if (this.#pendingClears > 0) {
      if (this.now() - this.#clearSince < this.clearTimeoutMs) return null;
      this.#pendingClears = 0; // the answer is lost: report plainly again
    }
    this.#last = Math.max(this.#last, Math.floor(samples));
    return cleared ? { type: "played", samples: this.#last, cleared: true } : { type: "played", samples: this.#last };
  }
}
