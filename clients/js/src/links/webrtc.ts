/**
 * The WebRTC transport (`POST /api/offer`): the microphone and the agent's voice as audio
 * tracks, the protocol's JSON on a data channel named "rejoinder". No `start`: the offer's
 * URL carries `timeline=1` and `resume=<token>`; the whole offer, ICE candidates included,
 * goes in one POST (the server does no trickle ICE).
 *
 * Playback truth: the client cannot see inside the browser's WebRTC audio pipeline, so it
 * reads the receiver's inbound-rtp stats every 40 ms (on the audio clock, which background
 * tabs do not throttle) and reports how far the jitter buffer has played out, in samples of
 * the agent's track at its RTP clock (48 kHz Opus):
 *   totalSamplesReceived - concealedSamples - insertedSamplesForDeceleration
 *   + removedSamplesForAcceleration
 * (played out, less the audio invented for gaps and stretching, plus what was skipped to
 * catch up), less the output device's latency. Silence on the track counts (the server maps
 * track positions to agent samples); audio lost in transit never does. The browser refreshes
 * these counters every 50-90 ms and nothing is guessed between refreshes, so the count lags
 * the speaker by up to ~130 ms rather than lead it. On `clear` the client reports where it
 * is at once, marked cleared (accepted, not needed: the server re-bases itself).
 *
 * ICE: the peer connection is created with the ICE servers of the link's `IceSource`
 * (`ice.ts`: by default the server's `GET /api/ice`, asked first); with `iceTimeoutMs`, an
 * attempt whose peer connection is not connected that long after it began fails
 * (`connect_failed`: no path to the server), so the caller can try another transport.
 *
 * How it ends: the data channel closing while the peer is still connected is the server
 * ending the session (1000; or the close code of the fatal `error` that came before it);
 * the peer connection failing, or staying disconnected for `disconnectGraceMs`, is a drop
 * (1006), which the client reconnects.
 *
 * Leaving without a goodbye: there is no close code, and the server takes the client
 * closing its peer connection (or data channel) as the goodbye that ends the session. So a
 * connection the client gives up on in order to resume (`abandon()`) is not closed while
 * the server may still carry the session on it: it goes quiet (its audio stops playing,
 * its microphone sender sends nothing, no message goes out, none is read) and stays open
 * until the client closes it, once the resume took over (the server then ignores this
 * peer) or failed for good. Meanwhile the server hears no microphone on it and takes it
 * for dropped after its media timeout, which keeps the session too.
 */

import { ERROR_CLOSE_CODES, RejoinderError } from "../errors.js";
import { chooseIce, type IceChoice, type IceSource } from "../ice.js";
import { decodeServerMessage } from "../messages.js";
import type { AudioSession, InboundAudioStats, PeerSession, Platform } from "../platform.js";
import type { ClientMessage, ErrorMessage } from "../protocol.js";
import { PlayedReporter } from "../reporting.js";
import { STATS_INTERVAL_MS } from "../limits.js";
import type { LinkClose } from "../reconnect.js";
import type { Link, LinkEvents } from "./link.js";

/** Samples the jitter buffer played out from received packets, or `null` when the browser
 * does not count them. */
export function playedOut(stats: InboundAudioStats): number | null {
  if (typeof stats.totalSamplesReceived !== "number") return null;
  return (
    stats.totalSamplesReceived -
    (stats.concealedSamples ?? 0) -
    (stats.insertedSamplesForDeceleration ?? 0) +
    (stats.removedSamplesForAcceleration ?? 0)
  );
}

export interface WebRTCLinkOptions {
  readonly platform: Platform;
  readonly offerUrl: URL;
  readonly audio: AudioSession;
  readonly camera: MediaStream | null;
  /** The ICE servers, when `ice` is not given (nothing asked of the server). */
  readonly iceServers: readonly RTCIceServer[];
  /** Where the ICE servers come from (asked of the server before the offer). */
  readonly ice?: IceSource | undefined;
  /** Fail an attempt whose peer connection is not connected this long after it began. */
  readonly iceTimeoutMs?: number | undefined;
  readonly audioElement?: HTMLAudioElement | undefined;
  readonly timeline: boolean;
  readonly resume: string | null;
  readonly events: LinkEvents;
  /** How long a `disconnected` peer may take to come back before it counts as dropped. */
  readonly disconnectGraceMs?: number;
}

