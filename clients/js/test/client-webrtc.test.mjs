// RejoinderClient over a fake peer connection: the offer, the data channel, played from the
// receiver's stats, how a WebRTC session ends, and resuming with ?resume=.
import assert from "node:assert/strict";
import { test } from "node:test";
import { RejoinderClient } from "../dist/index.js";
import { playedOut } from "../dist/lib/links/webrtc.js";
import { FakePlatform, record, settle } from "./fakes.mjs";

const READY = { type: "ready", sample_rate: 48000, protocol: 1, session_id: "s1", resume_token: "t1" };

async function connected(options = {}) {
  const platform = new FakePlatform();
  const client = new RejoinderClient({ platform });
  const log = record(client);
  const connecting = client.connect({ url: "http://127.0.0.1:8080/", transport: "webrtc", reconnect: { jitter: 0 }, ...options });
  await settle();
  platform.peer.open();
  platform.peer.receive(READY);
  await connecting;
  return { platform, client, log, peer: platform.peer };
}

test("the offer goes to /api/offer in one POST; the answer is applied; JSON flows on the channel", async () => {
  const platform = new FakePlatform();
  const client = new RejoinderClient({ platform });
  const log = record(client);
  const camera = { getVideoTracks: () => [] };
  const connecting = client.connect({ url: "http://127.0.0.1:8080/?voice=b", transport: "webrtc", timeline: true, camera });
  await settle();
  const [post] = platform.posts;
  assert.equal(post.url.href, "http://127.0.0.1:8080/api/offer?voice=b&timeline=1");
  assert.deepEqual(post.body, { sdp: "v=0 fake offer", type: "offer" });
  const peer = platform.peer;
  assert.deepEqual(peer.accepted, { type: "answer", sdp: "v=0 fake answer" });
  assert.equal(peer.options.microphone, platform.audio.microphone); // the microphone goes as a track
  assert.equal(peer.options.camera, camera);
  peer.open();
  peer.receive(READY);
  assert.deepEqual(await connecting, { sampleRate: 48000, protocol: 1, sessionId: "s1", resumed: false, transport: "webrtc" });
  peer.receive({ type: "agent_state", state: "thinking" });
  peer.receive({ type: "timeline", entry: { t: 1, kind: "agent_state", state: "thinking" } });
  client.sendText("Hi");
  client.mute(true);
  client.interrupt();
  assert.deepEqual(peer.json, [{ type: "text", text: "Hi" }, { type: "mute", muted: true }, { type: "interrupt" }]);
  assert.equal(platform.audio.track.enabled, false); // a disabled track sends silence
  assert.equal(log.of("agentState")[0].state, "thinking");
  assert.equal(log.of("timeline").length, 1);
  assert.equal(platform.sockets.length, 0);
});

test("played is the jitter buffer's playout, less what was invented, less the device latency", async () => {
  assert.equal(playedOut({ totalSamplesReceived: 1000, concealedSamples: 100, insertedSamplesForDeceleration: 20, removedSamplesForAcceleration: 5 }), 885);
  assert.equal(playedOut({ packetsReceived: 3 }), null);
  const { platform, peer, client } = await connected();
  const audio = platform.audio;
  assert.equal(audio.ticks[0].ms, 40); // read every 40 ms, on the audio clock
  audio.latency = 0.02; // 960 samples at 48 kHz
  audio.tick(); // no track yet: nothing to say
  await settle();
  peer.stats = { totalSamplesReceived: 48000, concealedSamples: 960, removedSamplesForAcceleration: 480, clockRate: 48000 };
  audio.tick();
  await settle();
  peer.stats = { ...peer.stats, totalSamplesReceived: 49920 };
  audio.tick();
  await settle();
  peer.stats = { ...peer.stats, totalSamplesReceived: 40000 }; // never backwards
  audio.tick();
  await settle();
  assert.deepEqual(peer.json.map((m) => m.samples), [46560, 48480, 48480]);
  // clear: the position at once, marked cleared
  peer.receive({ type: "clear" });
  await settle();
  assert.deepEqual(peer.json.at(-1), { type: "played", samples: 48480, cleared: true });
  assert.equal(client.stats.clearedReports, 1);
});

test("without playout counters, a clock from the first packet (the page's fallback)", async () => {
  const { platform, peer } = await connected();
  peer.stats = { packetsReceived: 5, clockRate: 48000 };
  platform.audio.tick();
  await settle();
  platform.timers.advance(500);
  platform.audio.tick();
  await settle();
  assert.deepEqual(peer.json.map((m) => m.samples), [0, 24000]);
});

