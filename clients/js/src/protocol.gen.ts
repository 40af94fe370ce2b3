/* eslint-disable */
// Generated: do not edit. The client protocol's types, from clients/protocol.schema.json
// (generated in turn from the server's models, src/rejoinder/io/protocol.py), by
// clients/js/scripts/gen-types.mjs with json-schema-to-typescript 16.0.0.
// Regenerate: python -m rejoinder.io.protocol_schema, then npm run gen:types in clients/js.

/**
 * Any JSON text message of the rejoinder client protocol, version 1 (docs/protocol.md), either way. Generated from `rejoinder.io.protocol` by `python -m rejoinder.io.protocol_schema`: do not edit.
 */
export type ProtocolMessage = (ClientMessage | ServerMessage)
/**
 * A JSON text message the client sends; `type` says which.
 */
export type ClientMessage = (Start | Played | UserText | Mute | Interrupt | Ping)
/**
 * A JSON text message the server sends; `type` says which. A client ignores types and fields it does not know: new ones may come within a version.
 */
export type ServerMessage = (Ready | Clear | AgentStateMessage | UserStateMessage | TranscriptMessage | ToolMessage | MetricsMessage | TimelineMessage | ErrorMessage | Pong)

/**
 * First message: the microphone audio that follows is PCM16LE mono at this rate.
 */
export interface Start {
  type: "start"
  sample_rate: number
  /**
   * Send `timeline` messages: the floor's entries of the session timeline.
   */
  timeline?: boolean
  /**
   * The protocol version the client speaks; another than the server's is refused (`protocol_mismatch`, close 4003). Absent: the client takes the server's.
   */
  protocol?: (number | null)
  /**
   * The `resume_token` of an earlier `ready`: continue that session (it was kept for `resume_grace` seconds after its connection dropped).
   */
  resume?: (string | null)
}
/**
 * Playback truth: agent samples played so far, in total, at the server's rate. `cleared` marks the report sent right after processing a `clear`.
 */
export interface Played {
  type: "played"
  samples: number
  cleared?: boolean
}
/**
 * Typed user input: a user turn, like a transcript.
 */
export interface UserText {
  type: "text"
  text: string
}
/**
 * The user muted (or unmuted) their microphone: the session hears silence meanwhile (`session.mute_input`); the client may keep sending audio or not.
 */
export interface Mute {
  type: "mute"
  muted: boolean
}
/**
 * Stop what the agent is saying now (a button, not speech): `session.interrupt()`; the server answers with `clear` as for a barge-in.
 */
export interface Interrupt {
  type: "interrupt"
}
/**
 * Is this connection alive? The server answers at once with a `pong` carrying the same `id`, on the connection the ping came by. A browser cannot see a WebSocket that died silently (a network change leaves it open for minutes): a client that gets no `pong` in time takes the connection for dropped and resumes.
 */
export interface Ping {
  type: "ping"
  id?: (number | null)
}
export interface Ready {
  type: "ready"
  /**
   * Rate of the agent audio the server sends (PCM16LE mono).
   */
  sample_rate: number
  protocol?: number
  /**
   * The session's id (the same after a resume).
   */
  session_id?: (string | null)
  /**
   * Give it as `start.resume` (WebRTC: the offer's `resume` query parameter) to continue this session after the connection drops; single use: each `ready` brings a new one. Absent: the server keeps no session for resuming.
   */
  resume_token?: (string | null)
  /**
   * Seconds the session is kept after its connection drops.
   */
  resume_grace?: (number | null)
  /**
   * True when this `ready` continues an earlier connection's session.
   */
  resumed?: (boolean | null)
  /**
   * The STUN/TURN servers for the client's next peer connection (a reconnect), with TURN credentials minted for this session. Absent: the server has none configured. Before its first offer a client gets them from `GET /api/ice` (docs/webrtc.md).
   */
  ice_servers?: (IceServerInfo[] | null)
  /**
   * The `iceTransportPolicy` the server asks for: `relay` means TURN relays only.
   */
  ice_transport_policy?: (("all" | "relay") | null)
}
/**
 * A STUN or TURN server for the client's peer connection (as an RTCIceServer).
 */
