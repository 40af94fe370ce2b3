// Each hook follows a fake client's events, re-renders only when its own value changes,
// and leaves no listener behind when it unmounts.
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import { RejoinderError } from "@rejoinder/client";
import {
  RejoinderProvider,
  useAgentState,
  useMicrophone,
  useRejoinder,
  useRejoinderEvent,
  useTranscript,
  useUserState,
} from "../dist/index.js";
import { FakeClient } from "./fake-client.mjs";
import { act, cleanup, h, probe, render, warnings } from "./render.mjs";

afterEach(() => {
  cleanup();
  assert.deepEqual(warnings.splice(0), [], "React warned");
});

/** `hook` rendered under a provider holding `client`; `seen` gets each render's value. */
function mount(client, hook) {
  const seen = [];
  const renderer = render(h(RejoinderProvider, { client }, h(probe(hook, seen))));
  return { seen, renderer };
}

test("useAgentState follows the agent's state, one render per change", () => {
  const client = new FakeClient();
  const { seen } = mount(client, () => useAgentState());
  assert.deepEqual(seen, [null]);
  act(() => client.emitAgentState("listening"));
  act(() => client.emitAgentState("thinking"));
  act(() => client.emitAgentState("speaking"));
  assert.deepEqual(seen, [null, "listening", "thinking", "speaking"]);
  // other events change nothing the hook returns: no render
  act(() => {
    client.emitUserState("speaking");
    client.emitTranscript("user", "hel", false);
    client.emit("metrics", { type: "llm", ttft: 0.2 });
  });
  assert.equal(seen.length, 4);
});

test("several changes in one batch are one render, with the last value", () => {
  const client = new FakeClient();
  const { seen } = mount(client, () => useAgentState());
  act(() => {
    client.emitAgentState("listening");
    client.emitAgentState("thinking");
  });
  assert.deepEqual(seen, [null, "thinking"]);
});

test("the agent's and the user's states end with the session (no event of their own)", () => {
  const client = new FakeClient();
  const { seen } = mount(client, () => [useAgentState(), useUserState()]);
  act(() => {
    client.emitAgentState("speaking");
    client.emitUserState("listening");
  });
  assert.deepEqual(seen.at(-1), ["speaking", "listening"]);
  act(() => client.fail(new RejoinderError("internal_error", "the agent failed")));
  assert.deepEqual(seen.at(-1), [null, null]);
});

test("useUserState follows the user's state", () => {
  const client = new FakeClient();
  const { seen } = mount(client, () => useUserState());
  act(() => client.emitUserState("speaking"));
  act(() => client.emitUserState("listening"));
  act(() => client.emitUserState("away"));
  act(() => client.emitAgentState("thinking"));
  assert.deepEqual(seen, [null, "speaking", "listening", "away"]);
});

test("useTranscript updates an interim turn in place and keeps the array while nothing changed", () => {
  const client = new FakeClient();
  const { seen } = mount(client, () => useTranscript());
  assert.deepEqual(seen, [[]]);
  act(() => client.emitTranscript("user", "What", false));
  act(() => client.emitTranscript("user", "What time", false));
  act(() => client.emitTranscript("user", "What time is it?", true));
  act(() => client.emitTranscript("agent", "It is", false));
  const last = seen.at(-1);
  assert.deepEqual(
    last.map(({ id, role, text, final }) => ({ id, role, text, final })),
    [
      { id: 0, role: "user", text: "What time is it?", final: true },
      { id: 1, role: "agent", text: "It is", final: false },
    ],
  );
  assert.equal(seen.length, 5);
  assert.deepEqual(seen[2].map((t) => t.text), ["What time"]); // one turn, replaced
  // the same text again, and events of other slices: the same array, no render
  act(() => {
    client.emitTranscript("agent", "It is", false);
    client.emitAgentState("speaking");
  });
  assert.equal(seen.length, 5); // the repeated interim changed no turn
  assert.equal(client.transcripts === client.transcripts, false); // (the client copies on each read)
  act(() => client.emitTranscript("agent", "It is three", false));
  assert.equal(seen.length, 6);
  assert.equal(seen[5][0], last[0]); // the unchanged turn is the same object
  assert.deepEqual(seen[5][1].text, "It is three");
});

