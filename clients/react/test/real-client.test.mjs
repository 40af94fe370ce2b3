// The hooks on the real `RejoinderClient` of @rejoinder/client, over a fake platform (a
// socket the test speaks the server's side of, audio that plays nothing): the slices
// listen to the events the real client emits, in the order it emits them.
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import {
  AgentStateIndicator,
  RejoinderProvider,
  useAgentState,
  useMicrophone,
  useRejoinder,
  useTranscript,
  useUserState,
} from "../dist/index.js";
import { StrictMode } from "react";
import { act, cleanup, h, probe, render, warnings } from "./render.mjs";

afterEach(() => {
  cleanup();
  assert.deepEqual(warnings.splice(0), [], "React warned");
});

class ServerSide {
  readyState = 0;
  binaryType = "blob";
  onopen = null;
  onmessage = null;
  onclose = null;
  onerror = null;
  sent = [];
  closedWith = null;

  send(data) {
    this.sent.push(JSON.parse(data));
  }
  close(code = 1000, reason = "") {
    this.closedWith = code;
    this.readyState = 3;
    this.onclose?.({ code, reason });
  }
  // the server's side
  open() {
    this.readyState = 1;
    this.onopen?.({});
  }
  say(message) {
    this.onmessage?.({ data: JSON.stringify(message) });
  }
  hangUp(code) {
    this.readyState = 3;
    this.onclose?.({ code, reason: "" });
  }
}

function fakePlatform() {
  const sockets = [];
  const platform = {
    sockets,
    async openAudio() {
      return {
        microphone: null,
        context: null,
        player: null,
        startCapture() {},
        every: () => () => {},
        outputLatency: () => 0,
        close: async () => {},
      };
    },
    createSocket(url) {
      const socket = new ServerSide();
      socket.url = url;
      sockets.push(socket);
      return socket;
    },
    createPeer() {
      throw new Error("no WebRTC here");
    },
    post() {
      throw new Error("no HTTP here");
    },
    timers: {
      setTimeout: (callback, ms) => setTimeout(callback, ms),
      clearTimeout: (handle) => clearTimeout(handle),
      now: () => performance.now(),
    },
    baseUrl: "http://127.0.0.1:8080/",
  };
  return platform;
}

/** Mounts a call under a provider that makes a real client on `platform`, connects, and
 * brings the first `ready`. */
async function connected(platform, { strict = false } = {}) {
  const seen = [];
  const Call = () => ({
    session: useRejoinder({ url: "/", microphone: false, reconnect: false }),
    agent: useAgentState(),
    user: useUserState(),
    turns: useTranscript(),
    microphone: useMicrophone(),
  });
  const tree = h(RejoinderProvider, { clientOptions: { platform } }, h(probe(Call, seen)), h(AgentStateIndicator));
  const renderer = render(strict ? h(StrictMode, null, tree) : tree);
  let connecting;
  act(() => {
    connecting = seen.at(-1).session.connect();
  });
  await act(async () => {
    await new Promise((resolve) => setImmediate(resolve)); // the audio opens
  });
  const [socket] = platform.sockets;
  assert.equal(socket.url, "ws://127.0.0.1:8080/ws");
  await act(async () => {
    socket.open();
    socket.say({ type: "ready", sample_rate: 16000, protocol: 1, session_id: "abc" });
  });
  assert.equal((await connecting).sessionId, "abc");
  return { seen, renderer, socket, indicator: () => renderer.query('[role="status"]') };
}

test("a conversation over the real client: states, transcript, and the indicator", async () => {
  const { seen, socket, indicator, renderer } = await connected(fakePlatform());
  assert.equal(seen.at(-1).session.state, "connected");
  assert.equal(indicator().title, "initializing");
  act(() => {
    socket.say({ type: "agent_state", state: "listening" });
    socket.say({ type: "user_state", state: "speaking" });
    socket.say({ type: "transcript", role: "user", text: "What time", final: false });
  });
  assert.equal(indicator().title, "listening");
  assert.deepEqual([seen.at(-1).agent, seen.at(-1).user], ["listening", "speaking"]);
  act(() => {
    socket.say({ type: "transcript", role: "user", text: "What time is it?", final: true });
    socket.say({ type: "agent_state", state: "speaking" });
    socket.say({ type: "transcript", role: "agent", text: "It is three", final: true, interrupted: true });
  });
  const { turns } = seen.at(-1);
  assert.deepEqual(
    turns.map(({ role, text, final, interrupted }) => ({ role, text, final, interrupted })),
    [
      { role: "user", text: "What time is it?", final: true, interrupted: false },
      { role: "agent", text: "It is three", final: true, interrupted: true },
    ],
  );
  assert.equal(indicator().textContent, "Speaking");
  const before = seen.length;
  act(() => socket.say({ type: "metrics", metrics: { type: "llm", ttft: 0.3 } }));
  assert.equal(seen.length, before); // nothing the call shows changed
  act(() => renderer.unmount());
});

test("the server failing the session: the error, no states, the indicator says so", async () => {
  const { seen, socket, indicator, renderer } = await connected(fakePlatform());
  act(() => {
    socket.say({ type: "agent_state", state: "thinking" });
    socket.say({ type: "transcript", role: "agent", text: "It is", final: false });
  });
  await act(async () => {
    socket.say({ type: "error", code: "internal_error", message: "the LLM failed", source: "llm" });
    socket.hangUp(1011);
  });
  const last = seen.at(-1);
  assert.equal(last.session.state, "closed");
  assert.equal(last.session.error.code, "internal_error");
  assert.equal(last.session.error.closeCode, 1011);
  assert.deepEqual([last.agent, last.user], [null, null]);
  assert.equal(last.turns[0].lost, true);
  assert.equal(indicator().title, "closed");
  assert.equal(indicator().textContent, "Not connected");
  act(() => renderer.unmount());
});

test("the provider closes the client it made when it unmounts (the session ends with 1000)", async () => {
  const { socket, renderer } = await connected(fakePlatform());
  await act(async () => renderer.unmount());
  assert.equal(socket.closedWith, 1000);
});

test("under StrictMode (mount, unmount, mount): one client, one connection, closed at the end", async () => {
  const platform = fakePlatform();
  const { seen, socket, renderer } = await connected(platform, { strict: true });
  assert.equal(platform.sockets.length, 1);
  assert.equal(new Set(seen.map((s) => s.session.client)).size, 1);
  act(() => socket.say({ type: "agent_state", state: "listening" }));
  assert.equal(seen.at(-1).agent, "listening");
  await act(async () => renderer.unmount());
  assert.equal(socket.closedWith, 1000);
});

test("a mute and a close called on the real client directly show in the hooks", async () => {
  const { seen, socket } = await connected(fakePlatform());
  const { client } = seen.at(-1).session;
  act(() => client.mute(true));
  assert.equal(seen.at(-1).microphone.muted, true);
  assert.deepEqual(socket.sent.at(-1), { type: "mute", muted: true });
  await act(() => client.close());
  assert.equal(seen.at(-1).session.state, "closed");
  assert.equal(seen.at(-1).session.error, null);
  assert.equal(socket.closedWith, 1000);
});
