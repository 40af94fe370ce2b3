// Interleavings, on seeded random runs (no dependency: a small PRNG): whatever order audio,
// clears, renders and reports come in, the playback truth keeps its rules; whatever a
// WebRTC connection and its server do, the client says goodbye to no session it resumes.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Playout } from "../dist/lib/audio/playout.js";
import { decodeServerMessage } from "../dist/lib/messages.js";
import { PlayedReporter } from "../dist/lib/reporting.js";

/** mulberry32: a seeded generator, so a failing run can be replayed from its seed. */
function random(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const SEEDS = Array.from({ length: 200 }, (_, i) => i + 1);

test("the player: heard never passes played, counts never go back, clears drop everything queued", () => {
  for (const seed of SEEDS) {
    const rand = random(seed);
    const playout = new Playout(48000);
    playout.configure([8000, 16000, 22050, 24000, 44100, 48000][Math.floor(rand() * 6)]);
    playout.setLatency(rand() * 0.2);
    let frame = 0;
    let written = 0;
    let dropped = 0;
    let lastReport = 0;
    const block = new Float32Array(128);
    for (let step = 0; step < 400; step++) {
      const what = rand();
      if (what < 0.2) {
        const n = Math.floor(rand() * 4000);
        playout.write(new Int16Array(n).fill(1000));
        written += n;
      } else if (what < 0.25) {
        const queued = playout.queued;
        const report = playout.clear(frame);
        assert.equal(report.cleared, true, `seed ${seed}`);
        assert.equal(report.played, playout.played, `seed ${seed}: a clear reports where playback stopped`);
        assert.ok(report.played >= lastReport, `seed ${seed}`);
        lastReport = report.played;
        assert.equal(playout.queued, 0, `seed ${seed}`);
        dropped += queued;
      } else {
        const report = playout.render(block, frame);
        frame += 128;
        if (report !== null) {
          assert.ok(report.played >= lastReport, `seed ${seed}: the count went back`);
          lastReport = report.played;
        }
      }
      assert.ok(playout.heard <= playout.played, `seed ${seed}`);
      assert.ok(playout.played + playout.queued + dropped <= written + 1, `seed ${seed}: more played than sent`);
    }
    // drained: everything not dropped was played and, once heard, reported
    for (let i = 0; i < 200000 && (playout.queued > 0 || playout.heard < playout.played); i++) {
      const report = playout.render(block, frame);
      frame += 128;
      if (report) lastReport = report.played;
    }
    assert.ok(Math.abs(playout.played + dropped - written) <= 1, `seed ${seed}`);
    assert.equal(lastReport, playout.played, `seed ${seed}: the final count was reported`);
  }
});

test("the reporter: counts never go back, and nothing but the cleared answer follows a clear", () => {
  for (const seed of SEEDS) {
    const rand = random(seed);
    let now = 0;
    const reporter = new PlayedReporter(() => now, 1000);
    let measured = 0;
    let pending = 0;
    let clearAt = 0; // when the oldest unanswered clear came (or the last answer went out)
    let last = 0;
    for (let step = 0; step < 300; step++) {
      now += Math.floor(rand() * 60);
      const what = rand();
      if (what < 0.1) {
        reporter.clearReceived();
        if (pending === 0) clearAt = now;
        pending += 1;
        continue;
      }
      measured += Math.floor(rand() * 2000);
      const cleared = what < 0.2 && pending > 0;
      const sent = reporter.report(measured, cleared);
      if (cleared) {
        assert.ok(sent?.cleared, `seed ${seed}: a clear's answer always goes out`);
        pending -= 1;
        clearAt = now;
      } else if (pending > 0 && now - clearAt < 1000) {
        assert.equal(sent, null, `seed ${seed}: a plain report between a clear and its answer`);
      } else {
        if (pending > 0) pending = 0; // the answer was given up on
        assert.ok(sent !== null && !sent.cleared, `seed ${seed}`);
      }
      if (sent) {
        assert.ok(sent.samples >= last, `seed ${seed}: the count went back`);
        last = sent.samples;
      }
    }
  }
});

test("junk from the server is never a crash: typed, skipped, or said why", () => {
  const pieces = ['"type"', '"ready"', '"agent_state"', '"transcript"', '"state"', "1", "-1", "null", "true",
    "[]", "{}", '"x"', ":", ",", "{", "}", "[", "]", '"sample_rate"', '"entry"', '"t"', "1e999"];
  for (const seed of SEEDS) {
    const rand = random(seed);
    for (let i = 0; i < 50; i++) {
      let text = "";
      const n = Math.floor(rand() * 12);
      for (let k = 0; k < n; k++) text += pieces[Math.floor(rand() * pieces.length)];
      const decoded = decodeServerMessage(text);
      assert.ok(decoded === null || decoded.ok === true || typeof decoded.why === "string", text);
      if (decoded?.ok) assert.equal(typeof decoded.message.type, "string");
    }
  }
});

// ---- A WebRTC client against a model server, on random runs: pongs that stop coming, peers
// that fail or disconnect, offers answered late or refused, readies that are slow, the
// server letting go of a quiet peer, the session ending, the user closing. The server ends
// a session when the client closes the peer connection that carries it (WebRTC's goodbye);
// the client must never do that to a session it is still resuming.

/** The server side: one session at a time, which peer carries it, its current token. */
class ModelServer {
  session = null; // { id, token, carrier, over }
  sessions = 0;
  claims = new Map(); // peer -> the session its offer resumes (null: a new session)
  goodbyes = []; // { id, state, at }: the session, the client's state, the client's events by then

  constructor(platform, client, log) {
    this.platform = platform;
    this.client = client;
    this.log = log;
    const post = platform.post.bind(platform);
    platform.post = async (url, body) => {
      const token = new URL(url).searchParams.get("resume");
      const session = this.session;
      if (token !== null && (session === null || session.over || session.token !== token || session.claimed)) {
        platform.responses.unshift([410, JSON.stringify({ error: "gone", code: "resume_failed" })]);
      } else if (token !== null) {
        session.claimed = true; // one offer per token at a time (the next is refused: 409/410)
      }
      const response = await post(url, body);
      if (response.ok) this.claims.set(platform.peer, token === null ? null : session);
      return response;
    };
    const createPeer = platform.createPeer.bind(platform);
    platform.createPeer = (options) => {
      const peer = createPeer(options);
      const close = peer.close.bind(peer);
      peer.close = () => {
        const s = this.session;
        const claimed = this.claims.get(peer);
        if (claimed) claimed.claimed = false; // gone before it connected: the token works again
        this.claims.delete(peer);
        if (!peer.closed && s !== null && !s.over && s.carrier === peer) {
          // The client's goodbye: the session ends with it. Checked for a session the
          // client knew of (one whose ready it never had, it cannot resume).
          if (s.known) this.goodbyes.push({ id: s.id, state: client.state, at: log.length });
          s.over = true;
        }
        close();
      };
      return peer;
    };
  }

  /** The latest offer's peer connects and its data channel opens; the server takes the
   * session over on it (or begins one) and sends its ready, unless `slow`. */
  open(slow) {
    const peer = this.platform.peer;
    if (peer.closed || peer.channelOpen || !this.claims.has(peer)) return;
    const resuming = this.claims.get(peer);
    this.claims.delete(peer);
    peer.open();
    if (resuming !== null && resuming.over) {
      peer.receive({ type: "error", code: "resume_failed", message: "the session ended" });
      peer.channelClose();
      return;
    }
    let session = resuming;
    if (session === null) {
      if (this.session !== null && !this.session.over && this.session.carrier !== null) this.let_go(this.session.carrier);
      session = this.session = { id: `s${++this.sessions}`, token: null, carrier: null, over: false, n: 0 };
    }
    const old = session.carrier;
    session.carrier = peer;
    session.claimed = false;
    session.token = `${session.id}-t${++session.n}`;
    if (old !== null && old !== peer) this.let_go(old); // taken over: the server closes the old one
    const ready = { type: "ready", sample_rate: 48000, protocol: 1, session_id: session.id, resume_token: session.token, resumed: resuming !== null };
    if (slow) session.lateReady = [peer, ready];
    else this.#ready(session, peer, ready);
  }

  #ready(session, peer, ready) {
    peer.receive(ready);
    session.known ||= this.client.sessionId === session.id; // a session the client knows of
  }

  /** A slow ready arrives at last. */
  deliver() {
    const late = this.session?.lateReady;
    if (late === undefined || late === null) return;
    this.session.lateReady = null;
    if (!late[0].closed) this.#ready(this.session, ...late);
  }

  /** The server closes a peer (its side): the client sees its data channel close. */
  let_go(peer) {
    if (this.session?.carrier === peer) this.session.carrier = null;
    if (!peer.closed && peer.channelOpen) peer.channelClose();
  }

  /** Each goodbye came from a client done with its session: closing (by the user, or
   * giving up), or going on with a new session instead (said with the same close). */
  checkGoodbyes(seed) {
    for (const { id, state, at } of this.goodbyes.splice(0)) {
      const after = this.log.slice(at);
      const givenUp =
        state === "closed" ||
        after.some(([name, event]) => name === "close" || (name === "sessionRestarted" && event.previousSessionId === id));
      assert.ok(givenUp, `seed ${seed}: session ${id} said goodbye to while ${state}`);
    }
  }

  /** The carrier answers the pings it got. */
  pong(answered) {
    const peer = this.session?.carrier;
    if (peer === null || peer === undefined || peer.closed || this.session.over) return;
    for (const { id } of peer.json.filter((m) => m.type === "ping")) {
      if (answered.has(id)) continue;
      answered.add(id);
      peer.receive({ type: "pong", id });
    }
  }
}