test("useTranscript: a turn still open when the session ends is closed as lost", () => {
  const client = new FakeClient();
  const { seen } = mount(client, () => useTranscript());
  act(() => client.emitTranscript("agent", "It is three", false));
  act(() => client.fail(new RejoinderError("connection_lost", "the connection was lost")));
  assert.deepEqual(
    seen.at(-1).map(({ text, final, lost }) => ({ text, final, lost })),
    [{ text: "It is three", final: true, lost: true }],
  );
});

test("useMicrophone mutes the client, with a value or a function of the current one", () => {
  const client = new FakeClient();
  const { seen } = mount(client, () => useMicrophone());
  assert.equal(seen[0].muted, false);
  act(() => seen.at(-1).setMuted(true));
  assert.equal(client.muted, true);
  assert.equal(seen.at(-1).muted, true);
  act(() => seen.at(-1).setMuted((muted) => !muted));
  assert.equal(client.muted, false);
  assert.equal(seen.at(-1).muted, false);
  assert.equal(seen.at(-1).setMuted, seen[0].setMuted); // a stable function
  const renders = seen.length;
  act(() => seen.at(-1).setMuted(false)); // no change: no render
  assert.equal(seen.length, renders);
});

test("every hook removes its listeners when it unmounts", () => {
  const client = new FakeClient();
  const { renderer } = mount(client, () => {
    useRejoinder();
    useAgentState();
    useUserState();
    useTranscript();
    useMicrophone();
    useRejoinderEvent("tool", () => {});
  });
  assert.ok(client.listenerCount() > 0);
  act(() => renderer.unmount());
  assert.equal(client.listenerCount(), 0);
});

test("a component that unmounts leaves the others subscribed", () => {
  const client = new FakeClient();
  const first = [];
  const second = [];
  const Both = ({ both }) =>
    h(RejoinderProvider, { client }, h(probe(() => useAgentState(), first)), both ? h(probe(() => useAgentState(), second)) : null);
  const renderer = render(h(Both, { both: true }));
  act(() => renderer.update(h(Both, { both: false })));
  act(() => client.emitAgentState("listening"));
  assert.deepEqual(first.at(-1), "listening");
  assert.deepEqual(second, [null]);
  act(() => renderer.unmount());
  assert.equal(client.listenerCount(), 0);
});

test("hooks take a client as argument outside any provider", () => {
  const client = new FakeClient();
  const seen = [];
  render(h(probe(() => [useAgentState(client), useTranscript(client).length], seen)));
  act(() => client.emitAgentState("listening"));
  act(() => client.emitTranscript("user", "Hi", true));
  assert.deepEqual(seen.at(-1), ["listening", 1]);
});

test("a hook with no provider and no client says what to do", () => {
  const Orphan = () => {
    useAgentState();
    return null;
  };
  const errors = [];
  const errorBoundaryless = console.error;
  console.error = (...args) => errors.push(args.map(String).join(" ")); // React logs the throw too
  try {
    assert.throws(
      () => render(h(Orphan)),
      /useAgentState\(\) found no client: put it under a <RejoinderProvider>, or pass the client/,
    );
  } finally {
    console.error = errorBoundaryless;
  }
});

test("useRejoinderEvent calls the latest handler, and stops on unmount", () => {
  const client = new FakeClient();
  const calls = [];
  const Tools = ({ tag }) => {
    useRejoinderEvent("tool", (tool) => calls.push([tag, tool.name]));
    return null;
  };
  const renderer = render(h(RejoinderProvider, { client }, h(Tools, { tag: "a" })));
  act(() => client.emit("tool", { name: "clock", callId: "1", status: "started", error: false }));
  act(() => renderer.update(h(RejoinderProvider, { client }, h(Tools, { tag: "b" }))));
  act(() => client.emit("tool", { name: "clock", callId: "1", status: "finished", error: false }));
  act(() => renderer.unmount());
  client.emit("tool", { name: "late", callId: "2", status: "started", error: false });
  assert.deepEqual(calls, [
    ["a", "clock"],
    ["b", "clock"],
  ]);
});
