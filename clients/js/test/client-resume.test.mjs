// Reconnect and resume (RejoinderClient over fake WebSockets, against the spec the server
// implements: start.resume = the last ready.resume_token; close 4004 when it cannot).
import assert from "node:assert/strict";
import { test } from "node:test";
import { RejoinderClient } from "../dist/index.js";
import { FakePlatform, record, settle } from "./fakes.mjs";

const ready = (n, extra = {}) => ({
  type: "ready",
  sample_rate: 16000,
  protocol: 1,
  session_id: "s1",
  resume_token: `t${n}`,
  resume_grace: 30,
  ...extra,
});

async function connected(reconnect = { jitter: 0 }) {
  const platform = new FakePlatform();
  const client = new RejoinderClient({ platform });
  const log = record(client);
  const connecting = client.connect({ url: "http://h/", reconnect });
  await settle();
  platform.socket.open();
  platform.socket.receive(ready(1));
  await connecting;
  return { platform, client, log };
}

test("a dropped connection is resumed with the last token; the conversation goes on", async () => {
  const { platform, client, log } = await connected();
  const first = platform.socket;
  first.receive({ type: "agent_state", state: "speaking" });
  first.receive({ type: "transcript", role: "agent", text: "Once upon", final: false });
  platform.audio.player.report(800);
  first.serverClose(1006);
  assert.equal(client.state, "reconnecting");
  assert.deepEqual(log.of("reconnecting").map((e) => [e.attempt, e.delayMs, e.resuming, e.error.code]), [
    [1, 250, true, "connection_lost"],
  ]);
  assert.deepEqual(platform.audio.player.calls.at(-1), ["reset", 1]); // what was playing stops
  assert.equal(client.agentState, "speaking"); // the session goes on on the server
  platform.timers.advance(249);
  assert.equal(platform.sockets.length, 1);
  platform.timers.advance(1);
  const second = platform.socket;
  assert.equal(platform.sockets.length, 2);
  second.open();
  assert.deepEqual(second.json[0], { type: "start", sample_rate: 16000, protocol: 1, resume: "t1" });
  second.receive(ready(2, { resumed: true }));
  second.receive({ type: "agent_state", state: "speaking" }); // the snapshot: no change
  second.receive({ type: "transcript", role: "agent", text: "Once upon a time", final: true, interrupted: true });
  assert.equal(client.state, "connected");
  assert.deepEqual(log.of("ready").map((r) => r.resumed), [false, true]);
  assert.equal(log.of("sessionRestarted").length, 0);
  assert.equal(log.of("agentState").length, 1);
  assert.deepEqual(client.transcripts.map((t) => [t.id, t.text, t.final, t.lost]), [[0, "Once upon a time", true, false]]);
  // the new connection counts played from zero, on its own epoch
  assert.deepEqual(platform.audio.player.calls.slice(-2), [["reset", 2], ["configure", 16000]]);
  platform.audio.player.report(900, { epoch: 1 });
  platform.audio.player.report(100);
  assert.deepEqual(second.json.filter((m) => m.type === "played"), [{ type: "played", samples: 100 }]);
  // a second drop resumes with the token of the last ready
  second.serverClose(4002);
  platform.timers.advance(250);
  platform.socket.open();
  assert.equal(platform.socket.json[0].resume, "t2");
  assert.equal(platform.audios.length, 1); // one microphone and audio for it all
});

test("resume_failed (4004): a new session at once, and an event saying so", async () => {
  const { platform, client, log } = await connected();
  platform.socket.receive({ type: "transcript", role: "user", text: "Can you", final: false });
  platform.socket.serverClose(1006);
  platform.timers.advance(250);
  const resuming = platform.socket;
  resuming.open();
  resuming.receive({ type: "error", code: "resume_failed", message: "no session for this token" });
  resuming.serverClose(4004, "resume failed");
  const [restarted] = log.of("sessionRestarted");
  assert.equal(restarted.error.code, "resume_failed");
  assert.equal(restarted.error.closeCode, 4004);
  assert.equal(restarted.error.serverMessage, "no session for this token");
  assert.equal(restarted.previousSessionId, "s1");
  assert.equal(client.sessionId, null);
  // the old session's open turn is closed, as lost
  assert.deepEqual(client.transcripts.map((t) => [t.text, t.final, t.lost]), [["Can you", true, true]]);
  assert.equal(client.agentState, null);
  assert.deepEqual(platform.timers.pending, [0]);
  platform.timers.advance(0);
  const fresh = platform.socket;
  fresh.open();
  assert.deepEqual(fresh.json[0], { type: "start", sample_rate: 16000, protocol: 1 }); // no resume
  fresh.receive(ready(3, { session_id: "s2", resumed: false }));
  assert.equal(client.state, "connected");
  assert.equal(client.sessionId, "s2");
  assert.equal(log.of("sessionRestarted").length, 1);
  assert.deepEqual(log.of("close"), []);
});

