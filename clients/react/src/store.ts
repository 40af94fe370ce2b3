/**
 * What the hooks read from a `RejoinderClient`, as slices for `useSyncExternalStore`: no
 * React here.
 *
 * The client is the store: a slice's snapshot is read from the client's getters, and a
 * slice is told to look again on the client's events that can change it. The client says
 * every change of its connection (`connectionState`) and of its mute (`muted`), whoever
 * made it, so a component sees a `client.mute()` or `client.close()` called anywhere. (A
 * client older than those events says neither a `connect()` starting nor a `mute()`: the
 * hooks' own calls go through `ClientStore`, which then tells every slice to look again.)
 * A slice whose value did not change re-renders nothing (React compares snapshots with
 * `Object.is`).
 *
 * One `ClientStore` per client (`ClientStore.of`), however many components watch it. It
 * holds what the client does not keep: the error the last session ended or failed with.
 * It listens to the client only while some slice is subscribed, so a client whose
 * components have all unmounted has no listener of ours left.
 */

import {
  RejoinderError,
  type AgentStateName,
  type ClientState,
  type ConnectOptions,
  type ReadyEvent,
  type RejoinderClient,
  type RejoinderEvents,
  type Transcript,
  type UserStateName,
} from "@rejoinder/client";

/** One piece of the client's state, as `useSyncExternalStore` takes it. */
export interface Slice<T> {
  readonly subscribe: (onChange: () => void) => () => void;
  readonly get: () => T;
}

type EventName = keyof RejoinderEvents;

// A session starting, ending or restarting resets the agent's and the user's states and
// the transcript without an event of their own (the client's conversation starts over).
const SESSION_CHANGES: readonly EventName[] = ["connectionState", "close", "sessionRestarted"];
// `connectionState` says every change; the others are what a client without it says.
const CONNECTION_CHANGES: readonly EventName[] = ["connectionState", "ready", "reconnecting", "close"];

const stores = new WeakMap<RejoinderClient, ClientStore>();

function sameTurn(a: Transcript, b: Transcript): boolean {
  return (
    a.id === b.id &&
    a.role === b.role &&
    a.text === b.text &&
    a.final === b.final &&
    a.interrupted === b.interrupted &&
    a.lost === b.lost
  );
}

function asRejoinderError(error: unknown): RejoinderError {
  if (error instanceof RejoinderError) return error;
  const message = error instanceof Error ? error.message : String(error);
  // The SDK's own code for a failure that is not one of its errors (bad options).
  return new RejoinderError("client_error", message, { cause: error });
}

export class ClientStore {
  readonly client: RejoinderClient;
  /** Listeners of every slice: told about the changes the client emits no event for. */
  readonly #all = new Set<() => void>();
  #stopWatching: (() => void) | null = null;
  #error: RejoinderError | null = null;
  #transcripts: readonly Transcript[] = [];

  readonly state: Slice<ClientState>;
  readonly agentState: Slice<AgentStateName | null>;
  readonly userState: Slice<UserStateName | null>;
  readonly transcripts: Slice<readonly Transcript[]>;
  readonly muted: Slice<boolean>;
  readonly error: Slice<RejoinderError | null>;

  /** The store of `client` (made on first use, shared after). */
  static of(client: RejoinderClient): ClientStore {
    let store = stores.get(client);
    if (store === undefined) {
      store = new ClientStore(client);
      stores.set(client, store);
    }
    return store;
  }

  private constructor(client: RejoinderClient) {
    this.client = client;
    this.state = this.#slice(CONNECTION_CHANGES, () => client.state);
    this.agentState = this.#slice(["agentState", ...SESSION_CHANGES], () => client.agentState);
    this.userState = this.#slice(["userState", ...SESSION_CHANGES], () => client.userState);
    this.transcripts = this.#slice(["transcript", ...SESSION_CHANGES], () => this.#readTranscripts());
    this.muted = this.#slice(["muted"], () => client.muted);
    this.error = this.#slice(["close", "connectionState"], () => this.#error);
  }

  /**
   * `client.connect(options)`, called at once (a click's user activation must still be
   * there for the audio to start). Resolves with the first `ready`, or with `null` when the
   * connection failed: the reason is then the `error` slice. Closing before `ready` is no
   * error.
   */
  async connect(options: Partial<ConnectOptions>): Promise<ReadyEvent | null> {
    this.#error = null;
    let byUser = false;
    const offClose = this.client.once("close", (event) => {
      byUser = event.byUser;
    });
    let connecting: Promise<ReadyEvent>;
    try {
      if (options.url === undefined) {
        throw new TypeError("connect() needs a url: useRejoinder({ url }) or connect({ url })");
      }
      connecting = this.client.connect(options as ConnectOptions);
    } catch (error) {
      connecting = Promise.reject(error);
    }
    this.#changed(); // the client is "connecting" now, with a new, empty conversation
    try {
      return await connecting;
    } catch (error) {
      if (!byUser) {
        this.#error = asRejoinderError(error);
        this.#changed();
      }
      return null;
    } finally {
      offClose();
    }
  }

  /** `client.mute(muted)`, and the `muted` slice looks again. */
  mute(muted: boolean): void {
    this.client.mute(muted);
    this.#changed();
  }

  /** Every slice looks again (for a client that emits no `connectionState` or `muted`). */
  #changed(): void {
    for (const listener of [...this.#all]) listener();
  }

  #slice<T>(events: readonly EventName[], get: () => T): Slice<T> {
    const subscribe = (onChange: () => void): (() => void) => {
      const wrapped = (): void => onChange(); // one function per subscription, for `off`
      this.#watch();
      const offs = events.map((event) => this.client.on(event, wrapped));
      this.#all.add(wrapped);
      return () => {
        for (const off of offs) off();
        this.#all.delete(wrapped);
        if (this.#all.size === 0) this.#unwatch();
      };
    };
    return { subscribe, get };
  }

  /** While anything is subscribed: keep the error a session ends with, and forget it when
   * a new one starts (a `connect()` called on the client directly too). Added before the
   * first slice's own listeners, so the `error` slice reads it already set. */
  #watch(): void {
    if (this.#stopWatching !== null) return;
    const offClose = this.client.on("close", (event) => {
      this.#error = event.error;
    });
    const offState = this.client.on("connectionState", ({ state }) => {
      if (state === "connecting") this.#error = null;
    });
    this.#stopWatching = () => {
      offClose();
      offState();
    };
  }

  #unwatch(): void {
    this.#stopWatching?.();
    this.#stopWatching = null;
  }

  /** The same array for as long as no turn changed: `client.transcripts` is a new copy on
   * each read, and `useSyncExternalStore` needs a stable snapshot. */
  #readTranscripts(): readonly Transcript[] {
    const now = this.client.transcripts;
    const known = this.#transcripts;
    if (now.length === known.length && now.every((turn, i) => sameTurn(turn, known[i]!))) return known;
    this.#transcripts = now;
    return now;
  }
}
