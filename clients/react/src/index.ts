/**
 * `@rejoinder/react`: React hooks for a rejoinder voice agent, on `@rejoinder/client`.
 *
 * ```tsx
 * <RejoinderProvider>
 *   <Call />
 * </RejoinderProvider>
 * ```
 *
 * where `Call` uses `useRejoinder({ url })`, `useAgentState()`, `useTranscript()`,
 * `useMicrophone()` and `<AgentStateIndicator/>`.
 */

export { AGENT_STATE_LABELS, AgentStateIndicator, indicatorState } from "./AgentStateIndicator.js";
export type { AgentStateIndicatorProps, IndicatorState } from "./AgentStateIndicator.js";
export { RejoinderProvider } from "./context.js";
export type { RejoinderProviderProps } from "./context.js";
export {
  useAgentState,
  useMicrophone,
  useRejoinder,
  useRejoinderEvent,
  useTranscript,
  useUserState,
} from "./hooks.js";
export type { UseMicrophone, UseRejoinder } from "./hooks.js";
