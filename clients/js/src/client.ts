/**
 * `RejoinderClient`: one API over both transports, for a browser page (or any runtime that
 * brings a `Platform`).
 *
 * ```ts
 * const client = new RejoinderClient();
 * client.on("agentState", ({ state }) => show(state));
 * client.on("transcript", (turn) => render(turn));
 * await client.connect({ url: "https://agent.example.com/", transport: "webrtc" });
 * ```
 *
 * The audio side (context, microphone, worklets) is opened once per `connect()` and kept
 * across reconnects; each connection is a `Link`. What a close means (end, give up, resume,
 * new session) is the `ReconnectPolicy`'s to decide; this class carries it out.
 */

import { browserPlatform } from "./browser/index.js";
import { Conversation, type Transcript } from "./conversation.js";
import { TypedEmitter } from "./emitter.js";
import { RejoinderError } from "./errors.js";
import type { ClientState, ReadyEvent, RejoinderEvents, Transport } from "./events.js";
import { iceOfReady, NO_ICE, type IceChoice, type IceSource } from "./ice.js";
import { DEFAULT_CAPTURE_RATE, MAX_SAMPLE_RATE, MAX_USER_TEXT_CHARS, MIN_SAMPLE_RATE } from "./limits.js";
import type { Link, LinkEvents } from "./links/link.js";
import { DEFAULT_PING_INTERVAL_MS, DEFAULT_PING_TIMEOUT_MS, Heartbeat } from "./liveness.js";
import { WebRTCLink } from "./links/webrtc.js";
import { WebSocketLink } from "./links/websocket.js";
import type { AudioSession, Platform } from "./platform.js";
import type { AgentStateName, ClientMessage, Ready, ServerMessage, UserStateName } from "./protocol.js";
import { ReconnectPolicy, type LinkClose, type ReconnectOptions } from "./reconnect.js";
import { endpoints } from "./url.js";

export interface ConnectOptions {
  /** The app's address (`https://host/`), or its WebSocket (`wss://host/ws`). */
  url: string | URL;
  /** Default `"websocket"`. */
  transport?: Transport;
  /** `true` (default): the default microphone; a stream: that one (not stopped on close);
   * `false`: none (typed text only). */
  microphone?: MediaStream | boolean;
  /** Ask for `timeline` events (the floor's entries of the session timeline). */
  timeline?: boolean;
  /** The microphone rate sent in `start` (WebSocket; default 16000). */
  sampleRate?: number;
  /** Reconnect after a drop (default: up to 8 attempts, 250 ms doubling to 5 s); `false`: never. */
  reconnect?: ReconnectOptions | false;
  /** How long a connection may take to bring `ready` (default 15000 ms). */
  connectTimeoutMs?: number;
  /** While connected, ping the server this often (default 5000 ms; 0: never), to notice a
   * connection that died without closing. */
  pingIntervalMs?: number;
  /** A connection whose oldest unanswered ping is this old is taken for dropped: closed
   * (not as a goodbye) and resumed (default 10000 ms; 0: never). */
  pingTimeoutMs?: number;
  /** An audio context to use (not closed by the client); else one is created. */
  audioContext?: AudioContext;
  /** Load the worklet from this URL (the package's `dist/worklet.js`) instead of the copy
   * embedded in the bundle: for a Content-Security-Policy without `blob:`. */
  workletUrl?: string | URL;
  /** WebRTC: share a camera too (its video tracks go to the agent). */
  camera?: MediaStream;
  /** WebRTC: ICE servers (STUN/TURN). Default: the server's, asked of it before each offer
   * (`GET /api/ice`, with TURN credentials minted for the connection); none when it has
   * none (the server is reachable directly). Given: these, and the server is not asked. */
  iceServers?: RTCIceServer[];
  /** WebRTC: `"relay"` connects only through a TURN relay, `"all"` any way ICE finds.
   * Default: what the server asks for (`GET /api/ice`), else `"all"`. */
  iceTransportPolicy?: RTCIceTransportPolicy;
  /** WebRTC: an attempt whose peer connection is not connected this long after it began
   * fails (`connect_failed`: ICE found no path), sooner than `connectTimeoutMs`, so that a
   * caller can try the WebSocket instead. Default: no bound of its own. */
  iceTimeoutMs?: number;
  /** WebRTC: the element that plays the agent's voice (default: one the client creates). */
  audioElement?: HTMLAudioElement;
}

