/**
 * One connection to the server (a WebSocket, or a peer connection with its data channel):
 * what the client asks of it and what it tells the client. The client keeps the session
 * across connections; a link lives from its connect to its close, once.
 */

import type { LinkClose } from "../reconnect.js";
import type { PlayerReport } from "../platform.js";
import type { ClientMessage, Played, ServerMessage } from "../protocol.js";

export interface LinkEvents {
  /** A valid server message (after the link handled `ready` and `clear` for its media). */
  message(message: ServerMessage): void;
  /** A server message that could not be read (skipped). */
  invalid(why: string): void;
  /** A `played` report that went out. */
  played(report: Played): void;
  /** Agent samples received (WebSocket path). */
  received(samples: number): void;
  /** The connection closed, or the link found it dropped (not called after `close()` or
   * `abandon()`). The link is inert from then on, but a peer connection may still be open:
   * the client then calls `close()` or `abandon()` on it. */
  closed(close: LinkClose): void;
}

export interface Link {
  /** Sends a JSON message; false when the connection cannot carry it now. */
  send(message: ClientMessage): boolean;
  /** A microphone frame (PCM16LE mono at the `start` rate; WebSocket path). */
  sendAudio(pcm: ArrayBuffer): void;
  /** A report from the player (WebSocket path). */
  playerReport(report: PlayerReport): void;
  /** The client is done with this connection: `goodbye` when the user closed (the session
   * ends with it), else the client gave up on it (no `ready` in time, no `pong` in time)
   * and does not resume; `reason` says why (a WebSocket close reason: under 123 bytes). */
  close(goodbye: boolean, reason?: string): void;
  /** The client gives up on this connection in order to resume the session on a new one,
   * so the server must not hear a goodbye. A WebSocket closes with 4000 (`reason`), a drop
   * to the server. A peer connection has no close code (closing it is the goodbye): one
   * that may carry the session on the server goes quiet instead (no audio either way, no
   * messages) and stays open, and `abandon` returns true: the client closes it (`close()`)
   * once the resume took over or failed for good. It closes by itself, quietly, when the
   * server closes it. False: nothing of it is left open. */
  abandon(reason?: string): boolean;
  /** Microphone samples sent (WebSocket path). */
  readonly sentSamples: number;
}
