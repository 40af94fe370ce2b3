/**
 * What the client needs from the platform, as small interfaces: the browser implements
 * them (`browserPlatform()`), node tests fake them, and another runtime (React Native, an
 * Electron main process) can bring its own. Everything protocol-related stays out of here.
 */

/** The part of the browser's `WebSocket` the client uses. */
export interface SocketLike {
  binaryType: string;
  readonly readyState: number;
  send(data: string | ArrayBuffer): void;
  close(code?: number, reason?: string): void;
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { readonly data: unknown }) => void) | null;
  onclose: ((event: { readonly code: number; readonly reason: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
}

/** `WebSocket.OPEN`. */
export const SOCKET_OPEN = 1;

/** A report from the player: agent samples heard on the connection `epoch`. */
export interface PlayerReport {
  readonly epoch: number;
  readonly played: number;
  readonly playing: boolean;
  readonly cleared: boolean;
}

/** The agent's voice on the WebSocket path (the player worklet). */
export interface Player {
  /** A new connection: drop everything queued, count from zero, tag reports with `epoch`. */
  reset(epoch: number): void;
  /** The server's rate, from `ready`. */
  configure(sampleRate: number): void;
  /** Agent PCM16LE mono (ownership passes to the player). */
  write(pcm: ArrayBuffer): void;
  /** Drop the queue now; a report marked `cleared` follows. */
  clear(): void;
  onReport: ((report: PlayerReport) => void) | null;
}

export interface AudioOptions {
  readonly transport: "websocket" | "webrtc";
  /** `true`: open the default microphone; a stream: use it (not stopped on close); `false`: none. */
  readonly microphone: MediaStream | boolean;
  /** An audio context to use (not closed on close); else one is created. */
  readonly audioContext?: AudioContext | undefined;
  /** Where to load the worklet module from; else the copy embedded in the bundle. */
  readonly workletUrl?: string | URL | undefined;
}

/** The audio side of a connection, kept across reconnects. */
export interface AudioSession {
  /** The microphone stream (its track goes out over WebRTC), or `null`. */
  readonly microphone: MediaStream | null;
  readonly context: AudioContext | null;
  /** The player (WebSocket path only). */
  readonly player: Player | null;
  /** Starts the capture worklet: PCM16LE mono frames at `sampleRate` (WebSocket path). */
  startCapture(sampleRate: number, onFrame: (pcm: ArrayBuffer) => void): void;
  /** Calls `tick` every `ms` of audio time until the returned function is called. */
  every(ms: number, tick: () => void): () => void;
  /** Seconds from rendering a sample to hearing it. */
  outputLatency(): number;
  close(): Promise<void>;
}

/** The inbound-rtp stats of the agent's audio track (the fields the client reads). */
export interface InboundAudioStats {
  readonly totalSamplesReceived?: number;
  readonly concealedSamples?: number;
  readonly insertedSamplesForDeceleration?: number;
  readonly removedSamplesForAcceleration?: number;
  readonly packetsReceived?: number;
  readonly totalAudioEnergy?: number;
  /** The codec's RTP clock rate (from the codec stats). */
  readonly clockRate?: number;
}

export interface SessionDescription {
  readonly type: string;
  readonly sdp: string;
}

export interface PeerOptions {
  readonly microphone: MediaStream | null;
  readonly camera: MediaStream | null;
  readonly iceServers: readonly RTCIceServer[];
  /** `"relay"`: gather TURN relay candidates only (default: the browser's, `"all"`). */
  readonly iceTransportPolicy?: RTCIceTransportPolicy | undefined;
  /** The element that plays the agent's track; else one is created. */
  readonly audioElement?: HTMLAudioElement | undefined;
}

/** One peer connection with its data channel (named "rejoinder", as the page's). */
export interface PeerSession {
  /** The offer with its ICE candidates (no trickle ICE). */
  offer(): Promise<SessionDescription>;
  accept(answer: SessionDescription): Promise<void>;
  send(text: string): void;
  readonly channelOpen: boolean;
  onOpen: (() => void) | null;
  onMessage: ((text: string) => void) | null;
  onChannelClose: (() => void) | null;
  /** `RTCPeerConnection.connectionState` changes. */
  onState: ((state: string) => void) | null;
  inboundAudio(): Promise<InboundAudioStats | null>;
  /** Stops playing the agent's voice and sending the microphone (and camera) on this
   * connection, and keeps it open, its data channel too: a connection the client left in
   * order to resume the session on another, which the server must not hear close (on
   * WebRTC closing is the session's goodbye) before the resume took over. The tracks
   * themselves go on (the next connection sends them). */
  quiet(): void;
  /** Closes the peer connection (the server takes it for the client's goodbye). */
  close(): void;
}

export interface HttpResponse {
  readonly ok: boolean;
  readonly status: number;
  text(): Promise<string>;
}

export interface Timers {
  setTimeout(callback: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
  /** Milliseconds, monotonic. */
  now(): number;
}

export interface Platform {
  openAudio(options: AudioOptions): Promise<AudioSession>;
  createSocket(url: string): SocketLike;
  createPeer(options: PeerOptions): PeerSession;
  post(url: string, body: string): Promise<HttpResponse>;
  /** `GET url`, never from a cache (the server's ICE servers, `GET /api/ice`, before each
   * WebRTC offer). Without it the client does not ask: it uses the `iceServers` option,
   * or the last `ready`'s. */
  get?(url: string): Promise<HttpResponse>;
  readonly timers: Timers;
  /** What relative URLs are taken against (the page's location), if anything. */
  readonly baseUrl: string | undefined;
}