export interface ClientOptions {
  /** The platform (default: the browser's). */
  platform?: Platform;
}

export type { ClientState } from "./events.js";

export interface ClientStats {
  /** Microphone samples sent (WebSocket), over the whole `connect()`. */
  readonly sentSamples: number;
  /** Agent samples received (WebSocket), over the whole `connect()`. */
  readonly receivedSamples: number;
  /** The last `played` count reported, on the current connection. */
  readonly playedSamples: number;
  /** `played` reports marked `cleared` sent. */
  readonly clearedReports: number;
}

interface Settings {
  readonly transport: Transport;
  readonly websocketUrl: string;
  readonly offerUrl: URL;
  readonly iceUrl: URL;
  readonly sampleRate: number;
  readonly timeline: boolean;
  readonly connectTimeoutMs: number;
  /** Both set, or both 0 (no pings). */
  readonly pingIntervalMs: number;
  readonly pingTimeoutMs: number;
  readonly options: ConnectOptions;
}

/** A duration option: a finite number ≥ 0 (ms), or its default. */
function milliseconds(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw new RangeError(`${name} is a number of milliseconds ≥ 0, not ${String(value)}`);
  }
  return value;
}

function settle(options: ConnectOptions, baseUrl: string | undefined): Settings {
  const transport = options.transport ?? "websocket";
  if (transport !== "websocket" && transport !== "webrtc") {
    throw new TypeError(`transport is "websocket" or "webrtc", not ${JSON.stringify(transport)}`);
  }
  const sampleRate = options.sampleRate ?? DEFAULT_CAPTURE_RATE;
  if (!Number.isInteger(sampleRate) || sampleRate < MIN_SAMPLE_RATE || sampleRate > MAX_SAMPLE_RATE) {
    throw new RangeError(`sampleRate is an integer from ${MIN_SAMPLE_RATE} to ${MAX_SAMPLE_RATE} Hz, not ${sampleRate}`);
  }
  if (options.camera !== undefined && transport !== "webrtc") {
    throw new TypeError("the camera goes over WebRTC only (transport: \"webrtc\")");
  }
  const policy = options.iceTransportPolicy;
  if (policy !== undefined && policy !== "all" && policy !== "relay") {
    throw new TypeError(`iceTransportPolicy is "all" or "relay", not ${JSON.stringify(policy)}`);
  }
  milliseconds("iceTimeoutMs", options.iceTimeoutMs, 0);
  const { websocket, offer, ice } = endpoints(options.url, baseUrl);
  const pingIntervalMs = milliseconds("pingIntervalMs", options.pingIntervalMs, DEFAULT_PING_INTERVAL_MS);
  const pingTimeoutMs = milliseconds("pingTimeoutMs", options.pingTimeoutMs, DEFAULT_PING_TIMEOUT_MS);
  const pinging = pingIntervalMs > 0 && pingTimeoutMs > 0;
  return {
    transport,
    websocketUrl: websocket.href,
    offerUrl: offer,
    iceUrl: ice,
    sampleRate,
    timeline: options.timeline === true,
    connectTimeoutMs: options.connectTimeoutMs ?? 15000,
    pingIntervalMs: pinging ? pingIntervalMs : 0,
    pingTimeoutMs: pinging ? pingTimeoutMs : 0,
    options,
  };
}

function asError(error: unknown): RejoinderError {
  if (error instanceof RejoinderError) return error;
  const message = error instanceof Error ? error.message : String(error);
  return new RejoinderError("client_error", message, { cause: error });
}