export interface IceServerInfo {
  /**
   * @minItems 1
   */
  urls: [string, ...(string)[]]
  username?: (string | null)
  credential?: (string | null)
}
/**
 * Drop all queued agent audio now, then report `played` with `cleared: true`.
 */
export interface Clear {
  type: "clear"
}
export interface AgentStateMessage {
  type: "agent_state"
  state: ("initializing" | "listening" | "thinking" | "speaking")
}
export interface UserStateMessage {
  type: "user_state"
  state: ("listening" | "speaking" | "away")
}
/**
 * The whole text of one user or agent turn so far (not a delta). `final` ends it; a final agent transcript is what was heard, `interrupted` when cut short.
 */
export interface TranscriptMessage {
  type: "transcript"
  role: ("user" | "agent")
  text: string
  final: boolean
  interrupted?: (boolean | null)
}
export interface ToolMessage {
  type: "tool"
  name: string
  call_id: string
  status: ("started" | "finished")
  error?: (boolean | null)
}
export interface MetricsMessage {
  type: "metrics"
  metrics: {
    [k: string]: unknown
  }
}
/**
 * One entry of the session timeline (`{"t", "kind", ...fields}`), `t` in seconds since the session started. Only for a client whose `start` asked for it; the kinds are `TIMELINE_KINDS` today, and a client skips kinds it does not know.
 */
export interface TimelineMessage {
  type: "timeline"
  entry: {
    /**
     * Seconds since the session started.
     */
    t: number
    /**
     * One of `TIMELINE_KINDS` (or newer).
     */
    kind: string
    [k: string]: unknown
  }
}
export interface ErrorMessage {
  type: "error"
  code: string
  message: string
  /**
   * For `session_error`: which part of the session failed.
   */
  source?: (string | null)
}
/**
 * The answer to a `ping`, with its `id`.
 */
export interface Pong {
  type: "pong"
  id?: (number | null)
}

// ---- values (the types above are erased at run time) ----

/** The protocol version this schema describes: `ready.protocol`, and what `start.protocol` may name (another version is refused with close 4003). */
export const PROTOCOL_VERSION = 1;
export type PROTOCOL_VERSION = typeof PROTOCOL_VERSION;

/** WebSocket close codes the server uses (RFC 6455 numbers where one fits). */
export const CloseCode = {
  /** The session ended (the agent closed it, or the client said goodbye). */
  NORMAL: 1000,
  /** Binary audio before `start`. */
  UNSUPPORTED_DATA: 1003,
  /** A text frame that is not JSON. */
  INVALID_JSON: 1007,
  /** An invalid `start` message (the session cannot begin). */
  POLICY_VIOLATION: 1008,
  /** A frame over the size limit. */
  MESSAGE_TOO_BIG: 1009,
  /** The agent's entry point failed. */
  INTERNAL_ERROR: 1011,
  /** No `start` message arrived in time. */
  START_TIMEOUT: 4001,
  /** The client does not read what the server sends (its queue overflowed). */
  SLOW_CLIENT: 4002,
  /** `start` named a protocol version this server does not speak. */
  PROTOCOL_MISMATCH: 4003,
  /** `start` asked to resume a session that is gone (unknown or expired token, or resuming is off): start a new session. */
  RESUME_FAILED: 4004,
  /** Another connection resumed this session (with its token): this one is replaced. */
  RESUMED: 4005,
} as const;
export type CloseCode = (typeof CloseCode)[keyof typeof CloseCode];

/** Values of `error.code`. The server may add codes within a version: a client treats one it does not know as an error. */
export const ErrorCode = {
  INVALID_JSON: "invalid_json",
  INVALID_MESSAGE: "invalid_message",
  UNKNOWN_TYPE: "unknown_type",
  TOO_LARGE: "too_large",
  NOT_STARTED: "not_started",
  ALREADY_STARTED: "already_started",
  NOT_READY: "not_ready",
  AUDIO_OVERRUN: "audio_overrun",
  START_TIMEOUT: "start_timeout",
  /** A warning: the client's `played` reports stopped (or a `clear` was never confirmed); the server estimates playback until they resume. */
  PLAYBACK_REPORTS: "playback_reports",
  SESSION: "session_error",
  INTERNAL: "internal_error",
  PROTOCOL_MISMATCH: "protocol_mismatch",
  RESUME_FAILED: "resume_failed",
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];
