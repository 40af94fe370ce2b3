/**
 * The messages of the client protocol, version 1 (docs/protocol.md), as the SDK uses them.
 *
 * They are generated from the server's own models (`rejoinder.io.protocol` ->
 * clients/protocol.schema.json -> `protocol.gen.ts`, by `npm run gen:types`), so they cannot
 * drift from what the server accepts and sends. Every other module of the SDK imports them
 * from here, never from the generated file: this is the one place that names them.
 */

export type {
  AgentStateMessage,
  Clear,
  ClientMessage,
  ErrorMessage,
  IceServerInfo,
  Interrupt,
  MetricsMessage,
  Mute,
  Ping,
  Played,
  Pong,
  ProtocolMessage,
  Ready,
  ServerMessage,
  Start,
  TimelineMessage,
  ToolMessage,
  TranscriptMessage,
  UserStateMessage,
  UserText,
} from "./protocol.gen.js";
export { CloseCode, ErrorCode, PROTOCOL_VERSION } from "./protocol.gen.js";

import type { AgentStateMessage, UserStateMessage } from "./protocol.gen.js";

export type AgentStateName = AgentStateMessage["state"];
export type UserStateName = UserStateMessage["state"];
