// Leaving a WebRTC connection in order to resume, without a goodbye: the server takes the
// client closing its peer connection as the end of the session, so a connection the client
// gives up on (no pong in time, no ready in time, disconnected too long) goes quiet and
// stays open until the resume took over (the resumed ready) or failed for good.
import assert from "node:assert/strict";
import { test } from "node:test";
import { RejoinderClient } from "../dist/index.js";
import { createBrowserPeer } from "../dist/lib/browser/peer.js";
import { FakePlatform, record, settle } from "./fakes.mjs";

const READY = { type: "ready", sample_rate: 48000, protocol: 1, session_id: "s1", resume_token: "t1", resume_grace: 30 };
const GONE = [410, JSON.stringify({ error: "no session to resume", code: "resume_failed" })];

async function connected(options = {}) {
  const platform = new FakePlatform();
  const client = new RejoinderClient({ platform });
  const log = record(client);
  const connecting = client.connect({ url: "http://h/", transport: "webrtc", reconnect: { jitter: 0 }, ...options });
  await settle();
  platform.peer.open();
  platform.peer.receive(READY);
  await connecting;
  return { platform, client, log, first: platform.peer };
}

/** Lets the pings of the first connection go unanswered until the client gives up on it. */
function pongsStop(platform) {
  platform.timers.advance(15_000); // ping 1 at 5 s, its deadline at 15 s
}

/** Lets the backoff pass: the next offer goes out. */
async function retry(platform, ms = 250) {
  platform.timers.advance(ms);
  await settle();
}

/** Every peer closed, every stats tick stopped, no timer left. */
function nothingLeft(platform) {
  assert.deepEqual(platform.peers.map((p) => p.closed), platform.peers.map(() => true));
  assert.ok(platform.audios.every((a) => a.ticks.every((t) => t.stopped)));
  assert.deepEqual(platform.timers.pending, []);
}

test("no pong in time: the old peer goes quiet, open until the resumed ready, then closes", async () => {
  const { platform, client, log, first } = await connected();
  first.stats = { totalSamplesReceived: 4800, clockRate: 48000 };
  pongsStop(platform);
  assert.equal(client.state, "reconnecting");
  assert.deepEqual([first.closed, first.quieted, first.channelOpen], [false, true, true]);
  assert.equal(platform.audio.ticks[0].stopped, true); // no more played reports on it
  // Nothing of it goes out or comes in: no mute, no played, no ping; late messages ignored.
  client.mute(true);
  platform.audio.tick();
  first.receive({ type: "pong", id: 1 });
  first.receive({ type: "agent_state", state: "speaking" });
  first.receive({ type: "ready", ...READY, resume_token: "t9" });
  platform.timers.advance(30_000 - 15_000); // up to the resume's backoff and beyond: no ping on it
  await settle();
  assert.equal(first.sent.length, first.sentWhenQuieted);
  assert.equal(client.agentState, null);
  // The resume offer goes out while the old peer is still open.
  assert.equal(platform.posts.length, 2);
  assert.equal(platform.posts[1].url.searchParams.get("resume"), "t1");
  assert.equal(first.closed, false);
  const second = platform.peer;
  second.open();
  assert.equal(first.closed, false); // open, not ready yet: the resume has not taken over
  second.receive({ ...READY, resume_token: "t2", resumed: true });
  assert.equal(first.closed, true);
  assert.equal(client.state, "connected");
  assert.deepEqual(log.of("ready").map((r) => r.resumed), [false, true]);
  assert.deepEqual(log.of("sessionRestarted"), []);
  assert.deepEqual(second.json, [{ type: "mute", muted: true }]); // the mute goes on the new one
  await client.close();
  nothingLeft(platform);
});

test("the resume refused (HTTP 410): the old peer closes, a new session starts as before", async () => {
  const { platform, log, first } = await connected();
  pongsStop(platform);
  platform.responses.push(GONE);
  await retry(platform);
  assert.equal(first.closed, true); // the session it carried is gone: closed with the refusal
  const [restarted] = log.of("sessionRestarted");
  assert.deepEqual([restarted.error.code, restarted.error.closeCode, restarted.previousSessionId], [
    "resume_failed",
    4004,
    "s1",
  ]);
  await retry(platform, 0);
  assert.equal(platform.posts[2].url.searchParams.get("resume"), null);
  platform.peer.open();
  platform.peer.receive({ ...READY, session_id: "s2", resume_token: "u1" });
  assert.deepEqual(log.of("ready").map((r) => [r.sessionId, r.resumed]), [["s1", false], ["s2", false]]);
});

test("the resume refused on the data channel (the session ended meanwhile): the old peer closes", async () => {
  const { platform, log, first } = await connected();
  pongsStop(platform);
  await retry(platform);
  platform.peer.open();
  assert.equal(first.closed, false);
  platform.peer.receive({ type: "error", code: "resume_failed", message: "the session ended" });
  platform.peer.channelClose();
  assert.equal(first.closed, true);
  assert.equal(log.of("sessionRestarted").length, 1);
});

test("close() during the resume: every peer closed, no timer left (in the backoff, or connecting)", async () => {
  for (const when of ["backoff", "offer", "open"]) {
    const { platform, client, log, first } = await connected();
    pongsStop(platform);
    if (when !== "backoff") await retry(platform);
    if (when === "open") platform.peer.open();
    assert.equal(first.closed, false, when);
    await client.close();
    nothingLeft(platform);
    assert.equal(platform.audio.closed, 1, when);
    assert.deepEqual(log.of("close"), [{ error: null, byUser: true }], when);
  }
});

