/**
 * One error class for everything that goes wrong, and what each close code means.
 *
 * `RejoinderError.code` is the server's `error.code` when the server said why
 * (`protocol_mismatch`, `internal_error`, ...), else a name for the close code
 * (`server_full`, `connection_lost`, ...) or one of the client's own codes
 * (`microphone_unavailable`, `audio_worklet_unavailable`, `reconnect_failed`, ...).
 * `closeCode` is the WebSocket close code (on WebRTC, which has none, the code the same
 * failure closes a WebSocket with); `serverMessage` is the server's `error.message`.
 */

import type { CloseCode, ErrorCode, ErrorMessage } from "./protocol.js";

/** What the client does when a connection closes with a code. */
export type CloseAction =
  /** The session ended normally: no reconnect. */
  | "end"
  /** The connection dropped: reconnect and resume. */
  | "retry"
  /** The session is gone: reconnect for a new session. */
  | "fresh"
  /** A mistake reconnecting cannot mend: give up with the error. */
  | "fatal";

export interface CloseCodeInfo {
  /** `RejoinderError.code` when the server sent no `error` message before closing. */
  readonly name: string;
  readonly meaning: string;
  readonly action: CloseAction;
}

/** The close codes of docs/protocol.md ("Errors and close codes"), plus the browser's own
 * (1005, 1006) and the hosting's (1012, 1013). Every `CloseCode` of the server's models must
 * be here: the type checker says so when the server adds one. */
export const CLOSE_CODES: Readonly<Record<number, CloseCodeInfo>> = {
  1000: { name: "session_ended", meaning: "the session ended", action: "end" },
  1001: { name: "going_away", meaning: "the server is going away", action: "retry" },
  1003: { name: "not_started", meaning: "audio was sent before start", action: "fatal" },
  1005: { name: "connection_lost", meaning: "the connection closed without a status", action: "retry" },
  1006: { name: "connection_lost", meaning: "the connection was lost", action: "retry" },
  1007: { name: "invalid_json", meaning: "a message was not JSON", action: "fatal" },
  1008: { name: "invalid_message", meaning: "the start message was invalid", action: "fatal" },
  1009: { name: "too_large", meaning: "a message was over the size limit", action: "fatal" },
  1011: { name: "internal_error", meaning: "the agent failed", action: "fatal" },
  1012: {
    name: "session_lost",
    meaning: "the session was lost with the server process that held it",
    action: "fresh",
  },
  1013: { name: "server_full", meaning: "the server is full or draining, try again later", action: "retry" },
  4001: { name: "start_timeout", meaning: "no start message arrived in time", action: "retry" },
  4002: { name: "slow_client", meaning: "the client did not keep up with the server's messages", action: "retry" },
  4003: {
    name: "protocol_mismatch",
    meaning: "the server speaks another protocol version",
    action: "fatal",
  },
  4004: { name: "resume_failed", meaning: "the session to resume is gone", action: "fresh" },
  4005: {
    name: "resumed_elsewhere",
    meaning: "another connection resumed this session (another tab or device took it over)",
    action: "end",
  },
} satisfies { readonly [code in CloseCode]: CloseCodeInfo } & { readonly [code: number]: CloseCodeInfo };

/** Server `error` codes that come with a close, and the close code they come with: on
 * WebRTC (no close codes) the client reads the close code from the last such error. */
export const ERROR_CLOSE_CODES: Readonly<Record<string, number>> = {
  invalid_json: 1007,
  too_large: 1009,
  start_timeout: 4001,
  internal_error: 1011,
  protocol_mismatch: 4003,
  resume_failed: 4004,
} satisfies { readonly [code in ErrorCode]?: number };

export function closeInfo(code: number): CloseCodeInfo {
  return (
    CLOSE_CODES[code] ?? {
      name: "closed",
      meaning: `the connection closed with code ${code}`,
      // An unknown code from a newer server: trying again is bounded by the backoff.
      action: "retry",
    }
  );
}

export interface RejoinderErrorOptions {
  closeCode?: number | null;
  serverMessage?: string | null;
  source?: string | null;
  cause?: unknown;
}

export class RejoinderError extends Error {
  /** Machine-readable: the server's `error.code`, a close code's name, or the client's own. */
  readonly code: string;
  /** The close code (WebSocket), or the one the same failure has on a WebSocket (WebRTC). */
  readonly closeCode: number | null;
  /** The server's `error.message`, when it sent one. */
  readonly serverMessage: string | null;
  /** The server's `error.source` (which part of the session failed), when it sent one. */
  readonly source: string | null;

  constructor(code: string, message: string, options: RejoinderErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "RejoinderError";
    this.code = code;
    this.closeCode = options.closeCode ?? null;
    this.serverMessage = options.serverMessage ?? null;
    this.source = options.source ?? null;
  }

  /** An `error` message from the server (most are warnings: the connection stays open). */
  static fromServer(message: ErrorMessage): RejoinderError {
    const where = message.source ? ` (${message.source})` : "";
    return new RejoinderError(message.code, `${message.code}${where}: ${message.message}`, {
      serverMessage: message.message,
      source: message.source ?? null,
    });
  }

  /** A connection closed with `closeCode`; `last` is the server's `error` before it, if any. */
  static fromClose(closeCode: number, reason: string, last: ErrorMessage | null = null): RejoinderError {
    const info = closeInfo(closeCode);
    const detail = last?.message || reason;
    return new RejoinderError(
      last?.code ?? info.name,
      `${info.meaning} (close ${closeCode})${detail ? ": " + detail : ""}`,
      { closeCode, serverMessage: last?.message ?? null, source: last?.source ?? null },
    );
  }
}
