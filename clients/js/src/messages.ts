/**
 * Server text messages in, typed messages out (no I/O).
 *
 * Clients must ignore message types and fields they do not know (docs/protocol.md,
 * "Compatibility"): an unknown `type` decodes to `null`. A known type whose fields are
 * wrong is reported (`invalid`), never half-applied.
 */

import type { ServerMessage } from "./protocol.js";

export type Decoded =
  | { readonly ok: true; readonly message: ServerMessage }
  | { readonly ok: false; readonly why: string }
  | null;

type Json = Record<string, unknown>;

const AGENT_STATES = new Set(["initializing", "listening", "thinking", "speaking"]);
const USER_STATES = new Set(["listening", "speaking", "away"]);

const str = (value: unknown): value is string => typeof value === "string";
const bool = (value: unknown): value is boolean => typeof value === "boolean";
const optional = <T>(check: (value: unknown) => value is T) => (value: unknown) =>
  value === undefined || value === null || check(value);
const object = (value: unknown): value is Json =>
  typeof value === "object" && value !== null && !Array.isArray(value);
const count = (value: unknown): value is number =>
  typeof value === "number" && Number.isInteger(value) && value > 0;
const whole = (value: unknown): value is number => typeof value === "number" && Number.isInteger(value) && value >= 0;
const finite = (value: unknown): value is number => typeof value === "number" && Number.isFinite(value);

/** What each known type must have; a check returns the first problem, or "". */
const CHECKS: Record<string, (m: Json) => string> = {
  ready: (m) =>
    !count(m.sample_rate)
      ? "sample_rate is not a positive integer"
      : !optional(str)(m.resume_token) || !optional(str)(m.session_id)
        ? "resume_token and session_id are strings"
        : !optional(finite)(m.resume_grace) || !optional(bool)(m.resumed)
          ? "resume_grace is a number, resumed a boolean"
          : "",
  clear: () => "",
  agent_state: (m) => (str(m.state) && AGENT_STATES.has(m.state) ? "" : "unknown agent state"),
  user_state: (m) => (str(m.state) && USER_STATES.has(m.state) ? "" : "unknown user state"),
  transcript: (m) =>
    (m.role === "user" || m.role === "agent") && str(m.text) && bool(m.final) && optional(bool)(m.interrupted)
      ? ""
      : "a transcript has a role, a text and final",
  tool: (m) =>
    str(m.name) && str(m.call_id) && (m.status === "started" || m.status === "finished")
      ? ""
      : "a tool message has a name, a call_id and a status",
  metrics: (m) => (object(m.metrics) && str(m.metrics.type) ? "" : "metrics is an object with a type"),
  timeline: (m) =>
    object(m.entry) && finite(m.entry.t) && str(m.entry.kind) ? "" : 'an entry has a number "t" and a "kind"',
  error: (m) => (str(m.code) && str(m.message) ? "" : "an error has a code and a message"),
  pong: (m) => (optional(whole)(m.id) ? "" : "id is an integer"),
};

/** One text message from the server: typed, `null` (a type to ignore), or why not. */
export function decodeServerMessage(text: string): Decoded {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    return { ok: false, why: "not JSON" };
  }
  if (!object(data) || !str(data.type)) return { ok: false, why: 'not an object with a string "type"' };
  const check = CHECKS[data.type];
  if (check === undefined) return null;
  const problem = check(data);
  if (problem) return { ok: false, why: `${data.type}: ${problem}` };
  return { ok: true, message: data as unknown as ServerMessage };
}
