/**
 * The hooks. Each reads one slice of the client through `useSyncExternalStore`, so a
 * component re-renders only when its slice changes, and every component sees the same
 * state in the same render (none is torn between two events).
 */

import type {
  AgentStateName,
  ClientState,
  ConnectOptions,
  ReadyEvent,
  RejoinderClient,
  RejoinderError,
  RejoinderEvents,
  Transcript,
  UserStateName,
} from "@rejoinder/client";
import { useCallback, useEffect, useRef, useSyncExternalStore } from "react";
import { useClient, useOwnedClient, useSharedClient } from "./context.js";
import { ClientStore, type Slice } from "./store.js";

function isPlainObject(value: unknown): value is object {
  if (typeof value !== "object" || value === null) return false;
  const prototype: unknown = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

/** One slice of a client's state (see `store.ts`). */
export function useSlice<T>(slice: Slice<T>): T {
  // The server snapshot is the same read: an idle client on the server renders as idle.
  return useSyncExternalStore(slice.subscribe, slice.get, slice.get);
}

export interface UseRejoinder {
  /** The client itself (for `sendText`, `interrupt`, `on`...). */
  readonly client: RejoinderClient;
  /**
   * Connects with the hook's options, overridden by `options`. Call it from a click: the
   * browser starts audio only on a user gesture. Resolves with the first `ready`, or with
   * `null` when the connection failed; it never rejects: the reason is `error`.
   */
  readonly connect: (options?: Partial<ConnectOptions>) => Promise<ReadyEvent | null>;
  /** Ends the session and releases the microphone and the audio. */
  readonly close: () => Promise<void>;
  /** `idle`, `connecting`, `connected`, `reconnecting` or `closed`, whatever changed it
   * (this hook's `connect`/`close`, the client's own methods called anywhere, the server). */
  readonly state: ClientState;
  /** Why the last `connect()` failed or the session ended with an error (`null` after a
   * normal end, a `close()`, or a new `connect()`). */
  readonly error: RejoinderError | null;
}

/**
 * The session: connect, close, the connection's state and its error. Under a
 * `<RejoinderProvider>` it uses the provider's client; else it makes one for this
 * component, closed when the component unmounts. `options` are `connect()`'s defaults
 * (`url`, `transport`, ...).
 */
export function useRejoinder(options: Partial<ConnectOptions> = {}): UseRejoinder {
  const shared = useSharedClient();
  const owned = useOwnedClient(shared === null);
  const client = (shared ?? owned)!;
  const store = ClientStore.of(client);
  // The latest options, for a `connect` that keeps its identity across renders.
  const latest = useRef(options);
  useEffect(() => {
    latest.current = options;
  });
  const connect = useCallback(
    (overrides?: Partial<ConnectOptions>): Promise<ReadyEvent | null> =>
      // `onClick={connect}` passes a click event: that is no options.
      store.connect(isPlainObject(overrides) ? { ...latest.current, ...overrides } : latest.current),
    [store],
  );
  const close = useCallback(() => client.close(), [client]);
  const state = useSlice(store.state);
  const error = useSlice(store.error);
  return { client, connect, close, state, error };
}

/** The agent's state: `initializing`, `listening`, `thinking`, `speaking`, or `null` when
 * no session is on. `speaking` only while the user can hear the agent. */
export function useAgentState(client?: RejoinderClient): AgentStateName | null {
  return useSlice(ClientStore.of(useClient(client, "useAgentState")).agentState);
}

/** The user's state: `listening`, `speaking`, `away`, or `null` when no session is on. */
export function useUserState(client?: RejoinderClient): UserStateName | null {
  return useSlice(ClientStore.of(useClient(client, "useUserState")).userState);
}

/** The conversation's turns, in order. An interim turn is replaced in place (same `id`)
 * until its `final` one; the array is a new one only when a turn changed. */
export function useTranscript(client?: RejoinderClient): readonly Transcript[] {
  return useSlice(ClientStore.of(useClient(client, "useTranscript")).transcripts);
}

export interface UseMicrophone {
  readonly muted: boolean;
  /** Mutes or unmutes (a value, or a function of the current one). Muted, the session
   * hears silence: the user cannot take a turn or interrupt. Kept across reconnects. */
  readonly setMuted: (muted: boolean | ((muted: boolean) => boolean)) => void;
}

/** The microphone's mute: `muted` follows every change, a `client.mute()` called anywhere
 * else too. */
export function useMicrophone(client?: RejoinderClient): UseMicrophone {
  const store = ClientStore.of(useClient(client, "useMicrophone"));
  const muted = useSlice(store.muted);
  const setMuted = useCallback(
    (next: boolean | ((muted: boolean) => boolean)) => {
      store.mute(typeof next === "function" ? next(store.muted.get()) : next);
    },
    [store],
  );
  return { muted, setMuted };
}

/**
 * Calls `handler` on each `event` of the client while the component is mounted (tools,
 * metrics, the server's warnings, ...). The latest `handler` is called: it need not be
 * memoized.
 */
export function useRejoinderEvent<K extends keyof RejoinderEvents>(
  event: K,
  handler: (payload: RejoinderEvents[K]) => void,
  client?: RejoinderClient,
): void {
  const found = useClient(client, "useRejoinderEvent");
  const latest = useRef(handler);
  useEffect(() => {
    latest.current = handler;
  });
  useEffect(() => found.on(event, (payload) => latest.current(payload)), [found, event]);
}
