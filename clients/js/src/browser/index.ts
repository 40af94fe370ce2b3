/** The browser's implementation of the client's `Platform`. */

import type { HttpResponse, Platform, SocketLike } from "../platform.js";
import { openBrowserAudio } from "./audio.js";
import { createBrowserPeer } from "./peer.js";

export function browserPlatform(): Platform {
  return {
    openAudio: openBrowserAudio,
    createSocket: (url) => new WebSocket(url) as unknown as SocketLike,
    createPeer: createBrowserPeer,
    async post(url: string, body: string): Promise<HttpResponse> {
      return fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body });
    },
    async get(url: string): Promise<HttpResponse> {
      return fetch(url, { cache: "no-store" });
    },
    timers: {
      setTimeout: (callback, ms) => setTimeout(callback, ms),
      clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
      now: () => performance.now(),
    },
    get baseUrl() {
      return typeof location === "undefined" ? undefined : location.href;
    },
  };
}