test("the data channel closing while connected is the session ending: no reconnect", async () => {
  const { platform, log, peer, client } = await connected();
  peer.channelClose();
  assert.deepEqual(log.of("close"), [{ error: null, byUser: false }]);
  assert.equal(client.state, "closed");
  assert.equal(platform.posts.length, 1);
  assert.equal(platform.audio.ticks[0].stopped, true);
});

test("a fatal error before the channel closes gives its close code", async () => {
  const { log, peer } = await connected();
  peer.receive({ type: "error", code: "internal_error", message: "the agent failed: boom" });
  peer.channelClose();
  const [closed] = log.of("close");
  assert.deepEqual([closed.error.code, closed.error.closeCode, closed.error.serverMessage], [
    "internal_error",
    1011,
    "the agent failed: boom",
  ]);
});

test("a failed peer connection is a drop: a new offer with ?resume=<token>", async () => {
  const { platform, log, peer, client } = await connected({ timeline: true });
  peer.state("failed");
  assert.equal(peer.closed, true);
  assert.equal(client.state, "reconnecting");
  platform.timers.advance(250);
  await settle();
  assert.equal(platform.posts[1].url.search, "?timeline=1&resume=t1");
  platform.peer.open();
  platform.peer.receive({ ...READY, resume_token: "t2", resumed: true });
  assert.equal(client.state, "connected");
  assert.deepEqual(log.of("ready").map((r) => r.resumed), [false, true]);
});

test("disconnected: a drop only if it does not come back within the grace", async () => {
  const { platform, peer, client } = await connected();
  peer.state("disconnected");
  platform.timers.advance(3000);
  peer.state("connected");
  platform.timers.advance(5000);
  assert.equal(client.state, "connected");
  peer.state("disconnected");
  platform.timers.advance(4000);
  assert.equal(client.state, "reconnecting");
});

test("resume_failed from the offer route: a new session at once, without the token", async () => {
  const { platform, log, peer } = await connected();
  peer.state("failed");
  platform.responses.push([409, JSON.stringify({ error: "no session to resume", code: "resume_failed" })]);
  platform.timers.advance(250);
  await settle();
  const [restarted] = log.of("sessionRestarted");
  assert.deepEqual([restarted.error.code, restarted.error.closeCode, restarted.error.serverMessage], [
    "resume_failed",
    4004,
    "no session to resume",
  ]);
  platform.timers.advance(0);
  await settle();
  assert.equal(platform.posts[2].url.searchParams.get("resume"), null);
});

test("resume_failed on the data channel (the answer came, the session did not) is the same", async () => {
  const { platform, log, peer } = await connected();
  peer.state("failed");
  platform.timers.advance(250);
  await settle();
  platform.peer.open();
  platform.peer.receive({ type: "error", code: "resume_failed", message: "expired" });
  platform.peer.channelClose();
  assert.equal(log.of("sessionRestarted")[0].error.closeCode, 4004);
});

test("the offer refused or unreachable: connect() says why", async () => {
  const cases = [
    [[503, JSON.stringify({ error: "the server is full" })], "server_full", 1013, /HTTP 503.*the server is full/],
    [[400, JSON.stringify({ error: "the offer has no audio section" })], "offer_refused", 1008, /refused the offer \(HTTP 400.*no audio section/],
    [["network"], "connect_failed", 1006, /could not post the offer to http:\/\/h\/api\/offer: Failed to fetch/],
    [[200, "<html>"], "connect_failed", 1006, /the answer could not be used: .*JSON/],
    [[200, "{}"], "connect_failed", 1006, /the answer could not be used: it has no SDP/],
  ];
  for (const [response, code, closeCode, message] of cases) {
    const platform = new FakePlatform();
    platform.responses.push(response);
    const client = new RejoinderClient({ platform });
    await assert.rejects(
      client.connect({ url: "http://h/", transport: "webrtc" }),
      (e) => e.code === code && e.closeCode === closeCode && message.test(e.message),
    );
    assert.equal(platform.peer.closed, true);
  }
});

test("a full server while reconnecting is tried again", async () => {
  const { platform, log } = await connected();
  platform.peer.state("failed");
  platform.responses.push([503, "{}"]);
  platform.timers.advance(250);
  await settle();
  assert.deepEqual(log.of("reconnecting").map((e) => [e.attempt, e.error.code]), [
    [1, "connection_lost"],
    [2, "server_full"],
  ]);
});

test("close(): the peer and the audio are let go", async () => {
  const { platform, client, peer, log } = await connected();
  await client.close();
  assert.equal(peer.closed, true);
  assert.equal(platform.audio.closed, 1);
  assert.deepEqual(log.of("close"), [{ error: null, byUser: true }]);
});
