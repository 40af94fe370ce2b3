// RejoinderClient over a fake WebSocket (the shipped bundle, dist/index.js): what it sends,
// what it makes of what the server sends, and how it ends.
import assert from "node:assert/strict";
import { test } from "node:test";
import { RejoinderClient, RejoinderError } from "../dist/index.js";
import { FakePlatform, record, settle } from "./fakes.mjs";

const READY = { type: "ready", sample_rate: 22050, protocol: 1, session_id: "s1", resume_token: "t1", resume_grace: 30 };

async function connected(options = {}) {
  const platform = new FakePlatform();
  const client = new RejoinderClient({ platform });
  const log = record(client);
  const ready = client.connect({ url: "http://127.0.0.1:8080/", ...options });
  await settle();
  platform.socket.open();
  platform.socket.receive(READY);
  await ready;
  return { platform, client, log, ws: platform.socket, player: platform.audio.player };
}

test("start, then the microphone, then ready: connect() resolves with it", async () => {
  const platform = new FakePlatform();
  const client = new RejoinderClient({ platform });
  const connecting = client.connect({ url: "http://127.0.0.1:8080/?voice=b", timeline: true, sampleRate: 24000 });
  assert.equal(client.state, "connecting");
  await settle();
  const ws = platform.socket;
  assert.equal(ws.url, "ws://127.0.0.1:8080/ws?voice=b");
  assert.equal(ws.binaryType, "arraybuffer");
  assert.equal(platform.audio.captureRate, 24000);
  platform.audio.onFrame(new Int16Array(480).buffer); // not open yet: nothing to send it on
  ws.open();
  assert.deepEqual(ws.json, [{ type: "start", sample_rate: 24000, protocol: 1, timeline: true }]);
  platform.audio.onFrame(new Int16Array(480).fill(7).buffer); // kept by the server until ready
  assert.equal(ws.binary.length, 1);
  assert.deepEqual(new Int16Array(ws.binary[0]).slice(0, 2), Int16Array.of(7, 7));
  ws.receive(READY);
  const ready = await connecting;
  assert.deepEqual(ready, { sampleRate: 22050, protocol: 1, sessionId: "s1", resumed: false, transport: "websocket" });
  assert.equal(client.state, "connected");
  assert.deepEqual(platform.audio.player.calls, [["reset", 1], ["configure", 22050]]);
  assert.equal(client.stats.sentSamples, 480);
});

test("states, transcripts (interim and final), tools, metrics, timeline and errors become events", async () => {
  const { client, log, ws, player } = await connected();
  const messages = [
    { type: "agent_state", state: "initializing" },
    { type: "user_state", state: "listening" },
    { type: "agent_state", state: "listening" },
    { type: "user_state", state: "speaking" },
    { type: "transcript", role: "user", text: "Hello can", final: false },
    { type: "transcript", role: "user", text: "Hello, can you hear me?", final: true },
    { type: "agent_state", state: "thinking" },
    { type: "tool", name: "check_clock", call_id: "c1", status: "started" },
    { type: "tool", name: "check_clock", call_id: "c1", status: "finished", error: false },
    { type: "metrics", metrics: { type: "llm", ttft: 0.21, future_field: 1 } },
    { type: "timeline", entry: { t: 0.98, kind: "ob_opened", id: 1, ob: "reply" } },
    { type: "transcript", role: "agent", text: "Yes,", final: false },
    { type: "agent_state", state: "speaking" },
    { type: "transcript", role: "agent", text: "Yes, I can hear you.", final: true, interrupted: false },
    { type: "error", code: "session_error", message: "tts hiccup", source: "tts" },
    { type: "a_future_type" },
  ];
  for (const message of messages) ws.receive(message);
  ws.receive("{not json");
  ws.receive(new Int16Array(2205).buffer);
  assert.deepEqual(
    log.of("agentState").map((e) => [e.previous, e.state]),
    [
      [null, "initializing"],
      ["initializing", "listening"],
      ["listening", "thinking"],
      ["thinking", "speaking"],
    ],
  );
  assert.deepEqual(log.of("userState").map((e) => e.state), ["listening", "speaking"]);
  assert.deepEqual(
    log.of("transcript").map((e) => [e.id, e.role, e.text, e.final]),
    [
      [0, "user", "Hello can", false],
      [0, "user", "Hello, can you hear me?", true],
      [1, "agent", "Yes,", false],
      [1, "agent", "Yes, I can hear you.", true],
    ],
  );
  assert.deepEqual(log.of("tool"), [
    { name: "check_clock", callId: "c1", status: "started", error: false },
    { name: "check_clock", callId: "c1", status: "finished", error: false },
  ]);
  assert.deepEqual(log.of("metrics"), [{ type: "llm", ttft: 0.21, future_field: 1 }]);
  assert.deepEqual(log.of("timeline"), [{ t: 0.98, kind: "ob_opened", id: 1, ob: "reply" }]);
  const errors = log.of("error");
  assert.deepEqual(errors.map((e) => [e.code, e.source, e.closeCode]), [
    ["session_error", "tts", null],
    ["invalid_server_message", null, null],
  ]);
  assert.equal(client.agentState, "speaking");
  assert.equal(client.userState, "speaking");
  assert.equal(client.transcripts.length, 2);
  assert.deepEqual(player.calls.at(-1), ["write", 2205]);
  assert.equal(client.stats.receivedSamples, 2205);
  assert.equal(client.state, "connected"); // warnings keep the connection
});