test("WebRTC: a session is said goodbye only when the client is done with it, and nothing is left open", async () => {
  const { RejoinderClient } = await import("../dist/index.js");
  const { FakePlatform, record, settle } = await import("./fakes.mjs");
  for (const seed of SEEDS.slice(0, 120)) {
    const rand = random(seed);
    const platform = new FakePlatform();
    const client = new RejoinderClient({ platform });
    const log = record(client);
    const server = new ModelServer(platform, client, log);
    const answered = new Set();
    let responsive = true;
    const connecting = client.connect({ url: "http://h/", transport: "webrtc", reconnect: { maxAttempts: 6 } });
    connecting.catch(() => {});
    await settle();
    server.open(false);
    for (let step = 0; step < 60 && client.state !== "closed"; step++) {
      const what = rand();
      if (what < 0.3) platform.timers.advance(Math.floor(rand() * 6000));
      else if (what < 0.4) responsive = !responsive; // the server goes slow, or comes back
      else if (what < 0.55) server.open(rand() < 0.3);
      else if (what < 0.6) server.deliver();
      else if (what < 0.65) {
        // The network fails: both sides see it (the server detaches the session).
        if (server.session?.carrier === platform.peer) server.session.carrier = null;
        platform.peer.state("failed");
      }
      else if (what < 0.7) platform.peer.state("disconnected");
      else if (what < 0.75) {
        // The server's media timeout: a quiet peer that carries the session is let go.
        const carrier = server.session?.carrier;
        if (carrier?.quieted) server.let_go(carrier);
      } else if (what < 0.77 && server.session !== null && !server.session.over) {
        // The agent ends the session.
        server.session.over = true;
        const carrier = server.session.carrier;
        if (carrier !== null) server.let_go(carrier);
      } else if (what < 0.79) await client.close();
      if (responsive) server.pong(answered);
      await settle();
      server.checkGoodbyes(seed);
      // At most one connection is live; the others are closed or quiet.
      const live = platform.peers.filter((p) => !p.closed && !p.quieted);
      assert.ok(live.length <= 1, `seed ${seed}: ${live.length} live peers`);
      for (const peer of platform.peers) {
        if (peer.quieted) assert.equal(peer.sent.length, peer.sentWhenQuieted, `seed ${seed}: sent on a quiet peer`);
      }
    }
    await client.close();
    server.checkGoodbyes(seed);
    assert.ok(platform.peers.every((p) => p.closed), `seed ${seed}: a peer left open`);
    assert.deepEqual(platform.timers.pending, [], `seed ${seed}: timers left`);
    assert.ok(platform.audios.every((a) => a.ticks.every((t) => t.stopped)), `seed ${seed}: ticks left`);
  }
});
