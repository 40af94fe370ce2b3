// Fakes of the platform (sockets, audio, peers, timers): the client's protocol logic runs
// in node, driven step by step by the tests, as a server would drive it.

/** Lets pending promise callbacks run (the client opens its audio asynchronously). */
export const settle = () => new Promise((resolve) => setImmediate(resolve));

export class FakeTimers {
  time = 0;
  #next = 1;
  #due = new Map(); // handle -> [at, callback]

  setTimeout(callback, ms) {
    const handle = this.#next++;
    this.#due.set(handle, [this.time + Math.max(0, ms), callback]);
    return handle;
  }

  clearTimeout(handle) {
    this.#due.delete(handle);
  }

  now() {
    return this.time;
  }

  /** Delays pending, in ms from now. */
  get pending() {
    return [...this.#due.values()].map(([at]) => at - this.time).sort((a, b) => a - b);
  }

  /** Moves the clock on, running what falls due, in order. */
  advance(ms) {
    const end = this.time + ms;
    for (;;) {
      let first = null;
      for (const [handle, [at]] of this.#due) if (at <= end && (first === null || at < this.#due.get(first)[0])) first = handle;
      if (first === null) break;
      const [at, callback] = this.#due.get(first);
      this.#due.delete(first);
      this.time = at;
      callback();
    }
    this.time = end;
  }
}

export class FakeSocket {
  binaryType = "blob";
  readyState = 0;
  onopen = null;
  onmessage = null;
  onclose = null;
  onerror = null;
  sent = [];
  closedWith = null;

  constructor(url) {
    this.url = url;
  }

  /** JSON messages the client sent, parsed. */
  get json() {
    return this.sent.filter((m) => typeof m === "string").map((m) => JSON.parse(m));
  }

  get binary() {
    return this.sent.filter((m) => typeof m !== "string");
  }

  send(data) {
    if (this.readyState !== 1) throw new Error("send on a socket that is not open");
    this.sent.push(data);
  }

  close(code = 1000, reason = "") {
    this.closedWith = { code, reason };
    this.readyState = 3;
    this.onclose?.({ code, reason });
  }

  // ---- the server's side
  open() {
    this.readyState = 1;
    this.onopen?.({});
  }

  receive(message) {
    this.onmessage?.({ data: message instanceof ArrayBuffer || typeof message === "string" ? message : JSON.stringify(message) });
  }

  serverClose(code, reason = "") {
    this.readyState = 3;
    this.onclose?.({ code, reason });
  }
}

export class FakePlayer {
  calls = [];
  onReport = null;
  reset(epoch) {
    this.epoch = epoch;
    this.calls.push(["reset", epoch]);
  }
  configure(rate) {
    this.calls.push(["configure", rate]);
  }
  write(pcm) {
    this.calls.push(["write", pcm.byteLength >> 1]);
  }
  clear() {
    this.calls.push(["clear"]);
  }
  /** What the worklet would post. */
  report(played, { cleared = false, playing = true, epoch = this.epoch } = {}) {
    this.onReport?.({ epoch, played, playing, cleared });
  }
}

export class FakeTrack {
  enabled = true;
  stopped = false;
  stop() {
    this.stopped = true;
  }
}

export class FakeAudio {
  closed = 0;
  captureRate = null;
  onFrame = null;
  ticks = [];
  latency = 0;

  constructor({ transport, microphone }) {
    this.track = new FakeTrack();
    this.microphone = microphone === false ? null : { getAudioTracks: () => [this.track], getTracks: () => [this.track] };
    this.context = null;
    this.player = transport === "websocket" ? new FakePlayer() : null;
  }

  startCapture(rate, onFrame) {
    this.captureRate = rate;
    this.onFrame = onFrame;
  }

  every(ms, tick) {
    const entry = { ms, tick, stopped: false };
    this.ticks.push(entry);
    return () => (entry.stopped = true);
  }

  tick() {
    for (const entry of this.ticks) if (!entry.stopped) entry.tick();
  }

  outputLatency() {
    return this.latency;
  }

  async close() {
    this.closed += 1;
  }
}

export class FakePeer {
  onOpen = null;
  onMessage = null;
  onChannelClose = null;
  onState = null;
  channelOpen = false;
  sent = [];
  accepted = null;
  closed = false;
  /** `quiet()` was called: what had been sent by then (nothing may follow). */
  quieted = false;
  sentWhenQuieted = null;
  stats = null;

  constructor(options) {
    this.options = options;
  }

  get json() {
    return this.sent.map((m) => JSON.parse(m));
  }

  async offer() {
    return { type: "offer", sdp: "v=0 fake offer" };
  }

  async accept(answer) {
    this.accepted = answer;
  }

  send(text) {
    if (!this.channelOpen) throw new Error("send on a closed channel");
    this.sent.push(text);
  }

  async inboundAudio() {
    return this.stats;
  }

  quiet() {
    this.quieted = true;
    this.sentWhenQuieted ??= this.sent.length;
  }

  close() {
    this.closed = true;
    this.channelOpen = false;
  }

  // ---- the server's side
  open() {
    this.channelOpen = true;
    this.onState?.("connected");
    this.onOpen?.();
  }

  receive(message) {
    this.onMessage?.(typeof message === "string" ? message : JSON.stringify(message));
  }

  channelClose() {
    this.channelOpen = false;
    this.onChannelClose?.();
  }

  state(state) {
    this.onState?.(state);
  }
}

/** A platform whose sockets, peers, audio, posts and clock the test holds. */
export class FakePlatform {
  timers = new FakeTimers();
  baseUrl = "http://127.0.0.1:8080/app/";
  sockets = [];
  peers = [];
  audios = [];
  posts = [];
  /** The next answers to `post`: [status, body]; default an SDP answer. */
  responses = [];
  audioError = null;

  async openAudio(options) {
    if (this.audioError) throw this.audioError;
    const audio = new FakeAudio(options);
    this.audios.push(audio);
    return audio;
  }

  createSocket(url) {
    const socket = new FakeSocket(url);
    this.sockets.push(socket);
    return socket;
  }

  createPeer(options) {
    const peer = new FakePeer(options);
    this.peers.push(peer);
    return peer;
  }

  async post(url, body) {
    this.posts.push({ url: new URL(url), body: JSON.parse(body) });
    const [status, text] = this.responses.shift() ?? [200, JSON.stringify({ type: "answer", sdp: "v=0 fake answer" })];
    if (status === "network") throw new TypeError("Failed to fetch");
    return { ok: status >= 200 && status < 300, status, text: async () => text };
  }

  get socket() {
    return this.sockets.at(-1);
  }

  get peer() {
    return this.peers.at(-1);
  }

  get audio() {
    return this.audios.at(-1);
  }
}

/** Records every event of a client, in order: [name, payload]. */
export function record(client) {
  const log = [];
  for (const name of [
    "connectionState",
    "muted",
    "ready",
    "agentState",
    "userState",
    "transcript",
    "tool",
    "metrics",
    "timeline",
    "error",
    "clear",
    "played",
    "reconnecting",
    "sessionRestarted",
    "close",
  ]) {
    client.on(name, (payload) => log.push([name, payload]));
  }
  log.of = (name) => log.filter(([n]) => n === name).map(([, p]) => p);
  /** The names of the events, in order, without those in `skip`. */
  log.names = (...skip) => log.map(([n]) => n).filter((n) => !skip.includes(n));
  /** Each `connectionState` change, as "previous>state". */
  log.states = () => log.of("connectionState").map((e) => `${e.previous}>${e.state}`);
  return log;
}