export class RejoinderClient extends TypedEmitter<RejoinderEvents> {
  readonly #platform: Platform;
  #state: ClientState = "idle";
  #announced: ClientState = "idle"; // the state the last `connectionState` event told
  #conversation = new Conversation();
  #policy = new ReconnectPolicy();
  #settings: Settings | null = null;
  #audio: AudioSession | null = null;
  #link: Link | null = null;
  /** Connections left in order to resume the session on a newer one and still open: on
   * WebRTC closing one is the session's goodbye, so each waits, quiet, for a `ready` on a
   * newer one (the resume took over) or for the resume to fail for good. */
  #abandoned: Link[] = [];
  #resumeSent: string | null = null; // the token the current link was opened with
  #epoch = 0;
  #run = 0; // one per connect(): callbacks of an earlier one are ignored
  #retryTimer: unknown = null;
  #readyTimer: unknown = null;
  #heartbeat: Heartbeat | null = null; // the ready link's pings
  #pingId = 0; // over every connection: a pong can answer only a ping of its own link
  #pending: { resolve(ready: ReadyEvent): void; reject(error: RejoinderError): void } | null = null;
  #ready: ReadyEvent | null = null;
  /** The ICE servers the last `ready` brought: for a reconnect when the server cannot say. */
  #readyIce: IceChoice | null = null;
  #sessionId: string | null = null;
  #muted = false;
  #stats = { sentBefore: 0, receivedSamples: 0, playedSamples: 0, clearedReports: 0 };

  constructor(options: ClientOptions = {}) {
    super();
    this.#platform = options.platform ?? browserPlatform();
  }

  get state(): ClientState {
    return this.#state;
  }

  get agentState(): AgentStateName | null {
    return this.#conversation.agentState;
  }

  get userState(): UserStateName | null {
    return this.#conversation.userState;
  }

