// A fake of @rejoinder/client's `RejoinderClient`, its public surface only: the events
// (`on`, `once`, `off`), `connect`, `close`, `mute`, `sendText`, `interrupt` and the
// getters the hooks read. The test drives it as the real client's server would
// (`emitState`, `emitTranscript`, `ready`, `fail`, ...) and reads what is still listened
// to (`listenerCount`). Like the real client it says every change of its state
// (`connectionState`, after the event that says why) and of its mute (`muted`);
// `{ legacy: true }` makes it a client from before those events, which says neither.
import { RejoinderError } from "@rejoinder/client";

export class FakeClient {
  #listeners = new Map(); // event -> Set
  #state = "idle";
  #agentState = null;
  #userState = null;
  #turns = [];
  #open = { user: null, agent: null };
  #muted = false;
  #pending = null;
  connects = [];
  sentTexts = [];
  interrupts = 0;
  closes = 0;
  #legacy;

  constructor({ legacy = false } = {}) {
    this.#legacy = legacy;
  }

  // ---- the public surface
  on(event, listener) {
    let set = this.#listeners.get(event);
    if (set === undefined) this.#listeners.set(event, (set = new Set()));
    const entry = (payload) => listener(payload);
    set.add(entry);
    return () => set.delete(entry);
  }

  once(event, listener) {
    const off = this.on(event, (payload) => {
      off();
      listener(payload);
    });
    return off;
  }

  off() {
    throw new Error("the hooks remove listeners with the function `on` returns");
  }

  get state() {
    return this.#state;
  }
  get agentState() {
    return this.#agentState;
  }
  get userState() {
    return this.#userState;
  }
  get transcripts() {
    return [...this.#turns]; // a new copy on each read, as the real client's
  }
  get muted() {
    return this.#muted;
  }

  connect(options) {
    if (this.#state !== "idle" && this.#state !== "closed") {
      return Promise.reject(new RejoinderError("already_connected", `connect() while ${this.#state}`));
    }
    this.connects.push(options);
    const previous = this.#state;
    this.#state = "connecting";
    this.#agentState = this.#userState = null;
    this.#turns = [];
    this.#open = { user: null, agent: null };
    const connecting = new Promise((resolve, reject) => (this.#pending = { resolve, reject }));
    this.#told(previous);
    return connecting;
  }

  async close() {
    this.closes += 1;
    if (this.#state === "idle" || this.#state === "closed") return;
    this.#finish(null, true);
  }

  mute(muted) {
    const changed = this.#muted !== muted;
    this.#muted = muted;
    if (changed && !this.#legacy) this.emit("muted", { muted });
  }

  sendText(text) {
    this.sentTexts.push(text);
  }

  interrupt() {
    this.interrupts += 1;
  }

  // ---- the test's side
  emit(event, payload) {
    for (const listener of [...(this.#listeners.get(event) ?? [])]) listener(payload);
  }

  /** Listeners on `event`, or on every event. */
  listenerCount(event) {
    if (event !== undefined) return this.#listeners.get(event)?.size ?? 0;
    return [...this.#listeners.values()].reduce((sum, set) => sum + set.size, 0);
  }

  ready() {
    const previous = this.#state;
    this.#state = "connected";
    const ready = { sampleRate: 16000, protocol: 1, sessionId: "s1", resumed: false, transport: "websocket" };
    this.emit("ready", ready);
    this.#pending?.resolve(ready);
    this.#pending = null;
    this.#told(previous);
  }

  emitAgentState(state) {
    const previous = this.#agentState;
    if (previous === state) return;
    this.#agentState = state;
    this.emit("agentState", { state, previous });
  }

  emitUserState(state) {
    const previous = this.#userState;
    if (previous === state) return;
    this.#userState = state;
    this.emit("userState", { state, previous });
  }

  emitTranscript(role, text, final, interrupted = false) {
    const index = this.#open[role];
    const turn = { id: index ?? this.#turns.length, role, text, final, interrupted, lost: false };
    if (index === null) this.#turns.push(turn);
    else this.#turns[index] = turn;
    this.#open[role] = final ? null : turn.id;
    this.emit("transcript", turn);
  }

  drop(error) {
    const previous = this.#state;
    this.#state = "reconnecting";
    this.emit("reconnecting", { attempt: 1, delayMs: 250, error, resuming: true });
    this.#told(previous);
  }

  /** The session fails (before `ready`: `connect()` rejects with `error` too). */
  fail(error) {
    this.#finish(error, false);
  }

  #finish(error, byUser) {
    const previous = this.#state;
    this.#state = "closed";
    for (const role of ["user", "agent"]) {
      const index = this.#open[role];
      if (index === null) continue;
      this.#turns[index] = { ...this.#turns[index], final: true, lost: true };
      this.#open[role] = null;
      this.emit("transcript", this.#turns[index]);
    }
    this.#agentState = this.#userState = null;
    const pending = this.#pending;
    this.#pending = null;
    this.emit("close", { error, byUser });
    this.#told(previous);
    pending?.reject(error ?? new RejoinderError("closed", "closed before the agent was ready"));
  }

  /** `connectionState`, when the state is not `previous` any more. */
  #told(previous) {
    if (!this.#legacy && previous !== this.#state) this.emit("connectionState", { state: this.#state, previous });
  }
}
