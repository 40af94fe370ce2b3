import { AgentStateIndicator, RejoinderProvider, useMicrophone, useRejoinder, useTranscript } from "@rejoinder/react";

function Call() {
  const { connect, close, state, error } = useRejoinder({ url: "/" });
  const transcript = useTranscript();
  const { muted, setMuted } = useMicrophone();
  const inCall = state !== "idle" && state !== "closed";
  return (
    <main>
      <AgentStateIndicator />
      <button onClick={() => (inCall ? close() : connect())}>{inCall ? "Hang up" : "Talk"}</button>
      <button onClick={() => setMuted(!muted)} disabled={!inCall}>{muted ? "Unmute" : "Mute"}</button>
      {error && <p role="alert">{error.message}</p>}
      {transcript.map((turn) => (
        <p key={turn.id} className={turn.role}>
          {turn.role === "user" ? "You" : "Agent"}: {turn.text}
        </p>
      ))}
    </main>
  );
}

export const App = () => (
  <RejoinderProvider>
    <Call />
  </RejoinderProvider>
);
