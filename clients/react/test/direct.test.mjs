// Changes made on the client directly (another component, a keyboard shortcut, code that
// holds the client): the hooks see them through the client's `connectionState` and
// `muted` events, not only the changes made through their own calls.
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import { RejoinderError } from "@rejoinder/client";
import { RejoinderProvider, useAgentState, useMicrophone, useRejoinder, useTranscript } from "../dist/index.js";
import { FakeClient } from "./fake-client.mjs";
import { act, cleanup, h, probe, render, warnings } from "./render.mjs";

afterEach(() => {
  cleanup();
  assert.deepEqual(warnings.splice(0), [], "React warned");
});

function mount(client, hook) {
  const seen = [];
  const view = render(h(RejoinderProvider, { client }, h(probe(hook, seen))));
  return { seen, view };
}

test("useMicrophone sees a client.mute() called elsewhere, one render per change", () => {
  const client = new FakeClient();
  const { seen } = mount(client, () => useMicrophone().muted);
  act(() => client.mute(true));
  act(() => client.mute(true)); // no change: no event, no render
  act(() => client.mute(false));
  assert.deepEqual(seen, [false, true, false]);
});

test("useRejoinder sees a connect() and a close() called on the client directly", async () => {
  const client = new FakeClient();
  const { seen } = mount(client, () => useRejoinder({ url: "/" }).state);
  act(() => void client.connect({ url: "/" }).catch(() => {}));
  assert.equal(seen.at(-1), "connecting");
  act(() => client.ready());
  assert.equal(seen.at(-1), "connected");
  await act(() => client.close());
  assert.deepEqual(seen, ["idle", "connecting", "connected", "closed"]);
});

test("a connect() called directly clears the error of the last session, and its turns", async () => {
  const client = new FakeClient();
  const { seen } = mount(client, () => ({ session: useRejoinder({ url: "/" }), turns: useTranscript(), agent: useAgentState() }));
  act(() => void seen.at(-1).session.connect());
  await act(async () => client.ready());
  act(() => {
    client.emitAgentState("speaking");
    client.emitTranscript("agent", "It is three", true);
  });
  act(() => client.fail(new RejoinderError("reconnect_failed", "the attempts ran out")));
  assert.equal(seen.at(-1).session.error.code, "reconnect_failed");
  act(() => void client.connect({ url: "/" }).catch(() => {}));
  const last = seen.at(-1);
  assert.deepEqual([last.session.state, last.session.error, last.turns, last.agent], ["connecting", null, [], null]);
});

test("a client without these events (an older SDK): the hooks' own calls still show", async () => {
  const client = new FakeClient({ legacy: true });
  const { seen } = mount(client, () => ({ session: useRejoinder({ url: "/" }), microphone: useMicrophone() }));
  act(() => seen.at(-1).microphone.setMuted(true));
  assert.equal(seen.at(-1).microphone.muted, true);
  act(() => void seen.at(-1).session.connect());
  assert.equal(seen.at(-1).session.state, "connecting");
  await act(async () => client.ready());
  assert.equal(seen.at(-1).session.state, "connected");
  assert.equal(client.listenerCount("connectionState") > 0, true); // listened for, never heard
});

test("no listener is left on connectionState or muted after unmount", () => {
  const client = new FakeClient();
  const { view } = mount(client, () => [useRejoinder(), useMicrophone(), useTranscript(), useAgentState()]);
  assert.ok(client.listenerCount("connectionState") > 0);
  assert.ok(client.listenerCount("muted") > 0);
  act(() => view.unmount());
  assert.equal(client.listenerCount(), 0);
});
