/**
 * Where to connect: the WebSocket (`GET /ws`), the WebRTC offer (`POST /api/offer`) and
 * the ICE servers for it (`GET /api/ice`) of one rejoinder app, from one URL.
 *
 * `url` is the app's address: `http(s)://host:port/` (or a folder under it, or a page in
 * that folder, as the page's own `new URL("ws", location.href)` does), or the WebSocket
 * itself (`ws(s)://host:port/ws`). A relative URL is taken against `base` (the page's
 * location in a browser). Its query parameters go to both endpoints: the agent's entry
 * point receives them as `conn.query`.
 */

export interface Endpoints {
  readonly websocket: URL;
  readonly offer: URL;
  readonly ice: URL;
}

export function endpoints(url: string | URL, base?: string): Endpoints {
  let parsed: URL;
  try {
    parsed = new URL(url, base);
  } catch {
    throw new TypeError(`not a URL: ${String(url)}`);
  }
  const secure = parsed.protocol === "https:" || parsed.protocol === "wss:";
  if (!["http:", "https:", "ws:", "wss:"].includes(parsed.protocol)) {
    throw new TypeError(`a rejoinder URL is http(s) or ws(s), not ${parsed.protocol} (${parsed.href})`);
  }
  let folder = parsed.pathname;
  let websocketPath: string | null = null;
  if (parsed.protocol.startsWith("ws")) {
    websocketPath = folder;
    folder = folder.endsWith("/ws") ? folder.slice(0, -2) : folder.slice(0, folder.lastIndexOf("/") + 1);
  } else if (!folder.endsWith("/")) {
    const last = folder.slice(folder.lastIndexOf("/") + 1);
    folder = last.includes(".") ? folder.slice(0, folder.lastIndexOf("/") + 1) : folder + "/";
  }
  const websocket = new URL(parsed.href);
  websocket.protocol = secure ? "wss:" : "ws:";
  websocket.pathname = websocketPath ?? folder + "ws";
  websocket.hash = "";
  const offer = new URL(parsed.href);
  offer.protocol = secure ? "https:" : "http:";
  offer.pathname = folder + "api/offer";
  offer.hash = "";
  const ice = new URL(offer.href);
  ice.pathname = folder + "api/ice";
  return { websocket, offer, ice };
}
