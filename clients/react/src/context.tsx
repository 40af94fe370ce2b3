/**
 * One client per component tree: `<RejoinderProvider>` holds it, and the hooks below it
 * find it. Without a provider, `useRejoinder()` makes a client of its own, and the other
 * hooks take it as their argument.
 */

import { RejoinderClient, type ClientOptions } from "@rejoinder/client";
import { createContext, useContext, useEffect, useRef, type ReactElement, type ReactNode } from "react";

const ClientContext = createContext<RejoinderClient | null>(null);

export interface RejoinderProviderProps {
  /** A client of your own (you close it). By default the provider makes one, and closes it
   * when the provider unmounts. */
  client?: RejoinderClient;
  /** Options for the client the provider makes (e.g. a `platform`). */
  clientOptions?: ClientOptions;
  children?: ReactNode;
}

/** Shares one `RejoinderClient` with every hook and `<AgentStateIndicator/>` below it. */
export function RejoinderProvider({ client, clientOptions, children }: RejoinderProviderProps): ReactElement {
  const owned = useOwnedClient(client === undefined, clientOptions);
  return <ClientContext.Provider value={client ?? owned}>{children}</ClientContext.Provider>;
}

/**
 * A client made on first render when `wanted` (kept for the component's life), and closed
 * when the component unmounts. `null` when not wanted.
 */
export function useOwnedClient(wanted: boolean, options?: ClientOptions): RejoinderClient | null {
  const made = useRef<RejoinderClient | null>(null);
  if (wanted && made.current === null) made.current = new RejoinderClient(options);
  const client = wanted ? made.current : null;
  useEffect(() => {
    if (client === null) return undefined;
    // Ends the session (a no-op on a client that never connected: under StrictMode's
    // mount, unmount, mount, the same client is used again).
    return () => void client.close();
  }, [client]);
  return client;
}

/** The provider's client, or `null` outside any provider. */
export function useSharedClient(): RejoinderClient | null {
  return useContext(ClientContext);
}

/** `client` if given, else the provider's; throws, saying what to do, when there is none. */
export function useClient(client: RejoinderClient | undefined, hook: string): RejoinderClient {
  const shared = useContext(ClientContext);
  const found = client ?? shared;
  if (found === null) {
    throw new Error(
      `${hook}() found no client: put it under a <RejoinderProvider>, or pass the client ` +
        `(const { client } = useRejoinder(); ${hook}(client))`,
    );
  }
  return found;
}
