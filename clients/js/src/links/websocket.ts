/**
 * The WebSocket transport (`GET /ws`): JSON text frames both ways, the microphone as
 * PCM16LE binary frames at the `start` rate, the agent's voice as binary frames played by
 * the player worklet, whose reports go out as `played`.
 *
 * `start` goes out as the socket opens (with `resume` when reconnecting), and the
 * microphone right after it: audio sent before `ready` is kept by the server (5 s).
 */

import { RejoinderError } from "../errors.js";
import { decodeServerMessage } from "../messages.js";
import { SOCKET_OPEN, type AudioSession, type Platform, type PlayerReport, type SocketLike } from "../platform.js";
import { PROTOCOL_VERSION, type ClientMessage, type ErrorMessage, type Start } from "../protocol.js";
import { PlayedReporter } from "../reporting.js";
import type { Link, LinkEvents } from "./link.js";

export interface WebSocketLinkOptions {
  readonly platform: Platform;
  readonly url: string;
  readonly audio: AudioSession;
  /** Tags this connection's player reports. */
  readonly epoch: number;
  /** The microphone rate announced in `start`. */
  readonly sampleRate: number;
  readonly timeline: boolean;
  readonly resume: string | null;
  readonly events: LinkEvents;
}

export class WebSocketLink implements Link {
  readonly #options: WebSocketLinkOptions;
  readonly #socket: SocketLike;
  readonly #reporter: PlayedReporter;
  #opened = false;
  #ready = false;
  #done = false;
  #serverError: ErrorMessage | null = null;
  #sent = 0;

  constructor(options: WebSocketLinkOptions) {
    this.#options = options;
    this.#reporter = new PlayedReporter(() => options.platform.timers.now());
    options.audio.player?.reset(options.epoch);
    const socket = (this.#socket = options.platform.createSocket(options.url));
    socket.binaryType = "arraybuffer";
    socket.onopen = () => this.#open();
    socket.onmessage = (event) => this.#receive(event.data);
    socket.onclose = (event) => this.#closed(event.code, event.reason);
    socket.onerror = () => {}; // a close event follows, with what there is to say
  }

  get sentSamples(): number {
    return this.#sent;
  }

  #open(): void {
    this.#opened = true;
    const start: Start = {
      type: "start",
      sample_rate: this.#options.sampleRate,
      protocol: PROTOCOL_VERSION,
      ...(this.#options.timeline ? { timeline: true } : {}),
      ...(this.#options.resume !== null ? { resume: this.#options.resume } : {}),
    };
    this.#socket.send(JSON.stringify(start));
  }

  #receive(data: unknown): void {
    if (this.#done) return;
    if (typeof data !== "string") {
      if (!(data instanceof ArrayBuffer)) return;
      // Agent audio comes only after `ready` (its rate); an odd byte is not a sample.
      if (!this.#ready || data.byteLength < 2) return;
      this.#options.events.received(data.byteLength >> 1);
      this.#options.audio.player?.write(data);
      return;
    }
    const decoded = decodeServerMessage(data);
    if (decoded === null) return;
    if (!decoded.ok) {
      this.#options.events.invalid(decoded.why);
      return;
    }
    const message = decoded.message;
    if (message.type === "ready") {
      this.#ready = true;
      this.#options.audio.player?.configure(message.sample_rate);
    } else if (message.type === "clear") {
      this.#reporter.clearReceived();
      this.#options.audio.player?.clear();
    } else if (message.type === "error") {
      this.#serverError = message;
    }
    this.#options.events.message(message);
  }

  send(message: ClientMessage): boolean {
    if (this.#done || !this.#opened || this.#socket.readyState !== SOCKET_OPEN) return false;
    this.#socket.send(JSON.stringify(message));
    return true;
  }

  sendAudio(pcm: ArrayBuffer): void {
    if (this.#done || !this.#opened || this.#socket.readyState !== SOCKET_OPEN) return;
    this.#socket.send(pcm);
    this.#sent += pcm.byteLength >> 1;
  }

  playerReport(report: PlayerReport): void {
    if (this.#done || report.epoch !== this.#options.epoch || !this.#ready) return;
    const played = this.#reporter.report(report.played, report.cleared);
    if (played !== null && this.send(played)) this.#options.events.played(played);
  }

  close(goodbye: boolean, reason?: string): void {
    if (this.#done) return;
    this.#done = true;
    this.#options.audio.player?.reset(this.#options.epoch);
    // 1000 only when the user is done: the session closes with it. A connection the client
    // gives up on (4000) is a drop to the server, which keeps the session for a resume.
    if (goodbye) this.#socket.close(1000, reason ?? "client closed");
    else this.#socket.close(4000, reason ?? "client gave up waiting");
  }

  /** 4000 is already a drop to the server: the socket closes now, nothing is kept. */
  abandon(reason?: string): boolean {
    this.close(false, reason);
    return false;
  }

  #closed(code: number, reason: string): void {
    if (this.#done) return;
    this.#done = true;
    // The server takes what was playing as ended at the last report: stop it here too,
    // so the listener hears no more than the history will say was heard.
    this.#options.audio.player?.reset(this.#options.epoch);
    const failure = this.#opened
      ? null
      : new RejoinderError(
          "connect_failed",
          `could not connect to ${this.#options.url} (the server may be down or full, or not a rejoinder app)`,
          { closeCode: code },
        );
    this.#options.events.closed({ code, reason, serverError: this.#serverError, failure });
  }
}
