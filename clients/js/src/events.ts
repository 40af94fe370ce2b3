/** The events a `RejoinderClient` emits, and their payloads. */

import type { StateChange, Transcript } from "./conversation.js";
import type { RejoinderError } from "./errors.js";
import type { AgentStateName, UserStateName } from "./protocol.js";

export type Transport = "websocket" | "webrtc";

/** The client's connection: `idle` (never connected), `connecting` (until the first
 * `ready`), `connected`, `reconnecting` (after a drop, until the next `ready`), `closed`. */
export type ClientState = "idle" | "connecting" | "connected" | "reconnecting" | "closed";

export interface MutedEvent {
  /** The microphone is muted now. */
  readonly muted: boolean;
}

export interface ReadyEvent {
  /** The rate of the agent's audio (WebRTC: the track's, 48 kHz). */
  readonly sampleRate: number;
  readonly protocol: number;
  readonly sessionId: string | null;
  /** This connection continues the session of the one that dropped. */
  readonly resumed: boolean;
  readonly transport: Transport;
}

export interface ToolEvent {
  readonly name: string;
  readonly callId: string;
  readonly status: "started" | "finished";
  /** The tool failed (on `finished`). */
  readonly error: boolean;
}

/** One metric, as the server's `to_dict()` has it (docs/protocol.md, "Metrics"). */
export interface Metrics {
  readonly type: string;
  readonly [field: string]: unknown;
}

/** One entry of the session timeline (docs/protocol.md, "Timeline"). */
export interface TimelineEntry {
  /** Seconds since the session started, on the session's clock. */
  readonly t: number;
  readonly kind: string;
  readonly [field: string]: unknown;
}

export interface PlayedEvent {
  /** Agent samples played on this connection, as reported to the server. */
  readonly samples: number;
  /** This report answers a `clear`. */
  readonly cleared: boolean;
}

export interface ReconnectingEvent {
  /** 1 for the first attempt after a drop. */
  readonly attempt: number;
  readonly delayMs: number;
  /** Why the connection closed. */
  readonly error: RejoinderError;
  /** The attempt resumes the session (else it starts a new one). */
  readonly resuming: boolean;
}

export interface SessionRestartedEvent {
  /** Why the session could not go on (`resume_failed`, `session_lost`, ...). */
  readonly error: RejoinderError;
  readonly previousSessionId: string | null;
}

export interface CloseEvent {
  /** `null` when the session ended normally or the user closed it. */
  readonly error: RejoinderError | null;
  readonly byUser: boolean;
}

export interface RejoinderEvents {
  /** The client's `state` changed, whatever changed it (`connect()`, `close()`, a `ready`,
   * a drop): every change, in order, each after the event that says why (`ready`,
   * `reconnecting`, `close`). */
  connectionState: StateChange<ClientState>;
  /** `mute()` changed whether the microphone is muted. */
  muted: MutedEvent;
  /** A connection is ready (the first, and each one after a reconnect). */
  ready: ReadyEvent;
  agentState: StateChange<AgentStateName>;
  userState: StateChange<UserStateName>;
  /** A turn's text so far (interim), or its end (`final`). */
  transcript: Transcript;
  tool: ToolEvent;
  metrics: Metrics;
  /** Only with `timeline: true`. */
  timeline: TimelineEntry;
  /** An `error` message from the server (most are warnings), or a message it could not read. */
  error: RejoinderError;
  /** The server asked to drop the agent's queued audio (a barge-in or `interrupt()`). */
  clear: Record<string, never>;
  /** A `played` report went out. */
  played: PlayedEvent;
  /** The connection dropped; another is tried after `delayMs`. */
  reconnecting: ReconnectingEvent;
  /** The session could not be resumed: the client goes on with a new one. */
  sessionRestarted: SessionRestartedEvent;
  /** The client is done: the session ended, failed, or `close()` was called. */
  close: CloseEvent;
}
