// `connectionState` on every change of `client.state`, whatever made it (a call, the
// server, a drop), each after the event that says why; `muted` when `mute()` changes it.
// Listeners that call back into the client (close() or connect() from inside an event)
// leave it consistent.
import assert from "node:assert/strict";
import { test } from "node:test";
import { RejoinderClient } from "../dist/index.js";
import { FakePlatform, record, settle } from "./fakes.mjs";

const READY = { type: "ready", sample_rate: 16000, protocol: 1, session_id: "s1", resume_token: "t1" };

function make() {
  const platform = new FakePlatform();
  const client = new RejoinderClient({ platform });
  const log = record(client);
  return { platform, client, log };
}

async function ready(platform, connecting, message = READY) {
  await settle();
  platform.socket.open();
  platform.socket.receive(message);
  return connecting;
}

test("every change of state, in order, from a connect to a close", async () => {
  const { platform, client, log } = make();
  const connecting = client.connect({ url: "http://h/", reconnect: { jitter: 0 } });
  assert.deepEqual(log.states(), ["idle>connecting"]); // at once, from the call itself
  await ready(platform, connecting);
  platform.socket.serverClose(1006);
  platform.timers.advance(250);
  platform.socket.open();
  platform.socket.receive({ ...READY, resumed: true });
  await client.close();
  assert.deepEqual(log.states(), [
    "idle>connecting",
    "connecting>connected",
    "connected>reconnecting",
    "reconnecting>connected",
    "connected>closed",
  ]);
  // each after the event that says why
  assert.deepEqual(log.names("transcript", "played"), [
    "connectionState",
    "ready",
    "connectionState",
    "reconnecting",
    "connectionState",
    "ready",
    "connectionState",
    "close",
    "connectionState",
  ]);
  // and the state is already the new one when the reason's event is heard
  assert.equal(client.state, "closed");
});

test("a connect() that fails, and a client that reconnects again after a close", async () => {
  const { platform, client, log } = make();
  platform.audioError = Object.assign(new Error("denied"), { name: "NotAllowedError" });
  await assert.rejects(client.connect({ url: "http://h/" }));
  assert.deepEqual(log.states(), ["idle>connecting", "connecting>closed"]);
  platform.audioError = null;
  const again = client.connect({ url: "http://h/" });
  await ready(platform, again);
  platform.socket.serverClose(1000); // the agent hung up
  assert.deepEqual(log.states().slice(2), ["closed>connecting", "connecting>connected", "connected>closed"]);
});

test("the reconnect attempts running out end in closed", async () => {
  const { platform, client, log } = make();
  await ready(platform, client.connect({ url: "http://h/", reconnect: { maxAttempts: 1, jitter: 0 } }));
  platform.socket.serverClose(1006);
  platform.timers.advance(250);
  platform.socket.serverClose(1006);
  assert.deepEqual(log.states(), ["idle>connecting", "connecting>connected", "connected>reconnecting", "reconnecting>closed"]);
  assert.equal(log.of("close")[0].error.code, "reconnect_failed");
});

test("close() from a connectionState listener: no reconnect, no change untold", async () => {
  const { platform, client, log } = make();
  client.on("connectionState", ({ state }) => state === "reconnecting" && void client.close());
  await ready(platform, client.connect({ url: "http://h/", reconnect: { jitter: 0 } }));
  platform.socket.serverClose(1006);
  assert.equal(client.state, "closed");
  assert.deepEqual(log.states(), ["idle>connecting", "connecting>connected", "connected>reconnecting", "reconnecting>closed"]);
  assert.deepEqual(platform.timers.pending, []);
  assert.deepEqual(log.of("close"), [{ error: null, byUser: true }]);
});

test("close() from a reconnecting listener: the reconnecting state is told, then closed", async () => {
  const { platform, client, log } = make();
  client.on("reconnecting", () => void client.close());
  await ready(platform, client.connect({ url: "http://h/", reconnect: { jitter: 0 } }));
  platform.socket.serverClose(1006);
  assert.deepEqual(log.states().slice(2), ["connected>reconnecting", "reconnecting>closed"]);
  assert.deepEqual(platform.timers.pending, []);
});

test("connect() again from a close listener: the new session is not mistaken for the old one", async () => {
  const { platform, client, log } = make();
  const first = client.connect({ url: "http://h/" });
  let second = null;
  client.once("close", () => {
    second = client.connect({ url: "http://h/" });
  });
  await settle();
  platform.socket.open();
  platform.socket.serverClose(1011); // before ready: the first connect fails
  await assert.rejects(first, (e) => e.code === "internal_error");
  assert.equal(client.state, "connecting");
  assert.deepEqual(log.states(), ["idle>connecting", "connecting>closed", "closed>connecting"]);
  const made = await ready(platform, second); // the second one's promise is its own
  assert.equal(made.sessionId, "s1");
  assert.equal(client.state, "connected");
  assert.deepEqual(log.states().at(-1), "connecting>connected");
});

test("muted: when mute() changes it, connected or not, and not when it does not", async () => {
  const { platform, client, log } = make();
  client.mute(true); // before any connection: kept, and told
  client.mute(true);
  const connecting = client.connect({ url: "http://h/" });
  await ready(platform, connecting);
  client.mute(false);
  client.mute(false);
  client.mute(true);
  assert.deepEqual(log.of("muted"), [{ muted: true }, { muted: false }, { muted: true }]);
  assert.deepEqual(
    platform.socket.json.filter((m) => m.type === "mute").map((m) => m.muted),
    [true, false, false, true], // sent with ready, then every call (the server ignores repeats)
  );
});

test("a listener's own event in the middle of a transition sees the new state", async () => {
  const { platform, client } = make();
  const seen = [];
  for (const name of ["ready", "reconnecting", "close", "connectionState"]) {
    client.on(name, () => seen.push([name, client.state]));
  }
  await ready(platform, client.connect({ url: "http://h/", reconnect: { jitter: 0 } }));
  platform.socket.serverClose(1006);
  await client.close();
  assert.deepEqual(seen, [
    ["connectionState", "connecting"],
    ["ready", "connected"],
    ["connectionState", "connected"],
    ["reconnecting", "reconnecting"],
    ["connectionState", "reconnecting"],
    ["close", "closed"],
    ["connectionState", "closed"],
  ]);
});
