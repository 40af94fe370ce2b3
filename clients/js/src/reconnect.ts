/**
 * When a connection closes: end, give up, reconnect to resume, or start a new session
 * (no I/O, no clock: the client acts on the decision).
 *
 * - Before the first `ready` nothing is retried: `connect()` fails with the reason, so a
 *   wrong URL or a full server is said at once instead of hidden behind retries.
 * - After it, a dropped connection (no close frame, 1001, 1013, 4001, 4002, an unknown
 *   code) is reconnected with exponential backoff, sending the last `ready.resume_token`;
 *   each `ready` brings a new token and resets the attempts.
 * - `resume_failed` (4004) and a lost session (1012) start a new session at once; a drop
 *   when the server gave no token (it keeps no session for resuming) starts one after the
 *   backoff (`restart` says why, as `resume_unavailable`).
 * - 1000 ends; the other codes (1003, 1007, 1008, 1009, 1011, 4003) are mistakes a
 *   reconnect would repeat: the client gives up with the error.
 */

import { closeInfo, RejoinderError } from "./errors.js";
import type { ErrorMessage } from "./protocol.js";

export interface ReconnectOptions {
  /** Attempts after a drop before giving up (default 8). */
  maxAttempts?: number;
  /** Delay before the first attempt (default 250 ms); doubles each time. */
  initialDelayMs?: number;
  /** Longest delay between attempts (default 5000 ms). */
  maxDelayMs?: number;
  /** Random spread of each delay, as a fraction of it (default 0.2). */
  jitter?: number;
}

/** How a connection closed, as the transport saw it. */
export interface LinkClose {
  /** The WebSocket close code (on WebRTC: the one the same close has on a WebSocket). */
  readonly code: number;
  readonly reason: string;
  /** The server's last `error` message before the close, if any. */
  readonly serverError: ErrorMessage | null;
  /** What the client itself found (could not connect, an offer refused), if anything. */
  readonly failure: RejoinderError | null;
}

export type Decision =
  | { readonly kind: "end" }
  | { readonly kind: "fail"; readonly error: RejoinderError }
  | {
      readonly kind: "reconnect";
      /** The token to resume with; `null`: a new session. */
      readonly resume: string | null;
      readonly delayMs: number;
      readonly attempt: number;
      /** Why the connection closed. */
      readonly error: RejoinderError;
      /** Why the session cannot go on (emit `sessionRestarted`), or `null` when it can. */
      readonly restart: RejoinderError | null;
    };

export class ReconnectPolicy {
  readonly #maxAttempts: number;
  readonly #initialDelayMs: number;
  readonly #maxDelayMs: number;
  readonly #jitter: number;
  #ready = false; // a first `ready` came: drops are reconnected from now on
  #token: string | null = null;
  #attempt = 0;

  constructor(
    options: ReconnectOptions | false = {},
    private readonly random: () => number = Math.random,
  ) {
    this.#maxAttempts = options === false ? 0 : Math.max(0, options.maxAttempts ?? 8);
    this.#initialDelayMs = options === false ? 0 : Math.max(0, options.initialDelayMs ?? 250);
    this.#maxDelayMs = options === false ? 0 : Math.max(this.#initialDelayMs, options.maxDelayMs ?? 5000);
    this.#jitter = options === false ? 0 : Math.min(1, Math.max(0, options.jitter ?? 0.2));
  }

  /** The token the next reconnect would send. */
  get resumeToken(): string | null {
    return this.#token;
  }

  /** A `ready` arrived: its token (if any) is the one to resume with from now on. */
  ready(token: string | null | undefined): void {
    this.#ready = true;
    this.#token = token ?? null;
    this.#attempt = 0;
  }

  /** The delay before attempt `n` (1-based), without jitter. */
  delay(attempt: number): number {
    return Math.min(this.#maxDelayMs, this.#initialDelayMs * 2 ** (attempt - 1));
  }

  decide(close: LinkClose): Decision {
    const error = close.failure ?? RejoinderError.fromClose(close.code, close.reason, close.serverError);
    const action = closeInfo(close.code).action;
    if (action === "end") return { kind: "end" };
    if (!this.#ready || action === "fatal") return { kind: "fail", error };
    this.#attempt += 1;
    if (this.#attempt > this.#maxAttempts) {
      const tries = this.#maxAttempts === 1 ? "1 attempt" : `${this.#maxAttempts} attempts`;
      return {
        kind: "fail",
        error: new RejoinderError("reconnect_failed", `could not reconnect after ${tries}: ${error.message}`, {
          closeCode: error.closeCode,
          serverMessage: error.serverMessage,
          cause: error,
        }),
      };
    }
    if (action === "fresh") {
      // The server said the session is gone: a new one at once (bounded by the attempts).
      this.#token = null;
      return { kind: "reconnect", resume: null, delayMs: 0, attempt: this.#attempt, error, restart: error };
    }
    const base = this.delay(this.#attempt);
    const spread = base * this.#jitter * (2 * this.random() - 1);
    const restart =
      this.#token !== null
        ? null
        : new RejoinderError(
            "resume_unavailable",
            `${error.message}, and the server keeps no session to resume (its ready had no resume_token)`,
            { closeCode: error.closeCode, cause: error },
          );
    return {
      kind: "reconnect",
      resume: this.#token,
      delayMs: Math.max(0, Math.round(base + spread)),
      attempt: this.#attempt,
      error,
      restart,
    };
  }
}