export class WebRTCLink implements Link {
  readonly sentSamples = 0; // the microphone goes as a track
  readonly #options: WebRTCLinkOptions;
  /** Null until the ICE servers are known (asked of the server first). */
  #peer: PeerSession | null = null;
  readonly #reporter: PlayedReporter;
  readonly #stopTicks: () => void;
  #opened = false;
  #ready = false;
  /** The client is done with it: no events, reports or messages (its peer may be open). */
  #inert = false;
  /** Abandoned and kept open (quiet) while the session resumes elsewhere. */
  #parked = false;
  /** Its peer connection is closed. */
  #released = false;
  #state = "new";
  #serverError: ErrorMessage | null = null;
  #disconnectTimer: unknown = null;
  #iceTimer: unknown = null;
  #clockRate = 48000;
  #clockStart: number | null = null;
  #polling = false;
  #again = false;
  #clearsToAnswer = 0;

  constructor(options: WebRTCLinkOptions) {
    this.#options = options;
    this.#reporter = new PlayedReporter(() => options.platform.timers.now());
    // Nothing to ask of the server: the peer connection is made now, as it always was (and
    // a platform without WebRTC throws here, before anything else is started).
    const source = options.ice;
    const asking = source !== undefined && source.url !== null && options.platform.get !== undefined;
    if (!asking) {
      const fallback = source?.fallback ?? { servers: options.iceServers, policy: undefined };
      this.#createPeer({ servers: fallback.servers, policy: source?.policy ?? fallback.policy });
    }
    this.#stopTicks = options.audio.every(STATS_INTERVAL_MS, () => void this.#poll(false));
    const bound = options.iceTimeoutMs;
    if (bound !== undefined && bound > 0) {
      this.#iceTimer = options.platform.timers.setTimeout(() => {
        this.#iceTimer = null;
        this.#dropped(`no connection within ${bound / 1000} s (ICE found no path to the server)`);
      }, bound);
    }
    if (asking) void this.#askThenNegotiate(source);
    else void this.#negotiate();
  }

  #createPeer(ice: IceChoice): PeerSession {
    const options = this.#options;
    const peer = (this.#peer = options.platform.createPeer({
      microphone: options.audio.microphone,
      camera: options.camera,
      iceServers: ice.servers,
      iceTransportPolicy: ice.policy,
      audioElement: options.audioElement,
    }));
    peer.onOpen = () => {
      this.#opened = true;
    };
    peer.onMessage = (text) => this.#receive(text);
    peer.onChannelClose = () => this.#channelClosed();
    peer.onState = (state) => this.#stateChanged(state);
    return peer;
  }

  async #askThenNegotiate(source: IceSource): Promise<void> {
    const ice = await chooseIce(this.#options.platform, source);
    if (this.#inert) return; // given up (or closed) meanwhile: no peer connection is made
    try {
      this.#createPeer(ice);
    } catch (error) {
      const why = error instanceof Error ? error.message : String(error);
      const failure =
        error instanceof RejoinderError ? error : new RejoinderError("connect_failed", why, { cause: error });
      this.#finish({ code: 1006, reason: why, serverError: null, failure });
      return;
    }
    await this.#negotiate();
  }

  async #negotiate(): Promise<void> {
    const peer = this.#peer!;
    const url = new URL(this.#options.offerUrl.href);
    if (this.#options.timeline) url.searchParams.set("timeline", "1");
    if (this.#options.resume !== null) url.searchParams.set("resume", this.#options.resume);
    let status = 0;
    let body = "";
    let stage = "could not make the offer";
    try {
      const offer = await peer.offer();
      if (this.#inert) return;
      stage = `could not post the offer to ${url.origin}${url.pathname}`;
      const response = await this.#options.platform.post(url.href, JSON.stringify({ sdp: offer.sdp, type: offer.type }));
      status = response.status;
      body = await response.text();
      if (this.#inert) return;
      if (response.ok) {
        stage = "the answer could not be used";
        const answer = JSON.parse(body) as { sdp?: unknown; type?: unknown };
        if (typeof answer.sdp !== "string" || typeof answer.type !== "string") throw new Error("it has no SDP");
        await peer.accept({ sdp: answer.sdp, type: answer.type });
        return;
      }
    } catch (error) {
      if (this.#inert) return;
      const why = error instanceof Error ? error.message : String(error);
      const what = stage;
      this.#finish({
        code: 1006,
        reason: why,
        serverError: null,
        failure: new RejoinderError("connect_failed", `${what}: ${why}`, { closeCode: 1006, cause: error }),
      });
      return;
    }
    this.#finish(refusal(status, body, url));
  }

  #receive(text: string): void {
    if (this.#inert) return;
    const decoded = decodeServerMessage(text);
    if (decoded === null) return;
    if (!decoded.ok) {
      this.#options.events.invalid(decoded.why);
      return;
    }
    const message = decoded.message;
    if (message.type === "ready") this.#ready = true;
    else if (message.type === "clear") {
      this.#reporter.clearReceived();
      void this.#poll(true);
    } else if (message.type === "error") this.#serverError = message;
    this.#options.events.message(message);
  }

  async #count(): Promise<number | null> {
    if (this.#peer === null) return null;
    const stats = await this.#peer.inboundAudio();
    if (stats === null) return null;
    if (typeof stats.clockRate === "number" && stats.clockRate > 0) this.#clockRate = stats.clockRate;
    const count = playedOut(stats);
    if (count !== null) return count;
    // No playout counters: a clock from the first packet (it cannot see stalls, so it may
    // run ahead of what was heard; only for browsers that count nothing).
    if (!stats.packetsReceived) return null;
    const now = this.#options.platform.timers.now();
    this.#clockStart ??= now;
    return Math.round(((now - this.#clockStart) / 1000) * this.#clockRate);
  }

  /** Reads the stats and reports; `cleared`: this report answers a `clear`. Reads never
   * overlap: one asked for meanwhile runs after, and each clear gets its own answer. */
  async #poll(cleared: boolean): Promise<void> {
    if (cleared) this.#clearsToAnswer += 1;
    if (this.#polling) {
      this.#again = true;
      return;
    }
    this.#polling = true;
    try {
      do {
        this.#again = false;
        await this.#report();
      } while (!this.#inert && this.#ready && (this.#again || this.#clearsToAnswer > 0));
    } finally {
      this.#polling = false;
    }
  }

  async #report(): Promise<void> {
    let count: number | null = null;
    try {
      count = await this.#count();
    } catch {
      // The stats could not be read this time (the peer is closing): the next tick tries.
    }
    if (this.#inert || !this.#ready) return;
    const cleared = this.#clearsToAnswer > 0;
    if (count === null && !cleared) return;
    if (cleared) this.#clearsToAnswer -= 1;
    const device = Math.round(this.#options.audio.outputLatency() * this.#clockRate);
    const samples = Math.max(0, (count ?? 0) - device, this.#reporter.samples);
    const played = this.#reporter.report(samples, cleared);
    if (played !== null && this.send(played)) this.#options.events.played(played);
  }

  send(message: ClientMessage): boolean {
    if (this.#inert || this.#peer === null || !this.#peer.channelOpen) return false;
    this.#peer.send(JSON.stringify(message));
    return true;
  }

  sendAudio(): void {}

  playerReport(): void {}

  #stateChanged(state: string): void {
    this.#state = state;
    if (this.#parked && (state === "failed" || state === "closed")) this.#release();
    if (this.#inert) return;
    const timers = this.#options.platform.timers;
    if (state === "connected" && this.#iceTimer !== null) {
      timers.clearTimeout(this.#iceTimer);
      this.#iceTimer = null;
    }
    if (state === "disconnected" && this.#disconnectTimer === null) {
      this.#disconnectTimer = timers.setTimeout(
        () => this.#dropped("the peer connection stayed disconnected"),
        this.#options.disconnectGraceMs ?? 4000,
      );
    } else if (state !== "disconnected" && this.#disconnectTimer !== null) {
      timers.clearTimeout(this.#disconnectTimer);
      this.#disconnectTimer = null;
    }
    if (state === "failed" || state === "closed") this.#dropped(`the peer connection ${state}`);
  }

  #dropped(reason: string): void {
    const failure = this.#opened
      ? null
      : new RejoinderError("connect_failed", `could not connect: ${reason}`, { closeCode: 1006 });
    this.#finish({ code: 1006, reason, serverError: this.#serverError, failure });
  }

  #channelClosed(): void {
    if (this.#parked) this.#release(); // the server let go of it: nothing left to protect
    if (this.#inert) return;
    const fatal = this.#serverError === null ? undefined : ERROR_CLOSE_CODES[this.#serverError.code];
    if (fatal !== undefined) {
      this.#finish({ code: fatal, reason: this.#serverError!.message, serverError: this.#serverError, failure: null });
    } else if (this.#opened && this.#state === "connected") {
      this.#finish({ code: 1000, reason: "the server closed the data channel", serverError: null, failure: null });
    } else this.#dropped("the data channel closed");
  }

  close(_goodbye: boolean): void {
    this.#stop();
    this.#release();
  }

  abandon(): boolean {
    if (this.#released) return false;
    this.#stop();
    // The server takes a session over on a peer once its data channel is open (and the
    // browser says a channel is open once it asked the server for it), so a peer whose
    // channel never opened, or closed, or that failed, carries nothing: it closes now.
    const peer = this.#peer;
    const mayCarry =
      peer !== null && this.#opened && peer.channelOpen && this.#state !== "failed" && this.#state !== "closed";
    if (!mayCarry) {
      this.#release();
      return false;
    }
    peer.quiet();
    this.#parked = true;
    return true;
  }

  /** Nothing more of this link reaches the client or goes out (its peer stays as it is). */
  #stop(): void {
    if (this.#inert) return;
    this.#inert = true;
    this.#stopTicks();
    const timers = this.#options.platform.timers;
    if (this.#disconnectTimer !== null) timers.clearTimeout(this.#disconnectTimer);
    if (this.#iceTimer !== null) timers.clearTimeout(this.#iceTimer);
    this.#disconnectTimer = this.#iceTimer = null;
  }

  #release(): void {
    if (this.#released) return;
    this.#released = true;
    this.#parked = false;
    this.#peer?.close(); // (none yet: the ICE servers were still being asked for)
  }

  /** The link found the connection closed or dropped: it tells the client, which closes
   * or abandons it (the peer connection stays open until then). */
  #finish(close: LinkClose): void {
    if (this.#inert) return;
    this.#stop();
    this.#options.events.closed(close);
  }
}

/** An offer the server did not answer: what the client makes of the HTTP status. */
function refusal(status: number, body: string, url: URL): LinkClose {
  let detail = body.slice(0, 300);
  let code: string | undefined;
  try {
    const data = JSON.parse(body) as { error?: unknown; code?: unknown; message?: unknown };
    if (typeof data.code === "string") code = data.code;
    const text = typeof data.error === "string" ? data.error : typeof data.message === "string" ? data.message : null;
    if (text !== null) detail = text;
  } catch {
    // not JSON: the body as text
  }
  const where = `${url.origin}${url.pathname}`;
  if (code === "resume_failed" || (code === undefined && /resume_failed/.test(body))) {
    const serverError: ErrorMessage = { type: "error", code: "resume_failed", message: detail };
    return { code: 4004, reason: detail, serverError, failure: null };
  }
  if (status === 502 || status === 503 || status === 504 || status === 429) {
    const failure = new RejoinderError(
      "server_full",
      `the server is full or draining, try again later (HTTP ${status} from ${where})${detail ? ": " + detail : ""}`,
      { closeCode: 1013, serverMessage: detail || null },
    );
    return { code: 1013, reason: detail, serverError: null, failure };
  }
  const failure = new RejoinderError(
    code ?? "offer_refused",
    `the server refused the offer (HTTP ${status} from ${where})${detail ? ": " + detail : ""}`,
    { closeCode: status >= 500 ? 1011 : 1008, serverMessage: detail || null },
  );
  return { code: status >= 500 ? 1011 : 1008, reason: detail, serverError: null, failure };
}
