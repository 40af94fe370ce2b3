/**
 * `@rejoinder/client`: talk to a rejoinder voice agent from a browser, over a WebSocket or
 * WebRTC, with the agent's true state (protocol version 1, docs/protocol.md).
 */

export { RejoinderClient } from "./client.js";
export type { ClientOptions, ClientStats, ConnectOptions } from "./client.js";
export type { Role, StateChange, Transcript } from "./conversation.js";
export { TypedEmitter } from "./emitter.js";
export type { Listener } from "./emitter.js";
export { CLOSE_CODES, ERROR_CLOSE_CODES, RejoinderError, closeInfo } from "./errors.js";
export type { CloseAction, CloseCodeInfo } from "./errors.js";
export type {
  ClientState,
  CloseEvent,
  Metrics,
  MutedEvent,
  PlayedEvent,
  ReadyEvent,
  ReconnectingEvent,
  RejoinderEvents,
  SessionRestartedEvent,
  TimelineEntry,
  ToolEvent,
  Transport,
} from "./events.js";
export { browserPlatform } from "./browser/index.js";
export type {
  AudioOptions,
  AudioSession,
  HttpResponse,
  InboundAudioStats,
  PeerOptions,
  PeerSession,
  Platform,
  Player,
  PlayerReport,
  SessionDescription,
  SocketLike,
  Timers,
} from "./platform.js";
export { CloseCode, ErrorCode, PROTOCOL_VERSION } from "./protocol.js";
export type * from "./protocol.js";
export type { ReconnectOptions } from "./reconnect.js";
