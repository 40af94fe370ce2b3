/**
 * The messages of the client protocol, version 1 (docs/protocol.md; the server's models
 * are `rejoinder.io.protocol`).
 *
 * Written by hand until `protocol.gen.ts` (generated from the server's JSON Schema by
 * `npm run gen:types`) lands; then this module re-exports the generated types under these
 * names, and nothing else in the SDK changes. Every other module imports its message types
 * from here, never from the generated file.
 */

/** The protocol version this SDK speaks (sent as `start.protocol`). */
export const PROTOCOL_VERSION = 1;

// ------------------------------------------------------------ client -> server

/** First message on a WebSocket: the microphone audio that follows is PCM16LE mono at this rate. */
export interface Start {
  type: "start";
  sample_rate: number;
  timeline?: boolean;
  protocol?: number | null;
  /** The `resume_token` of an earlier `ready`: continue that session. */
  resume?: string | null;
}

/** Playback truth: agent samples played so far on this connection, in total. */
export interface Played {
  type: "played";
  samples: number;
  cleared?: boolean;
}

/** Typed user input: a user turn, like a transcript. */
export interface UserText {
  type: "text";
  text: string;
}

export interface Mute {
  type: "mute";
  muted: boolean;
}

export interface Interrupt {
  type: "interrupt";
}

export type ClientMessage = Start | Played | UserText | Mute | Interrupt;

// ------------------------------------------------------------ server -> client

export interface Ready {
  type: "ready";
  sample_rate: number;
  protocol?: number;
  session_id?: string | null;
  resume_token?: string | null;
  resume_grace?: number | null;
  resumed?: boolean | null;
}

export interface Clear {
  type: "clear";
}

export type AgentStateName = "initializing" | "listening" | "thinking" | "speaking";
export type UserStateName = "listening" | "speaking" | "away";

export interface AgentStateMessage {
  type: "agent_state";
  state: AgentStateName;
}

export interface UserStateMessage {
  type: "user_state";
  state: UserStateName;
}

export interface TranscriptMessage {
  type: "transcript";
  role: "user" | "agent";
  text: string;
  final: boolean;
  interrupted?: boolean | null;
}

export interface ToolMessage {
  type: "tool";
  name: string;
  call_id: string;
  status: "started" | "finished";
  error?: boolean | null;
}

export interface MetricsMessage {
  type: "metrics";
  metrics: { [key: string]: unknown };
}

export interface TimelineMessage {
  type: "timeline";
  entry: { [key: string]: unknown };
}

export interface ErrorMessage {
  type: "error";
  code: string;
  message: string;
  source?: string | null;
}

export type ServerMessage =
  | Ready
  | Clear
  | AgentStateMessage
  | UserStateMessage
  | TranscriptMessage
  | ToolMessage
  | MetricsMessage
  | TimelineMessage
  | ErrorMessage;