  /** Every turn so far, in order (interim ones as they stand). */
  get transcripts(): readonly Transcript[] {
    return [...this.#conversation.transcripts];
  }

  get muted(): boolean {
    return this.#muted;
  }

  get sessionId(): string | null {
    return this.#sessionId;
  }

  /** The last `ready` (null before the first). */
  get ready(): ReadyEvent | null {
    return this.#ready;
  }

  get stats(): ClientStats {
    const s = this.#stats;
    return {
      sentSamples: s.sentBefore + (this.#link?.sentSamples ?? 0),
      receivedSamples: s.receivedSamples,
      playedSamples: s.playedSamples,
      clearedReports: s.clearedReports,
    };
  }

  /** The audio context and the microphone stream in use (e.g. for a level meter). */
  get media(): { readonly context: AudioContext | null; readonly microphone: MediaStream | null } {
    return { context: this.#audio?.context ?? null, microphone: this.#audio?.microphone ?? null };
  }

  /**
   * Opens the microphone and the audio, connects, and resolves with the first `ready`.
   * Call it from a user gesture (browsers start audio only then). It rejects with a
   * `RejoinderError` (a `close` event says the same) when the microphone, the audio or
   * the connection fails before the agent is ready; nothing is retried before that.
   */
  connect(options: ConnectOptions): Promise<ReadyEvent> {
    if (this.#state !== "idle" && this.#state !== "closed") {
      return Promise.reject(new RejoinderError("already_connected", `connect() while ${this.#state}: close() first`));
    }
    let settings: Settings;
    try {
      settings = settle(options, this.#platform.baseUrl);
    } catch (error) {
      return Promise.reject(error);
    }
    this.#settings = settings;
    this.#setState("connecting");
    this.#conversation = new Conversation();
    this.#policy = new ReconnectPolicy(options.reconnect ?? {});
    this.#ready = null;
    this.#readyIce = null;
    this.#sessionId = null;
    this.#stats = { sentBefore: 0, receivedSamples: 0, playedSamples: 0, clearedReports: 0 };
    const run = ++this.#run;
    // Synchronously, while a click's user activation lasts: the audio context starts.
    let opening: Promise<AudioSession>;
    try {
      opening = this.#platform.openAudio({
        transport: settings.transport,
        microphone: options.microphone ?? true,
        audioContext: options.audioContext,
        workletUrl: options.workletUrl,
      });
    } catch (error) {
      opening = Promise.reject(error);
    }
    const ready = new Promise<ReadyEvent>((resolve, reject) => {
      this.#pending = { resolve, reject };
      opening.then(
        (audio) => {
          if (run !== this.#run) {
            void audio.close();
            return;
          }
          this.#audio = audio;
          for (const track of audio.microphone?.getAudioTracks() ?? []) track.enabled = !this.#muted;
          if (audio.player !== null) audio.player.onReport = (report) => this.#link?.playerReport(report);
          if (settings.transport === "websocket") audio.startCapture(settings.sampleRate, (pcm) => this.#capture(pcm));
          this.#open(null);
        },
        (error: unknown) => {
          if (run === this.#run) void this.#finish(asError(error), false);
        },
      );
    });
    this.#announce(); // last: a listener may close() or connect() again
    return ready;
  }

  /** Typed user input: a user turn (it interrupts the agent, as speech would). */
  sendText(text: string): void {
    if (typeof text !== "string" || text.length === 0) throw new RejoinderError("invalid_text", "the text is empty");
    const length = [...text].length;
    if (length > MAX_USER_TEXT_CHARS) {
      throw new RejoinderError("invalid_text", `the text is ${length} characters, over ${MAX_USER_TEXT_CHARS}`);
    }
    this.#send({ type: "text", text });
  }

  /** Mutes the microphone: the session hears silence, and the user cannot take a turn or
   * interrupt. Kept across reconnects; takes effect on the server once connected. */
  mute(muted: boolean): void {
    const changed = this.#muted !== muted;
    this.#muted = muted;
    // WebRTC: a disabled track sends silence (WebSocket: `#capture` sends zeros).
    for (const track of this.#audio?.microphone?.getAudioTracks() ?? []) track.enabled = !muted;
    if (this.#state === "connected") this.#link?.send({ type: "mute", muted });
    if (changed) this.emit("muted", { muted });
  }

  /** Stops what the agent is saying now (a `clear` follows, as for a barge-in). */
  interrupt(): void {
    this.#send({ type: "interrupt" });
  }

  /** Ends the session (the server ends it too) and releases the microphone and audio. */
  async close(): Promise<void> {
    if (this.#state === "idle" || this.#state === "closed") return;
    this.#run += 1;
    await this.#finish(null, true);
  }

  /** The state changes now; listeners hear of it at the next `#announce()`, once the
   * client is consistent again (a change not yet told is told before this one). */
  #setState(next: ClientState): void {
    this.#announce();
    this.#state = next;
  }

  /** Tells `connectionState` listeners the state, if it is not the one they last heard. */
  #announce(): void {
    const previous = this.#announced;
    const state = this.#state;
    if (previous === state) return;
    this.#announced = state;
    this.emit("connectionState", { state, previous });
  }

  #send(message: ClientMessage): void {
    const sent = this.#state === "connected" && this.#link !== null && this.#link.send(message);
    if (!sent) {
      throw new RejoinderError("not_ready", `cannot send ${message.type} while ${this.#state}: wait for "ready"`);
    }
  }

  #capture(pcm: ArrayBuffer): void {
    // Muted: the server still gets its clock of audio, but silence.
    this.#link?.sendAudio(this.#muted ? new ArrayBuffer(pcm.byteLength) : pcm);
  }

  #open(resume: string | null): void {
    const settings = this.#settings!;
    const audio = this.#audio!;
    this.#retryTimer = null;
    this.#resumeSent = resume;
    let link: Link | null = null;
    const mine = (): boolean => link !== null && this.#link === link;
    const events: LinkEvents = {
      message: (message) => mine() && this.#message(message),
      invalid: (why) => mine() && this.emit("error", new RejoinderError("invalid_server_message", why)),
      played: (report) => {
        if (!mine()) return;
        this.#stats.playedSamples = report.samples;
        if (report.cleared) this.#stats.clearedReports += 1;
        this.emit("played", { samples: report.samples, cleared: report.cleared === true });
      },
      received: (samples) => {
        if (mine()) this.#stats.receivedSamples += samples;
      },
      // Not the current link any more (it cannot happen: one the client left is inert):
      // nothing of it may stay open.
      closed: (close) => (mine() ? this.#closed(close) : link?.close(false)),
    };
    try {
      link =
        settings.transport === "websocket"
          ? new WebSocketLink({
              platform: this.#platform,
              url: settings.websocketUrl,
              audio,
              epoch: ++this.#epoch,
              sampleRate: settings.sampleRate,
              timeline: settings.timeline,
              resume,
              events,
            })
          : new WebRTCLink({
              platform: this.#platform,
              offerUrl: settings.offerUrl,
              audio,
              camera: settings.options.camera ?? null,
              iceServers: settings.options.iceServers ?? [],
              ice: this.#iceSource(settings),
              iceTimeoutMs: settings.options.iceTimeoutMs,
              audioElement: settings.options.audioElement,
              timeline: settings.timeline,
              resume,
              events,
            });
    } catch (error) {
      this.#closed({ code: 1006, reason: "", serverError: null, failure: asError(error) });
      return;
    }
    this.#link = link;
    this.#readyTimer = this.#platform.timers.setTimeout(() => {
      if (!mine()) return;
      const seconds = settings.connectTimeoutMs / 1000;
      const failure = new RejoinderError("connect_timeout", `the agent was not ready within ${seconds} s`, {
        closeCode: 1006,
      });
      this.#closed({ code: 1006, reason: failure.message, serverError: null, failure }, "client gave up waiting");
    }, settings.connectTimeoutMs);
  }

  /** Where the next WebRTC connection's ICE servers come from: the caller's own, or the
   * server's (asked first; the last `ready`'s when it cannot say). */
  #iceSource(settings: Settings): IceSource {
    const given = settings.options.iceServers;
    const policy = settings.options.iceTransportPolicy;
    if (given !== undefined) return { url: null, fallback: { servers: given, policy: undefined }, policy };
    return { url: settings.iceUrl, fallback: this.#readyIce ?? NO_ICE, policy };
  }

  #message(message: ServerMessage): void {
    switch (message.type) {
      case "ready":
        this.#onReady(message);
        break;
      case "clear":
        this.emit("clear", {});
        break;
      case "agent_state": {
        const change = this.#conversation.agent(message.state);
        if (change !== null) this.emit("agentState", change);
        break;
      }
      case "user_state": {
        const change = this.#conversation.user(message.state);
        if (change !== null) this.emit("userState", change);
        break;
      }
      case "transcript":
        this.emit("transcript", this.#conversation.transcript(message));
        break;
      case "tool":
        this.emit("tool", {
          name: message.name,
          callId: message.call_id,
          status: message.status,
          error: message.error === true,
        });
        break;
      case "metrics":
        this.emit("metrics", message.metrics as RejoinderEvents["metrics"]);
        break;
      case "timeline":
        this.emit("timeline", message.entry as unknown as RejoinderEvents["timeline"]);
        break;
      case "error":
        this.emit("error", RejoinderError.fromServer(message));
        break;
      case "pong":
        this.#heartbeat?.pong(message.id);
        break;
    }
  }

  #onReady(message: Ready): void {
    this.#platform.timers.clearTimeout(this.#readyTimer);
    // This connection carries the session now (resumed: the server ignores the ones left
    // for it), or a new one began: the connections left behind can close.
    this.#closeAbandoned();
    const resumed = message.resumed === true;
    if (this.#resumeSent !== null && !resumed) {
      // A server that does not resume (an older one ignores `resume`) began a new session.
      this.#restarted(
        new RejoinderError("resume_failed", "the server began a new session instead of resuming the old one"),
      );
    }
    this.#policy.ready(message.resume_token);
    this.#readyIce = iceOfReady(message) ?? this.#readyIce;
    this.#sessionId = message.session_id ?? null;
    this.#setState("connected");
    this.#listen();
    const ready: ReadyEvent = {
      sampleRate: message.sample_rate,
      protocol: message.protocol ?? 1,
      sessionId: this.#sessionId,
      resumed,
      transport: this.#settings!.transport,
    };
    this.#ready = ready;
    if (this.#muted) this.#link?.send({ type: "mute", muted: true });
    this.emit("ready", ready);
    const pending = this.#pending;
    this.#pending = null;
    pending?.resolve(ready);
    this.#announce();
  }

