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
  /** The connection closed (not called after `close()`). */
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
   * and may resume; `reason` says why (a WebSocket close reason: under 123 bytes). */
  close(goodbye: boolean, reason?: string): void;
  /** Microphone samples sent (WebSocket path). */
  readonly sentSamples: number;
}
