// The player worklet's playback truth (src/audio/playout.ts), rendered block by block as
// the audio thread would, with the clock in output frames.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Playout } from "../dist/lib/audio/playout.js";

const OUT = 48000;
const BLOCK = 128;

function pcm(samples, value = 1000) {
  return new Int16Array(samples).fill(value);
}

/** Renders `seconds` of output; returns the reports with the frame they came at. */
function run(playout, clock, seconds, out = null) {
  const reports = [];
  const block = new Float32Array(BLOCK);
  const end = clock.frame + Math.round(seconds * OUT);
  while (clock.frame < end) {
    const report = playout.render(block, clock.frame);
    if (out) out.push(...block);
    if (report) reports.push({ ...report, frame: clock.frame });
    clock.frame += BLOCK;
  }
  return reports;
}

test("every sample sent is played and reported, and the count only grows", () => {
  const playout = new Playout(OUT);
  playout.configure(22050);
  const clock = { frame: 0 };
  playout.write(pcm(22050)); // one second of agent audio
  const reports = run(playout, clock, 1.3);
  const counts = reports.map((r) => r.played);
  assert.deepEqual(counts, [...counts].sort((a, b) => a - b));
  assert.equal(counts.at(-1), 22050);
  assert.equal(reports.at(-1).playing, false); // the settling report, once the queue ran dry
  // while playing, a report at least every 100 ms (50 ms and a block here)
  const gaps = reports.slice(1).map((r, i) => (r.frame - reports[i].frame) / OUT);
  assert.ok(Math.max(...gaps) <= 0.05 + BLOCK / OUT + 1e-9, Math.max(...gaps));
  // and no more often than needed
  assert.ok(reports.length <= 22, reports.length);
});

test("silence played while the queue is empty counts for nothing", () => {
  const playout = new Playout(OUT);
  playout.configure(16000);
  const clock = { frame: 0 };
  assert.deepEqual(run(playout, clock, 0.5), []);
  playout.write(pcm(1600));
  const reports = run(playout, clock, 0.5);
  assert.equal(reports.at(-1).played, 1600);
  assert.deepEqual(run(playout, clock, 0.5), []); // nothing changed: nothing to say
});

test("a sample counts once the output latency has gone by, not when it was rendered", () => {
  const playout = new Playout(OUT, { prebufferSeconds: 0 });
  playout.configure(48000);
  playout.setLatency(0.1);
  const clock = { frame: 0 };
  playout.write(pcm(48000));
  run(playout, clock, 0.5);
  // 0.5 s rendered; heard: what was rendered 100 ms ago (to the block)
  assert.ok(Math.abs(playout.played - 24000) <= BLOCK);
  assert.ok(Math.abs(playout.heard - (playout.played - 4800)) <= BLOCK, `${playout.heard}`);
});

test("playback waits for 40 ms of audio (or 40 ms) before starting", () => {
  const playout = new Playout(OUT);
  playout.configure(24000);
  const clock = { frame: 0 };
  playout.write(pcm(240)); // 10 ms: not enough to start at once
  const out = [];
  run(playout, clock, 0.03, out);
  assert.ok(out.every((v) => v === 0));
  assert.equal(playout.played, 0);
  run(playout, clock, 0.05, out);
  assert.equal(playout.played, 240); // it waited long enough: played anyway
});

test("clear drops the queue at once and reports where playback stopped", () => {
  const playout = new Playout(OUT);
  playout.configure(16000);
  playout.setLatency(0.02);
  const clock = { frame: 0 };
  playout.write(pcm(16000));
  run(playout, clock, 0.3);
  const before = playout.played;
  const report = playout.clear(clock.frame);
  assert.deepEqual(report, { played: before, playing: false, cleared: true });
  assert.equal(playout.queued, 0);
  assert.ok(before > 3000 && before < 16000 - 3000);
  const out = [];
  assert.deepEqual(run(playout, clock, 0.2, out), []); // nothing more is played or reported
  assert.ok(out.every((v) => v === 0));
  // the next reply plays after the stop, and the count goes on from there
  playout.write(pcm(1600));
  const after = run(playout, clock, 0.3);
  assert.equal(after.at(-1).played, before + 1600);
});

test("reset starts a new connection's count from zero", () => {
  const playout = new Playout(OUT);
  playout.configure(16000);
  const clock = { frame: 0 };
  playout.write(pcm(8000));
  run(playout, clock, 0.2);
  playout.reset(clock.frame);
  assert.equal(playout.played, 0);
  assert.equal(playout.queued, 0);
  playout.write(pcm(800));
  assert.equal(run(playout, clock, 0.2).at(-1).played, 800);
});

test("the agent's voice is resampled to the output rate faithfully", () => {
  const playout = new Playout(OUT, { prebufferSeconds: 0 });
  playout.configure(24000);
  const clock = { frame: 0 };
  const tone = new Int16Array(24000);
  for (let i = 0; i < tone.length; i++) tone[i] = Math.round(16000 * Math.sin((2 * Math.PI * 440 * i) / 24000));
  playout.write(tone);
  const out = [];
  run(playout, clock, 0.9, out);
  let worst = 0;
  for (let i = 0; i < 40000; i++) {
    const want = (16000 / 32768) * Math.sin((2 * Math.PI * 440 * i) / OUT);
    worst = Math.max(worst, Math.abs(out[i] - want));
  }
  assert.ok(worst < 0.01, `${worst}`);
});

test("a long reply grows the buffer instead of losing audio", () => {
  const playout = new Playout(OUT);
  playout.configure(48000);
  const clock = { frame: 0 };
  for (let i = 0; i < 15; i++) playout.write(pcm(48000)); // 15 s, more than the first buffer
  assert.equal(playout.queued, 15 * 48000);
  run(playout, clock, 15.2);
  assert.equal(playout.played, 15 * 48000);
});