test("played: the player's counts go out; after a clear only its cleared answer; stale epochs never", async () => {
  const { client, log, ws, player } = await connected();
  player.report(1102);
  player.report(3307);
  ws.receive({ type: "clear" });
  assert.deepEqual(player.calls.at(-1), ["clear"]);
  player.report(3500); // measured before the worklet saw the clear: held back
  player.report(3410, { cleared: true, playing: false });
  player.report(4000, { epoch: 0 }); // from an earlier connection
  player.report(3600);
  const played = ws.json.filter((m) => m.type === "played");
  assert.deepEqual(played, [
    { type: "played", samples: 1102 },
    { type: "played", samples: 3307 },
    { type: "played", samples: 3410, cleared: true },
    { type: "played", samples: 3600 },
  ]);
  assert.equal(log.of("clear").length, 1);
  assert.deepEqual(log.of("played").map((p) => [p.samples, p.cleared]), [
    [1102, false],
    [3307, false],
    [3410, true],
    [3600, false],
  ]);
  assert.equal(client.stats.playedSamples, 3600);
  assert.equal(client.stats.clearedReports, 1);
});

test("sendText, mute and interrupt: sent when ready, refused (clearly) before", async () => {
  const platform = new FakePlatform();
  const client = new RejoinderClient({ platform });
  const connecting = client.connect({ url: "http://h/" });
  assert.throws(() => client.sendText("hi"), (e) => e instanceof RejoinderError && e.code === "not_ready");
  assert.throws(() => client.interrupt(), /wait for "ready"/);
  client.mute(true); // kept, and sent once ready
  await settle();
  platform.socket.open();
  platform.socket.receive(READY);
  await connecting;
  const ws = platform.socket;
  assert.deepEqual(ws.json.at(-1), { type: "mute", muted: true });
  assert.equal(platform.audio.track.enabled, false);
  platform.audio.onFrame(new Int16Array(320).fill(99).buffer);
  assert.ok(new Int16Array(ws.binary.at(-1)).every((v) => v === 0)); // muted: silence goes out
  client.mute(false);
  client.sendText("Hello");
  client.interrupt();
  assert.deepEqual(ws.json.slice(-3), [
    { type: "mute", muted: false },
    { type: "text", text: "Hello" },
    { type: "interrupt" },
  ]);
  assert.throws(() => client.sendText(""), /empty/);
  client.sendText("😀".repeat(8192)); // 8192 characters, though 16384 UTF-16 units
  assert.throws(() => client.sendText("x".repeat(8193)), /8193 characters, over 8192/);
});

test("the server's closes: 1000 ends quietly, the others end with the error and its message", async () => {
  const fatal = {
    1003: "not_started",
    1007: "invalid_json",
    1008: "invalid_message",
    1009: "too_large",
    1011: "internal_error",
    4003: "protocol_mismatch",
  };
  for (const [code, name] of Object.entries(fatal)) {
    const { client, log, ws, platform } = await connected();
    ws.receive({ type: "error", code: name, message: `what went wrong (${code})` });
    ws.serverClose(Number(code), "closing");
    const [closed] = log.of("close");
    assert.ok(closed.error instanceof RejoinderError, code);
    assert.deepEqual([closed.error.code, closed.error.closeCode, closed.error.serverMessage, closed.byUser], [
      name,
      Number(code),
      `what went wrong (${code})`,
      false,
    ]);
    assert.equal(client.state, "closed");
    assert.equal(platform.audio.closed, 1);
    assert.equal(platform.sockets.length, 1); // no reconnect
  }
  const { client, log, ws, platform } = await connected();
  ws.receive({ type: "transcript", role: "agent", text: "Goodbye and", final: false });
  ws.serverClose(1000, "session ended");
  assert.deepEqual(log.of("close"), [{ error: null, byUser: false }]);
  assert.equal(platform.sockets.length, 1);
  assert.equal(client.transcripts[0].lost, true); // its final never came
  assert.equal(client.state, "closed");
});

