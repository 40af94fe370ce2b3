/**
 * `<AgentStateIndicator/>`: a dot and a word for what the agent is doing, as a person
 * would say it ("Listening", "Thinking", "Speaking", "Connecting"); the technical state is
 * on `title` and `data-state` (for CSS). While the client is not connected the agent's
 * last state is stale, so the connection's state is shown instead.
 */

import type { AgentStateName, ClientState, RejoinderClient } from "@rejoinder/client";
import type { CSSProperties, ReactElement } from "react";
import { useClient } from "./context.js";
import { useSlice } from "./hooks.js";
import { ClientStore } from "./store.js";

/** What the indicator shows: the agent's state while connected, else the connection's. */
export type IndicatorState = AgentStateName | Exclude<ClientState, "connected">;

/** The words shown, by state. */
export const AGENT_STATE_LABELS: Readonly<Record<IndicatorState, string>> = {
  idle: "Not connected",
  connecting: "Connecting",
  initializing: "Connecting",
  listening: "Listening",
  thinking: "Thinking",
  speaking: "Speaking",
  reconnecting: "Reconnecting",
  closed: "Not connected",
};

const DOT_COLORS: Readonly<Record<IndicatorState, string>> = {
  idle: "#9ca3af",
  connecting: "#9ca3af",
  initializing: "#9ca3af",
  listening: "#16a34a",
  thinking: "#d97706",
  speaking: "#2563eb",
  reconnecting: "#d97706",
  closed: "#9ca3af",
};

export interface AgentStateIndicatorProps {
  /** Default: the provider's client. */
  client?: RejoinderClient;
  /** Words of your own (another language), by state; the rest stay as they are. */
  labels?: Partial<Record<IndicatorState, string>>;
  className?: string;
  style?: CSSProperties;
}

/** The state to show for a client in `clientState` whose agent is in `agentState`. */
export function indicatorState(clientState: ClientState, agentState: AgentStateName | null): IndicatorState {
  if (clientState !== "connected") return clientState;
  return agentState ?? "initializing";
}

/** A dot and a word for what the agent is doing (`role="status"`: screen readers say the
 * changes); `title` and `data-state` hold the technical state. */
export function AgentStateIndicator({ client, labels, className, style }: AgentStateIndicatorProps): ReactElement {
  const found = useClient(client, "AgentStateIndicator");
  const store = ClientStore.of(found);
  const state = indicatorState(useSlice(store.state), useSlice(store.agentState));
  const label = labels?.[state] ?? AGENT_STATE_LABELS[state];
  const dot: CSSProperties = {
    display: "inline-block",
    width: "0.6em",
    height: "0.6em",
    borderRadius: "50%",
    marginRight: "0.4em",
    background: DOT_COLORS[state],
  };
  return (
    <span role="status" className={className} style={style} title={state} data-state={state}>
      <span aria-hidden="true" style={dot} />
      {label}
    </span>
  );
}
