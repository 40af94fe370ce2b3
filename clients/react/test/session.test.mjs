// useRejoinder: connecting, the connection's state, errors, and one client per tree.
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import { RejoinderClient, RejoinderError } from "@rejoinder/client";
import { RejoinderProvider, useAgentState, useRejoinder } from "../dist/index.js";
import { FakeClient } from "./fake-client.mjs";
import { act, cleanup, h, probe, render, warnings } from "./render.mjs";

afterEach(() => {
  cleanup();
  assert.deepEqual(warnings.splice(0), [], "React warned");
});

function mount(client, hook) {
  const seen = [];
  const renderer = render(h(RejoinderProvider, { client }, h(probe(hook, seen))));
  return { seen, renderer };
}

const session = (r) => ({ state: r.state, error: r.error?.code ?? null });

test("connect() merges its options over the hook's, and the state follows the connection", async () => {
  const client = new FakeClient();
  const { seen } = mount(client, () => useRejoinder({ url: "/", transport: "webrtc" }));
  assert.deepEqual(session(seen[0]), { state: "idle", error: null });
  let connecting;
  act(() => {
    connecting = seen.at(-1).connect({ transport: "websocket", timeline: true });
  });
  assert.deepEqual(client.connects, [{ url: "/", transport: "websocket", timeline: true }]);
  // "connecting" at once: the client emits no event for it
  assert.equal(seen.at(-1).state, "connecting");
  await act(async () => client.ready());
  assert.equal((await connecting).sessionId, "s1");
  assert.equal(seen.at(-1).state, "connected");
  act(() => client.drop(new RejoinderError("connection_lost", "the connection was lost")));
  assert.equal(seen.at(-1).state, "reconnecting");
  act(() => client.ready());
  assert.equal(seen.at(-1).state, "connected");
  await act(() => seen.at(-1).close());
  assert.deepEqual(session(seen.at(-1)), { state: "closed", error: null });
});

test("onClick={connect}: the click event is not taken for options", async () => {
  const client = new FakeClient();
  const { seen } = mount(client, () => useRejoinder({ url: "/" }));
  const click = new (class SyntheticEvent {
    type = "click";
    url = "not-an-option";
  })();
  act(() => void seen.at(-1).connect(click));
  assert.deepEqual(client.connects, [{ url: "/" }]);
});

test("connect() picks up options from the latest render", () => {
  const client = new FakeClient();
  const Session = ({ url }) => {
    const { connect } = useRejoinder({ url });
    Session.connect = connect;
    return null;
  };
  const renderer = render(h(RejoinderProvider, { client }, h(Session, { url: "/a" })));
  const first = Session.connect;
  act(() => renderer.update(h(RejoinderProvider, { client }, h(Session, { url: "/b" }))));
  assert.equal(Session.connect, first); // the same function...
  act(() => void Session.connect());
  assert.deepEqual(client.connects, [{ url: "/b" }]); // ...with the new url
});

test("a connect() that fails resolves null, and its error is `error`", async () => {
  const client = new FakeClient();
  const { seen } = mount(client, () => useRejoinder({ url: "/" }));
  let result;
  act(() => {
    result = seen.at(-1).connect();
  });
  const refused = new RejoinderError("microphone_unavailable", "permission to use the microphone was denied");
  await act(async () => client.fail(refused));
  assert.equal(await result, null);
  assert.equal(seen.at(-1).error, refused);
  assert.equal(seen.at(-1).state, "closed");
  // a new connect clears it
  act(() => void seen.at(-1).connect());
  assert.deepEqual(session(seen.at(-1)), { state: "connecting", error: null });
});

test("a session that ends with an error after ready leaves it in `error`", async () => {
  const client = new FakeClient();
  const { seen } = mount(client, () => useRejoinder({ url: "/" }));
  act(() => void seen.at(-1).connect());
  await act(async () => client.ready());
  const gaveUp = new RejoinderError("reconnect_failed", "the attempts ran out");
  act(() => client.fail(gaveUp));
  assert.deepEqual(session(seen.at(-1)), { state: "closed", error: "reconnect_failed" });
});

test("closing before ready is no error", async () => {
  const client = new FakeClient();
  const { seen } = mount(client, () => useRejoinder({ url: "/" }));
  let result;
  act(() => {
    result = seen.at(-1).connect();
  });
  await act(() => seen.at(-1).close());
  assert.equal(await result, null);
  assert.deepEqual(session(seen.at(-1)), { state: "closed", error: null });
});

test("connect() with no url says so in `error`", async () => {
  const client = new FakeClient();
  const { seen } = mount(client, () => useRejoinder());
  await act(async () => assert.equal(await seen.at(-1).connect(), null));
  assert.equal(seen.at(-1).error.code, "client_error");
  assert.match(seen.at(-1).error.message, /connect\(\) needs a url/);
  assert.deepEqual(client.connects, []);
});

test("connect() while connected fails with already_connected, the session goes on", async () => {
  const client = new FakeClient();
  const { seen } = mount(client, () => useRejoinder({ url: "/" }));
  act(() => void seen.at(-1).connect());
  await act(async () => client.ready());
  await act(async () => assert.equal(await seen.at(-1).connect(), null));
  assert.deepEqual(session(seen.at(-1)), { state: "connected", error: "already_connected" });
});

test("the provider shares one client with every component under it", () => {
  const client = new FakeClient();
  const seen = [];
  render(
    h(RejoinderProvider, { client }, h(probe(() => useRejoinder().client, seen)), h(probe(() => useRejoinder().client, seen))),
  );
  assert.equal(seen.length, 2);
  assert.equal(seen[0], client);
  assert.equal(seen[1], client);
});

test("a provider without a client makes one, the same across renders, for every component", () => {
  const seen = [];
  const Tree = ({ n }) =>
    h(RejoinderProvider, null, h(probe(() => useRejoinder().client, seen)), h(probe(() => useRejoinder({ n }).client, seen)));
  const renderer = render(h(Tree, { n: 1 }));
  act(() => renderer.update(h(Tree, { n: 2 })));
  assert.ok(seen[0] instanceof RejoinderClient);
  assert.equal(new Set(seen).size, 1);
  act(() => renderer.unmount());
});

test("useRejoinder outside a provider makes a client of its own, for its other hooks", () => {
  const seen = [];
  const Standalone = () => {
    const { client, state } = useRejoinder({ url: "/" });
    seen.push([client, state, useAgentState(client)]);
    return null;
  };
  const renderer = render(h(Standalone));
  const [[client, state, agent]] = seen;
  assert.ok(client instanceof RejoinderClient);
  assert.deepEqual([state, agent], ["idle", null]);
  act(() => renderer.update(h(Standalone)));
  assert.equal(seen[1][0], client);
  act(() => renderer.unmount());
});
