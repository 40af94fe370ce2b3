/**
 * The ICE servers (STUN/TURN) a WebRTC connection uses, and where they come from.
 *
 * A peer connection must be created with its ICE servers, and the offer carries every
 * candidate they gave it (the server does no trickle ICE), so the client asks the server
 * for them before each offer: `GET /api/ice` answers `{"ice_servers": [{urls, username,
 * credential}], "ice_transport_policy": "all" | "relay"}`, with TURN credentials minted
 * for this connection (time-limited: hence a fresh ask on every reconnect). When that
 * cannot be had (an older server without the route, a network error, no answer within
 * `ICE_FETCH_TIMEOUT_MS`), the last `ready`'s `ice_servers` stand in, else none.
 */

import type { HttpResponse, Platform } from "./platform.js";
import type { Ready } from "./protocol.js";

/** How long the client waits for `GET /api/ice` before it offers without its answer. */
export const ICE_FETCH_TIMEOUT_MS = 5000;

/** ICE servers for one peer connection, and the policy the server asked for (if any). */
export interface IceChoice {
  readonly servers: readonly RTCIceServer[];
  readonly policy: RTCIceTransportPolicy | undefined;
}

export const NO_ICE: IceChoice = { servers: [], policy: undefined };

/** Where a connection's ICE servers come from. */
export interface IceSource {
  /** The server's `GET /api/ice`, asked before the offer; null: not asked. */
  readonly url: URL | null;
  /** What is used when the server is not asked, or could not say. */
  readonly fallback: IceChoice;
  /** The caller's own policy: it wins over the server's. */
  readonly policy?: RTCIceTransportPolicy | undefined;
}

/** The server's answer (`/api/ice`'s body, or a `ready`'s fields), checked; null when it
 * is not one (an entry without a string URL, a policy that is not "all" or "relay"). */
export function readIce(data: unknown): IceChoice | null {
  if (typeof data !== "object" || data === null) return null;
  const { ice_servers: entries, ice_transport_policy: policy } = data as Record<string, unknown>;
  if (!Array.isArray(entries)) return null;
  if (policy !== undefined && policy !== null && policy !== "all" && policy !== "relay") return null;
  const servers: RTCIceServer[] = [];
  for (const entry of entries) {
    if (typeof entry !== "object" || entry === null) return null;
    const { urls, username, credential } = entry as Record<string, unknown>;
    const list = typeof urls === "string" ? [urls] : urls;
    if (!Array.isArray(list) || list.length === 0 || !list.every((u) => typeof u === "string")) return null;
    const server: RTCIceServer = { urls: [...(list as string[])] };
    if (typeof username === "string") server.username = username;
    if (typeof credential === "string") server.credential = credential;
    servers.push(server);
  }
  return { servers, policy: policy ?? undefined };
}

/** The ICE servers a `ready` brought, for the next connection (null: it brought none). */
export function iceOfReady(ready: Ready): IceChoice | null {
  return ready.ice_servers === undefined || ready.ice_servers === null ? null : readIce(ready);
}

/** `GET url` for the server's ICE servers; null when the answer cannot be had or read. */
export async function fetchIce(
  platform: Platform,
  url: URL,
  timeoutMs: number = ICE_FETCH_TIMEOUT_MS,
): Promise<IceChoice | null> {
  const get = platform.get;
  if (get === undefined) return null;
  const timers = platform.timers;
  let timer: unknown = null;
  const late = new Promise<null>((resolve) => {
    timer = timers.setTimeout(() => resolve(null), timeoutMs);
  });
  const asked = (async (): Promise<IceChoice | null> => {
    let response: HttpResponse;
    try {
      response = await get.call(platform, url.href);
      if (!response.ok) return null; // 404: a server from before /api/ice
      return readIce(JSON.parse(await response.text()));
    } catch {
      return null;
    }
  })();
  try {
    return await Promise.race([asked, late]);
  } finally {
    timers.clearTimeout(timer);
  }
}

/** The ICE servers and policy to create one peer connection with. */
export async function chooseIce(platform: Platform, source: IceSource): Promise<IceChoice> {
  const asked = source.url === null ? null : await fetchIce(platform, source.url);
  const choice = asked ?? source.fallback;
  return { servers: choice.servers, policy: source.policy ?? choice.policy };
}