test("a server that did not resume (ready without resumed) is a new session too", async () => {
  const { platform, client, log } = await connected();
  platform.socket.serverClose(1006);
  platform.timers.advance(250);
  platform.socket.open();
  platform.socket.receive(ready(2, { session_id: "s9" })); // an older server ignores `resume`
  assert.equal(log.of("sessionRestarted")[0].error.code, "resume_failed");
  assert.equal(client.sessionId, "s9");
});

test("a server that gives no token: a drop starts a new session (after the backoff)", async () => {
  const platform = new FakePlatform();
  const client = new RejoinderClient({ platform });
  const log = record(client);
  const connecting = client.connect({ url: "http://h/", reconnect: { jitter: 0 } });
  await settle();
  platform.socket.open();
  platform.socket.receive({ type: "ready", sample_rate: 16000 });
  await connecting;
  platform.socket.serverClose(1006);
  assert.deepEqual(log.of("sessionRestarted").map((e) => e.error.code), ["resume_unavailable"]);
  assert.deepEqual(log.of("reconnecting").map((e) => [e.resuming, e.delayMs]), [[false, 250]]);
  platform.timers.advance(250);
  platform.socket.open();
  assert.equal(platform.socket.json[0].resume, undefined);
});

test("attempts that fail back off, then the client gives up with reconnect_failed", async () => {
  const { platform, client, log } = await connected({ jitter: 0, maxAttempts: 4, initialDelayMs: 100, maxDelayMs: 300 });
  platform.socket.serverClose(1006);
  for (let i = 0; i < 4; i++) {
    platform.timers.advance(platform.timers.pending[0]);
    if (i % 2) platform.socket.serverClose(1006); // the server is not there
    else (platform.socket.open(), platform.socket.serverClose(1013)); // the server is full
  }
  assert.deepEqual(log.of("reconnecting").map((e) => e.delayMs), [100, 200, 300, 300]);
  const [closed] = log.of("close");
  assert.equal(closed.error.code, "reconnect_failed");
  assert.match(closed.error.message, /after 4 attempts/);
  assert.equal(client.state, "closed");
  assert.equal(platform.audio.closed, 1);
});

test("a reconnect attempt that brings no ready in time is abandoned (no goodbye) and retried", async () => {
  const platform = new FakePlatform();
  const client = new RejoinderClient({ platform });
  const log = record(client);
  const connecting = client.connect({ url: "http://h/", reconnect: { jitter: 0 }, connectTimeoutMs: 3000 });
  await settle();
  platform.socket.open();
  platform.socket.receive(ready(1));
  await connecting;
  platform.socket.serverClose(1006);
  platform.timers.advance(250);
  const stalled = platform.socket;
  stalled.open();
  platform.timers.advance(3000);
  assert.equal(stalled.closedWith.code, 4000); // not 1000: the session must be kept to resume
  assert.deepEqual(log.of("reconnecting").map((e) => [e.attempt, e.error.code]), [
    [1, "connection_lost"],
    [2, "connect_timeout"],
  ]);
  platform.timers.advance(500);
  platform.socket.open();
  assert.equal(platform.socket.json[0].resume, "t1");
});

test("close() while reconnecting stops it", async () => {
  const { platform, client, log } = await connected();
  platform.socket.serverClose(1006);
  await client.close();
  platform.timers.advance(10000);
  assert.equal(platform.sockets.length, 1);
  assert.deepEqual(log.of("close"), [{ error: null, byUser: true }]);
});

test("a fatal close while resuming gives up; 1000 after a drop ends quietly", async () => {
  const { platform, log } = await connected();
  platform.socket.serverClose(1006);
  platform.timers.advance(250);
  platform.socket.open();
  platform.socket.receive({ type: "error", code: "protocol_mismatch", message: "protocol 2 only" });
  platform.socket.serverClose(4003);
  assert.equal(log.of("close")[0].error.code, "protocol_mismatch");

  const other = await connected();
  other.platform.socket.serverClose(1001);
  other.platform.timers.advance(250);
  other.platform.socket.open();
  other.platform.socket.serverClose(1000);
  assert.deepEqual(other.log.of("close"), [{ error: null, byUser: false }]);
});

test("mute is kept across a reconnect", async () => {
  const { platform, client } = await connected();
  client.mute(true);
  platform.socket.serverClose(1006);
  platform.timers.advance(250);
  platform.socket.open();
  platform.socket.receive(ready(2, { resumed: true }));
  assert.deepEqual(platform.socket.json.at(-1), { type: "mute", muted: true });
});