  /** Pings the ready link, and takes it for dropped when its pongs stop coming. */
  #listen(): void {
    this.#heartbeat?.stop();
    this.#heartbeat = null;
    const link = this.#link;
    const { pingIntervalMs, pingTimeoutMs } = this.#settings!;
    if (link === null || pingIntervalMs === 0) return;
    this.#heartbeat = new Heartbeat({
      timers: this.#platform.timers,
      intervalMs: pingIntervalMs,
      timeoutMs: pingTimeoutMs,
      nextId: () => ++this.#pingId,
      send: (id) => void link.send({ type: "ping", id }),
      silent: (waitedMs) => this.#silent(link, waitedMs),
    });
  }

  /** No pong came in time: the link is dropped as a dead socket would be, except that the
   * client leaves it (not as a goodbye, so the server keeps the session) and resumes. */
  #silent(link: Link, waitedMs: number): void {
    if (this.#link !== link) return;
    const seconds = Math.round(waitedMs / 100) / 10;
    const failure = new RejoinderError(
      "connection_lost",
      `the connection was lost: no answer to a ping for ${seconds} s`,
      { closeCode: 1006 },
    );
    this.#closed({ code: 1006, reason: failure.message, serverError: null, failure }, "no pong in time");
  }

  /** The session is gone: its open turns are lost, and the next one is new. */
  #restarted(error: RejoinderError): void {
    for (const turn of this.#conversation.endSession()) this.emit("transcript", turn);
    const previousSessionId = this.#sessionId;
    this.#sessionId = null;
    this.emit("sessionRestarted", { error, previousSessionId });
  }

  /** The current link closed, or the client gives up on it (`giveUp`: why, as a WebSocket
   * close reason): what the policy decides is done, the link left accordingly. */
  #closed(close: LinkClose, giveUp?: string): void {
    this.#platform.timers.clearTimeout(this.#readyTimer);
    this.#heartbeat?.stop();
    this.#heartbeat = null;
    const link = this.#link;
    this.#link = null;
    if (link !== null) this.#stats.sentBefore += link.sentSamples;
    if (this.#state === "closed" || this.#state === "idle") {
      link?.close(false, giveUp);
      return;
    }
    const decision = this.#policy.decide(close);
    if (decision.kind === "reconnect" && decision.resume !== null) {
      // Left to be resumed: the server must not hear a goodbye on it.
      if (link?.abandon(giveUp) === true) this.#abandoned.push(link);
    } else {
      link?.close(false, giveUp);
      this.#closeAbandoned(); // no resume follows: the session they carried is given up
    }
    if (decision.kind === "end") {
      void this.#finish(null, false);
      return;
    }
    if (decision.kind === "fail") {
      void this.#finish(decision.error, false);
      return;
    }
    if (decision.restart !== null) this.#restarted(decision.restart);
    this.#setState("reconnecting");
    this.emit("reconnecting", {
      attempt: decision.attempt,
      delayMs: decision.delayMs,
      error: decision.error,
      resuming: decision.resume !== null,
    });
    if (this.#state !== "reconnecting") return; // a listener closed the client
    const run = this.#run;
    this.#retryTimer = this.#platform.timers.setTimeout(() => {
      if (run === this.#run && this.#state === "reconnecting") this.#open(decision.resume);
    }, decision.delayMs);
    this.#announce();
  }

  /** Closes the connections left for a resume: it took over, or failed for good. */
  #closeAbandoned(): void {
    const abandoned = this.#abandoned;
    this.#abandoned = [];
    for (const link of abandoned) link.close(false);
  }

  async #finish(error: RejoinderError | null, byUser: boolean): Promise<void> {
    if (this.#state === "closed") return;
    this.#setState("closed");
    const timers = this.#platform.timers;
    if (this.#retryTimer !== null) timers.clearTimeout(this.#retryTimer);
    timers.clearTimeout(this.#readyTimer);
    this.#retryTimer = this.#readyTimer = null;
    this.#heartbeat?.stop();
    this.#heartbeat = null;
    const link = this.#link;
    this.#link = null;
    if (link !== null) {
      this.#stats.sentBefore += link.sentSamples;
      link.close(true);
    }
    this.#closeAbandoned();
    const audio = this.#audio;
    this.#audio = null;
    // Taken before any listener runs: one may connect() again, with a promise of its own.
    const pending = this.#pending;
    this.#pending = null;
    for (const turn of this.#conversation.endSession()) this.emit("transcript", turn);
    this.emit("close", { error, byUser });
    this.#announce();
    pending?.reject(
      error ?? new RejoinderError("closed", byUser ? "closed before the agent was ready" : "the session ended before it was ready"),
    );
    await audio?.close();
  }
}