test("the server lets go of the old peer meanwhile (its media timeout): it closes, quietly", async () => {
  const { platform, client, log, first } = await connected();
  pongsStop(platform);
  first.channelClose(); // the server closed it: the session waits for its client
  assert.equal(first.closed, true);
  assert.equal(client.state, "reconnecting");
  assert.deepEqual(log.of("reconnecting").length, 1);
  const other = await connected();
  pongsStop(other.platform);
  other.first.state("failed");
  assert.equal(other.first.closed, true);
  assert.equal(other.log.of("reconnecting").length, 1);
});

test("disconnected past the grace: a drop the link found, left open and quiet as well", async () => {
  const { platform, first } = await connected();
  first.state("disconnected");
  platform.timers.advance(4000);
  assert.deepEqual([first.closed, first.quieted], [false, true]);
  await retry(platform);
  platform.peer.open();
  platform.peer.receive({ ...READY, resume_token: "t2", resumed: true });
  assert.equal(first.closed, true);
});

test("no ready in time on a resume: a peer whose channel opened may carry the session, kept; one that never opened closes", async () => {
  const { platform, client, first } = await connected({ connectTimeoutMs: 5000 });
  pongsStop(platform);
  await retry(platform);
  const second = platform.peer;
  second.open(); // the server may have taken the session over on it; its ready is late
  platform.timers.advance(5000);
  assert.deepEqual([first.closed, second.closed, second.quieted], [false, false, true]);
  await retry(platform, 500);
  const third = platform.peer;
  assert.equal(platform.posts[2].url.searchParams.get("resume"), "t1");
  platform.timers.advance(5000); // third never connects: nothing of it on the server
  assert.deepEqual([third.closed, third.quieted], [true, false]);
  await retry(platform, 1000);
  platform.peer.open();
  assert.deepEqual([first.closed, second.closed], [false, false]);
  platform.peer.receive({ ...READY, resume_token: "t2", resumed: true });
  assert.deepEqual([first.closed, second.closed], [true, true]);
  await client.close();
  nothingLeft(platform);
});

test("the attempts run out: the old peer closes with the client", async () => {
  const { platform, client, log, first } = await connected({ reconnect: { jitter: 0, maxAttempts: 2 } });
  pongsStop(platform);
  platform.responses.push([503, "{}"], [503, "{}"]);
  await retry(platform);
  assert.equal(first.closed, false); // a full server: the session may still be resumed
  await retry(platform, 500);
  assert.equal(client.state, "closed");
  assert.equal(log.of("close")[0].error.code, "reconnect_failed");
  nothingLeft(platform);
});

test("user close() is still a goodbye: the peer closes at once", async () => {
  const { platform, client, first } = await connected();
  await client.close();
  assert.deepEqual([first.closed, first.quieted], [true, false]);
  nothingLeft(platform);
});

// ---- the browser's peer connection, on a fake RTCPeerConnection

class FakeSender {
  constructor(track) {
    this.track = track;
  }
  async replaceTrack(track) {
    this.track = track;
  }
}

class FakeRTCPeerConnection {
  ontrack = null;
  onconnectionstatechange = null;
  closed = false;
  #senders = [];
  createDataChannel() {
    return { readyState: "open", close() {}, send() {} };
  }
  addTrack(track) {
    this.#senders.push(new FakeSender(track));
  }
  addTransceiver() {}
  getSenders() {
    return this.#senders;
  }
  close() {
    this.closed = true;
  }
  /** The agent's track arrives. */
  track(stream) {
    this.ontrack?.({ track: { kind: "audio" }, receiver: {}, streams: [stream] });
  }
}

test("browser peer: quiet() stops its sending and its audio; the page's element keeps the next connection's", async (t) => {
  const pcs = [];
  const saved = globalThis.RTCPeerConnection;
  globalThis.RTCPeerConnection = class extends FakeRTCPeerConnection {
    constructor() {
      super();
      pcs.push(this);
    }
  };
  t.after(() => (globalThis.RTCPeerConnection = saved));
  const element = { srcObject: null, paused: true, play: async () => (element.paused = false), pause: () => (element.paused = true) };
  const microphone = { getAudioTracks: () => [mic] };
  const mic = { kind: "audio" };
  const options = { microphone, camera: null, iceServers: [], audioElement: element };
  const old = createBrowserPeer(options);
  pcs[0].track("old stream");
  assert.equal(element.srcObject, "old stream");
  old.quiet();
  await settle();
  assert.deepEqual(pcs[0].getSenders().map((s) => s.track), [null]); // nothing sent on it
  assert.deepEqual([element.srcObject, element.paused, pcs[0].closed], [null, true, false]);
  pcs[0].track("late stream"); // a track that comes after: not played
  assert.equal(element.srcObject, null);
  const next = createBrowserPeer(options);
  assert.deepEqual(pcs[1].getSenders().map((s) => s.track), [mic]); // the track goes on
  pcs[1].track("new stream");
  old.close();
  assert.equal(pcs[0].closed, true);
  assert.deepEqual([element.srcObject, element.paused], ["new stream", false]);
  next.close();
  assert.deepEqual([element.srcObject, element.paused], [null, true]);
});
