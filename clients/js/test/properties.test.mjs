// Interleavings, on seeded random runs (no dependency: a small PRNG): whatever order audio,
// clears, renders and reports come in, the playback truth keeps its rules.
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