test("connect() fails at once, with the reason, when the first connection does", async () => {
  const cases = [
    [(ws) => ws.serverClose(1006), "connect_failed", 1006, /could not connect to ws:\/\/h\/ws/],
    [(ws) => (ws.open(), ws.serverClose(1013, "at capacity")), "server_full", 1013, /full or draining.*at capacity/],
    [
      (ws) => (ws.open(), ws.receive({ type: "error", code: "protocol_mismatch", message: "speaks 1, not 2" }), ws.serverClose(4003)),
      "protocol_mismatch",
      4003,
      /speaks 1, not 2/,
    ],
  ];
  for (const [act, code, closeCode, message] of cases) {
    const platform = new FakePlatform();
    const client = new RejoinderClient({ platform });
    const connecting = client.connect({ url: "http://h/" });
    await settle();
    act(platform.socket);
    await assert.rejects(connecting, (e) => e.code === code && e.closeCode === closeCode && message.test(e.message));
    assert.equal(platform.sockets.length, 1);
    assert.equal(platform.audio.closed, 1);
  }
});

test("no ready in time: connect() fails, and the socket is let go without a goodbye", async () => {
  const platform = new FakePlatform();
  const client = new RejoinderClient({ platform });
  const connecting = client.connect({ url: "http://h/", connectTimeoutMs: 5000 });
  await settle();
  platform.socket.open();
  platform.timers.advance(4999);
  assert.equal(client.state, "connecting");
  platform.timers.advance(1);
  await assert.rejects(connecting, { code: "connect_timeout" });
  assert.equal(platform.socket.closedWith.code, 4000);
});

test("the microphone or the audio failing fails connect() with that error", async () => {
  const platform = new FakePlatform();
  platform.audioError = new RejoinderError("microphone_unavailable", "permission to use the microphone was denied");
  const client = new RejoinderClient({ platform });
  const log = record(client);
  await assert.rejects(client.connect({ url: "http://h/" }), { code: "microphone_unavailable" });
  assert.equal(platform.sockets.length, 0);
  assert.equal(log.of("close")[0].error.code, "microphone_unavailable");
  assert.equal(client.state, "closed");
});

test("bad options are refused before anything opens", async () => {
  const client = new RejoinderClient({ platform: new FakePlatform() });
  await assert.rejects(client.connect({ url: "http://h/", sampleRate: 4000 }), RangeError);
  await assert.rejects(client.connect({ url: "http://h/", transport: "carrier-pigeon" }), /transport/);
  await assert.rejects(client.connect({ url: "http://h/", camera: {} }), /WebRTC only/);
  assert.equal(client.state, "idle");
});

test("close(): a goodbye (1000), the audio released, nothing reconnected", async () => {
  const { client, log, ws, platform } = await connected();
  await client.close();
  assert.deepEqual(ws.closedWith, { code: 1000, reason: "client closed" });
  assert.equal(platform.audio.closed, 1);
  assert.deepEqual(log.of("close"), [{ error: null, byUser: true }]);
  platform.timers.advance(60000);
  assert.equal(platform.sockets.length, 1);
  assert.equal(client.state, "closed");
  // and a client can connect again
  const again = client.connect({ url: "http://h/" });
  await settle();
  assert.equal(platform.sockets.length, 2);
  await client.close();
  await assert.rejects(again, { code: "closed" });
});

test("a listener that throws does not stop the others, nor the client", async () => {
  const { client, ws } = await connected();
  const seen = [];
  const thrown = [];
  const before = globalThis.reportError;
  globalThis.reportError = (error) => thrown.push(error.message);
  try {
    client.on("agentState", () => {
      throw new Error("a bug in the page");
    });
    client.on("agentState", ({ state }) => seen.push(state));
    ws.receive({ type: "agent_state", state: "thinking" });
    ws.receive({ type: "agent_state", state: "speaking" });
  } finally {
    globalThis.reportError = before;
  }
  assert.deepEqual(seen, ["thinking", "speaking"]);
  assert.deepEqual(thrown, ["a bug in the page", "a bug in the page"]);
});
